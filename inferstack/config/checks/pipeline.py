"""The pipeline block against the environments it deploys, and CodePipeline's quota of actions per stage."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence

from inferstack.config.checks.common import Finding
from inferstack.schema import kinds
from inferstack.schema.environments import CONNECTION_ARN_PATTERN, EnvironmentsFile
from inferstack.schema.kinds import Model


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
            yield (
                ("pipeline", "approval_before", index),
                (f"{name!r} is not one of pipeline.stages ({', '.join(pipeline.stages)})"),
            )
    # A pipeline can only use a connection of its own account (connections are not shared across accounts).
    connection_account = re.fullmatch(CONNECTION_ARN_PATTERN, pipeline.connection_arn).group(2)  # type: ignore[union-attr]  # the field's pattern
    if connection_account != pipeline.account:
        yield (
            ("pipeline", "connection_arn"),
            (f"the connection belongs to account {connection_account}, not the pipeline's account {pipeline.account}"),
        )


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
            yield (
                ("pipeline", "stages"),
                (
                    f"{stacks} serving stacks need {actions} actions in the {name} stage; CodePipeline allows "
                    f"{PIPELINE_ACTIONS_PER_STAGE} per stage: remove the pipeline block and deploy with the CLI "
                    f"(docs/how-to/external-ci.md)"
                ),
            )
            return
