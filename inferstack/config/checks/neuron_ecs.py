"""Checks of a neuron-ecs model: its compile and serving settings, its instance type, its rollouts."""

from __future__ import annotations

from collections.abc import Iterator

from inferstack.config.checks.common import Finding
from inferstack.config.yaml_source import KeyPath
from inferstack.neuron import deployment as neuron_deployment
from inferstack.schema import instances
from inferstack.schema.environments import Environment, EnvironmentsFile
from inferstack.schema.neuron_ecs import NeuronEcsModel

# https://awsdocs-neuron.readthedocs-hosted.com/en/latest/archive/torch-neuron/misc-inference-torch-neuron.html
INF1_SUPPORT_STATUS = (
    "torch-neuron (Inf1) is no longer officially supported by the AWS Neuron SDK (its pages are "
    "archived), and the ECS AL2023 Neuron AMI pins Inf1 hosts to an older Neuron driver at boot"
)


def check_file(model: NeuronEcsModel) -> Iterator[Finding]:
    yield from _check_static(model)
    yield from check_ecs_deployments(model.deployment, model.environments, ())


def _check_static(model: NeuronEcsModel) -> Iterator[Finding]:
    comp, serving = model.compile, model.serving
    if comp.parallelism == "pipeline" and serving.data_parallel:
        yield (
            ("serving", "data_parallel"),
            (
                "DataParallel cannot run a model compiled in pipeline mode; set serving.data_parallel: false "
                "or compile.parallelism: data-parallel"
            ),
        )
    if comp.parallelism == "pipeline" and comp.neuron_cores_per_model < 2:
        yield ("compile", "neuron_cores_per_model"), "pipeline mode needs at least 2 NeuronCores per model"
    if comp.parallelism == "data-parallel" and comp.neuron_cores_per_model != 1:
        yield (
            ("compile", "neuron_cores_per_model"),
            ("data-parallel copies are compiled for exactly 1 NeuronCore; use parallelism: pipeline to span cores"),
        )
    if comp.parallelism == "pipeline" and comp.neuron_generation == "inf2":
        yield ("compile", "parallelism"), "pipeline mode (--neuroncore-pipeline-cores) is an inf1 compiler feature"


def check_instance(model: NeuronEcsModel, spec: instances.InstanceSpec, environment: Environment) -> Iterator[Finding]:
    comp, serving = model.compile, model.serving
    if comp.neuron_generation != spec.neuron_generation:
        yield (
            ("compile", "neuron_generation"),
            (
                f"compile target {comp.neuron_generation} cannot run on {spec.name} ({spec.neuron_generation}); "
                f"Neuron artifacts are not portable between generations"
            ),
        )
        return
    cores = spec.neuron_cores
    if comp.neuron_cores_per_model > cores:
        yield (
            ("compile", "neuron_cores_per_model"),
            (f"{comp.neuron_cores_per_model} NeuronCores per model, but {spec.name} has {cores}"),
        )
        return
    if serving.workers > cores or cores % serving.workers:
        yield (
            ("serving", "workers"),
            (f"{serving.workers} workers cannot split the {cores} NeuronCores of {spec.name} evenly"),
        )
        return
    if (cores // serving.workers) % comp.neuron_cores_per_model:
        yield (
            ("serving", "workers"),
            (
                f"each worker gets {cores // serving.workers} NeuronCores, not a multiple of "
                f"neuron_cores_per_model {comp.neuron_cores_per_model}"
            ),
        )


def check_load_balancer(model: NeuronEcsModel, environment: Environment) -> Iterator[Finding]:
    # An environment-wide public default is checked in environments.yaml; here only the model's own setting.
    if not model.load_balancer.public:
        return
    if environment.defaults.certificate_arn is None:
        yield (
            ("load_balancer", "public"),
            ("a public load balancer serves HTTPS only: set defaults.certificate_arn in environments.yaml"),
        )
    if not environment.has_public_subnets:
        yield (
            ("load_balancer", "public"),
            ("a public load balancer needs public subnets: set network.import.public_subnet_ids in environments.yaml"),
        )


def warnings(model: NeuronEcsModel, env_file: EnvironmentsFile) -> Iterator[Finding]:
    if model.compile.neuron_generation == "inf1":
        yield (
            ("compile", "neuron_generation"),
            (
                f"{INF1_SUPPORT_STATUS}. To move {model.name} to Inf2: set compile.neuron_generation: inf2 (and "
                f"cast: matmult for BF16), profile it on inf2.xlarge or inf2.8xlarge under throughput_profile, set "
                f"capacity.instance_type to one of them, and compare with `python -m inferstack plan --compare` "
                f"(model_configs/intent-bert-inf2.yaml is intent-bert moved)"
            ),
        )
    for env in env_file.environments:
        if not model.deploys_in(env):
            continue
        message = bake_warning(model.deployment_for(env), model.alarms.evaluation_minutes)
        if message:
            own = model.environments.get(env)
            key = ("environments", env, "deployment") if own and own.deployment else ("deployment",)
            yield key, f"{message} (environment {env})"


def bake_warning(deployment, evaluation_minutes: int) -> str | None:
    """A traffic-shifting rollout whose bakes end before its alarms can fire cannot roll back in time."""
    rollout = neuron_deployment.rollout(deployment)
    if not rollout.shifts_traffic:
        return None
    bakes = [
        b for b in (rollout.bake_time_minutes, rollout.canary_bake_minutes, rollout.step_bake_minutes) if b is not None
    ]
    shortest = min(bakes) if bakes else 0
    if shortest >= evaluation_minutes:
        return None
    return (
        f"a {shortest}-minute bake is shorter than the {evaluation_minutes} breaching minutes its alarms need "
        f"(alarms.evaluation_minutes): ECS watches the alarms only while it bakes, so a regression would not "
        f"roll back (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/deployment-alarm-failure.html)"
    )


def check_ecs_deployments(deployment, environments, base: KeyPath) -> Iterator[Finding]:
    """A Neuron service's rollouts (its own and each environment's) against what ECS accepts."""
    for key, message in neuron_deployment.problems(deployment):
        yield base + ("deployment",) + key, message
    for env, override in environments.items():
        for key, message in neuron_deployment.problems(override.deployment):
            yield base + ("environments", env, "deployment") + key, message
