"""What every model file has, whatever its kind: the checkpoint, the SLO, the throughput profile, the
capacity, and the per-environment overrides (ModelBase, which each kind's model class extends)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from inferstack.schema import families
from inferstack.schema.base import Frozen, InstanceType, Name, PositiveFloat, PositiveInt
from inferstack.schema.deployment import Deployment
from inferstack.schema.off_hours import OffHours
from inferstack.schema.throughput import ProfilePoint


class ModelSource(Frozen):
    huggingface_id: str | None = Field(
        None,
        pattern=r"^[\w.-]+(/[\w.-]+)?$",
        description="Hugging Face Hub checkpoint the image build downloads (set this or local_path)",
    )
    revision: str | None = Field(None, description="commit or tag pinned for reproducible builds")
    local_path: str | None = Field(None, description="path inside the image's build context")
    family: str | None = Field(
        None,
        pattern=r"^[a-z][a-z0-9_-]*$",
        description="the checkpoint's architecture (Hugging Face model_type: "
        f"{', '.join(families.FAMILIES)}); omitted: read from the checkpoint's config.json where "
        "local_path is in the image's build context, else from huggingface_id's name. validate "
        "checks export.token_type_ids and the task against it; the image build rehearsal builds its "
        "tiny stand-in checkpoint from it",
    )
    task: Literal["text-classification", "text2text-generation"] = Field(
        description="what the model does: the tensors it takes and answers with follow from it"
    )
    labels: tuple[str, ...] = Field(
        (), description="text-classification: the class names, in the order of the model's logits (at least two)"
    )

    @model_validator(mode="after")
    def _source(self) -> ModelSource:
        if (self.huggingface_id is None) == (self.local_path is None):
            raise ValueError("set exactly one of 'huggingface_id' or 'local_path'")
        if self.task == "text-classification" and len(self.labels) < 2:
            raise ValueError("text-classification needs 'labels' with at least two entries")
        if len(set(self.labels)) != len(self.labels):
            raise ValueError("labels repeat")
        return self


class Slo(Frozen):
    p99_latency_ms: PositiveFloat = Field(description="end-to-end p99 the service must meet")
    peak_tps: PositiveFloat = Field(description="peak inferences per second across the fleet")
    cold_start_seconds: PositiveFloat | None = Field(
        None,
        description="longest the model's callers accept to wait (retrying) after it scaled to zero, "
        "until it serves again; required to scale a model to zero, and must cover the planner's cold-start "
        "estimate (inferstack/capacity/packing.py)",
    )


class Capacity(Frozen):
    instance_type: InstanceType
    min: PositiveInt = Field(description="instances (one task each on ECS) the service never scales below")
    max: PositiveInt = Field(description="instances the service never scales above; the SLO's peak must fit")
    safety_factor: float | None = Field(None, gt=0, le=1, description="overrides the environment default")


class CapacityOverride(Frozen):
    instance_type: InstanceType | None = Field(None, description="this environment's instance type")
    min: PositiveInt | None = Field(None, description="this environment's minimum")
    max: PositiveInt | None = Field(None, description="this environment's maximum")
    safety_factor: float | None = Field(None, gt=0, le=1, description="this environment's safety factor")


class SloOverride(Frozen):
    p99_latency_ms: PositiveFloat | None = Field(None, description="this environment's p99 latency SLO")
    peak_tps: PositiveFloat | None = Field(None, description="this environment's peak (dev and staging see less)")
    cold_start_seconds: PositiveFloat | None = Field(None, description="this environment's cold-start SLO")


class EnvironmentOverride(Frozen):
    capacity: CapacityOverride = Field(
        CapacityOverride(), description="this environment's capacity, key by key over the model's"
    )
    slo: SloOverride = Field(SloOverride(), description="this environment's SLO, key by key over the model's")
    off_hours: tuple[OffHours, ...] = Field(
        (), description="scheduled scale-down windows in this environment (e.g. nights and weekends in dev)"
    )
    deployment: Deployment | None = Field(
        None, description="this environment's rollout, replacing the model's deployment (e.g. all at once in dev)"
    )


class ModelBase(Frozen):
    name: Name = Field(
        description="the model's name: its stack (<env>-<name>), image repository and release pin "
        "entry; lower-case letters, digits and dashes"
    )
    description: str = Field("", description="free text for readers of the file; not deployed")
    source: ModelSource = Field(description="the checkpoint: where it comes from and what task it does")
    slo: Slo = Field(description="what the service must meet: p99 latency and peak throughput")
    throughput_profile: dict[InstanceType, ProfilePoint] = Field(
        min_length=1,
        description="per instance type, the most one instance sustains within a p99: every capacity "
        "number is derived from it",
    )
    capacity: Capacity = Field(description="the instance type and the fleet's bounds")
    environments: dict[Name, EnvironmentOverride] = Field(
        default_factory=dict, description="per-environment overrides of capacity and SLO"
    )
    deploy_in: tuple[Name, ...] | None = Field(
        None,
        min_length=1,
        description="environments the model is deployed in (its stack, plan, release pin, "
        "promotion and smoke test); elsewhere it does not exist; omitted: every environment",
    )

    @field_validator("deploy_in")
    @classmethod
    def _unique_environments(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError("environments repeat")
        return value

    def deploys_in(self, environment: str) -> bool:
        return self.deploy_in is None or environment in self.deploy_in

    def capacity_for(self, environment: str) -> Capacity:
        override = self.environments.get(environment, EnvironmentOverride()).capacity
        return self.capacity.model_copy(update=override.model_dump(exclude_none=True))

    def slo_for(self, environment: str) -> Slo:
        override = self.environments.get(environment, EnvironmentOverride()).slo
        return self.slo.model_copy(update=override.model_dump(exclude_none=True))

    def off_hours_for(self, environment: str) -> tuple[OffHours, ...]:
        return self.environments.get(environment, EnvironmentOverride()).off_hours

    def deployment_for(self, environment: str) -> Deployment | None:
        override = self.environments.get(environment, EnvironmentOverride()).deployment
        return override if override is not None else getattr(self, "deployment", None)
