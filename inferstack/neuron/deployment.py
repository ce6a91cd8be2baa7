"""A model's `deployment:` (the vocabulary the Triton endpoints use) as an ECS native deployment: the
strategy, its traffic steps and bake times, and what ECS would refuse, as pure functions the construct and
validation share.

Facts, from the ECS API and CloudFormation references (DeploymentConfiguration, CanaryConfiguration,
LinearConfiguration, DeploymentCircuitBreaker, DeploymentAlarms):
- Strategy ROLLING | BLUE_GREEN | LINEAR | CANARY; BLUE_GREEN needs BakeTimeInMinutes.
- Bake times (BakeTimeInMinutes, CanaryBakeTimeInMinutes, StepBakeTimeInMinutes) are whole minutes, 0-1440.
- CanaryPercent 0.1-100 and StepPercent 3-100, in steps of 0.1.
- The deployment circuit breaker applies to rolling deployments only; alarms with rollback apply to all
  (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/deployment-alarm-failure.html).
- BLUE_GREEN, LINEAR and CANARY start the whole new fleet beside the old one before traffic moves (green
  scales to the full count): with one task per Inferentia instance, a rollout holds twice the instances
  until the last bake ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from inferstack.schema.deployment import Deployment

MAX_BAKE_MINUTES = 1440
# A rolling deployment without a `deployment:`: start the whole new fleet, then stop the old one.
DEFAULT_ROLLING_MAXIMUM_PERCENT = 200
MINIMUM_HEALTHY_PERCENT = 100
# Blue and green side by side at the full count until the bake time ends.
FULL_SECOND_FLEET_PERCENT = 200


@dataclass(frozen=True)
class EcsRollout:
    strategy: str  # ROLLING | BLUE_GREEN | LINEAR | CANARY
    bake_time_minutes: int | None = None  # after all traffic moved: both fleets up, alarms watched
    canary_percent: float | None = None
    canary_bake_minutes: int | None = None
    step_percent: float | None = None
    step_bake_minutes: int | None = None
    maximum_percent: int = DEFAULT_ROLLING_MAXIMUM_PERCENT  # rolling only
    minimum_healthy_percent: int = MINIMUM_HEALTHY_PERCENT  # rolling only

    @property
    def circuit_breaker(self) -> bool:
        return self.strategy == "ROLLING"

    @property
    def shifts_traffic(self) -> bool:
        """Blue/green family: two target groups and a production listener rule ECS re-weights."""
        return self.strategy != "ROLLING"

    @property
    def peak_percent(self) -> int:
        """The most tasks a rollout runs, in percent of the desired count: a rolling update's maximumPercent;
        the blue/green family scales green to the full count beside blue (200 %). With one task per
        Inferentia instance, the instance group's maximum must hold this share of the task maximum."""
        return FULL_SECOND_FLEET_PERCENT if self.shifts_traffic else self.maximum_percent


def rollout(deployment: Deployment | None) -> EcsRollout:
    """The ECS deployment for `deployment` (None: rolling, the whole new fleet started first). Call
    `problems` first: this assumes whole minutes."""
    if deployment is None:
        return EcsRollout("ROLLING")
    wait = deployment.wait_interval_seconds // 60
    bake = deployment.termination_wait_seconds // 60
    if deployment.strategy == "canary":
        return EcsRollout(
            "CANARY",
            bake_time_minutes=bake,
            canary_percent=float(deployment.size_percent or 0),
            canary_bake_minutes=wait,
        )
    if deployment.strategy == "linear":
        return EcsRollout(
            "LINEAR", bake_time_minutes=bake, step_percent=float(deployment.size_percent or 0), step_bake_minutes=wait
        )
    if deployment.strategy == "all-at-once":
        # SageMaker bakes wait_interval after the shift, then waits termination_wait before removing the old
        # fleet; ECS has one bake with both fleets up: their sum.
        return EcsRollout("BLUE_GREEN", bake_time_minutes=wait + bake)
    # rolling: start size_percent of the fleet beside the old one at a time, never below the full fleet
    return EcsRollout("ROLLING", maximum_percent=100 + (deployment.size_percent or 100))


def problems(deployment: Deployment | None) -> Iterator[tuple[tuple[str, ...], str]]:
    """(key under `deployment`, message) for what ECS would refuse or silently ignore."""
    if deployment is None:
        return
    for field in ("wait_interval_seconds", "termination_wait_seconds"):
        value = getattr(deployment, field)
        if value % 60:
            yield (
                (field,),
                (
                    f"{value} s: ECS bakes in whole minutes (BakeTimeInMinutes, CanaryBakeTimeInMinutes, "
                    f"StepBakeTimeInMinutes); use a multiple of 60"
                ),
            )
    if (
        deployment.strategy == "all-at-once"
        and (deployment.wait_interval_seconds + deployment.termination_wait_seconds) // 60 > MAX_BAKE_MINUTES
    ):
        yield ("wait_interval_seconds",), f"ECS bakes at most {MAX_BAKE_MINUTES} minutes"
    if deployment.rollback_size_percent is not None:
        yield (
            ("rollback_size_percent",),
            (
                "ECS rolls a blue/green-family deployment back by moving traffic to the "
                "old fleet, and a rolling one as a new deployment: no rollback batch size"
            ),
        )
    if "maximum_execution_timeout_seconds" in deployment.model_fields_set:
        yield (
            ("maximum_execution_timeout_seconds",),
            ("ECS deployments have no overall timeout setting (each stage is bounded by ECS itself)"),
        )
