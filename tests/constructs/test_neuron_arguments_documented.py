"""NeuronEcsService documents every argument with its default (as aws-cdk documents every prop), in the Google
`Args:` section the API reference renders (docs/reference/constructs.md, mkdocstrings)."""

from __future__ import annotations

import inspect
import re

from inferstack.constructs.neuron_service import NeuronEcsService
from inferstack.constructs.neuron_service.service import ROLLING
from inferstack.neuron import deployment


def _args_section(docstring: str) -> dict[str, str]:
    """Each argument's entry: its first line (`name: text`, indented once under `Args:`) and its continuation."""
    text = inspect.cleandoc(docstring)
    section = re.search(r"^Args:\n((?:    .*\n|\n)*?)(?:\S|\Z)", text + "\n", re.MULTILINE)
    assert section, "no Args: section"
    entries: dict[str, str] = {}
    name = None
    for line in section.group(1).splitlines():
        entry = re.match(r"^    (\w+): (.*)$", line)
        if entry:
            name = entry.group(1)
            entries[name] = entry.group(2)
        elif name and line.startswith("        "):
            entries[name] += " " + line.strip()
    return entries


def test_every_argument_is_documented_with_its_default():
    assert NeuronEcsService.__doc__
    documented = _args_section(NeuronEcsService.__doc__)
    parameters = list(inspect.signature(NeuronEcsService.__init__).parameters.values())[1:]  # not self
    assert list(documented) == [p.name for p in parameters]
    for parameter in parameters:
        entry = documented[parameter.name]
        if parameter.name in ("scope", "construct_id"):
            continue
        if parameter.default is inspect.Parameter.empty:
            assert entry.endswith(("Required.", "Required (None allowed).")), (parameter.name, entry)
        else:
            assert "Default: " in entry, (parameter.name, entry)


def test_the_documented_default_rollout_is_the_one_in_the_signature():
    """`ROLLING`: the whole new fleet started before the old one stops, as the docstring says."""
    default = inspect.signature(NeuronEcsService.__init__).parameters["rollout"].default
    assert default is ROLLING and default == deployment.rollout(None)
    assert (ROLLING.strategy, ROLLING.maximum_percent, ROLLING.minimum_healthy_percent) == ("ROLLING", 200, 100)
