"""One Stage class, instantiated per environment: a foundation stack plus one serving stack per model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import aws_cdk as cdk
from constructs import Construct

from inferstack.config import Environment, Project
from inferstack.config.loader import Model
from inferstack.config.release_pin import ReleasePin
from inferstack.delivery import stack_outputs
from inferstack.schema.models import DEFAULT_SMOKE_ROLE_NAME, PIPELINE_STACK_NAME
from stacks.foundation_stack import FoundationStack, SmokeRole
from stacks.serving_stack import ServingStack


class InferenceStage(cdk.Stage):
    def __init__(self, scope: Construct, env_name: str, *, environment: Environment,
                 models: Sequence[Model], smoke_role: SmokeRole, release: ReleasePin | None = None) -> None:
        """`release`: the environment's promoted release; its models deploy the pinned images.
        `smoke_role`: the role the smoke test assumes here (see `smoke_role_for`)."""
        super().__init__(scope, env_name, env=cdk.Environment(account=environment.account,
                                                              region=environment.region))
        protect = environment.defaults.retain_stateful_resources
        self.foundation = FoundationStack(self, stack_outputs.FOUNDATION, environment=environment,
                                          env_name=env_name, smoke_role=smoke_role,
                                          termination_protection=protect,
                                          description=f"inferstack foundation ({env_name})")
        self.serving: dict[str, ServingStack] = {}
        for model in models:
            stack = ServingStack(self, model.name, model=model, environment=environment, env_name=env_name,
                                 shared=self.foundation.shared, termination_protection=protect,
                                 pinned_image=release.image_for(model.name) if release else None,
                                 description=f"inferstack {model.kind} serving: {model.name} ({env_name})")
            cdk.Tags.of(stack).add("inferstack:model", model.name)
            self.serving[model.name] = stack
        cdk.Tags.of(self).add("inferstack:environment", env_name)


def smoke_role_for(project: Project, env_name: str) -> SmokeRole:
    """The pipeline's smoke role, trusting the pipeline's tooling account, in every environment it deploys.
    Elsewhere (no pipeline, or an environment it does not deploy) the same name, trusting the environment's
    own account: principals there that IAM allows to assume it (an OIDC role of an external CI) may."""
    pipeline = project.pipeline
    name = pipeline.smoke_role_name if pipeline else DEFAULT_SMOKE_ROLE_NAME
    if pipeline and env_name in pipeline.stages:
        # Only the pipeline stack's roles (its smoke steps' CodeBuild roles), not the whole tooling account.
        return SmokeRole(name, pipeline.account, trusted_role_prefix=f"{PIPELINE_STACK_NAME}-")
    return SmokeRole(name, project.environments[env_name].account)


def add_stages(app: cdk.App, project: Project, env_names: Sequence[str],
               only: Mapping[str, Sequence[str]] | None = None) -> dict[str, InferenceStage]:
    """`only`: environment -> the models to build there (a synth shard); default every model."""
    def models(env_name: str) -> list[Model]:
        if only is None:
            return list(project.models)
        wanted = set(only[env_name])
        return [m for m in project.models if m.name in wanted]

    return {name: InferenceStage(app, name, environment=project.environments[name], models=models(name),
                                 smoke_role=smoke_role_for(project, name), release=project.releases.get(name))
            for name in env_names}
