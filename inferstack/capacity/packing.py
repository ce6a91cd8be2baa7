"""Fleets that several models share, planned from the same SLOs and throughput profiles as a dedicated
model (inferstack.capacity.planning): the one source of the layout, instance counts, scaling targets and
costs that both `plan` and the stacks use.

- A `neuron-cores` fleet runs one task per Inferentia instance; each model gets a disjoint, contiguous
  range of the instance's NeuronCores, sized so the fleet's instances carry its peak within its SLO.
  A data-parallel copy occupies `neuron_cores_per_model` cores and sustains the profiled per-instance
  throughput divided by the instance's copies.
- A `sagemaker-inference-components` fleet is one endpoint whose instances hold copies of each model
  (an inference component); a copy holds `inference_component.accelerators` GPUs and sustains the
  profiled throughput of the instance it was measured on, scaled by its share of that instance's GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from inferstack.capacity import pricing, schedule
from inferstack.capacity.planning import FleetBeyondCount, PlanningError, target_in_flight
from inferstack.capacity.planning import plan as plan_dedicated
from inferstack.schema import instances, kinds
from inferstack.schema.environments import Environment
from inferstack.schema.fleets import Fleet, InferenceComponentFleet, NeuronCoreFleet
from inferstack.schema.neuron_ecs import NeuronEcsModel
from inferstack.schema.off_hours import OffHours
from inferstack.schema.triton_sagemaker import TritonSageMakerModel
from inferstack.triton import startup as triton_startup

# Scale-out from zero (SageMaker's documented pattern): a request that finds no copy fails and counts in
# NoCapacityInvocationFailures; an alarm on one 1-minute datapoint starts a step-scaling policy to one copy,
# managed instance scaling launches an instance ("several minutes"), and the copy loads the model.
NO_CAPACITY_ALARM_SECONDS = 60
INSTANCE_LAUNCH_SECONDS = 360  # an estimate for a g4dn instance joining the endpoint; re-measure on a real one


class PackingError(PlanningError):
    """The fleet cannot hold its models (more cores or accelerators per copy than an instance has)."""


# ---------------------------------------------------------------- shared arithmetic


def safety_factor(capacity_safety: float | None, environment: Environment) -> float:
    return capacity_safety if capacity_safety is not None else environment.defaults.safety_factor


def hourly_price(instance_type: str, environment: Environment) -> pricing.Price:
    return pricing.price(instance_type, environment.prices)


@dataclass(frozen=True)
class Window:
    """An off-hours window, with the share of the month it holds reduced capacity."""

    start: str
    end: str
    time_zone: str
    min: int
    max: int
    open_share: float

    @classmethod
    def of(cls, window: OffHours) -> Window:
        return cls(window.start, window.end, window.time_zone, window.min, window.max, schedule.window_share(window))


def monthly_instance_hours(instances_outside: int, windows: Sequence[Window]) -> float:
    """Instance hours per month at `instances_outside` (the fleet at peak, an upper bound), with each window's
    share of the month at its max instead (never more than outside). Windows are assumed not to overlap."""
    open_total = min(1.0, sum(w.open_share for w in windows))
    inside = sum(w.open_share * min(w.max, instances_outside) for w in windows)
    return (instances_outside * (1 - open_total) + inside) * pricing.HOURS_PER_MONTH


# ---------------------------------------------------------------- neuron-cores


class _MeetsSlo:
    """Whether a fleet plan meets its members' SLOs: each profiled p99 within its SLO, the peak within max."""

    shares: tuple
    instances_at_peak: int
    max_capacity: int

    @property
    def latency_within_slo(self) -> bool:
        return all(s.profile_p99_ms <= s.slo_p99_ms for s in self.shares)

    @property
    def peak_within_max(self) -> bool:
        return self.instances_at_peak <= self.max_capacity

    @property
    def meets_slo(self) -> bool:
        return self.latency_within_slo and self.peak_within_max


@dataclass(frozen=True)
class CoreShare:
    model: str
    first_core: int
    cores: int  # per instance
    workers: int
    port: int
    throughput_per_core: float
    profile_p99_ms: float
    slo_p99_ms: float
    peak_tps: float

    @property
    def visible_cores(self) -> str:
        last = self.first_core + self.cores - 1
        return str(self.first_core) if self.cores == 1 else f"{self.first_core}-{last}"

    def throughput_per_instance(self) -> float:
        return self.cores * self.throughput_per_core


@dataclass(frozen=True)
class NeuronFleetPlan(_MeetsSlo):
    fleet: str
    environment: str
    instance_type: str
    neuron_cores: int
    safety_factor: float
    shares: tuple[CoreShare, ...]
    instances_at_peak: int
    min_capacity: int
    max_capacity: int
    windows: tuple[Window, ...]

    @property
    def spare_cores(self) -> int:
        return self.neuron_cores - sum(s.cores for s in self.shares)

    def share(self, model: str) -> CoreShare:
        return next(s for s in self.shares if s.model == model)

    def target_per_task_per_minute(self, model: str) -> float:
        """Requests per minute to one task's target of this model (ALB RequestCountPerTarget on the model's
        target group): its cores' measured throughput x safety factor x 60, as for a dedicated instance."""
        return self.share(model).throughput_per_instance() * self.safety_factor * 60.0

    def target_in_flight_per_task(self, model: str) -> float:
        """The model's concurrency target per task (planning.target_in_flight on its cores' throughput)."""
        share = self.share(model)
        return target_in_flight(share.throughput_per_instance(), self.safety_factor, share.profile_p99_ms)


def _largest_divisor_at_most(units: int, limit: int) -> int:
    return max(d for d in range(1, min(units, limit) + 1) if units % d == 0)


def plan_neuron_fleet(
    name: str, fleet: NeuronCoreFleet, members: Sequence[NeuronEcsModel], env_name: str, environment: Environment
) -> NeuronFleetPlan:
    capacity = fleet.capacity_for(env_name)
    spec = instances.get(capacity.instance_type)
    safety = safety_factor(capacity.safety_factor, environment)
    total = spec.neuron_cores
    if total == 0:
        raise PackingError(f"{capacity.instance_type} has no NeuronCores")
    per_core, unit, points = [], [], []
    for model in members:
        point = model.throughput_profile.get(capacity.instance_type)
        if point is None:
            raise PlanningError(
                f"{model.name}: no throughput_profile entry for {capacity.instance_type} (the "
                f"instance type of fleet {name} in {env_name})"
            )
        per_core.append(point.throughput_per_second / total)
        unit.append(model.compile.neuron_cores_per_model)
        points.append(point)
    if sum(unit) > total:
        raise PackingError(
            f"fleet {name}: its models need at least {sum(unit)} NeuronCores per instance "
            f"({' + '.join(map(str, unit))}), {capacity.instance_type} has {total}"
        )
    peaks = [model.slo_for(env_name).peak_tps for model in members]

    def cores_needed(instances_count: int) -> list[int] | None:
        cores = []
        for peak, rate, step in zip(peaks, per_core, unit, strict=True):
            per_instance = instances_count * rate * safety
            needed = peak / per_instance if per_instance > 0 else math.inf
            if not math.isfinite(needed) or needed > total:
                return None
            cores.append(max(step, math.ceil((needed - 1e-9) / step) * step))
        return cores if sum(cores) <= total else None

    # The smallest fleet that fits: at most every model on its own instances, plus one for rounding.
    upper = 1
    for peak, rate in zip(peaks, per_core, strict=True):
        per_instance = rate * total * safety
        needed = peak / per_instance if per_instance > 0 else math.inf
        if not math.isfinite(needed) or needed > 10**9:
            raise FleetBeyondCount(f"fleet {name}: peak {peak:g} TPS needs more instances than can be counted")
        upper += math.ceil(needed)
    count, cores = next(
        ((n, c) for n in range(1, upper + len(members) + 1) if (c := cores_needed(n)) is not None), (None, None)
    )
    if count is None or cores is None:
        raise PackingError(f"fleet {name}: no instance count up to {upper} fits every model's cores")
    cores = _spread_spare(cores, unit, peaks, per_core, total)
    shares, first = [], 0
    for index, (model, point, model_cores, step) in enumerate(zip(members, points, cores, unit, strict=True)):
        copies = model_cores // step
        shares.append(
            CoreShare(
                model=model.name,
                first_core=first,
                cores=model_cores,
                workers=_largest_divisor_at_most(copies, model.serving.workers),
                # Its own port (serving.port), wherever it sits in the fleet: a member's target groups are on its
                # port, and a port that moved with the fleet's order would replace them.
                port=model.serving.port,
                throughput_per_core=per_core[index],
                profile_p99_ms=point.p99_latency_ms,
                slo_p99_ms=model.slo_for(env_name).p99_latency_ms,
                peak_tps=peaks[index],
            )
        )
        first += model_cores
    return NeuronFleetPlan(
        fleet=name,
        environment=env_name,
        instance_type=spec.name,
        neuron_cores=total,
        safety_factor=safety,
        shares=tuple(shares),
        instances_at_peak=count,
        min_capacity=capacity.min,
        max_capacity=capacity.max,
        windows=tuple(Window.of(w) for w in fleet.off_hours_for(env_name)),
    )


def _spread_spare(
    cores: list[int], unit: list[int], peaks: list[float], per_core: list[float], total: int
) -> list[int]:
    """Cores the peak does not need still cost money: hand them out, one copy at a time, to the model with
    the least headroom (capacity over peak), so no core idles."""
    cores = list(cores)
    while True:
        spare = total - sum(cores)
        candidates = [i for i, step in enumerate(unit) if step <= spare]
        if not candidates:
            return cores
        neediest = min(candidates, key=lambda i: (cores[i] * per_core[i] / peaks[i], i))
        cores[neediest] += unit[neediest]


# ---------------------------------------------------------------- sagemaker-inference-components


@dataclass(frozen=True)
class ComponentShare:
    model: str
    accelerators: int
    cpu_cores: float
    memory_mib: int
    throughput_per_copy: float
    profile_p99_ms: float
    slo_p99_ms: float
    peak_tps: float
    copies_at_peak: int
    min_copies: int
    max_copies: int
    cold_start_seconds: int | None  # what a first request after scale-to-zero waits for (None: never at zero)
    cold_start_allowed: float | None
    copies_per_instance: int  # copies of this model alone one instance holds (its GPUs, vCPUs or memory)

    @property
    def initial_copies(self) -> int:
        """RuntimeConfig.CopyCount a deploy creates or updates the component with: at least one copy, so a
        deploy proves the model loads and serves; a fleet that scales to zero drops it again when idle."""
        return max(1, self.min_copies)

    @property
    def target_invocations_per_copy_per_minute(self) -> float:
        """SageMakerInferenceComponentInvocationsPerCopy target: measured copy throughput x safety x 60 is
        computed by the fleet plan (it knows the safety factor); this is the copy's measured rate."""
        return self.throughput_per_copy


@dataclass(frozen=True)
class ComponentFleetPlan(_MeetsSlo):
    fleet: str
    environment: str
    instance_type: str
    safety_factor: float
    shares: tuple[ComponentShare, ...]
    instances_at_peak: int
    min_capacity: int  # managed instance scaling minimum (0: scale to zero)
    max_capacity: int
    placement: tuple[tuple[str, ...], ...]  # at peak: the copies on each instance
    windows: tuple[Window, ...]

    def share(self, model: str) -> ComponentShare:
        return next(s for s in self.shares if s.model == model)

    def target_per_copy_per_minute(self, model: str) -> float:
        return self.share(model).throughput_per_copy * self.safety_factor * 60.0

    @property
    def initial_instances(self) -> int:
        """The variant's InitialInstanceCount: SageMaker requires at least 1 even where managed instance
        scaling may go to 0 (ProductionVariant.InitialInstanceCount, minimum 1)."""
        return max(1, self.min_capacity)

    def window_copies(self, model: str, window: Window) -> tuple[int, int]:
        """(min, max) copies of `model` while an off-hours window is open: the window's minimum as copies
        (0 scales the model to zero), at most the window's maximum instances' worth of copies."""
        share = self.share(model)
        most = min(share.max_copies, window.max * share.copies_per_instance)
        return min(window.min, most), most

    def smallest_copy_count(self, model: str) -> int:
        """The fewest copies a deploy can meet (the planned minimum, or a window's): sizes the rolling update."""
        return min([self.share(model).min_copies, *(self.window_copies(model, w)[0] for w in self.windows)])

    @property
    def scales_to_zero(self) -> bool:
        return self.min_capacity == 0 or any(w.min == 0 for w in self.windows)


def copy_profiled_on(model: TritonSageMakerModel) -> str:
    """The throughput_profile entry one copy's throughput comes from: inference_component.profiled_on, else the
    model's capacity.instance_type."""
    spec_ic = model.inference_component
    return (spec_ic.profiled_on if spec_ic is not None else None) or model.capacity.instance_type


def copy_throughput(model: TritonSageMakerModel) -> tuple[float, float, str]:
    """(throughput per copy, its p99, the profiled instance type) from the model's throughput profile."""
    spec_ic = model.inference_component
    assert spec_ic is not None
    profiled = copy_profiled_on(model)
    point = model.throughput_profile.get(profiled)
    if point is None:
        raise PlanningError(
            f"{model.name}: no throughput_profile entry for {profiled} (inference_component.profiled_on)"
        )
    gpus = instances.get(profiled).gpus or 1
    return point.throughput_per_second * spec_ic.accelerators / gpus, point.p99_latency_ms, profiled


def cold_start_seconds(model: TritonSageMakerModel) -> int:
    """What the first request after scale-to-zero waits for (and its callers retry through): the alarm on
    NoCapacityInvocationFailures, an instance launch and the container's start-up (model load, TensorRT
    engine builds, warm-up: inferstack.triton.startup's estimate)."""
    return NO_CAPACITY_ALARM_SECONDS + INSTANCE_LAUNCH_SECONDS + triton_startup.estimated_seconds(model)


def _place(
    copies: Sequence[tuple[str, int, float, int]], spec: instances.InstanceSpec, count: int
) -> list[list[str]] | None:
    """First-fit decreasing of copies (model, accelerators, cpus, memory) onto `count` instances."""
    free = [[spec.gpus, float(spec.vcpus), spec.memory_gib * 1024] for _ in range(count)]
    placed: list[list[str]] = [[] for _ in range(count)]
    for model, gpus, cpus, memory in sorted(copies, key=lambda c: (-c[1], -c[3], -c[2], c[0])):
        for index, room in enumerate(free):
            if room[0] >= gpus and room[1] >= cpus and room[2] >= memory:
                room[0] -= gpus
                room[1] -= cpus
                room[2] -= memory
                placed[index].append(model)
                break
        else:
            return None
    return placed


def plan_component_fleet(
    name: str,
    fleet: InferenceComponentFleet,
    members: Sequence[TritonSageMakerModel],
    env_name: str,
    environment: Environment,
) -> ComponentFleetPlan:
    capacity = fleet.capacity_for(env_name)
    spec = instances.get(capacity.instance_type)
    safety = safety_factor(capacity.safety_factor, environment)
    windows = tuple(Window.of(w) for w in fleet.off_hours_for(env_name))
    to_zero = capacity.min == 0 or any(w.min == 0 for w in windows)
    shares, copies = [], []
    for model in members:
        ic = model.inference_component
        if ic is None:
            raise PackingError(f"{model.name}: set inference_component to place it on fleet {name}")
        if ic.accelerators > spec.gpus or ic.cpu_cores > spec.vcpus or ic.memory_mib > spec.memory_gib * 1024:
            raise PackingError(
                f"{model.name}: one copy ({ic.accelerators} GPU, {ic.cpu_cores:g} vCPU, "
                f"{ic.memory_mib} MiB) does not fit on {spec.name} ({spec.gpus} GPU, {spec.vcpus} "
                f"vCPU, {spec.memory_gib * 1024} MiB)"
            )
        rate, p99, _ = copy_throughput(model)
        slo = model.slo_for(env_name)
        needed = slo.peak_tps / (rate * safety) if rate * safety > 0 else math.inf
        if not math.isfinite(needed) or needed > 10**6:
            raise FleetBeyondCount(f"{model.name}: peak {slo.peak_tps:g} TPS needs more copies than can be counted")
        at_peak = max(1, math.ceil(needed - 1e-9))
        per_instance = min(
            spec.gpus // ic.accelerators, int(spec.vcpus // ic.cpu_cores), spec.memory_gib * 1024 // ic.memory_mib
        )
        shares.append(
            ComponentShare(
                model=model.name,
                accelerators=ic.accelerators,
                cpu_cores=ic.cpu_cores,
                memory_mib=ic.memory_mib,
                throughput_per_copy=rate,
                profile_p99_ms=p99,
                slo_p99_ms=slo.p99_latency_ms,
                peak_tps=slo.peak_tps,
                copies_at_peak=at_peak,
                min_copies=0 if to_zero else 1,
                max_copies=max(1, per_instance * capacity.max),
                cold_start_seconds=cold_start_seconds(model) if to_zero else None,
                cold_start_allowed=slo.cold_start_seconds,
                copies_per_instance=per_instance,
            )
        )
        copies += [(model.name, ic.accelerators, ic.cpu_cores, ic.memory_mib)] * at_peak
    count, placement = None, None
    for n in range(1, len(copies) + 1):
        placement = _place(copies, spec, n)
        if placement is not None:
            count = n
            break
    if count is None or placement is None:
        raise PackingError(f"fleet {name}: the copies at peak do not fit on {spec.name} instances")
    return ComponentFleetPlan(
        fleet=name,
        environment=env_name,
        instance_type=spec.name,
        safety_factor=safety,
        shares=tuple(shares),
        instances_at_peak=count,
        min_capacity=capacity.min,
        max_capacity=capacity.max,
        placement=tuple(tuple(sorted(p)) for p in placement),
        windows=windows,
    )


# ---------------------------------------------------------------- either kind, and the comparison

FleetPlan = NeuronFleetPlan | ComponentFleetPlan


@dataclass(frozen=True)
class FleetPlanner:
    """How one fleet kind is planned."""

    plan: Callable[..., FleetPlan]  # (name, fleet, members, env_name, environment)
    # (member, fleet, env_name): the instance type whose throughput_profile entry the plan reads for a member
    profiled_on: Callable[..., str]


PLANNERS: dict[kinds.FleetKind, FleetPlanner] = {
    kinds.NEURON_CORES: FleetPlanner(
        plan_neuron_fleet, profiled_on=lambda _model, fleet, env_name: fleet.capacity_for(env_name).instance_type
    ),
    kinds.SAGEMAKER_INFERENCE_COMPONENTS: FleetPlanner(
        plan_component_fleet, profiled_on=lambda model, _fleet, _env_name: copy_profiled_on(model)
    ),
}


def plan_fleet(name: str, fleet: Fleet, members: Sequence, env_name: str, environment: Environment) -> FleetPlan:
    return PLANNERS[kinds.fleet_kind(fleet)].plan(name, fleet, members, env_name, environment)


@dataclass(frozen=True)
class FleetCost:
    """A fleet next to the same models each on its own accelerators (dedicated instances or endpoints)."""

    fleet: str
    environment: str
    instance_type: str
    usd_per_instance_hour: float
    price_source: str
    instances_at_peak: int
    cost_per_hour_at_peak: float
    min_capacity: int
    monthly_at_min: float  # the planned minimum all month, the windows' hours at their min (the floor)
    monthly_at_peak: float  # every hour at the peak fleet (upper bound)
    monthly_with_off_hours: float  # the windows' hours at their max instead
    dedicated_instances_at_peak: int
    dedicated_cost_per_hour_at_peak: float
    dedicated_min_capacity: int
    dedicated_monthly_at_min: float
    dedicated_monthly_at_peak: float
    dedicated_monthly_with_off_hours: float  # what the dedicated models' own schedules would save

    @property
    def monthly_saving_at_peak(self) -> float:
        """Packing plus the fleet's schedules, against one model per accelerator with the models' own, with
        every fleet at its peak size outside the windows."""
        return self.dedicated_monthly_with_off_hours - self.monthly_with_off_hours

    @property
    def monthly_saving_at_min(self) -> float:
        """The same when traffic stays low: each fleet at its minimum (a fleet at min 0 costs nothing idle)."""
        return self.dedicated_monthly_at_min - self.monthly_at_min


def monthly_floor_hours(minimum: int, windows: Sequence[Window]) -> float:
    """Instance hours per month at the planned minimum, each window's share at its own minimum."""
    open_total = min(1.0, sum(w.open_share for w in windows))
    inside = sum(w.open_share * min(w.min, minimum) for w in windows)
    return (minimum * (1 - open_total) + inside) * pricing.HOURS_PER_MONTH


def cost(fleet_plan: FleetPlan, members: Sequence, environment: Environment) -> FleetCost:
    price = hourly_price(fleet_plan.instance_type, environment)
    hourly = price.usd_per_hour
    dedicated_count = dedicated_min = 0
    dedicated_hourly = dedicated_monthly = dedicated_scheduled = dedicated_floor = 0.0
    for model in members:
        own = plan_dedicated(model, fleet_plan.environment, environment)
        own_price = hourly_price(own.instance_type, environment).usd_per_hour
        dedicated_count += own.instances_at_peak
        dedicated_min += own.min_capacity
        dedicated_hourly += own.instances_at_peak * own_price
        dedicated_monthly += own.instances_at_peak * own_price * pricing.HOURS_PER_MONTH
        # A dedicated model keeps its own off-hours windows (a Triton endpoint never below one instance).
        own_windows = [Window.of(w) for w in model.off_hours_for(fleet_plan.environment)]
        dedicated_scheduled += monthly_instance_hours(own.instances_at_peak, own_windows) * own_price
        dedicated_floor += monthly_floor_hours(own.min_capacity, own_windows) * own_price
    return FleetCost(
        fleet=fleet_plan.fleet,
        environment=fleet_plan.environment,
        instance_type=fleet_plan.instance_type,
        usd_per_instance_hour=hourly,
        price_source=f"{price.source} ({price.recorded})" if price.recorded else price.source,
        instances_at_peak=fleet_plan.instances_at_peak,
        cost_per_hour_at_peak=fleet_plan.instances_at_peak * hourly,
        min_capacity=fleet_plan.min_capacity,
        monthly_at_min=monthly_floor_hours(fleet_plan.min_capacity, fleet_plan.windows) * hourly,
        monthly_at_peak=fleet_plan.instances_at_peak * hourly * pricing.HOURS_PER_MONTH,
        monthly_with_off_hours=monthly_instance_hours(fleet_plan.instances_at_peak, fleet_plan.windows) * hourly,
        dedicated_instances_at_peak=dedicated_count,
        dedicated_cost_per_hour_at_peak=dedicated_hourly,
        dedicated_min_capacity=dedicated_min,
        dedicated_monthly_at_min=dedicated_floor,
        dedicated_monthly_at_peak=dedicated_monthly,
        dedicated_monthly_with_off_hours=dedicated_scheduled,
    )
