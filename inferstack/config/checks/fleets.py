"""What validate checks of every fleet in environments.yaml, and the per-kind table of what it checks beyond that."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from inferstack.capacity import packing, planning
from inferstack.config.checks import inference_components, neuron_cores
from inferstack.config.checks.common import Finding, did_you_mean, family_problem, fleet_capacity_key, nothing
from inferstack.config.checks.off_hours import check_window
from inferstack.schema import instances, kinds
from inferstack.schema.environments import Environment, EnvironmentsFile
from inferstack.schema.fleets import Fleet
from inferstack.schema.kinds import Model

RESERVED_STACK_IDS = ("Foundation", "Pipeline", "LoadTest")


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
    return (
        f"a {kind} fleet needs at least {need} member{'s' if need != 1 else ''}{why}, {has}; to retire the fleet, "
        f"remove its entry fleets.{name} from environments.yaml: its stack goes, and a member whose model file "
        f"stays gets a stack of its own"
    )


def check_fleets(env_file: EnvironmentsFile, models: Mapping[str, Model]) -> Iterator[Finding]:
    """`fleets:` against the models and environments: membership, what fits on the instance, and the plan
    (inferstack.capacity.packing) in every environment the fleet deploys in. Keys are environments.yaml's."""
    carrier: dict[tuple[str, str], str] = {}  # (environment, model) -> fleet
    for name, fleet in env_file.fleets.items():
        kind = kinds.fleet_kind(fleet)
        own = FLEET_CHECKS[kind]
        base = ("fleets", name)
        if name in models or name in RESERVED_STACK_IDS:
            yield (
                base,
                (
                    f"fleet name {name!r} is also a model's or a reserved stack's name; each names a stack "
                    f"in every environment, so they must differ"
                ),
            )
        for env in fleet.environments:
            if env not in env_file.environments:
                yield base + ("environments", env), (f"unknown environment; known: {', '.join(env_file.environments)}")
        yield from own.file(base, fleet, env_file)
        members: list[Model] = []
        for index, model_name in enumerate(fleet.models):
            model = models.get(model_name)
            if model is None:
                hint = did_you_mean(model_name, models) or (
                    " (no model file names it: a model retired by removing its file leaves its fleet too; take it "
                    "off this list)"
                )
                yield (
                    base + ("models", index),
                    (f"unknown model {model_name!r}{hint}; known: {', '.join(sorted(models))}"),
                )
                continue
            if kinds.model_kind(model) is not kind.member:
                yield (
                    base + ("models", index),
                    (f"{model_name} is a {model.kind} model; a {fleet.kind} fleet carries {kind.member.name} models"),
                )
                continue
            absent = [env for env in env_file.environments if fleet.deploys_in(env) and not model.deploys_in(env)]
            if absent:
                yield (
                    base + ("models", index),
                    (
                        f"{model_name} is not deployed in {', '.join(absent)} (its deploy_in: "
                        f"{', '.join(model.deploy_in or ())}), where fleet {name} deploys: {own.absent_remedy}"
                    ),
                )
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


def _check_fleet_environment(
    name: str, fleet: Fleet, members: Sequence[Model], env_name: str, environment: Environment
) -> Iterator[Finding]:
    kind = kinds.fleet_kind(fleet)
    capacity = fleet.capacity_for(env_name)
    spec = instances.get(capacity.instance_type)
    type_key = fleet_capacity_key(name, fleet, env_name, "instance_type")
    problem = family_problem(spec, kind.member)
    if problem:
        yield type_key, problem
        return
    if capacity.min > capacity.max:
        yield fleet_capacity_key(name, fleet, env_name, "min"), f"min {capacity.min} > max {capacity.max}"
        return
    windows = fleet.off_hours_for(env_name)
    for index, window in enumerate(windows):
        yield from check_window(
            window,
            ("fleets", name, "environments", env_name, "off_hours", index),
            capacity.max,
            zero=kind.at_zero,
            owner=f"fleet {name}",
        )
    plannable = yield from FLEET_CHECKS[kind].members(name, fleet, members, env_name, environment, capacity, spec)
    if not plannable:
        return
    try:
        result = packing.plan_fleet(name, fleet, members, env_name, environment)
    except planning.FleetBeyondCount as exc:
        yield fleet_capacity_key(name, fleet, env_name, "max"), str(exc)
        return
    except planning.PlanningError as exc:  # PackingError among them: cores or a copy over the instance
        yield type_key, str(exc)
        return
    shares: Sequence[packing.CoreShare | packing.ComponentShare] = result.shares
    for index, share in enumerate(shares):
        if share.profile_p99_ms > share.slo_p99_ms:
            yield (
                ("fleets", name, "models", index),
                (
                    f"{share.model}: SLO p99 {share.slo_p99_ms:g} ms is below the profiled p99 "
                    f"{share.profile_p99_ms:g} ms on {result.instance_type}"
                ),
            )
    if not result.peak_within_max:
        yield (
            fleet_capacity_key(name, fleet, env_name, "max"),
            (
                f"the members' peaks need {result.instances_at_peak} x {result.instance_type}, but max is "
                f"{result.max_capacity}"
            ),
        )
    yield from FLEET_CHECKS[kind].on_plan(name, result)


def fleet_warnings(env_file: EnvironmentsFile, models: Mapping[str, Model]) -> Iterator[Finding]:
    for name, fleet in env_file.fleets.items():
        yield from FLEET_CHECKS[kinds.fleet_kind(fleet)].warnings(name, fleet, env_file, models)


@dataclass(frozen=True)
class FleetChecks:
    """What validate checks of one fleet kind beyond what every fleet gets (check_fleets); each yields findings."""

    file: Callable[..., Iterable[Finding]]  # (base key, fleet, env_file): the fleet's entry alone
    absent_remedy: str  # what to do about a member that is not deployed where the fleet deploys
    # (name, fleet, members, env_name, environment, capacity, spec): the members on the fleet's instance type in an
    # environment; returns whether the fleet can be planned there (False skips the plan's checks)
    members: Callable[..., Generator[Finding, None, bool]]
    on_plan: Callable[..., Iterable[Finding]] = nothing  # (name, fleet plan): the plan of an environment
    warnings: Callable[..., Iterable[Finding]] = nothing  # (name, fleet, env_file, models)


FLEET_CHECKS: dict[kinds.FleetKind, FleetChecks] = {
    kinds.NEURON_CORES: FleetChecks(
        file=neuron_cores.check_file,
        members=neuron_cores.check_members,
        warnings=neuron_cores.warnings,
        absent_remedy="a neuron-cores fleet deploys in every environment (one image): add them to its deploy_in, or "
        "take it off the fleet",
    ),
    kinds.SAGEMAKER_INFERENCE_COMPONENTS: FleetChecks(
        file=inference_components.check_file,
        members=inference_components.check_members,
        on_plan=inference_components.check_plan,
        absent_remedy="add them to its deploy_in, or give the fleet a deploy_in without them",
    ),
}
