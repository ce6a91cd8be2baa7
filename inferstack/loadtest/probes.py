"""What each model is sent to check that it answers, and what its reply must hold: smoke's request, which the
load tests send too unless given a payload file (one request, one check, for both)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from inferstack.loadtest import text_contract
from inferstack.loadtest.answer import Output
from inferstack.schema import kinds

SMOKE_TEXT = "inferstack smoke test"


@dataclass(frozen=True)
class Probe:
    body: dict
    outputs: tuple[Output, ...]


def probe_for(model) -> Probe:
    """The request a model gets and the outputs its interface promises, for a batch of one."""
    return PROBES[kinds.model_kind(model)](model)


def _text_probe(model) -> Probe:
    # Every kind takes the text contract (text_contract.py): the Neuron app, and the Triton ensemble each
    # SageMaker endpoint defaults to, which tokenizes in the server. Smoke sends what an application sends. The
    # model's name in the text makes each model's request its own: an emulator that answers by request (moto
    # keys its canned InvokeEndpoint replies by body, not endpoint) tells them apart.
    return Probe(text_contract.request_body([smoke_text(model)]), text_contract.expected_outputs(model, 1))


def smoke_text(model) -> str:
    return f"{SMOKE_TEXT} of {model.name}"


# Each model kind's smoke request: what its serving container's interface takes and promises.
PROBES: dict[kinds.ModelKind, Callable[..., Probe]] = {
    kinds.NEURON_ECS: _text_probe,
    kinds.TRITON_SAGEMAKER: _text_probe,
}
