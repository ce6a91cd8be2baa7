"""Checks of a neuron-cores fleet: its members on one task (target groups, ports, generation) and its rollouts."""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sequence

from inferstack.config.checks.common import Finding, fleet_capacity_key
from inferstack.config.checks.neuron_ecs import bake_warning, check_ecs_deployments
from inferstack.config.yaml_source import KeyPath
from inferstack.neuron import deployment as neuron_deployment
from inferstack.neuron import routing
from inferstack.schema import instances, kinds
from inferstack.schema.environments import Environment, EnvironmentsFile
from inferstack.schema.fleets import FleetCapacity, NeuronCoreFleet
from inferstack.schema.kinds import Model
from inferstack.schema.neuron_ecs import NeuronEcsModel


def check_file(base: KeyPath, fleet: NeuronCoreFleet, env_file: EnvironmentsFile) -> Iterator[Finding]:
    yield from check_ecs_deployments(fleet.deployment, fleet.environments, base)


def check_members(
    name: str,
    fleet: NeuronCoreFleet,
    members: Sequence[NeuronEcsModel],
    env_name: str,
    environment: Environment,
    capacity: FleetCapacity,
    spec: instances.InstanceSpec,
) -> Generator[Finding, None, bool]:
    if len(members) > routing.MAX_TARGET_GROUPS:
        yield (
            ("fleets", name, "models"),
            (
                f"{len(members)} models; the fleet's ECS service routes each to its own target group and a "
                f"service takes at most {routing.MAX_TARGET_GROUPS} ({routing.MAX_TARGET_GROUPS_SOURCE})"
            ),
        )
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
            yield (
                ("fleets", name, "models", index),
                (
                    f"{model.name} listens on port {model.serving.port}, as {other} does; the members of a fleet share "
                    f"one task: give {model.name} a port of its own (serving.port in its model file, e.g. {free})"
                ),
            )
    if capacity.min == 0:
        yield (
            fleet_capacity_key(name, fleet, env_name, "min"),
            (
                "a neuron-cores fleet keeps at least 1 instance outside its off_hours (ECS cannot scale out from "
                "0 tasks on requests); close it at night with an off_hours window at min 0, max 0"
            ),
        )
        return False
    for index, model in enumerate(members):
        if model.compile.neuron_generation != spec.neuron_generation:
            yield (
                ("fleets", name, "models", index),
                (
                    f"{model.name} is compiled for {model.compile.neuron_generation}, {spec.name} runs "
                    f"{spec.neuron_generation}; Neuron artifacts are not portable between generations"
                ),
            )
            return False
    publics = {model.public_load_balancer(environment) for model in members}
    if len(publics) > 1:
        yield (
            ("fleets", name, "models"),
            ("the members share one load balancer: give them the same load_balancer.public setting"),
        )
        return False
    return True


def warnings(
    name: str, fleet: NeuronCoreFleet, env_file: EnvironmentsFile, models: Mapping[str, Model]
) -> Iterator[Finding]:
    # A member that is no neuron-ecs model is a problem check_fleets reports.
    members = [
        m for m in (models.get(n) for n in fleet.models) if m is not None and kinds.model_kind(m) is kinds.NEURON_ECS
    ]
    evaluation = max((m.alarms.evaluation_minutes for m in members), default=0)  # type: ignore[union-attr]  # members: neuron-ecs models only
    for env in env_file.environments:
        message = bake_warning(fleet.deployment_for(env), evaluation)
        if message:
            own = fleet.environments.get(env)
            key = ("environments", env, "deployment") if own and own.deployment else ("deployment",)
            yield ("fleets", name) + key, f"{message} (environment {env})"
