"""Capacity derived from a model's SLO and measured throughput profile: the one source of the numbers
the stacks use for min/max capacity and autoscaling targets.

An instance is asked to carry `safety_factor` of the throughput it was measured to sustain within its
p99; the rest is headroom for bursts and for the time a scale-out takes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inferstack.schema.environments import Environment
from inferstack.schema.kinds import Model
from inferstack.schema.model_file import Slo


class PlanningError(ValueError):
    """The configuration cannot be planned at all (e.g. no profile for the chosen instance type)."""


class FleetBeyondCount(PlanningError):
    """Peak over per-instance throughput is not a finite number of instances (a throughput so small,
    or a peak so large, that the division overflows): no max capacity can carry it."""


def target_in_flight(throughput_per_second: float, safety_factor: float, p99_latency_ms: float) -> float:
    """Concurrency target per instance (requests in the server at once: queued plus executing), for scaling
    on the serving app's own in-flight metric. Little's law at the request-count target's operating point:
    arrival rate (measured max RPS x safety factor) x time in the server, bounded by the profiled p99."""
    return throughput_per_second * safety_factor * p99_latency_ms / 1000.0


def target_per_minute(throughput_per_second: float, safety_factor: float) -> float:
    """Autoscaling target in requests per instance per minute, the unit of both ALBRequestCountPerTarget
    and SageMakerVariantInvocationsPerInstance: measured max RPS x safety factor x 60."""
    return throughput_per_second * safety_factor * 60.0


@dataclass(frozen=True)
class CapacityPlan:
    model: str
    environment: str
    instance_type: str
    throughput_per_instance: float
    profile_p99_ms: float
    slo_p99_ms: float
    peak_tps: float
    safety_factor: float
    instances_at_peak: int
    min_capacity: int
    max_capacity: int

    @property
    def target_per_instance_per_second(self) -> float:
        return self.throughput_per_instance * self.safety_factor

    @property
    def target_per_instance_per_minute(self) -> float:
        return target_per_minute(self.throughput_per_instance, self.safety_factor)

    @property
    def target_in_flight_per_instance(self) -> float:
        return target_in_flight(self.throughput_per_instance, self.safety_factor, self.profile_p99_ms)

    @property
    def latency_within_slo(self) -> bool:
        return self.profile_p99_ms <= self.slo_p99_ms

    @property
    def peak_within_max(self) -> bool:
        return self.instances_at_peak <= self.max_capacity

    @property
    def meets_slo(self) -> bool:
        return self.latency_within_slo and self.peak_within_max


def plan(
    model: Model, env_name: str, environment: Environment, *, instance_type: str | None = None, slo: Slo | None = None
) -> CapacityPlan:
    """The capacity the stacks deploy; `instance_type` plans the same model on another profiled type, `slo`
    for another model's SLO (the same checkpoint compiled for another Neuron generation, compared)."""
    capacity = model.capacity_for(env_name)
    slo = slo or model.slo_for(env_name)
    instance_type = instance_type or capacity.instance_type
    point = model.throughput_profile.get(instance_type)
    if point is None:
        raise PlanningError(f"no throughput_profile entry for {instance_type} (the instance type used in {env_name})")
    safety = capacity.safety_factor if capacity.safety_factor is not None else environment.defaults.safety_factor
    per_instance = point.throughput_per_second * safety
    needed = slo.peak_tps / per_instance if per_instance > 0 else math.inf  # both factors > 0 may underflow to 0
    if not math.isfinite(needed):
        raise FleetBeyondCount(
            f"peak {slo.peak_tps:g} TPS at {point.throughput_per_second:g}/s x safety factor {safety:g} per "
            f"{instance_type} needs more instances than can be counted"
        )
    return CapacityPlan(
        model=model.name,
        environment=env_name,
        instance_type=instance_type,
        throughput_per_instance=point.throughput_per_second,
        profile_p99_ms=point.p99_latency_ms,
        slo_p99_ms=slo.p99_latency_ms,
        peak_tps=slo.peak_tps,
        safety_factor=safety,
        # A tiny epsilon keeps float noise (e.g. 3.0000000004) from adding an instance.
        instances_at_peak=max(1, math.ceil(needed - 1e-9)),
        min_capacity=capacity.min,
        max_capacity=capacity.max,
    )
