"""Every public construct's arguments are documented with their defaults, as aws-cdk documents each prop's
`@default`: an argument with a default says it (`Default: ...`) in its docstring's `Args:` section, which
mkdocstrings renders as the API page's Parameters table; the serving constructs (TritonEndpoint,
NeuronEcsService) document every argument, `Required.` or its default. docs/gen/reference.py refuses to write
the API page otherwise."""

from __future__ import annotations

import inspect

import pytest
from constructs import Construct

from inferstack.constructs.neuron_service.service import NeuronEcsService
from inferstack.constructs.triton_endpoint import TritonEndpoint


def test_every_public_construct_documents_the_defaults_of_its_arguments(generator):
    constructs = generator.public_constructs()
    assert {TritonEndpoint, NeuronEcsService} <= set(constructs) and len(constructs) > 10
    assert generator.construct_argument_problems() == []


@pytest.mark.parametrize("construct", [TritonEndpoint, NeuronEcsService], ids=lambda c: c.__name__)
def test_the_serving_constructs_document_every_argument(generator, construct):
    assert construct.__name__ in generator.DOCUMENTED_IN_FULL
    documented = {
        **generator.documented_arguments(construct.__doc__),
        **generator.documented_arguments(construct.__init__.__doc__),
    }
    parameters = inspect.signature(construct.__init__).parameters
    keyword_only = [name for name, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert len(keyword_only) >= 12 and set(keyword_only) <= set(documented)
    for name in keyword_only:
        has_default = parameters[name].default is not inspect.Parameter.empty
        assert ("Default:" in documented[name]) == has_default, (name, documented[name])


class _Optional(Construct):
    """A construct whose optional argument does not say its default.

    Args:
        size: How big. Default: 3.
        colour: Which colour.
    """

    def __init__(self, scope: Construct, construct_id: str, *, size: int = 3, colour: str = "red") -> None:
        super().__init__(scope, construct_id)


class TritonEndpointLike(Construct):
    """Named as one documented in full: a required argument missing, another not said to be required, and one
    documented that it does not take.

    Args:
        model: The model. Required.
        plan: The plan.
        replicas: How many. Default: 1.
    """

    def __init__(self, scope: Construct, construct_id: str, *, model: str, plan: str, image: str) -> None:
        super().__init__(scope, construct_id)


def test_an_argument_without_its_documented_default_fails_generation(generator, monkeypatch):
    monkeypatch.setattr(generator, "DOCUMENTED_IN_FULL", (*generator.DOCUMENTED_IN_FULL, "TritonEndpointLike"))
    problems = generator.construct_argument_problems([_Optional, TritonEndpointLike])
    where = f"{__name__}."
    assert problems == [
        f"{where}_Optional: `colour` has a default, and its Args: entry does not say it (end it with `Default: ...`)",
        f"{where}TritonEndpointLike: documents `replicas`, which it does not take",
        f"{where}TritonEndpointLike: `plan` is required: its Args: entry must say so (`Required.`)",
        f"{where}TritonEndpointLike: `image` is not in its docstring's Args: section",
    ]
    monkeypatch.setattr(generator, "public_constructs", lambda: [_Optional])
    with pytest.raises(generator.GenerationError, match="`colour` has a default"):
        generator.api_page()


def test_an_args_section_is_read_as_mkdocstrings_reads_it(generator):
    documented = generator.documented_arguments("""Summary.

        Args:
            first (int): One line.
            second: Two
                lines. Default: x.

        Returns:
            nothing: not an argument.
        """)
    assert documented == {"first": "One line.", "second": "Two lines. Default: x."}
