"""`python -m inferstack plan`: capacity and cost per model and environment, from the same
`planning.plan` the stacks use, priced with `inferstack.capacity.pricing`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from inferstack.capacity import planning, pricing

if TYPE_CHECKING:  # capacity sits below config: the report takes a loaded project, it never loads one
    from inferstack.config import Project


@dataclass(frozen=True)
class PlanRow:
    model: str
    env: str
    instance_type: str
    throughput_per_instance: float
    profile_p99_ms: float
    slo_p99_ms: float
    peak_tps: float
    safety_factor: float
    instances_min: int
    instances_max: int
    instances_at_peak: int
    scaling_target_per_instance_per_minute: float
    usd_per_instance_hour: float
    price_source: str
    cost_per_hour: float  # the fleet needed at peak
    cost_per_month_min: float
    cost_per_month_at_peak: float
    cost_per_million: float  # one instance at its measured throughput (how published figures are quoted)
    cost_per_million_at_target: float  # at the autoscaling target, i.e. what the fleet really pays
    meets_slo: bool
    deployed: bool  # the instance type the stacks deploy in this environment
    cheapest: bool = False
    compare: list[PlanRow] = field(default_factory=list)


def _row(project: Project, model, env: str, instance_type: str | None = None) -> PlanRow:
    environment = project.environments[env]
    result = planning.plan(model, env, environment, instance_type=instance_type)
    hourly = pricing.price(result.instance_type, environment.prices)
    deployed = instance_type is None or instance_type == model.capacity_for(env).instance_type
    return PlanRow(
        model=model.name, env=env, instance_type=result.instance_type,
        throughput_per_instance=result.throughput_per_instance, profile_p99_ms=result.profile_p99_ms,
        slo_p99_ms=result.slo_p99_ms, peak_tps=result.peak_tps, safety_factor=result.safety_factor,
        instances_min=result.min_capacity, instances_max=result.max_capacity,
        instances_at_peak=result.instances_at_peak,
        scaling_target_per_instance_per_minute=result.target_per_instance_per_minute,
        usd_per_instance_hour=hourly.usd_per_hour,
        price_source=f"{hourly.source} ({hourly.recorded})" if hourly.recorded else hourly.source,
        cost_per_hour=result.instances_at_peak * hourly.usd_per_hour,
        cost_per_month_min=result.min_capacity * hourly.usd_per_hour * pricing.HOURS_PER_MONTH,
        cost_per_month_at_peak=result.instances_at_peak * hourly.usd_per_hour * pricing.HOURS_PER_MONTH,
        cost_per_million=pricing.cost_per_million(hourly.usd_per_hour, result.throughput_per_instance),
        cost_per_million_at_target=pricing.cost_per_million(hourly.usd_per_hour,
                                                            result.target_per_instance_per_second),
        # Another instance type would get its own max, so only its latency can rule it out.
        meets_slo=result.meets_slo if deployed else result.latency_within_slo,
        deployed=deployed,
    )


def build(project: Project, envs: Sequence[str], *, compare: bool = False) -> list[PlanRow]:
    rows = []
    for env in envs:
        for model in project.models:
            row = _row(project, model, env)
            if compare:
                options = [_row(project, model, env, itype) for itype in sorted(model.throughput_profile)
                           if _plannable(model, env, project.environments[env], itype)]
                eligible = [o for o in options if o.meets_slo]
                best = min(eligible, key=lambda o: (o.cost_per_hour, o.cost_per_million)) if eligible else None
                options = [o if o is not best else _mark_cheapest(o) for o in options]
                row = PlanRow(**{**_fields(row), "compare": options,
                                 "cheapest": best is not None and best.instance_type == row.instance_type})
            rows.append(row)
    return rows


def _plannable(model, env: str, environment, instance_type: str) -> bool:
    """Validation plans only the deployed instance type; another profiled type whose figures no finite
    fleet can serve is left out of the comparison (it could never be the cheapest that meets the SLO)."""
    try:
        planning.plan(model, env, environment, instance_type=instance_type)
    except planning.FleetBeyondCount:
        return False
    return True


def _fields(row: PlanRow) -> dict:
    return {name: getattr(row, name) for name in PlanRow.__dataclass_fields__}


def _mark_cheapest(row: PlanRow) -> PlanRow:
    return PlanRow(**{**_fields(row), "cheapest": True})


def to_json(rows: Sequence[PlanRow]) -> str:
    def clean(row: PlanRow) -> dict:
        data = asdict(row)
        if not row.compare:
            data.pop("compare")
        return data
    return json.dumps([clean(r) for r in rows], indent=2)


_COLUMNS = ("model", "env", "instance", "thru/inst", "p99 ms", "min", "peak", "max", "target/min",
            "$/h peak", "$/month min..peak", "$/1M", "SLO")


def to_table(rows: Sequence[PlanRow]) -> str:
    lines = []
    for row in rows:
        lines.append(_cells(row, row.model, row.env))
        for option in row.compare:
            label = ("* " if option.cheapest else "  ") + ("(deployed)" if option.deployed else "")
            lines.append(_cells(option, "", label.rstrip()))
    widths = [max(len(c), *(len(line[i]) for line in lines)) for i, c in enumerate(_COLUMNS)]
    fmt = "  ".join(f"{{:<{w}}}" if i < 3 else f"{{:>{w}}}" for i, w in enumerate(widths))
    out = [fmt.format(*_COLUMNS), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*line) for line in lines]
    if any(r.compare for r in rows):
        out.append("* cheapest instance type (fleet cost at peak) whose profiled p99 meets the SLO")
    return "\n".join(out)


def _cells(row: PlanRow, model: str, env: str) -> list[str]:
    return [model, env, row.instance_type, f"{row.throughput_per_instance:,.1f}/s",
            f"{row.profile_p99_ms:g}/{row.slo_p99_ms:g}", str(row.instances_min), str(row.instances_at_peak),
            str(row.instances_max), f"{row.scaling_target_per_instance_per_minute:,.0f}",
            f"{row.cost_per_hour:,.2f}", f"{row.cost_per_month_min:,.0f}..{row.cost_per_month_at_peak:,.0f}",
            f"{row.cost_per_million:.3f}", "yes" if row.meets_slo else "NO"]
