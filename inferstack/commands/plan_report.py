"""`python -m inferstack plan`: capacity and cost per model and environment, from the same
`planning.plan` the stacks use, priced with `inferstack.capacity.pricing`; and per fleet (models sharing
accelerators), the packed layout from `packing.plan_fleet`, its cost with and without its off-hours
schedules, and what it saves against one model per accelerator. Every row names whether the throughput_profile
entry that sized it was measured (and how many days ago) or is an estimate, and says so where what was measured is
not a p99 (an Inference Recommender job's p95); --compare ranks entries with a measured p99 only."""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from inferstack.capacity import packing, planning, pricing, provenance
from inferstack.config import Project
from inferstack.schema import kinds
from inferstack.schema.neuron_ecs import NeuronEcsModel


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
    fleet: str | None = None  # the fleet that carries the model here; this row is then its dedicated baseline
    # The throughput_profile entry (of instance_type) this row is planned from: "measured" or "estimate"
    profile: str = provenance.ESTIMATE
    measured_date: str | None = None
    profile_age_days: int | None = None  # days from measured_date to the day of the report
    measured_percentile: str | None = None  # "p99", or "p95": an Inference Recommender job's, no p99 measured
    profile_caveat: str | None = None  # why the entry's p99 is not a measurement, where it is measured
    ranked: bool = True  # a compare option: only entries with a measured p99 compete for cheapest


def _today(today: datetime.date | None) -> datetime.date:
    return today or datetime.datetime.now(datetime.UTC).date()


def _provenance(sized: provenance.Sizing, today: datetime.date) -> dict:
    point = sized.point
    measured = point.measured if point is not None else None
    return {
        "profile": "measured" if measured else provenance.ESTIMATE,
        "measured_date": measured.date.isoformat() if measured else None,
        "profile_age_days": sized.age_days(today),
        "measured_percentile": sized.percentile,
        "profile_caveat": sized.caveat,
    }


def _row(
    project: Project, model, env: str, instance_type: str | None = None, *, today: datetime.date | None = None
) -> PlanRow:
    environment = project.environments[env]
    result = planning.plan(model, env, environment, instance_type=instance_type)
    sized = provenance.dedicated(model, env, result.instance_type)
    hourly = pricing.price(result.instance_type, environment.prices)
    deployed = instance_type is None or instance_type == model.capacity_for(env).instance_type
    return PlanRow(
        model=model.name,
        env=env,
        instance_type=result.instance_type,
        throughput_per_instance=result.throughput_per_instance,
        profile_p99_ms=result.profile_p99_ms,
        slo_p99_ms=result.slo_p99_ms,
        peak_tps=result.peak_tps,
        safety_factor=result.safety_factor,
        instances_min=result.min_capacity,
        instances_max=result.max_capacity,
        instances_at_peak=result.instances_at_peak,
        scaling_target_per_instance_per_minute=result.target_per_instance_per_minute,
        usd_per_instance_hour=hourly.usd_per_hour,
        price_source=f"{hourly.source} ({hourly.recorded})" if hourly.recorded else hourly.source,
        cost_per_hour=result.instances_at_peak * hourly.usd_per_hour,
        cost_per_month_min=result.min_capacity * hourly.usd_per_hour * pricing.HOURS_PER_MONTH,
        cost_per_month_at_peak=result.instances_at_peak * hourly.usd_per_hour * pricing.HOURS_PER_MONTH,
        cost_per_million=pricing.cost_per_million(hourly.usd_per_hour, result.throughput_per_instance),
        cost_per_million_at_target=pricing.cost_per_million(hourly.usd_per_hour, result.target_per_instance_per_second),
        # Another instance type would get its own max, so only its latency can rule it out.
        meets_slo=result.meets_slo if deployed else result.latency_within_slo,
        deployed=deployed,
        **_provenance(sized, _today(today)),
    )


def build(
    project: Project, envs: Sequence[str], *, compare: bool = False, today: datetime.date | None = None
) -> list[PlanRow]:
    """A row per model and environment it is deployed in (not_deployed() names the others). `today`: the day
    the measured entries' ages count to (default: today, UTC)."""
    rows = []
    for env in envs:
        for model in project.models_in(env):
            row = _row(project, model, env, today=today)
            fleet = project.fleet_of(model.name, env)
            if fleet is not None:
                row = PlanRow(**{**_fields(row), "fleet": fleet})
            if compare:
                options = [
                    _row(project, model, env, itype, today=today)
                    for itype in sorted(model.throughput_profile)
                    if _plannable(model, env, project.environments[env], itype)
                ]
                # An estimate is never ranked (a cheaper-looking guess must not win over a measurement), nor a
                # p95 (the most load whose p95 stays within a limit is more than the most whose p99 does); both
                # are listed apart, after the ranked ones.
                options = [o for o in options if o.measured_percentile == "p99"] + [
                    PlanRow(**{**_fields(o), "ranked": False}) for o in options if o.measured_percentile != "p99"
                ]
                eligible = [o for o in options if o.meets_slo and o.ranked]
                best = min(eligible, key=lambda o: (o.cost_per_hour, o.cost_per_million)) if eligible else None
                options = [o if o is not best else _mark_cheapest(o) for o in options]
                row = PlanRow(
                    **{
                        **_fields(row),
                        "compare": options,
                        "cheapest": best is not None and best.instance_type == row.instance_type,
                    }
                )
            rows.append(row)
    return rows


@dataclass(frozen=True)
class NotDeployed:
    model: str
    env: str
    deploy_in: tuple[str, ...]


def not_deployed(project: Project, envs: Sequence[str]) -> list[NotDeployed]:
    """The models whose `deploy_in` leaves out one of `envs`: no stack there, so nothing to plan or price."""
    return [
        NotDeployed(model.name, env, tuple(model.deploy_in or ()))
        for env in envs
        for model in project.models
        if not model.deploys_in(env)
    ]


def not_deployed_to_text(rows: Sequence[NotDeployed]) -> str:
    return "\n".join(f"{row.model}: not deployed in {row.env} (deploy_in: {', '.join(row.deploy_in)})" for row in rows)


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


@dataclass(frozen=True)
class FleetMemberRow:
    model: str
    placement: str  # "cores 0-2, port 8080, 3 workers" or "1 GPU, 2 vCPU, 8192 MiB per copy"
    slo_p99_ms: float
    profile_p99_ms: float
    peak_tps: float
    capacity_at_peak: str  # "3 cores x 2 instances" or "1 copy"
    scaling_target: str  # per task or per copy, per minute
    target_per_minute: float  # the same, as a number: requests per task (neuron) or per copy (components)
    cold_start_seconds: int | None = None
    # neuron-cores
    visible_cores: str | None = None
    port: int | None = None
    workers: int | None = None
    target_in_flight_per_task: float | None = None
    # inference components
    accelerators: int | None = None
    cpu_cores: float | None = None
    memory_mib: int | None = None
    copies_min: int | None = None
    copies_at_peak: int | None = None
    copies_max: int | None = None
    # The member's throughput_profile entry the fleet's plan reads, as PlanRow's profile fields
    profile_instance_type: str | None = None
    profile: str = provenance.ESTIMATE
    measured_date: str | None = None
    profile_age_days: int | None = None
    measured_percentile: str | None = None
    profile_caveat: str | None = None


@dataclass(frozen=True)
class FleetRow:
    fleet: str
    kind: str
    env: str
    instance_type: str
    members: list[FleetMemberRow]
    instances_min: int
    instances_at_peak: int
    instances_max: int
    off_hours: list[str]
    meets_slo: bool
    cost: packing.FleetCost


def build_fleets(project: Project, envs: Sequence[str], *, today: datetime.date | None = None) -> list[FleetRow]:
    rows = []
    for env in envs:
        environment = project.environments[env]
        for name in project.fleets_in(env):
            fleet = project.fleets[name]
            members = project.fleet_members(name)
            result = packing.plan_fleet(name, fleet, members, env, environment)
            member = MEMBER_ROWS[kinds.fleet_kind(fleet)]
            rows.append(
                FleetRow(
                    fleet=name,
                    kind=fleet.kind,
                    env=env,
                    instance_type=result.instance_type,
                    members=[
                        _with_provenance(
                            member(result, share),
                            provenance.fleet_member(project.model(share.model), name, fleet, env),
                            _today(today),
                        )
                        for share in result.shares
                    ],
                    instances_min=result.min_capacity,
                    instances_at_peak=result.instances_at_peak,
                    instances_max=result.max_capacity,
                    off_hours=[
                        f"{w.start}..{w.end} {w.time_zone}: {w.min}..{w.max} ({w.open_share:.0%} of the time)"
                        for w in result.windows
                    ],
                    meets_slo=result.meets_slo,
                    cost=packing.cost(result, members, environment),
                )
            )
    return rows


def _with_provenance(row: FleetMemberRow, sized: provenance.Sizing, today: datetime.date) -> FleetMemberRow:
    return FleetMemberRow(**{**asdict(row), "profile_instance_type": sized.instance_type, **_provenance(sized, today)})


def _core_member(result: packing.NeuronFleetPlan, share: packing.CoreShare) -> FleetMemberRow:
    return FleetMemberRow(
        model=share.model,
        slo_p99_ms=share.slo_p99_ms,
        profile_p99_ms=share.profile_p99_ms,
        peak_tps=share.peak_tps,
        placement=f"cores {share.visible_cores}, port {share.port}, {share.workers} worker"
        + ("s" if share.workers > 1 else ""),
        capacity_at_peak=f"{share.cores} core{'s' if share.cores > 1 else ''} x {result.instances_at_peak}",
        scaling_target=f"{result.target_per_task_per_minute(share.model):,.0f}/task/min",
        target_per_minute=result.target_per_task_per_minute(share.model),
        visible_cores=share.visible_cores,
        port=share.port,
        workers=share.workers,
        target_in_flight_per_task=result.target_in_flight_per_task(share.model),
    )


def _component_member(result: packing.ComponentFleetPlan, share: packing.ComponentShare) -> FleetMemberRow:
    return FleetMemberRow(
        model=share.model,
        slo_p99_ms=share.slo_p99_ms,
        profile_p99_ms=share.profile_p99_ms,
        peak_tps=share.peak_tps,
        placement=f"{share.accelerators} GPU, {share.cpu_cores:g} vCPU, {share.memory_mib} MiB per copy",
        capacity_at_peak=f"{share.copies_at_peak} cop{'y' if share.copies_at_peak == 1 else 'ies'} "
        f"({share.min_copies}..{share.max_copies})",
        scaling_target=f"{result.target_per_copy_per_minute(share.model):,.0f}/copy/min",
        target_per_minute=result.target_per_copy_per_minute(share.model),
        cold_start_seconds=share.cold_start_seconds,
        accelerators=share.accelerators,
        cpu_cores=share.cpu_cores,
        memory_mib=share.memory_mib,
        copies_min=share.min_copies,
        copies_at_peak=share.copies_at_peak,
        copies_max=share.max_copies,
    )


# Each fleet kind's member row, from its plan and the member's share in it.
MEMBER_ROWS: dict[kinds.FleetKind, Callable[..., FleetMemberRow]] = {
    kinds.NEURON_CORES: _core_member,
    kinds.SAGEMAKER_INFERENCE_COMPONENTS: _component_member,
}


def to_json(
    rows: Sequence[PlanRow],
    fleets: Sequence[FleetRow] = (),
    generations: Sequence[GenerationRow] = (),
    absent: Sequence[NotDeployed] = (),
) -> str:
    def clean(row: PlanRow) -> dict:
        data = asdict(row)
        if not row.compare:
            data.pop("compare")
        return data

    def fleet(row: FleetRow) -> dict:
        data = asdict(row)
        data["cost"]["monthly_saving_at_peak"] = row.cost.monthly_saving_at_peak
        data["cost"]["monthly_saving_at_min"] = row.cost.monthly_saving_at_min
        return data

    return json.dumps(
        {
            "models": [clean(r) for r in rows],
            "fleets": [fleet(f) for f in fleets],
            "generations": [asdict(g) for g in generations],
            "not_deployed": [asdict(a) for a in absent],
        },
        indent=2,
    )


def fleets_to_text(fleets: Sequence[FleetRow]) -> str:
    """Each fleet: its layout, then cost per month (low traffic: the minimum; high: the peak fleet all
    month) with its schedules, without them, and for the same models each on its own accelerators."""
    out = []
    for row in fleets:
        c = row.cost
        out.append(
            f"fleet {row.fleet} ({row.kind}) in {row.env}: {row.instance_type} x "
            f"{row.instances_min}..{row.instances_max}, {row.instances_at_peak} at peak, "
            f"SLO {'met' if row.meets_slo else 'NOT met'}"
        )
        for m in row.members:
            cold = f", cold start ~{m.cold_start_seconds} s" if m.cold_start_seconds is not None else ""
            out.append(
                f"  {m.model}: {m.placement}; {m.capacity_at_peak} at peak {m.peak_tps:g} TPS; "
                f"p99 {m.profile_p99_ms:g}/{m.slo_p99_ms:g} ms; target {m.scaling_target}{cold}; "
                f"profile {m.profile_instance_type} {_profile_cell(m)}"
            )
        for window in row.off_hours:
            out.append(f"  off hours {window}")
        out.append(
            f"  ${c.usd_per_instance_hour:g}/h per instance ({c.price_source}); ${c.cost_per_hour_at_peak:,.2f}/h "
            f"at peak"
        )
        out.append("  $/month       at min     at peak   (without schedules)")
        out.append(
            f"  packed     {c.monthly_at_min:>9,.0f}  {c.monthly_with_off_hours:>10,.0f}   ({c.monthly_at_peak:,.0f})"
        )
        out.append(
            f"  dedicated  {c.dedicated_monthly_at_min:>9,.0f}  {c.dedicated_monthly_with_off_hours:>10,.0f}   "
            f"({c.dedicated_monthly_at_peak:,.0f})   {c.dedicated_min_capacity}..{c.dedicated_instances_at_peak} "
            f"instances, one model per accelerator"
        )
        out.append(f"  saving     {c.monthly_saving_at_min:>9,.0f}  {c.monthly_saving_at_peak:>10,.0f}")
    return "\n".join(out)


_COLUMNS = (
    "model",
    "env",
    "instance",
    "thru/inst",
    "p99 ms",
    "min",
    "peak",
    "max",
    "target/min",
    "$/h peak",
    "$/month min..peak",
    "$/1M",
    "SLO",
    "profile",
    "fleet",
)


def _profile_cell(row) -> str:
    """ "measured 2025-06-01 (12d ago)" or "estimate"; a measured entry whose p99 is not a measurement says so,
    and a compare option that was not ranked says that too."""
    unranked = "not ranked: " if not getattr(row, "ranked", True) else ""
    if row.profile != "measured":
        return f"{unranked}{provenance.ESTIMATE}"
    caveat = f", {row.profile_caveat}" if row.profile_caveat else ""
    return f"{unranked}measured {row.measured_date} ({row.profile_age_days}d ago){caveat}"


def to_table(rows: Sequence[PlanRow]) -> str:
    lines = []
    for row in rows:
        lines.append(_cells(row, row.model, row.env))
        for option in row.compare:
            label = ("* " if option.cheapest else "  ") + ("(deployed)" if option.deployed else "")
            lines.append(_cells(option, "", label.rstrip()))
    widths = [max([len(c), *(len(line[i]) for line in lines)]) for i, c in enumerate(_COLUMNS)]
    left = {0, 1, 2, _COLUMNS.index("profile")}
    fmt = "  ".join(f"{{:<{w}}}" if i in left else f"{{:>{w}}}" for i, w in enumerate(widths))
    out = [fmt.format(*_COLUMNS), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*line) for line in lines]
    if any(r.compare for r in rows):
        out.append(
            "* cheapest instance type (fleet cost at peak) whose measured p99 meets the SLO; estimates (no "
            "measured: block in throughput_profile) are listed, not ranked"
        )
    if any(o.measured_percentile not in (None, "p99") for r in rows for o in (r, *r.compare)):
        out.append(
            "p95: the entry's latency is an Inference Recommender job's p95 (measured.p95_latency_ms), not a "
            "p99 measurement; its p99 is assumed, and --compare does not rank it"
        )
    if any(r.fleet for r in rows):
        out.append("fleet: the model runs on that fleet here (below); its row is what it would need on its own")
    return "\n".join(out)


def _cells(row: PlanRow, model: str, env: str) -> list[str]:
    return [
        model,
        env,
        row.instance_type,
        f"{row.throughput_per_instance:,.1f}/s",
        f"{row.profile_p99_ms:g}/{row.slo_p99_ms:g}",
        str(row.instances_min),
        str(row.instances_at_peak),
        str(row.instances_max),
        f"{row.scaling_target_per_instance_per_minute:,.0f}",
        f"{row.cost_per_hour:,.2f}",
        f"{row.cost_per_month_min:,.0f}..{row.cost_per_month_at_peak:,.0f}",
        f"{row.cost_per_million:.3f}",
        "yes" if row.meets_slo else "NO",
        _profile_cell(row),
        row.fleet or "",
    ]


# ---------------------------------------------------------------- Inf1 against Inf2

# The Neuron SDK's own statement of Inf1's status (its torch-neuron pages are archived).
INF1_STATUS = (
    "torch-neuron (Inf1) is no longer officially supported by the AWS Neuron SDK "
    "(awsdocs-neuron.readthedocs-hosted.com/en/latest/archive/torch-neuron/misc-inference-torch-neuron.html)"
)
SUPPORT = {"inf1": "no longer supported (torch-neuron, archived)", "inf2": "current (torch-neuronx)"}


@dataclass(frozen=True)
class GenerationRow:
    env: str
    reference: str  # the model whose SLO both generations are planned for
    model: str
    generation: str
    instance_type: str
    throughput_per_instance: float
    profile_p99_ms: float
    slo_p99_ms: float
    peak_tps: float
    instances_at_peak: int
    usd_per_instance_hour: float
    price_source: str
    price_recorded: str
    cost_per_hour: float
    cost_per_million: float
    meets_slo: bool
    support: str
    cheapest: bool = False
    measured: bool = False  # its profile entry was measured; only those are ranked


def generation_pairs(project: Project) -> list[tuple]:
    """(inf1 model, inf2 model) pairs of one checkpoint: the same source (hub id or local path, revision,
    task and labels) compiled for each generation."""

    def source_key(model):
        s = model.source
        return (s.huggingface_id, s.local_path, s.revision, s.task, s.labels)

    neuron = [m for m in project.models if isinstance(m, NeuronEcsModel)]  # the neuron-ecs kind's schema
    return [
        (old, new)
        for old in neuron
        if old.compile.neuron_generation == "inf1"
        for new in neuron
        if new.compile.neuron_generation == "inf2" and source_key(new) == source_key(old)
    ]


def build_generations(project: Project, envs: Sequence[str]) -> list[GenerationRow]:
    """Each pair planned on every profiled instance type at the Inf1 model's SLO in each environment, priced
    from the same table (its dated entries, or the environment's overrides)."""
    rows = []
    for env in envs:
        environment = project.environments[env]
        for old, new in generation_pairs(project):
            if not (old.deploys_in(env) and new.deploys_in(env)):
                continue  # planned only where both are deployed (and so validated)
            slo = old.slo_for(env)
            options = []
            for model in (old, new):
                for itype in sorted(model.throughput_profile):
                    try:
                        result = planning.plan(model, env, environment, instance_type=itype, slo=slo)
                    except planning.FleetBeyondCount:
                        continue
                    hourly = pricing.price(itype, environment.prices)
                    options.append(
                        GenerationRow(
                            env=env,
                            reference=old.name,
                            model=model.name,
                            generation=model.compile.neuron_generation,
                            instance_type=itype,
                            throughput_per_instance=result.throughput_per_instance,
                            profile_p99_ms=result.profile_p99_ms,
                            slo_p99_ms=slo.p99_latency_ms,
                            peak_tps=slo.peak_tps,
                            instances_at_peak=result.instances_at_peak,
                            usd_per_instance_hour=hourly.usd_per_hour,
                            price_source=hourly.source,
                            price_recorded=hourly.recorded,
                            cost_per_hour=result.instances_at_peak * hourly.usd_per_hour,
                            cost_per_million=pricing.cost_per_million(
                                hourly.usd_per_hour, result.throughput_per_instance
                            ),
                            meets_slo=result.latency_within_slo,
                            support=SUPPORT[model.compile.neuron_generation],
                            measured=provenance.dedicated(model, env, itype).measured,
                        )
                    )
            eligible = [o for o in options if o.meets_slo and o.measured]
            best = min(eligible, key=lambda o: (o.cost_per_hour, o.cost_per_million)) if eligible else None
            rows += [o if o is not best else GenerationRow(**{**asdict(o), "cheapest": True}) for o in options]
    return rows


def generations_to_text(rows: Sequence[GenerationRow]) -> str:
    out, seen = [], set()
    for row in rows:
        if (row.env, row.reference) not in seen:
            seen.add((row.env, row.reference))
            out.append(
                f"Inf1 vs Inf2 in {row.env}, at {row.reference}'s SLO (p99 {row.slo_p99_ms:g} ms, "
                f"{row.peak_tps:,.0f} TPS at peak):"
            )
        price = f"${row.usd_per_instance_hour:g}/h" + (f" ({row.price_recorded})" if row.price_recorded else "")
        out.append(
            f"  {'*' if row.cheapest else ' '} {row.generation}  {row.model:<18} {row.instance_type:<13} "
            f"{row.throughput_per_instance:>7,.0f}/s  p99 {row.profile_p99_ms:>3g} ms  "
            f"{row.instances_at_peak:>3} x {price:<20} = {'$' + format(row.cost_per_hour, ',.2f') + '/h':>11}  "
            f"${row.cost_per_million:.3f}/1M  {'meets SLO' if row.meets_slo else 'misses SLO'}; "
            f"{'measured' if row.measured else 'not ranked: estimate'}; {row.support}"
        )
    if rows:
        out.append(
            "* cheapest measured entry that meets the SLO. Prices: " + "; ".join(sorted({r.price_source for r in rows}))
        )
        out.append(INF1_STATUS)
    return "\n".join(out)
