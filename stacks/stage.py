"""One Stage class, instantiated per environment: a foundation stack, one serving stack per model (or
neuron-cores fleet), and the load-test stack where the environment has `load_test:`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import aws_cdk as cdk
from constructs import Construct

from inferstack.aws import stack_outputs
from inferstack.config import Environment, Project
from inferstack.config.loader import Model
from inferstack.config.release_pin import ReleasePin
from inferstack.schema.environments import DEFAULT_LOAD_TEST_ROLE_NAME, DEFAULT_SMOKE_ROLE_NAME, PIPELINE_STACK_NAME
from inferstack.schema.fleets import Fleet
from stacks.fleet_stack import FleetStack
from stacks.foundation_stack import FoundationStack, ToolRole
from stacks.load_test_stack import LoadTestStack
from stacks.serving_stack import ServingStack


class InferenceStage(cdk.Stage):
    def __init__(
        self,
        scope: Construct,
        env_name: str,
        *,
        environment: Environment,
        models: Sequence[Model],
        smoke_role: ToolRole,
        load_test_role: ToolRole | None = None,
        release: ReleasePin | None = None,
        fleets: Mapping[str, Fleet] | None = None,
        all_models: Sequence[Model] = (),
    ) -> None:
        """`release`: the environment's promoted release; its models deploy the pinned images.
        `smoke_role`, `load_test_role`: the roles the smoke and load tests assume here (see `tool_roles_for`).
        `fleets`: the fleets deployed in this environment (fleet name -> fleet); a neuron-cores fleet's
        members are served by the fleet's stack, an inference-components fleet's members keep their own
        stacks on the fleet's endpoint. `all_models`: every model of the project (fleet members)."""
        super().__init__(scope, env_name, env=cdk.Environment(account=environment.account, region=environment.region))
        protect = environment.defaults.retain_stateful_resources
        self.foundation = FoundationStack(
            self,
            stack_outputs.FOUNDATION,
            environment=environment,
            env_name=env_name,
            smoke_role=smoke_role,
            termination_protection=protect,
            description=f"inferstack foundation ({env_name})",
        )
        by_name = {m.name: m for m in (all_models or models)}
        wanted = {m.name for m in models}
        self.fleets: dict[str, FleetStack] = {}
        fleet_of: dict[str, str] = {}
        for fleet_name, fleet in (fleets or {}).items():
            if not wanted.intersection(fleet.models):
                continue  # a synth shard without this fleet's models
            stack = FleetStack(
                self,
                fleet_name,
                fleet_name=fleet_name,
                fleet=fleet,
                members=[by_name[m] for m in fleet.models],
                environment=environment,
                env_name=env_name,
                shared=self.foundation.shared,
                termination_protection=protect,
                pinned_image=release.image_for(fleet_name) if release else None,
                description=f"inferstack {fleet.kind} fleet: {fleet_name} ({env_name})",
            )
            cdk.Tags.of(stack).add("inferstack:fleet", fleet_name)
            self.fleets[fleet_name] = stack
            fleet_of.update({m: fleet_name for m in fleet.models})
        self.serving: dict[str, ServingStack] = {}
        for model in models:
            fleet_stack = self.fleets.get(fleet_of.get(model.name, ""))
            if fleet_stack is not None and fleet_stack.serves_members:
                continue  # the fleet's own stack serves this model
            stack = ServingStack(
                self,
                model.name,
                model=model,
                environment=environment,
                env_name=env_name,
                shared=self.foundation.shared,
                termination_protection=protect,
                pinned_image=release.image_for(model.name) if release else None,
                shared_endpoint=fleet_stack.shared_endpoint if fleet_stack else None,
                description=f"inferstack {model.kind} serving: {model.name} ({env_name})",
            )
            cdk.Tags.of(stack).add("inferstack:model", model.name)
            if fleet_stack is not None:
                stack.add_stack_dependency(fleet_stack)  # the shared endpoint exists before its components
            self.serving[model.name] = stack
        self.load_test: LoadTestStack | None = None
        if environment.load_test is not None:
            if load_test_role is None:
                raise ValueError(f"{env_name}: an environment with load_test needs the load test role's trust")
            self.load_test = LoadTestStack(
                self,
                stack_outputs.LOAD_TEST,
                environment=environment,
                env_name=env_name,
                shared=self.foundation.shared,
                runner_role=load_test_role,
                termination_protection=protect,
                description=f"inferstack load-test generators ({env_name})",
            )
        cdk.Tags.of(self).add("inferstack:environment", env_name)


def smoke_role_for(project: Project, env_name: str) -> ToolRole:
    pipeline = project.pipeline
    return _tool_role(project, env_name, pipeline.smoke_role_name if pipeline else DEFAULT_SMOKE_ROLE_NAME)


def load_test_role_for(project: Project, env_name: str) -> ToolRole:
    pipeline = project.pipeline
    return _tool_role(project, env_name, pipeline.load_test_role_name if pipeline else DEFAULT_LOAD_TEST_ROLE_NAME)


def _tool_role(project: Project, env_name: str, name: str) -> ToolRole:
    """A tool's role (smoke, load test) trusting the pipeline's tooling account in every environment it deploys.
    Elsewhere (no pipeline, or an environment it does not deploy) the same name, trusting the environment's
    own account: principals there that IAM allows to assume it (an OIDC role of an external CI) may."""
    pipeline = project.pipeline
    if pipeline and env_name in pipeline.stages:
        # Only the pipeline stack's roles (its steps' CodeBuild roles), not the whole tooling account.
        return ToolRole(name, pipeline.account, trusted_role_prefix=f"{PIPELINE_STACK_NAME}-")
    return ToolRole(name, project.environments[env_name].account)


def add_stages(
    app: cdk.App, project: Project, env_names: Sequence[str], only: Mapping[str, Sequence[str]] | None = None
) -> dict[str, InferenceStage]:
    """`only`: environment -> the models to build there (a synth shard); default every model deployed there
    (a model file's `deploy_in`)."""

    def models(env_name: str) -> list[Model]:
        deployed = project.models_in(env_name)
        if only is None:
            return deployed
        wanted = set(only[env_name])
        return [m for m in deployed if m.name in wanted]

    return {
        name: InferenceStage(
            app,
            name,
            environment=project.environments[name],
            models=models(name),
            smoke_role=smoke_role_for(project, name),
            load_test_role=load_test_role_for(project, name),
            release=project.releases.get(name),
            fleets={f: project.fleets[f] for f in project.fleets_in(name)},
            all_models=project.models,
        )
        for name in env_names
    }
