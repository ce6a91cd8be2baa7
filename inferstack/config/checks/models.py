"""What validate checks of every model file, and the per-kind table of what it checks beyond that."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from inferstack.capacity import planning
from inferstack.config.checks import neuron_ecs, triton_sagemaker
from inferstack.config.checks.common import (
    Finding,
    capacity_key,
    did_you_mean,
    family_problem,
    nothing,
    unknown_environments,
)
from inferstack.config.checks.off_hours import check_off_hours
from inferstack.schema import instances, kinds
from inferstack.schema.environments import Environment, EnvironmentsFile
from inferstack.schema.kinds import Model


def check_model(model: Model, environments: dict[str, Environment]) -> Iterator[Finding]:
    yield from unknown_environments((), model.deploy_in, environments)
    for env in model.environments:
        if env not in environments:
            yield (
                ("environments", env),
                (f"unknown environment{did_you_mean(env, environments)}; known: {', '.join(sorted(environments))}"),
            )
        elif not model.deploys_in(env):
            # An error, not a warning: the block would never apply, and whoever reads the file would take it
            # for the model's settings there (a prod override that silently stopped counting, or a prod
            # deployment someone meant to add).
            yield (
                ("environments", env),
                (
                    f"{env} is not in deploy_in ({', '.join(model.deploy_in or ())}), so this override would never "
                    f"apply: add {env} to deploy_in, or remove the block"
                ),
            )
    for itype, point in model.throughput_profile.items():
        measured_in = point.measured.environment if point.measured is not None else None
        if measured_in is not None and measured_in not in environments:
            yield (
                ("throughput_profile", itype, "measured", "environment"),
                (
                    f"unknown environment {measured_in!r}{did_you_mean(measured_in, environments)}; known: "
                    f"{', '.join(environments)}"
                ),
            )
    yield from MODEL_CHECKS[kinds.model_kind(model)].file(model)
    yield from check_off_hours(model)
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
    wrong_family = family_problem(spec, kind)
    if wrong_family:
        yield capacity_key(model, env_name, "instance_type"), wrong_family
    else:
        yield from MODEL_CHECKS[kind].on_instance(model, spec, environment)
    yield from MODEL_CHECKS[kind].in_environment(model, environment)
    if capacity.min > capacity.max:
        yield capacity_key(model, env_name, "min"), f"min {capacity.min} > max {capacity.max}"
    elif not wrong_family:
        yield from _check_plan(model, env_name, environment)


def _check_plan(model: Model, env_name: str, environment: Environment) -> Iterator[Finding]:
    try:
        result = planning.plan(model, env_name, environment)
    except planning.FleetBeyondCount as exc:
        yield capacity_key(model, env_name, "max"), str(exc)
        return
    except planning.PlanningError as exc:
        yield ("throughput_profile",), str(exc)
        return
    if not result.latency_within_slo:
        yield (
            ("slo", "p99_latency_ms"),
            (
                f"SLO p99 {result.slo_p99_ms:g} ms is below the profiled p99 {result.profile_p99_ms:g} ms "
                f"of {result.instance_type}"
            ),
        )
    if not result.peak_within_max:
        yield (
            capacity_key(model, env_name, "max"),
            (
                f"peak {result.peak_tps:g} TPS needs {result.instances_at_peak} x {result.instance_type} at "
                f"{result.throughput_per_instance:g}/s x safety factor {result.safety_factor:g}, "
                f"but max is {result.max_capacity}"
            ),
        )


def model_warnings(env_file: EnvironmentsFile, model: Model) -> Iterator[Finding]:
    """What loads and deploys but deserves a look: reported by `validate` as warning lines, exit 0."""
    yield from MODEL_CHECKS[kinds.model_kind(model)].warnings(model, env_file)


@dataclass(frozen=True)
class ModelChecks:
    """What validate checks of one model kind beyond what every model gets (check_model); each yields findings."""

    file: Callable[..., Iterable[Finding]]  # (model): the model file alone
    # (model, spec, environment): in each environment it deploys in, on its instance type there, where that is
    # one the kind runs on (its accelerator)
    on_instance: Callable[..., Iterable[Finding]]
    in_environment: Callable[..., Iterable[Finding]] = nothing  # (model, environment): whatever the instance type
    warnings: Callable[..., Iterable[Finding]] = nothing  # (model, env_file): loads and deploys, but deserves a look


MODEL_CHECKS: dict[kinds.ModelKind, ModelChecks] = {
    kinds.NEURON_ECS: ModelChecks(
        file=neuron_ecs.check_file,
        on_instance=neuron_ecs.check_instance,
        in_environment=neuron_ecs.check_load_balancer,
        warnings=neuron_ecs.warnings,
    ),
    kinds.TRITON_SAGEMAKER: ModelChecks(
        file=triton_sagemaker.check_file, on_instance=triton_sagemaker.check_image, warnings=triton_sagemaker.warnings
    ),
}
