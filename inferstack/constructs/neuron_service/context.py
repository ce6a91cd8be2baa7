"""ServiceContext: what NeuronEcsService knows before any part runs (the served models, the task, the capacity
plan, the rollout), read-only. Every part receives it with the resources it needs and returns the resources it
makes (a frozen dataclass of its own), so the order they run in is the data flow in service.py; it sits below
the parts, so that none of them imports service.py."""

from __future__ import annotations

from dataclasses import dataclass

from inferstack.capacity.packing import NeuronFleetPlan
from inferstack.capacity.planning import CapacityPlan
from inferstack.constructs.neuron_service.served import ScheduledWindow, ServedModel
from inferstack.neuron.deployment import EcsRollout
from inferstack.neuron.task import NeuronTask
from inferstack.schema.neuron_ecs import NeuronEcsModel


@dataclass(frozen=True)
class ServiceContext:
    """`name`: the model's, or the fleet's. `task`: the task's facts (inferstack.neuron.task). `served`: the
    models, in port order. `off_hours`: a dedicated model's windows, or a fleet plan's. `metrics_service`: the
    Service dimension of the task's metrics, a literal."""

    name: str
    task: NeuronTask
    capacity: CapacityPlan | NeuronFleetPlan
    rollout: EcsRollout
    metrics_service: str
    served: tuple[ServedModel, ...]
    off_hours: tuple[ScheduledWindow, ...]

    @property
    def models(self) -> tuple[NeuronEcsModel, ...]:
        return tuple(s.model for s in self.served)

    @property
    def packed(self) -> bool:
        """A fleet's models are routed by path; one model keeps the whole listener (and its template)."""
        return isinstance(self.capacity, NeuronFleetPlan)
