"""Checks of a sagemaker-inference-components fleet: its members on one endpoint and scaling to zero."""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence

from inferstack.capacity import packing
from inferstack.config.checks.common import Finding, unknown_environments
from inferstack.config.yaml_source import KeyPath
from inferstack.schema import instances
from inferstack.schema.environments import Environment, EnvironmentsFile
from inferstack.schema.fleets import FleetCapacity, InferenceComponentFleet
from inferstack.schema.triton_sagemaker import TritonSageMakerModel

# https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html (inline policies per role: 10,240
# characters in all); the endpoint role's own statements take the rest.
MAX_COMPONENTS_PER_FLEET = 10


def check_file(base: KeyPath, fleet: InferenceComponentFleet, env_file: EnvironmentsFile) -> Iterator[Finding]:
    yield from unknown_environments(base, fleet.deploy_in, env_file.environments)


def check_members(
    name: str,
    fleet: InferenceComponentFleet,
    members: Sequence[TritonSageMakerModel],
    env_name: str,
    environment: Environment,
    capacity: FleetCapacity,
    spec: instances.InstanceSpec,
) -> Generator[Finding, None, bool]:
    if len(members) > MAX_COMPONENTS_PER_FLEET:
        yield (
            ("fleets", name, "models"),
            (
                f"{len(members)} models; each member grants the shared endpoint's role its image and log group in "
                f"an inline policy of about 0.7 KB, and IAM allows 10,240 characters of inline policy per role: "
                f"at most {MAX_COMPONENTS_PER_FLEET} members"
            ),
        )
        return False
    amis = {model.serving.inference_ami_version for model in members}
    if len(amis) > 1:
        yield (
            ("fleets", name, "models"),
            (
                f"the members share one endpoint variant and so one inference AMI, but ask for "
                f"{', '.join(sorted(str(a) for a in amis))}: give them the same serving.inference_ami_version"
            ),
        )
        return False
    for index, model in enumerate(members):
        if model.inference_component is None:
            yield (
                ("fleets", name, "models", index),
                (
                    f"{model.name} needs inference_component (accelerators, cpu_cores, memory_mib of one copy) "
                    f"in its model file to share an endpoint"
                ),
            )
            return False
    return True


def check_plan(name: str, result: packing.ComponentFleetPlan) -> Iterator[Finding]:
    if not result.scales_to_zero:
        return
    for index, share in enumerate(result.shares):
        needed = share.cold_start_seconds or 0
        if share.cold_start_allowed is None or share.cold_start_allowed < needed:
            allowed = (
                "no slo.cold_start_seconds"
                if share.cold_start_allowed is None
                else f"slo.cold_start_seconds {share.cold_start_allowed:g}"
            )
            yield (
                ("fleets", name, "models", index),
                (
                    f"{share.model}: scaling to zero makes a first request wait about {needed} s (alarm "
                    f"{packing.NO_CAPACITY_ALARM_SECONDS} s + instance launch {packing.INSTANCE_LAUNCH_SECONDS} s + "
                    f"start-up {needed - packing.NO_CAPACITY_ALARM_SECONDS - packing.INSTANCE_LAUNCH_SECONDS} s), "
                    f"but its SLO has {allowed}: set slo.cold_start_seconds >= {needed} in its model file, or keep "
                    f"the fleet's min >= 1"
                ),
            )
