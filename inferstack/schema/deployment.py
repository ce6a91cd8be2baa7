"""How a running fleet is replaced on update: shared by the Triton and Neuron model kinds and neuron-cores fleets."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from inferstack.schema.base import Frozen

# SageMaker sizes every stepped deployment against the variant's instance count at deploy time: CanarySize
# "must be less than or equal to 50% of the variant's total instance count", LinearStepSize "must be 10-50%"
# of it (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_TrafficRoutingConfig.html), a rolling
# MaximumBatchSize "between 5% to 50%" (.../API_RollingUpdatePolicy.html). A step is at least one instance,
# and one instance is at most 50% of the fleet only from two instances on.
MIN_INSTANCES_FOR_STEPPED_DEPLOYMENT = 2


class Deployment(Frozen):
    """How a running fleet is replaced on update, rolled back automatically when the latency or error alarms
    fire: SageMaker deployment guardrails for Triton endpoints, ECS's native deployment strategies for
    Neuron services (the mapping and the ECS rules: inferstack/neuron/deployment.py)."""

    strategy: Literal["canary", "linear", "all-at-once", "rolling"] = Field(
        "canary",
        description="canary/linear/all-at-once: blue/green (a second fleet for the duration); "
        "rolling: replace the fleet in batches (no second fleet); a fleet that can be one instance at deploy "
        "time is replaced blue/green all at once",
    )
    size_percent: int | None = Field(
        None,
        ge=1,
        le=50,
        description="canary: share of capacity that takes traffic first (1-50); linear: "
        "share shifted per step (10-50); rolling: batch size (5-50); unused by all-at-once",
    )
    wait_interval_seconds: int = Field(
        300, ge=0, le=3600, description="baking time between steps, watched by the rollback alarms"
    )
    termination_wait_seconds: int = Field(
        300, ge=0, le=3600, description="blue/green: keep the old fleet this long after the last shift"
    )
    rollback_size_percent: int | None = Field(
        None, ge=1, le=100, description="rolling: batch size when rolling back (default: all at once)"
    )
    maximum_execution_timeout_seconds: int = Field(
        3600,
        ge=600,
        le=28800,
        description="longest the whole deployment may take; it must exceed the time it spends waiting",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Deployment:
        size_range = {"canary": (1, 50), "linear": (10, 50), "rolling": (5, 50)}.get(self.strategy)
        if size_range is None:
            if self.size_percent is not None:
                raise ValueError("size_percent does not apply to strategy all-at-once")
        elif self.size_percent is None:
            raise ValueError(f"strategy {self.strategy} needs size_percent")
        elif not size_range[0] <= self.size_percent <= size_range[1]:
            raise ValueError(f"size_percent for {self.strategy} must be {size_range[0]} to {size_range[1]}")
        if self.strategy == "rolling" and "termination_wait_seconds" in self.model_fields_set:
            raise ValueError("termination_wait_seconds applies to blue/green strategies, not rolling")
        if self.strategy != "rolling" and self.rollback_size_percent is not None:
            raise ValueError("rollback_size_percent applies to strategy rolling only")
        if self.total_wait_seconds >= self.maximum_execution_timeout_seconds:
            raise ValueError(
                f"maximum_execution_timeout_seconds {self.maximum_execution_timeout_seconds} must "
                f"exceed the {self.total_wait_seconds} s this deployment spends waiting"
            )
        return self

    def for_fleet(self, smallest_fleet: int) -> Deployment:
        """The deployment SageMaker can run when the variant may hold only `smallest_fleet` instances at
        deploy time (the endpoint keeps its autoscaled count, so that is the planned minimum or an
        off-hours minimum). Below MIN_INSTANCES_FOR_STEPPED_DEPLOYMENT a canary, linear step or rolling
        batch would be the whole fleet: such a fleet is replaced blue/green all at once, still baked
        against the rollback alarms for wait_interval_seconds."""
        if self.strategy == "all-at-once" or smallest_fleet >= MIN_INSTANCES_FOR_STEPPED_DEPLOYMENT:
            return self
        return self.model_copy(update={"strategy": "all-at-once", "size_percent": None, "rollback_size_percent": None})

    @property
    def steps(self) -> int:
        """Traffic steps, each followed by a baking wait."""
        if self.strategy in ("linear", "rolling"):
            return math.ceil(100 / (self.size_percent or 100))
        return 2 if self.strategy == "canary" else 1

    @property
    def total_wait_seconds(self) -> int:
        termination = 0 if self.strategy == "rolling" else self.termination_wait_seconds
        return self.steps * self.wait_interval_seconds + termination
