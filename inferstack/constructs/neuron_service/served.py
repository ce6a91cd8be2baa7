"""What the task serves, as every part of the service reads it: each model's port, readiness path and the
planner's numbers (ServedModel), the image, the off-hours windows, and where a fleet model's own resources live.
Apart from the parts, so that none imports another for them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from constructs import Construct

from inferstack.capacity.packing import NeuronFleetPlan
from inferstack.capacity.planning import CapacityPlan
from inferstack.config.release_pin import PinnedImage
from inferstack.schema.neuron_ecs import NeuronEcsModel

READINESS_PATH = "/v2/health/ready"  # 200 only after the model is loaded and warmed up
# Several models in one task: the serving app answers each model's readiness on that model's port.
MODEL_PATH = "/v2/models/{name}"
MODEL_READINESS_PATH = MODEL_PATH + "/ready"


@dataclass(frozen=True)
class ImageBuild:
    """Build the serving image at deploy time from this Docker context (container/neuron/); the
    Dockerfile and build args follow from the model and instance type."""

    directory: str


# Either built from source (dev) or a promoted image pinned by digest (staging, prod).
NeuronImage = ImageBuild | PinnedImage


class ScheduledWindow(Protocol):
    """An off-hours window: a model's `OffHours` or a fleet plan's `Window` (crons in Application Auto
    Scaling's format, their IANA zone, and the task range inside the window)."""

    @property
    def start(self) -> str: ...
    @property
    def end(self) -> str: ...
    @property
    def time_zone(self) -> str: ...
    @property
    def min(self) -> int: ...
    @property
    def max(self) -> int: ...


@dataclass(frozen=True)
class ServedModel:
    """One model the task serves: where it listens and how it is health-checked, and the planner's numbers
    that alarm and scale it."""

    model: NeuronEcsModel
    port: int
    readiness_path: str
    slo_p99_ms: float
    requests_per_task_per_minute: float
    in_flight_per_task: float  # the planner's concurrency target per task (inferstack.capacity.planning)
    workers: int  # this model's worker processes in the task, each emitting its own InFlight

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def in_flight_per_worker(self) -> float:
        """The InFlight target as the scaling policy reads it: every worker writes its own InFlight under the
        model's (Service, Model) dimensions, so their Average is per worker; a task runs `workers` of them."""
        return self.in_flight_per_task / self.workers

    @property
    def path(self) -> str:
        """The model's routes on the load balancer (KServe v2): `<path>` and `<path>/...`."""
        return MODEL_PATH.format(name=self.name)


def dedicated(model: NeuronEcsModel, capacity: CapacityPlan) -> ServedModel:
    # One task per instance: the planner's per-instance targets are per task.
    return ServedModel(
        model,
        model.serving.port,
        READINESS_PATH,
        capacity.slo_p99_ms,
        capacity.target_per_instance_per_minute,
        capacity.target_in_flight_per_instance,
        model.serving.workers,
    )


def fleet(capacity: NeuronFleetPlan, models: Sequence[NeuronEcsModel]) -> tuple[ServedModel, ...]:
    """A neuron-cores fleet's members, in the plan's (port) order."""
    by_name = {m.name: m for m in models}
    return tuple(
        ServedModel(
            by_name[share.model],
            share.port,
            MODEL_READINESS_PATH.format(name=share.model),
            share.slo_p99_ms,
            capacity.target_per_task_per_minute(share.model),
            capacity.target_in_flight_per_task(share.model),
            share.workers,
        )
        for share in capacity.shares
    )


def health_check_grace_seconds(models: Sequence[NeuronEcsModel]) -> int:
    """The task is healthy once every model has loaded and warmed up."""
    return max(m.serving.health_check_grace_seconds for m in models)


def model_scope(service: Construct, served: ServedModel) -> Construct:
    """A fleet model's own resources (target group, rule, alarms) live under its name."""
    existing = service.node.try_find_child(served.name)
    return existing if isinstance(existing, Construct) else Construct(service, served.name)
