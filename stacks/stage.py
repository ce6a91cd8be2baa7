"""One Stage class, instantiated per environment: a foundation stack plus one serving stack per model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import aws_cdk as cdk
from constructs import Construct

from inferstack.config import Environment, Project
from inferstack.config.loader import Model
from inferstack.config.release_pin import ReleasePin
from stacks.foundation_stack import FoundationStack
from stacks.serving_stack import ServingStack


class InferenceStage(cdk.Stage):
    def __init__(self, scope: Construct, env_name: str, *, environment: Environment,
                 models: Sequence[Model], release: ReleasePin | None = None) -> None:
        """`release`: the environment's promoted release; its models deploy the pinned images."""
        super().__init__(scope, env_name, env=cdk.Environment(account=environment.account,
                                                              region=environment.region))
        protect = environment.defaults.retain_stateful_resources
        self.foundation = FoundationStack(self, "Foundation", environment=environment,
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


def add_stages(app: cdk.App, project: Project, env_names: Sequence[str],
               only: Mapping[str, Sequence[str]] | None = None) -> dict[str, InferenceStage]:
    """`only`: environment -> the models to build there (a synth shard); default every model."""
    def models(env_name: str) -> list[Model]:
        if only is None:
            return list(project.models)
        wanted = set(only[env_name])
        return [m for m in project.models if m.name in wanted]

    return {name: InferenceStage(app, name, environment=project.environments[name], models=models(name),
                                 release=project.releases.get(name))
            for name in env_names}
