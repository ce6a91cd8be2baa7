"""Rules that span several fields, files or the instance catalog. Each yields (key path, message)
pairs so the loader can attach file and line; nothing here raises on the first problem."""

from __future__ import annotations

import re
from collections.abc import Iterator

from inferstack.schema import instances
from inferstack.capacity import planning
from inferstack.triton import image as triton_image
from inferstack.triton import startup as triton_startup
from inferstack.schema.models import (
    CONNECTION_ARN_PATTERN, DEFAULT_SMOKE_ROLE_NAME, Environment, EnvironmentsFile, NeuronEcsModel,
    TritonSageMakerModel,
)
from inferstack.config.yaml_source import KeyPath

Model = NeuronEcsModel | TritonSageMakerModel
Finding = tuple[KeyPath, str]


def _capacity_key(model: Model, env: str, field: str) -> KeyPath:
    """Point at the per-environment override when it sets `field`, else at the model-wide value."""
    override = model.environments.get(env)
    if override is not None and getattr(override.capacity, field) is not None:
        return ("environments", env, "capacity", field)
    return ("capacity", field)


def check_model(model: Model, environments: dict[str, Environment]) -> Iterator[Finding]:
    for env in model.environments:
        if env not in environments:
            yield ("environments", env), f"unknown environment; known: {', '.join(sorted(environments))}"
    if isinstance(model, NeuronEcsModel):
        yield from _check_neuron_static(model)
    else:
        yield from _check_triton_startup(model)
    yield from _check_off_hours(model)
    # Instance-dependent rules run per environment, after its overrides; a finding shared by several
    # environments is reported once, naming them all.
    grouped: dict[Finding, list[str]] = {}
    for env_name, environment in environments.items():
        for finding in _check_environment(model, env_name, environment):
            grouped.setdefault(finding, []).append(env_name)
    for (key, message), env_names in grouped.items():
        label = "environment" if len(env_names) == 1 else "environments"
        yield key, f"{message} ({label} {', '.join(env_names)})"


def _check_environment(model: Model, env_name: str, environment: Environment) -> Iterator[Finding]:
    capacity = model.capacity_for(env_name)
    spec = instances.get(capacity.instance_type)
    family_problem = _family_problem(spec, model.kind)
    if family_problem:
        yield _capacity_key(model, env_name, "instance_type"), family_problem
    elif isinstance(model, NeuronEcsModel):
        yield from _check_neuron_instance(model, spec)
    else:
        yield from _check_triton_image(model, environment, spec)
    if isinstance(model, NeuronEcsModel):
        yield from _check_neuron_load_balancer(model, environment)
    if capacity.min > capacity.max:
        yield _capacity_key(model, env_name, "min"), f"min {capacity.min} > max {capacity.max}"
    elif not family_problem:
        yield from _check_plan(model, env_name, environment)


def _check_off_hours(model: Model) -> Iterator[Finding]:
    for env, override in model.environments.items():
        if override.off_hours and not isinstance(model, TritonSageMakerModel):
            yield ("environments", env, "off_hours"), f"off_hours is not supported for {model.kind} models yet"
            continue
        planned_max = model.capacity_for(env).max
        for index, window in enumerate(override.off_hours):
            if window.max > planned_max:
                yield ("environments", env, "off_hours", index, "max"), (
                    f"off-hours max {window.max} exceeds the planned max {planned_max}; off-hours only scale down")


def _family_problem(spec: instances.InstanceSpec, kind: str) -> str | None:
    if kind == "neuron-ecs" and (spec.is_sagemaker or spec.neuron_generation is None):
        return f"{spec.name} is not an Inferentia EC2 type; neuron-ecs needs inf1.* or inf2.*"
    if kind == "triton-sagemaker" and (not spec.is_sagemaker or spec.gpus == 0):
        return f"{spec.name} is not a SageMaker GPU type; triton-sagemaker needs ml.g4dn.* or ml.g5.*"
    return None


def _check_triton_image(model: TritonSageMakerModel, environment: Environment,
                        spec: instances.InstanceSpec) -> Iterator[Finding]:
    try:
        triton_image.base_image_uri(region=environment.region, version=model.serving.image_version,
                                    instance_type=spec.name)
    except triton_image.UnknownTritonImage as exc:
        yield ("serving", "image_version"), str(exc)


def _check_triton_startup(model: TritonSageMakerModel) -> Iterator[Finding]:
    """SageMaker allows at most 3600 s from container start to a healthy /ping."""
    if model.serving.container_startup_health_check_timeout_seconds is not None:
        return
    needed = triton_startup.padded_seconds(model)
    if needed > triton_startup.MAX_SECONDS:
        key = ("export", "parameters_millions") if model.export.parameters_millions else ("serving", "instance_group")
        yield key, (
            f"start-up (TensorRT engine builds, {model.serving.instance_group.count} instances per model, "
            f"warm-up) is estimated at {needed} s with margin, above SageMaker's "
            f"{triton_startup.MAX_SECONDS} s health-check limit: use fewer instances or a TensorRT plan, or "
            f"set serving.container_startup_health_check_timeout_seconds if it starts faster")


def _check_neuron_static(model: NeuronEcsModel) -> Iterator[Finding]:
    comp, serving = model.compile, model.serving
    if comp.parallelism == "pipeline" and serving.data_parallel:
        yield ("serving", "data_parallel"), (
            "DataParallel cannot run a model compiled in pipeline mode; set serving.data_parallel: false "
            "or compile.parallelism: data-parallel")
    if comp.parallelism == "pipeline" and comp.neuron_cores_per_model < 2:
        yield ("compile", "neuron_cores_per_model"), "pipeline mode needs at least 2 NeuronCores per model"
    if comp.parallelism == "data-parallel" and comp.neuron_cores_per_model != 1:
        yield ("compile", "neuron_cores_per_model"), (
            "data-parallel copies are compiled for exactly 1 NeuronCore; use parallelism: pipeline to span cores")
    if comp.parallelism == "pipeline" and comp.neuron_generation == "inf2":
        yield ("compile", "parallelism"), "pipeline mode (--neuroncore-pipeline-cores) is an inf1 compiler feature"


def _check_neuron_instance(model: NeuronEcsModel, spec: instances.InstanceSpec) -> Iterator[Finding]:
    comp, serving = model.compile, model.serving
    if comp.neuron_generation != spec.neuron_generation:
        yield ("compile", "neuron_generation"), (
            f"compile target {comp.neuron_generation} cannot run on {spec.name} ({spec.neuron_generation}); "
            f"Neuron artifacts are not portable between generations")
        return
    cores = spec.neuron_cores
    if comp.neuron_cores_per_model > cores:
        yield ("compile", "neuron_cores_per_model"), (
            f"{comp.neuron_cores_per_model} NeuronCores per model, but {spec.name} has {cores}")
        return
    if serving.workers > cores or cores % serving.workers:
        yield ("serving", "workers"), (
            f"{serving.workers} workers cannot split the {cores} NeuronCores of {spec.name} evenly")
        return
    if (cores // serving.workers) % comp.neuron_cores_per_model:
        yield ("serving", "workers"), (
            f"each worker gets {cores // serving.workers} NeuronCores, not a multiple of "
            f"neuron_cores_per_model {comp.neuron_cores_per_model}")


def _check_neuron_load_balancer(model: NeuronEcsModel, environment: Environment) -> Iterator[Finding]:
    # An environment-wide public default is checked in environments.yaml; here only the model's own setting.
    if not model.load_balancer.public:
        return
    if environment.defaults.certificate_arn is None:
        yield ("load_balancer", "public"), (
            "a public load balancer serves HTTPS only: set defaults.certificate_arn in environments.yaml")
    if not environment.has_public_subnets:
        yield ("load_balancer", "public"), (
            "a public load balancer needs public subnets: set network.import.public_subnet_ids in environments.yaml")


def _check_plan(model: Model, env_name: str, environment: Environment) -> Iterator[Finding]:
    try:
        result = planning.plan(model, env_name, environment)
    except planning.FleetBeyondCount as exc:
        yield _capacity_key(model, env_name, "max"), str(exc)
        return
    except planning.PlanningError as exc:
        yield ("throughput_profile",), str(exc)
        return
    if not result.latency_within_slo:
        yield ("slo", "p99_latency_ms"), (
            f"SLO p99 {result.slo_p99_ms:g} ms is below the profiled p99 {result.profile_p99_ms:g} ms "
            f"of {result.instance_type}")
    if not result.peak_within_max:
        yield _capacity_key(model, env_name, "max"), (
            f"peak {result.peak_tps:g} TPS needs {result.instances_at_peak} x {result.instance_type} at "
            f"{result.throughput_per_instance:g}/s x safety factor {result.safety_factor:g}, "
            f"but max is {result.max_capacity}")


# CodePipeline quota: at most 50 actions in one stage. CDK Pipelines deploys each stack of an environment
# with two actions (prepare the change set, execute it), plus the smoke step and an optional approval.
PIPELINE_ACTIONS_PER_STAGE = 50


def pipeline_actions_per_stage(model_count: int, *, approval: bool) -> int:
    return 2 * (1 + model_count) + 1 + int(approval)  # foundation + models, smoke, approval


def check_pipeline_capacity(env_file: EnvironmentsFile, model_count: int) -> Iterator[Finding]:
    """Every environment's stacks deploy in one pipeline stage, so the fleet must fit CodePipeline's quota."""
    pipeline = env_file.pipeline
    if pipeline is None:
        return
    for name in pipeline.stages:
        actions = pipeline_actions_per_stage(model_count, approval=name in pipeline.approval_before)
        if actions > PIPELINE_ACTIONS_PER_STAGE:
            yield ("pipeline", "stages"), (
                f"{model_count} models need {actions} actions in the {name} stage; CodePipeline allows "
                f"{PIPELINE_ACTIONS_PER_STAGE} per stage: remove the pipeline block and deploy with the CLI "
                f"(README: From an external CI)")
            return


def check_pipeline(env_file: EnvironmentsFile) -> Iterator[Finding]:
    """The pipeline block against the environments it deploys."""
    pipeline = env_file.pipeline
    if pipeline is None:
        return
    known = ", ".join(env_file.environments)
    seen: set[str] = set()
    for index, name in enumerate(pipeline.stages):
        if name not in env_file.environments:
            yield ("pipeline", "stages", index), f"unknown environment {name!r}; known: {known}"
        elif name in seen:
            yield ("pipeline", "stages", index), f"{name} is deployed twice"
        seen.add(name)
    for index, name in enumerate(pipeline.approval_before):
        if name not in pipeline.stages:
            yield ("pipeline", "approval_before", index), (
                f"{name!r} is not one of pipeline.stages ({', '.join(pipeline.stages)})")
    # A pipeline can only use a connection of its own account (connections are not shared across accounts).
    connection_account = re.fullmatch(CONNECTION_ARN_PATTERN, pipeline.connection_arn).group(2)  # type: ignore[union-attr]
    if connection_account != pipeline.account:
        yield ("pipeline", "connection_arn"), (
            f"the connection belongs to account {connection_account}, not the pipeline's account {pipeline.account}")


def check_networks(env_file: EnvironmentsFile) -> Iterator[Finding]:
    """A VPC shared from another account: its owner creates and manages the VPC endpoints and route
    tables, participants cannot (https://docs.aws.amazon.com/vpc/latest/userguide/vpc-share-limitations.html)."""
    for name, environment in env_file.environments.items():
        imported = environment.network.import_
        owner = environment.network.vpc_owner(environment.account)
        if imported is not None and owner != environment.account and imported.create_endpoints:
            yield ("environments", name, "network", "import", "create_endpoints"), (
                f"the VPC is shared from account {owner}: participants cannot create VPC endpoints or change "
                f"route tables in a shared VPC; set create_endpoints: false and have the owner add them")


def check_accounts(env_file: EnvironmentsFile) -> Iterator[Finding]:
    """Each environment's foundation creates the smoke role by its fixed name, and IAM names are unique per
    account (across regions): two environments in one account would collide on it."""
    role = env_file.pipeline.smoke_role_name if env_file.pipeline else DEFAULT_SMOKE_ROLE_NAME
    first: dict[str, str] = {}
    for name, environment in env_file.environments.items():
        other = first.setdefault(environment.account, name)
        if other != name:
            yield ("environments", name, "account"), (
                f"account {environment.account} is also {other}'s: each environment's foundation creates the "
                f"IAM role {role} (the smoke test's), and role names are unique per account; give each "
                f"environment its own account")
