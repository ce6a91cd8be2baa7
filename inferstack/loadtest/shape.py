"""The load test a model's config calls for: smoke's request and expected answer, the environment's p99 SLO,
and steps up to the planned per-instance target rate times the instances behind the target (what the
autoscaling target asks each instance to carry: the rate a staging test must hold)."""

from __future__ import annotations

import math

from inferstack.capacity import planning
from inferstack.delivery import smoke
from inferstack.loadtest.spec import (DEFAULT_ERROR_BUDGET_PERCENT, DEFAULT_STEPS, LoadTestSpec, SpecError, Target,
                                      stepped)


def planned_rate(model, env_name: str, environment, *, instances: int) -> float:
    """The planned per-instance target (throughput x safety factor) times `instances`."""
    return planning.plan(model, env_name, environment).target_per_instance_per_second * instances


def check_fractions(fractions: tuple[float, ...]) -> None:
    """Steps rise to the full rate and end there: the verdict is read from the last step."""
    if not fractions:
        raise SpecError("steps: at least one fraction")
    if any(not (math.isfinite(f) and 0 < f <= 1) for f in fractions):
        raise SpecError(f"steps: every fraction must be within (0, 1], got {', '.join(f'{f:g}' for f in fractions)}")
    if list(fractions) != sorted(set(fractions)) or fractions[-1] != 1:
        raise SpecError(f"steps: fractions must rise and end at 1 (the full rate, where the verdict is read), got "
                        f"{', '.join(f'{f:g}' for f in fractions)}")


def spec_for(model, env_name: str, environment, *, target: Target, instances: int = 1, rate: float | None = None,
             hold: float | None = None, fractions: tuple[float, ...] = DEFAULT_STEPS, release: str | None = None,
             error_budget_percent: float = DEFAULT_ERROR_BUDGET_PERCENT, timeout_s: float = 10.0) -> LoadTestSpec:
    """The spec of `model`'s load test in `env_name` against `target`: `rate` (req/s across the target; default
    planned_rate) reached in `fractions` steps held `hold` seconds each (default: long enough for a p99, see
    spec.stepped). SpecError (naming the field) for a bad value; planning.PlanningError when the model has no
    profile to plan a default rate from."""
    if not (isinstance(instances, int) and instances >= 1):
        raise SpecError(f"instances: must be a whole number >= 1, got {instances!r}")
    if rate is None:
        rate = planned_rate(model, env_name, environment, instances=instances)
    if not (math.isfinite(rate) and rate > 0):
        raise SpecError(f"rate: must be a number > 0, got {rate!r}")
    if hold is not None and not (math.isfinite(hold) and hold > 0):
        raise SpecError(f"hold: must be a number of seconds > 0, got {hold!r}")
    check_fractions(fractions)
    probe = smoke.probe_for(model)
    return LoadTestSpec(
        model=model.name, target=target, body=probe.body, outputs=probe.outputs,
        steps=stepped(rate, fractions=fractions, hold_s=hold), p99_slo_ms=model.slo_for(env_name).p99_latency_ms,
        error_budget_percent=error_budget_percent, environment=env_name, release=release,
        instance_type=model.capacity_for(env_name).instance_type, instances=instances, timeout_s=timeout_s)
