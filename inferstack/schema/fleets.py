"""environments.yaml `fleets:`: models sharing accelerators, on one SageMaker endpoint (inference
components) or on one Inferentia instance's NeuronCores."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from inferstack.schema.base import Frozen, InstanceType, Name, PositiveInt
from inferstack.schema.deployment import Deployment
from inferstack.schema.off_hours import OffHours


class FleetCapacity(Frozen):
    instance_type: InstanceType
    min: int = Field(
        ge=0,
        description="instances at the least; 0 scales the fleet to zero when idle "
        "(sagemaker-inference-components only; a neuron-cores fleet reaches 0 through off_hours)",
    )
    max: PositiveInt = Field(description="instances at the most; the plan must carry every member's peak within it")
    safety_factor: float | None = Field(None, gt=0, le=1, description="overrides the environment default")


class FleetCapacityOverride(Frozen):
    instance_type: InstanceType | None = Field(None, description="this environment's instance type")
    min: int | None = Field(None, ge=0, description="this environment's minimum instances")
    max: PositiveInt | None = Field(None, description="this environment's maximum instances")
    safety_factor: float | None = Field(None, gt=0, le=1, description="this environment's safety factor")


class FleetEnvironmentOverride(Frozen):
    capacity: FleetCapacityOverride = Field(
        FleetCapacityOverride(), description="this environment's capacity, key by key over the fleet's"
    )
    off_hours: tuple[OffHours, ...] = Field(
        (), description="scheduled windows of reduced capacity; min 0 scales the fleet to zero for the window"
    )
    deployment: Deployment | None = Field(None, description="neuron-cores: this environment's rollout")


class _FleetBase(Frozen):
    description: str = Field("", description="free text for readers of the file; not deployed")
    models: tuple[Name, ...] = Field(min_length=1, description="the models this fleet carries, in this order")
    capacity: FleetCapacity = Field(description="the shared instances: type, min, max and safety factor")
    environments: dict[Name, FleetEnvironmentOverride] = Field(
        default_factory=dict, description="per-environment overrides of capacity and off_hours"
    )

    @field_validator("models")
    @classmethod
    def _unique_models(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError("models repeat")
        return value

    def capacity_for(self, environment: str) -> FleetCapacity:
        override = self.environments.get(environment, FleetEnvironmentOverride()).capacity
        return self.capacity.model_copy(update=override.model_dump(exclude_none=True))

    def off_hours_for(self, environment: str) -> tuple[OffHours, ...]:
        return self.environments.get(environment, FleetEnvironmentOverride()).off_hours


class InferenceComponentFleet(_FleetBase):
    """One SageMaker endpoint whose instances (managed instance scaling) are shared by its models, each an
    inference component with its own copies, scaling, alarms, dashboard and smoke test."""

    kind: Literal["sagemaker-inference-components"] = Field(
        description="one SageMaker endpoint, each member an inference component"
    )
    deploy_in: tuple[Name, ...] | None = Field(
        None,
        description="environments where the models share this endpoint; elsewhere each keeps its own "
        "(dedicated endpoints, e.g. where an SLO needs them); omitted: every environment",
    )

    def deploys_in(self, environment: str) -> bool:
        return self.deploy_in is None or environment in self.deploy_in


class NeuronCoreFleet(_FleetBase):
    """Inferentia instances whose NeuronCores are split among several neuron-ecs models: one task per
    instance, one image with every model compiled in, each model on its own core range and port. Packed in
    every environment, so the one image promotes unchanged."""

    kind: Literal["neuron-cores"] = Field(
        description="one ECS service whose task splits the NeuronCores among the members"
    )
    # One member is still a fleet: a fleet whose other members retired keeps its stack, load balancer and URL, so
    # the model left is where its callers find it (moving it to a stack of its own is a change of address).
    models: tuple[Name, ...] = Field(
        min_length=1, description="the models sharing each instance, in core order (each on its own serving.port)"
    )
    deployment: Deployment | None = Field(
        None, description="the fleet service's ECS rollout (as a neuron-ecs model's deployment); omitted: rolling"
    )

    def deployment_for(self, environment: str) -> Deployment | None:
        override = self.environments.get(environment, FleetEnvironmentOverride()).deployment
        return override if override is not None else self.deployment

    def deploys_in(self, environment: str) -> bool:
        return True


Fleet = Annotated[InferenceComponentFleet | NeuronCoreFleet, Field(discriminator="kind")]
