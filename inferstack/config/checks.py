"""Rules that span several fields, files or the instance catalog. Each yields (key path, message)
pairs so the loader can attach file and line; nothing here raises on the first problem."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from inferstack.schema import instances, kinds
from inferstack.capacity import packing, planning, provenance, schedule
from inferstack.neuron import deployment as neuron_deployment, routing
from inferstack.triton import image as triton_image
from inferstack.triton import startup as triton_startup
from inferstack.schema.kinds import Model
from inferstack.schema.models import (
    CONNECTION_ARN_PATTERN, DEFAULT_SMOKE_ROLE_NAME, Environment, EnvironmentsFile, Fleet, FleetCapacity,
    InferenceComponentFleet, NeuronCoreFleet, NeuronEcsModel, OffHours, TritonSageMakerModel,
)
from inferstack.config import pipeline_checks
from inferstack.config.yaml_source import KeyPath

Finding = tuple[KeyPath, str]


def _capacity_key(model: Model, env: str, field: str) -> KeyPath:
    """Point at the per-environment override when it sets `field`, else at the model-wide value."""
    override = model.environments.get(env)
    if override is not None and getattr(override.capacity, field) is not None:
        return ("environments", env, "capacity", field)
    return ("capacity", field)


def unknown_environments(base: KeyPath, deploy_in: Sequence[str] | None,
                         environments: Iterable[str]) -> Iterator[Finding]:
    """A `deploy_in` list (a model's or an inference-components fleet's) naming environments that do not exist."""
    known = list(environments)
    for index, env in enumerate(deploy_in or ()):
        if env not in known:
            yield base + ("deploy_in", index), (
                f"unknown environment {env!r}{did_you_mean(env, known)}; known: {', '.join(known)}")


def did_you_mean(word: str, choices: Iterable[str], form: str = " (did you mean {!r}?)") -> str:
    """`form` with the choice closest to `word` (difflib), or "" when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1) if word else []
    return form.format(close[0]) if close else ""


def check_model(model: Model, environments: dict[str, Environment]) -> Iterator[Finding]:
    yield from unknown_environments((), model.deploy_in, environments)
    for env in model.environments:
        if env not in environments:
            yield ("environments", env), (f"unknown environment{did_you_mean(env, environments)}; known: "
                                          f"{', '.join(sorted(environments))}")
        elif not model.deploys_in(env):
            # An error, not a warning: the block would never apply, and whoever reads the file would take it
            # for the model's settings there (a prod override that silently stopped counting, or a prod
            # deployment someone meant to add).
            yield ("environments", env), (
                f"{env} is not in deploy_in ({', '.join(model.deploy_in or ())}), so this override would never "
                f"apply: add {env} to deploy_in, or remove the block")
    for itype, point in model.throughput_profile.items():
        measured_in = point.measured.environment if point.measured is not None else None
        if measured_in is not None and measured_in not in environments:
            yield ("throughput_profile", itype, "measured", "environment"), (
                f"unknown environment {measured_in!r}{did_you_mean(measured_in, environments)}; known: "
                f"{', '.join(environments)}")
    yield from MODEL_CHECKS[kinds.model_kind(model)].file(model)
    yield from _check_off_hours(model)
    # Instance-dependent rules run per environment, after its overrides; a finding shared by several
    # environments is reported once, naming them all.
    grouped: dict[Finding, list[str]] = {}
    for env_name, environment in environments.items():
        if not model.deploys_in(env_name):
            continue  # not planned, not deployed there: nothing to check
        for finding in _check_environment(model, env_name, environment):
            grouped.setdefault(finding, []).append(env_name)
    for (key, message), env_names in grouped.items():
        label = "environment" if len(env_names) == 1 else "environments"
        yield key, f"{message} ({label} {', '.join(env_names)})"


def _check_environment(model: Model, env_name: str, environment: Environment) -> Iterator[Finding]:
    kind = kinds.model_kind(model)
    capacity = model.capacity_for(env_name)
    spec = instances.get(capacity.instance_type)
    family_problem = _family_problem(spec, kind)
    if family_problem:
        yield _capacity_key(model, env_name, "instance_type"), family_problem
    else:
        yield from MODEL_CHECKS[kind].on_instance(model, spec, environment)
    yield from MODEL_CHECKS[kind].in_environment(model, environment)
    if capacity.min > capacity.max:
        yield _capacity_key(model, env_name, "min"), f"min {capacity.min} > max {capacity.max}"
    elif not family_problem:
        yield from _check_plan(model, env_name, environment)


# https://awsdocs-neuron.readthedocs-hosted.com/en/latest/archive/torch-neuron/misc-inference-torch-neuron.html
INF1_SUPPORT_STATUS = ("torch-neuron (Inf1) is no longer officially supported by the AWS Neuron SDK (its pages are "
                       "archived), and the ECS AL2023 Neuron AMI pins Inf1 hosts to an older Neuron driver at boot")


def model_warnings(env_file: EnvironmentsFile, model: Model) -> Iterator[Finding]:
    """What loads and deploys but deserves a look: reported by `validate` as warning lines, exit 0."""
    yield from MODEL_CHECKS[kinds.model_kind(model)].warnings(model, env_file)


def _neuron_warnings(model: NeuronEcsModel, env_file: EnvironmentsFile) -> Iterator[Finding]:
    if model.compile.neuron_generation == "inf1":
        yield ("compile", "neuron_generation"), (
            f"{INF1_SUPPORT_STATUS}. To move {model.name} to Inf2: set compile.neuron_generation: inf2 (and "
            f"cast: matmult for BF16), profile it on inf2.xlarge or inf2.8xlarge under throughput_profile, set "
            f"capacity.instance_type to one of them, and compare with `python -m inferstack plan --compare` "
            f"(model_configs/intent-bert-inf2.yaml is intent-bert moved)")
    for env in env_file.environments:
        if not model.deploys_in(env):
            continue
        message = _bake_warning(model.deployment_for(env), model.alarms.evaluation_minutes)
        if message:
            own = model.environments.get(env)
            key = ("environments", env, "deployment") if own and own.deployment else ("deployment",)
            yield key, f"{message} (environment {env})"


def _bake_warning(deployment, evaluation_minutes: int) -> str | None:
    """A traffic-shifting rollout whose bakes end before its alarms can fire cannot roll back in time."""
    rollout = neuron_deployment.rollout(deployment)
    if not rollout.shifts_traffic:
        return None
    bakes = [b for b in (rollout.bake_time_minutes, rollout.canary_bake_minutes, rollout.step_bake_minutes)
             if b is not None]
    shortest = min(bakes) if bakes else 0
    if shortest >= evaluation_minutes:
        return None
    return (f"a {shortest}-minute bake is shorter than the {evaluation_minutes} breaching minutes its alarms need "
            f"(alarms.evaluation_minutes): ECS watches the alarms only while it bakes, so a regression would not "
            f"roll back (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/deployment-alarm-failure.html)")


def fleet_warnings(env_file: EnvironmentsFile, models: Mapping[str, Model]) -> Iterator[Finding]:
    for name, fleet in env_file.fleets.items():
        yield from FLEET_CHECKS[kinds.fleet_kind(fleet)].warnings(name, fleet, env_file, models)


def _neuron_cores_warnings(name: str, fleet: NeuronCoreFleet, env_file: EnvironmentsFile,
                           models: Mapping[str, Model]) -> Iterator[Finding]:
    # A member that is no neuron-ecs model is a problem check_fleets reports.
    members = [m for m in (models.get(n) for n in fleet.models) if m is not None and
               kinds.model_kind(m) is kinds.NEURON_ECS]
    evaluation = max((m.alarms.evaluation_minutes for m in members), default=0)  # type: ignore[union-attr]
    for env in env_file.environments:
        message = _bake_warning(fleet.deployment_for(env), evaluation)
        if message:
            own = fleet.environments.get(env)
            key = ("environments", env, "deployment") if own and own.deployment else ("deployment",)
            yield ("fleets", name) + key, f"{message} (environment {env})"


def _triton_warnings(model: TritonSageMakerModel, env_file: EnvironmentsFile) -> Iterator[Finding]:
    """Settings of a model's own deployment that do not apply where a fleet carries it (its model file keys)."""
    if model.data_capture is None:
        return
    envs = [env for env in env_file.environments for fleet in env_file.fleets.values()
            if kinds.fleet_kind(fleet).member is kinds.TRITON_SAGEMAKER and model.name in fleet.models
            and fleet.deploys_in(env) and model.deploys_in(env)]
    if envs:
        yield ("data_capture",), (
            f"not applied in {', '.join(envs)}, where an inference-components fleet carries {model.name}: data "
            f"capture is a setting of a dedicated endpoint's configuration")


def _estimate_message(envs: Sequence[str], sizings: Sequence[provenance.Sizing]) -> str:
    """Entries without a measured p99: estimates, and p95 entries (an Inference Recommender job's)."""
    where = f"production environment{'s' if len(envs) > 1 else ''} {', '.join(envs)}"
    estimates = [s for s in sizings if not s.measured]
    reasons = []
    if estimates:
        entries = ", ".join(f"{s.model}'s throughput_profile.{s.instance_type}" for s in estimates)
        reasons.append(f"{entries} {'has' if len(estimates) == 1 else 'have'} no measured: block")
    reasons += [f"{s.model}'s throughput_profile.{s.instance_type} has a {s.caveat}" for s in sizings if s.measured]
    one = len(sizings) == 1
    what = ("an estimate" if one else "estimates") if len(estimates) == len(sizings) else (
        "an entry with no measured p99" if one else "entries with no measured p99")
    model = sizings[0].model if one else "MODEL"
    # Not --recommender: its job measures a p95, which leaves this warning standing.
    return (f"{where} sized from {what} ({'; '.join(reasons)}): measure {'it' if one else 'them'} with `python -m "
            f"inferstack profile {model} --env ENV` (a load test, which measures p99) in an environment on that "
            f"instance type before relying on the plan")


def estimate_warnings(env_file: EnvironmentsFile, model: Model) -> Iterator[Finding]:
    """A model on its own instances or endpoint in a production environment (EnvironmentsFile.is_production),
    sized from an entry with no measured p99 (an estimate, or an Inference Recommender job's p95): it loads and
    deploys, but nobody measured the p99 it plans with. A fleet member's entries are reported on the fleet
    (fleet_estimate_warnings)."""
    grouped: dict[str, list[str]] = {}
    for env in env_file.environments:
        if not (env_file.is_production(env) and model.deploys_in(env)):
            continue
        sized = provenance.sizing(env_file.fleets, model, env)
        if sized.fleet is None and sized.point is not None and not sized.p99_measured:
            grouped.setdefault(sized.instance_type, []).append(env)
    for itype, envs in grouped.items():
        yield ("throughput_profile", itype), _estimate_message(envs, [provenance.dedicated(model, envs[0])])


def fleet_estimate_warnings(env_file: EnvironmentsFile, models: Mapping[str, Model]) -> Iterator[Finding]:
    """A fleet in a production environment whose plan reads an entry of one of its members with no measured
    p99."""
    for name, fleet in env_file.fleets.items():
        for env in env_file.environments:
            if not (env_file.is_production(env) and fleet.deploys_in(env)):
                continue
            # A member of another kind than the fleet carries is a problem check_fleets reports.
            members = [models[m] for m in fleet.models
                       if m in models and kinds.model_kind(models[m]) is kinds.fleet_kind(fleet).member]
            estimates = [s for s in (provenance.fleet_member(m, name, fleet, env) for m in members)
                         if s.point is not None and not s.p99_measured]
            if estimates:
                yield _fleet_capacity_key(name, fleet, env, "instance_type"), _estimate_message([env], estimates)


def _check_ecs_deployments(deployment, environments, base: KeyPath) -> Iterator[Finding]:
    """A Neuron service's rollouts (its own and each environment's) against what ECS accepts."""
    for key, message in neuron_deployment.problems(deployment):
        yield base + ("deployment",) + key, message
    for env, override in environments.items():
        for key, message in neuron_deployment.problems(override.deployment):
            yield base + ("environments", env, "deployment") + key, message


def _check_off_hours(model: Model) -> Iterator[Finding]:
    for env, override in model.environments.items():
        planned_max = model.capacity_for(env).max
        for index, window in enumerate(override.off_hours):
            key = ("environments", env, "off_hours", index)
            yield from _check_window(window, key, planned_max, zero=kinds.model_kind(model).at_zero,
                                     owner=model.kind)


def _check_window(window: OffHours, key: KeyPath, planned_max: int, *, zero: kinds.AtZero,
                  owner: str) -> Iterator[Finding]:
    """`zero`: the kind's at_zero (inferstack.schema.kinds): None where nothing can scale to zero (a dedicated
    real-time endpoint); "closed" where a window at min 0 must also be max 0 (ECS scales on requests per
    target, which no request can raise from zero tasks); "on-demand" where a request scales out from zero
    (inference components)."""
    try:
        schedule.open_share(window.start, window.end, window.time_zone)
        readable = True
    except schedule.CronError as exc:
        readable = False
        yield key + ("start",), f"cannot evaluate the schedule: {exc}"
    if zero == "closed" and readable:  # ECS: the Auto Scaling group follows the window, in its Unix cron
        for field in ("start", "end"):
            expression = getattr(window, field)
            try:
                schedule.unix_recurrence(expression)  # what the stack renders; a readable cron fails only on its year
            except schedule.CronError:
                year = expression.removesuffix(")").split()[-1]
                yield key + (field,), (
                    f"year {year!r}: the Auto Scaling group's scheduled actions take a 5-field Unix cron, which "
                    f"has no year (https://docs.aws.amazon.com/autoscaling/ec2/APIReference/"
                    f"API_ScheduledUpdateGroupActionRequest.html); use * for every year")
    if window.max > planned_max:
        yield key + ("max",), (
            f"off-hours max {window.max} exceeds the planned max {planned_max}; off-hours only scale down")
    if window.min == 0 and zero is None:
        yield key + ("min",), (
            f"a dedicated real-time SageMaker endpoint keeps at least 1 instance; to scale {owner} to zero, "
            f"carry it on a fleet of kind sagemaker-inference-components (environments.yaml fleets:)")
    elif window.max == 0 and zero is None:
        yield key + ("max",), "a dedicated real-time SageMaker endpoint keeps at least 1 instance"
    elif window.min == 0 and window.max > 0 and zero == "closed":
        yield key + ("max",), (
            "an ECS service at 0 tasks has no target to count requests for, so nothing scales it out again "
            "before the window ends: a window at min 0 must be closed (max 0)")


def _family_problem(spec: instances.InstanceSpec, kind: kinds.ModelKind) -> str | None:
    accelerator = kind.accelerator
    if not accelerator.runs(spec):
        return f"{spec.name} is not {accelerator.description}; {kind.name} needs {accelerator.types}"
    return None


def _check_triton_image(model: TritonSageMakerModel, spec: instances.InstanceSpec,
                        environment: Environment) -> Iterator[Finding]:
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


def _check_triton_file(model: TritonSageMakerModel) -> Iterator[Finding]:
    yield from _check_triton_startup(model)
    yield from pipeline_checks.check_wiring(model)


def _check_neuron_file(model: NeuronEcsModel) -> Iterator[Finding]:
    yield from _check_neuron_static(model)
    yield from _check_ecs_deployments(model.deployment, model.environments, ())


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


def _check_neuron_instance(model: NeuronEcsModel, spec: instances.InstanceSpec,
                           environment: Environment) -> Iterator[Finding]:
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


def _nothing(*_args) -> Iterable[Finding]:
    return ()


@dataclass(frozen=True)
class ModelChecks:
    """What validate checks of one model kind beyond what every model gets (check_model); each yields findings."""

    file: Callable[..., Iterable[Finding]]  # (model): the model file alone
    # (model, spec, environment): in each environment it deploys in, on its instance type there, where that is
    # one the kind runs on (its accelerator)
    on_instance: Callable[..., Iterable[Finding]]
    in_environment: Callable[..., Iterable[Finding]] = _nothing  # (model, environment): whatever the instance type
    warnings: Callable[..., Iterable[Finding]] = _nothing  # (model, env_file): loads and deploys, but deserves a look


MODEL_CHECKS: dict[kinds.ModelKind, ModelChecks] = {
    kinds.NEURON_ECS: ModelChecks(file=_check_neuron_file, on_instance=_check_neuron_instance,
                                  in_environment=_check_neuron_load_balancer, warnings=_neuron_warnings),
    kinds.TRITON_SAGEMAKER: ModelChecks(file=_check_triton_file, on_instance=_check_triton_image,
                                        warnings=_triton_warnings),
}


# CodePipeline quota: at most 50 actions in one stage. CDK Pipelines deploys each stack of an environment
# with two actions (prepare the change set, execute it), plus the smoke step and an optional approval.
PIPELINE_ACTIONS_PER_STAGE = 50


def pipeline_actions_per_stage(model_count: int, *, approval: bool) -> int:
    """`model_count`: the serving stacks of the environment (models with their own stack, and fleets)."""
    return 2 * (1 + model_count) + 1 + int(approval)  # foundation + serving stacks, smoke, approval


def serving_stack_count(env_file: EnvironmentsFile, models: Iterable[Model], env_name: str) -> int:
    """Stacks besides the foundation in an environment: one per fleet deployed there, one per model deployed
    there except the members of a neuron-cores fleet (the fleet's stack serves them)."""
    fleets = [f for f in env_file.fleets.values() if f.deploys_in(env_name)]
    served_by_fleet = {m for f in fleets if kinds.fleet_kind(f).serves_members for m in f.models}
    return len(fleets) + sum(1 for m in models if m.deploys_in(env_name) and m.name not in served_by_fleet)


def check_pipeline_capacity(env_file: EnvironmentsFile, models: Sequence[Model]) -> Iterator[Finding]:
    """Every environment's stacks deploy in one pipeline stage, so the fleet must fit CodePipeline's quota."""
    pipeline = env_file.pipeline
    if pipeline is None:
        return
    for name in pipeline.stages:
        stacks = serving_stack_count(env_file, models, name)
        actions = pipeline_actions_per_stage(stacks, approval=name in pipeline.approval_before)
        if actions > PIPELINE_ACTIONS_PER_STAGE:
            yield ("pipeline", "stages"), (
                f"{stacks} serving stacks need {actions} actions in the {name} stage; CodePipeline allows "
                f"{PIPELINE_ACTIONS_PER_STAGE} per stage: remove the pipeline block and deploy with the CLI "
                f"(docs/how-to/external-ci.md)")
            return


# ---------------------------------------------------------------- fleets

RESERVED_STACK_IDS = ("Foundation", "Pipeline", "LoadTest")
# https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html (inline policies per role: 10,240
# characters in all); the endpoint role's own statements take the rest.
MAX_COMPONENTS_PER_FLEET = 10


def fleet_too_small(name: str, kind: str, error: Mapping) -> str:
    """The schema's minimum of `models:` (pydantic's too_short error on fleets.<name>.models) as what it means
    when a member leaves: the last member of an inference-components fleet, or the second-to-last of a
    neuron-cores fleet (one model alone on its instances is a dedicated service). Retiring the fleet is
    removing its entry."""
    context = error.get("ctx") or {}
    members = error.get("input")
    names = [str(m) for m in members] if isinstance(members, (list, tuple)) else []
    need = context.get("min_length", 1)
    has = f"it has {len(names)} ({', '.join(names)})" if names else "it has none"
    why = " (one model alone on its instances is a dedicated service)" if need > 1 else ""
    return (f"a {kind} fleet needs at least {need} member{'s' if need != 1 else ''}{why}, {has}; to retire the fleet, "
            f"remove its entry fleets.{name} from environments.yaml: its stack goes, and a member whose model file "
            f"stays gets a stack of its own")


def check_fleets(env_file: EnvironmentsFile, models: Mapping[str, Model]) -> Iterator[Finding]:
    """`fleets:` against the models and environments: membership, what fits on the instance, and the plan
    (inferstack.capacity.packing) in every environment the fleet deploys in. Keys are environments.yaml's."""
    carrier: dict[tuple[str, str], str] = {}  # (environment, model) -> fleet
    for name, fleet in env_file.fleets.items():
        kind = kinds.fleet_kind(fleet)
        own = FLEET_CHECKS[kind]
        base = ("fleets", name)
        if name in models or name in RESERVED_STACK_IDS:
            yield base, (f"fleet name {name!r} is also a model's or a reserved stack's name; each names a stack "
                         f"in every environment, so they must differ")
        for env in fleet.environments:
            if env not in env_file.environments:
                yield base + ("environments", env), (
                    f"unknown environment; known: {', '.join(env_file.environments)}")
        yield from own.file(base, fleet, env_file)
        members: list[Model] = []
        for index, model_name in enumerate(fleet.models):
            model = models.get(model_name)
            if model is None:
                hint = did_you_mean(model_name, models) or (
                    " (no model file names it: a model retired by removing its file leaves its fleet too; take it "
                    "off this list)")
                yield base + ("models", index), f"unknown model {model_name!r}{hint}; known: {', '.join(sorted(models))}"
                continue
            if kinds.model_kind(model) is not kind.member:
                yield base + ("models", index), (
                    f"{model_name} is a {model.kind} model; a {fleet.kind} fleet carries {kind.member.name} models")
                continue
            absent = [env for env in env_file.environments if fleet.deploys_in(env) and not model.deploys_in(env)]
            if absent:
                yield base + ("models", index), (
                    f"{model_name} is not deployed in {', '.join(absent)} (its deploy_in: "
                    f"{', '.join(model.deploy_in or ())}), where fleet {name} deploys: {own.absent_remedy}")
                continue
            for env in env_file.environments:
                if not fleet.deploys_in(env):
                    continue
                other = carrier.setdefault((env, model_name), name)
                if other != name:
                    yield base + ("models", index), f"{model_name} is already on fleet {other} in {env}"
                    break
            members.append(model)
        if len(members) != len(fleet.models):
            continue
        grouped: dict[Finding, list[str]] = {}
        for env_name, environment in env_file.environments.items():
            if fleet.deploys_in(env_name):
                for finding in _check_fleet_environment(name, fleet, members, env_name, environment):
                    grouped.setdefault(finding, []).append(env_name)
        for (key, message), env_names in grouped.items():
            label = "environment" if len(env_names) == 1 else "environments"
            yield key, f"{message} ({label} {', '.join(env_names)})"


def _fleet_capacity_key(name: str, fleet: Fleet, env: str, field: str) -> KeyPath:
    override = fleet.environments.get(env)
    if override is not None and getattr(override.capacity, field) is not None:
        return ("fleets", name, "environments", env, "capacity", field)
    return ("fleets", name, "capacity", field)


def _check_fleet_environment(name: str, fleet: Fleet, members: Sequence[Model], env_name: str,
                             environment: Environment) -> Iterator[Finding]:
    kind = kinds.fleet_kind(fleet)
    capacity = fleet.capacity_for(env_name)
    spec = instances.get(capacity.instance_type)
    type_key = _fleet_capacity_key(name, fleet, env_name, "instance_type")
    problem = _family_problem(spec, kind.member)
    if problem:
        yield type_key, problem
        return
    if capacity.min > capacity.max:
        yield _fleet_capacity_key(name, fleet, env_name, "min"), f"min {capacity.min} > max {capacity.max}"
        return
    windows = fleet.off_hours_for(env_name)
    for index, window in enumerate(windows):
        yield from _check_window(window, ("fleets", name, "environments", env_name, "off_hours", index),
                                 capacity.max, zero=kind.at_zero, owner=f"fleet {name}")
    plannable = yield from FLEET_CHECKS[kind].members(name, fleet, members, env_name, environment, capacity, spec)
    if not plannable:
        return
    try:
        result = packing.plan_fleet(name, fleet, members, env_name, environment)
    except planning.FleetBeyondCount as exc:
        yield _fleet_capacity_key(name, fleet, env_name, "max"), str(exc)
        return
    except planning.PlanningError as exc:  # PackingError among them: cores or a copy over the instance
        yield type_key, str(exc)
        return
    for index, share in enumerate(result.shares):
        if share.profile_p99_ms > share.slo_p99_ms:
            yield ("fleets", name, "models", index), (
                f"{share.model}: SLO p99 {share.slo_p99_ms:g} ms is below the profiled p99 "
                f"{share.profile_p99_ms:g} ms on {result.instance_type}")
    if not result.peak_within_max:
        yield _fleet_capacity_key(name, fleet, env_name, "max"), (
            f"the members' peaks need {result.instances_at_peak} x {result.instance_type}, but max is "
            f"{result.max_capacity}")
    yield from FLEET_CHECKS[kind].on_plan(name, result)


def _check_neuron_cores_file(base: KeyPath, fleet: NeuronCoreFleet, env_file: EnvironmentsFile) -> Iterator[Finding]:
    yield from _check_ecs_deployments(fleet.deployment, fleet.environments, base)


def _check_neuron_cores_members(name: str, fleet: NeuronCoreFleet, members: Sequence[NeuronEcsModel], env_name: str,
                                environment: Environment, capacity: FleetCapacity,
                                spec: instances.InstanceSpec) -> Generator[Finding, None, bool]:
    if len(members) > routing.MAX_TARGET_GROUPS:
        yield ("fleets", name, "models"), (
            f"{len(members)} models; the fleet's ECS service routes each to its own target group and a "
            f"service takes at most {routing.MAX_TARGET_GROUPS} ({routing.MAX_TARGET_GROUPS_SOURCE})")
        return False
    shifting = neuron_deployment.rollout(fleet.deployment_for(env_name)).shifts_traffic
    for index, message in routing.priority_clashes(fleet.models, shifting=shifting):
        yield ("fleets", name, "models", index), message
    ports: dict[int, str] = {}
    for index, model in enumerate(members):
        other = ports.setdefault(model.serving.port, model.name)
        if other != model.name:
            # Each member keeps its own port wherever it sits in the fleet (its target groups are on it).
            taken = sorted(ports)
            free = next(p for p in range(taken[0], 65536) if p not in ports)
            yield ("fleets", name, "models", index), (
                f"{model.name} listens on port {model.serving.port}, as {other} does; the members of a fleet share "
                f"one task: give {model.name} a port of its own (serving.port in its model file, e.g. {free})")
    if capacity.min == 0:
        yield _fleet_capacity_key(name, fleet, env_name, "min"), (
            "a neuron-cores fleet keeps at least 1 instance outside its off_hours (ECS cannot scale out from "
            "0 tasks on requests); close it at night with an off_hours window at min 0, max 0")
        return False
    for index, model in enumerate(members):
        if model.compile.neuron_generation != spec.neuron_generation:
            yield ("fleets", name, "models", index), (
                f"{model.name} is compiled for {model.compile.neuron_generation}, {spec.name} runs "
                f"{spec.neuron_generation}; Neuron artifacts are not portable between generations")
            return False
    publics = {model.public_load_balancer(environment) for model in members}
    if len(publics) > 1:
        yield ("fleets", name, "models"), (
            "the members share one load balancer: give them the same load_balancer.public setting")
        return False
    return True


def _check_components_file(base: KeyPath, fleet: InferenceComponentFleet,
                           env_file: EnvironmentsFile) -> Iterator[Finding]:
    yield from unknown_environments(base, fleet.deploy_in, env_file.environments)


def _check_components_members(name: str, fleet: InferenceComponentFleet, members: Sequence[TritonSageMakerModel],
                              env_name: str, environment: Environment, capacity: FleetCapacity,
                              spec: instances.InstanceSpec) -> Generator[Finding, None, bool]:
    if len(members) > MAX_COMPONENTS_PER_FLEET:
        yield ("fleets", name, "models"), (
            f"{len(members)} models; each member grants the shared endpoint's role its image and log group in "
            f"an inline policy of about 0.7 KB, and IAM allows 10,240 characters of inline policy per role: "
            f"at most {MAX_COMPONENTS_PER_FLEET} members")
        return False
    amis = {model.serving.inference_ami_version for model in members}
    if len(amis) > 1:
        yield ("fleets", name, "models"), (
            f"the members share one endpoint variant and so one inference AMI, but ask for "
            f"{', '.join(sorted(str(a) for a in amis))}: give them the same serving.inference_ami_version")
        return False
    for index, model in enumerate(members):
        if model.inference_component is None:
            yield ("fleets", name, "models", index), (
                f"{model.name} needs inference_component (accelerators, cpu_cores, memory_mib of one copy) "
                f"in its model file to share an endpoint")
            return False
    return True


def _check_components_plan(name: str, result: packing.ComponentFleetPlan) -> Iterator[Finding]:
    if not result.scales_to_zero:
        return
    for index, share in enumerate(result.shares):
        needed = share.cold_start_seconds or 0
        if share.cold_start_allowed is None or share.cold_start_allowed < needed:
            allowed = ("no slo.cold_start_seconds" if share.cold_start_allowed is None
                       else f"slo.cold_start_seconds {share.cold_start_allowed:g}")
            yield ("fleets", name, "models", index), (
                f"{share.model}: scaling to zero makes a first request wait about {needed} s (alarm "
                f"{packing.NO_CAPACITY_ALARM_SECONDS} s + instance launch {packing.INSTANCE_LAUNCH_SECONDS} s + "
                f"start-up {needed - packing.NO_CAPACITY_ALARM_SECONDS - packing.INSTANCE_LAUNCH_SECONDS} s), "
                f"but its SLO has {allowed}: set slo.cold_start_seconds >= {needed} in its model file, or keep "
                f"the fleet's min >= 1")


@dataclass(frozen=True)
class FleetChecks:
    """What validate checks of one fleet kind beyond what every fleet gets (check_fleets); each yields findings."""

    file: Callable[..., Iterable[Finding]]  # (base key, fleet, env_file): the fleet's entry alone
    absent_remedy: str  # what to do about a member that is not deployed where the fleet deploys
    # (name, fleet, members, env_name, environment, capacity, spec): the members on the fleet's instance type in an
    # environment; returns whether the fleet can be planned there (False skips the plan's checks)
    members: Callable[..., Generator[Finding, None, bool]]
    on_plan: Callable[..., Iterable[Finding]] = _nothing  # (name, fleet plan): the plan of an environment
    warnings: Callable[..., Iterable[Finding]] = _nothing  # (name, fleet, env_file, models)


FLEET_CHECKS: dict[kinds.FleetKind, FleetChecks] = {
    kinds.NEURON_CORES: FleetChecks(
        file=_check_neuron_cores_file, members=_check_neuron_cores_members, warnings=_neuron_cores_warnings,
        absent_remedy="a neuron-cores fleet deploys in every environment (one image): add them to its deploy_in, or "
                      "take it off the fleet"),
    kinds.SAGEMAKER_INFERENCE_COMPONENTS: FleetChecks(
        file=_check_components_file, members=_check_components_members, on_plan=_check_components_plan,
        absent_remedy="add them to its deploy_in, or give the fleet a deploy_in without them"),
}


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
