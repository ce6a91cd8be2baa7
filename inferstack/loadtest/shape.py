"""The load test a model's config calls for: smoke's request (or a payload file's) and expected answer, the
environment's p99 SLO, and steps through the planned per-instance target rate times the instances behind the
target (what the autoscaling target asks each instance to carry: the rate a staging test must hold)."""

from __future__ import annotations

import math

from inferstack.capacity import planning
from inferstack.loadtest.probes import probe_for
from inferstack.loadtest.spec import (
    DEFAULT_ERROR_BUDGET_PERCENT,
    DEFAULT_STEPS,
    LoadTestSpec,
    SpecError,
    Target,
    stepped,
)


def planned_rate(model, env_name: str, environment, *, instances: int) -> float:
    """The planned per-instance target (throughput x safety factor) times `instances`."""
    return planning.plan(model, env_name, environment).target_per_instance_per_second * instances


# Above twice the full rate a step measures the generators' connection churn more than the server's shedding.
MAX_FRACTION = 4.0


def check_fractions(fractions: tuple[float, ...]) -> None:
    """Steps rise through the full rate (1): every step up to it is judged against the SLO, those above it (up to
    MAX_FRACTION) on the p99 of what was admitted and the goodput held."""
    shown = ", ".join(f"{f:g}" for f in fractions)
    if not fractions:
        raise SpecError("steps: at least one fraction")
    if any(not (math.isfinite(f) and 0 < f <= MAX_FRACTION) for f in fractions):
        raise SpecError(f"steps: every fraction must be within (0, {MAX_FRACTION:g}], got {shown}")
    if list(fractions) != sorted(set(fractions)) or 1 not in fractions:
        raise SpecError(f"steps: fractions must rise and include 1 (the full rate), got {shown}")


def spec_for(
    model,
    env_name: str,
    environment,
    *,
    target: Target,
    instances: int = 1,
    rate: float | None = None,
    hold: float | None = None,
    fractions: tuple[float, ...] = DEFAULT_STEPS,
    release: str | None = None,
    error_budget_percent: float = DEFAULT_ERROR_BUDGET_PERCENT,
    timeout_s: float = 10.0,
    instance_type: str | None = None,
    bodies: tuple[dict, ...] | None = None,
) -> LoadTestSpec:
    """The spec of `model`'s load test in `env_name` against `target`: `rate` (req/s across the target, the 100 %
    step; default planned_rate) in `fractions` steps held `hold` seconds each (default: long enough for a p99,
    see spec.stepped). `instance_type`: what serves the target, only where it is known (an environment run);
    `bodies`: the requests (default smoke's). The planned rate is recorded whenever the model can be planned.
    SpecError (naming the field) for a bad value; planning.PlanningError when the model has no profile to plan
    a default rate from."""
    if not (isinstance(instances, int) and instances >= 1):
        raise SpecError(f"instances: must be a whole number >= 1, got {instances!r}")
    planned: float | None
    try:
        planned = planned_rate(model, env_name, environment, instances=instances)
    except planning.PlanningError:
        if rate is None:
            raise
        planned = None
    else:
        if rate is None:
            rate = planned
    if not (math.isfinite(rate) and rate > 0):
        raise SpecError(f"rate: must be a number > 0, got {rate!r}")
    if hold is not None and not (math.isfinite(hold) and hold > 0):
        raise SpecError(f"hold: must be a number of seconds > 0, got {hold!r}")
    check_fractions(fractions)
    probe = probe_for(model)
    return LoadTestSpec(
        model=model.name,
        target=target,
        bodies=bodies or (probe.body,),
        outputs=probe.outputs,
        steps=stepped(rate, fractions=fractions, hold_s=hold),
        p99_slo_ms=model.slo_for(env_name).p99_latency_ms,
        full_rate=round(rate, 3),
        planned_rate=round(planned, 3) if planned is not None else None,
        plan_basis=f"{instances} x {model.capacity_for(env_name).instance_type} in {env_name}",
        error_budget_percent=error_budget_percent,
        environment=env_name,
        release=release,
        instance_type=instance_type,
        instances=instances,
        timeout_s=timeout_s,
    )
