"""What the checks share: a finding, the key paths it points at, and the did-you-mean hint."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Sequence

from inferstack.config.yaml_source import KeyPath
from inferstack.schema import instances, kinds
from inferstack.schema.fleets import Fleet
from inferstack.schema.kinds import Model

Finding = tuple[KeyPath, str]


def capacity_key(model: Model, env: str, field: str) -> KeyPath:
    """Point at the per-environment override when it sets `field`, else at the model-wide value."""
    override = model.environments.get(env)
    if override is not None and getattr(override.capacity, field) is not None:
        return ("environments", env, "capacity", field)
    return ("capacity", field)


def fleet_capacity_key(name: str, fleet: Fleet, env: str, field: str) -> KeyPath:
    override = fleet.environments.get(env)
    if override is not None and getattr(override.capacity, field) is not None:
        return ("fleets", name, "environments", env, "capacity", field)
    return ("fleets", name, "capacity", field)


def unknown_environments(
    base: KeyPath, deploy_in: Sequence[str] | None, environments: Iterable[str]
) -> Iterator[Finding]:
    """A `deploy_in` list (a model's or an inference-components fleet's) naming environments that do not exist."""
    known = list(environments)
    for index, env in enumerate(deploy_in or ()):
        if env not in known:
            yield (
                base + ("deploy_in", index),
                (f"unknown environment {env!r}{did_you_mean(env, known)}; known: {', '.join(known)}"),
            )


def did_you_mean(word: str, choices: Iterable[str], form: str = " (did you mean {!r}?)") -> str:
    """`form` with the choice closest to `word` (difflib), or "" when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1) if word else []
    return form.format(close[0]) if close else ""


def family_problem(spec: instances.InstanceSpec, kind: kinds.ModelKind) -> str | None:
    accelerator = kind.accelerator
    if not accelerator.runs(spec):
        return f"{spec.name} is not {accelerator.description}; {kind.name} needs {accelerator.types}"
    return None


def nothing(*_args) -> Iterable[Finding]:
    return ()
