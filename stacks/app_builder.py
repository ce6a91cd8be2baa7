"""Assemble the app: the stages for the chosen environments, the pipeline that deploys them, and the
cdk-nag checks. Shared by app.py and the tests so both synthesize exactly the same thing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import aws_cdk as cdk

from inferstack.config import Project
from inferstack.constructs import nag
from inferstack.schema.environments import PIPELINE_STACK_NAME
from stacks.pipeline_stack import PipelineStack
from stacks.stage import InferenceStage, add_stages

# Context every app of ours sets after the CLI's (post-CLI context wins over it):
# - the CDK CLI hands every app failSynthOnValidationErrors=false, so policy findings would only be
#   reported: with true, an unacknowledged cdk-nag finding fails synth;
# - no stack trace of each construct's creation in the assembly metadata (a tenth of the assembly at
#   fleet scale, and synth time); `cdk synth --debug` records them still. Set here, not in cdk.json,
#   because the CLI warns about the reserved "aws:" keys there.
POST_CLI_CONTEXT = {"@aws-cdk/core:failSynthOnValidationErrors": True, "aws:cdk:disable-creation-stack-traces": True}
PIPELINE_STACK_ID = "Pipeline"


class PipelineUnavailable(ValueError):
    """`-c pipeline=true` asked for a pipeline that cannot be built from this config and selection."""


def pipeline_wanted(project: Project, env_names: Sequence[str], requested: str | None) -> bool:
    """Whether to add the pipeline stack. `requested` is the `pipeline` context value: unset builds it when
    `pipeline:` is configured and every environment it deploys is being synthesized (so `-c environments=dev`
    stays a fast dev-only synth); "true" insists; "false" leaves it out."""
    if requested not in (None, "true", "false"):
        raise PipelineUnavailable(f"-c pipeline: expected true or false, got {requested!r}")
    if requested == "false":
        return False
    if project.pipeline is None:
        if requested == "true":
            raise PipelineUnavailable("-c pipeline=true: environments.yaml has no pipeline: block")
        return False
    missing = [name for name in project.pipeline.stages if name not in env_names]
    if missing and requested == "true":
        raise PipelineUnavailable(
            f"-c pipeline=true: the pipeline deploys {', '.join(project.pipeline.stages)}, "
            f"but -c environments leaves out {', '.join(missing)}"
        )
    return not missing


def build(
    app: cdk.App,
    project: Project,
    env_names: Sequence[str],
    *,
    pipeline: bool = False,
    only: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, InferenceStage]:
    """`only`: build just these models per environment (a synth shard, inferstack/synthesis/shards.py)."""
    if pipeline and only is not None:
        raise ValueError("the pipeline needs every stage: a synth shard cannot build it")
    stages = add_stages(app, project, env_names, only)
    if pipeline:
        add_pipeline(app, project, stages)
    nag.add_checks(app)
    return stages


def add_pipeline(app: cdk.App, project: Project, stages: dict[str, InferenceStage]) -> PipelineStack:
    settings = project.pipeline
    if settings is None:
        raise PipelineUnavailable("environments.yaml has no pipeline: block")
    environments = {name: project.environments[name] for name in settings.stages}
    return PipelineStack(
        app,
        PIPELINE_STACK_ID,
        stack_name=PIPELINE_STACK_NAME,
        settings=settings,
        stages=stages,
        environments=environments,
        base_images=base_images(stages, settings.stages),
        description="inferstack CDK pipeline: " + " -> ".join(settings.stages),
    )


def shard_groups(project: Project, env_names: Sequence[str]) -> dict[str, list[list[str]]]:
    """environment -> the model groups a synth shard must keep together there: each fleet's members, served
    by the fleet's one stack (neuron-cores) or holding their components on the fleet's endpoint, whose stack
    and theirs reference each other (inferstack.synthesis.shards.plan_shards, `together`)."""
    return {
        env: [list(fleet.models) for fleet in project.fleets.values() if fleet.deploys_in(env)] for env in env_names
    }


def base_images(stages: Mapping[str, InferenceStage], env_names: Sequence[str]) -> dict[str, str]:
    """ "<env>/<model>" -> the registry image its serving stack's image asset is built from (ServingStack.base_image:
    the SageMaker Triton base image of a Triton model)."""
    return {
        f"{env_name}/{name}": stack.base_image
        for env_name in env_names
        for name, stack in stages[env_name].serving.items()
        if stack.base_image is not None
    }
