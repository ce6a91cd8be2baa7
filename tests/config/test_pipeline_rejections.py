"""The pipeline block of environments.yaml: every mistake is one line naming the file, line and key."""

from __future__ import annotations

import pytest
import yaml

from inferstack import config
from tests.support.config_edits import assert_rejected, delete_at, edit_yaml, problems_of, set_at

FILE = "environments.yaml"
OTHER_ACCOUNT_CONNECTION = (
    "arn:aws:codeconnections:us-east-1:555555555555:connection/0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9"
)

CASES = {
    "short account": (set_at("pipeline", "account", value="4444"), "pipeline.account: String should match pattern"),
    "bad region": (set_at("pipeline", "region", value="us-east"), "pipeline.region: String should match pattern"),
    "not a connection ARN": (
        set_at("pipeline", "connection_arn", value="arn:aws:iam::444444444444:role/github"),
        "pipeline.connection_arn: String should match pattern",
    ),
    "connection without a UUID": (
        set_at("pipeline", "connection_arn", value="arn:aws:codestar-connections:us-east-1:444444444444:connection/x"),
        "pipeline.connection_arn: String should match pattern",
    ),
    "connection of another account": (
        set_at("pipeline", "connection_arn", value=OTHER_ACCOUNT_CONNECTION),
        "pipeline.connection_arn: the connection belongs to account 555555555555, not the pipeline's account "
        "444444444444",
    ),
    "missing connection": (
        delete_at("pipeline", "connection_arn"),
        "pipeline.connection_arn: required field is missing",
    ),
    "repository without owner": (
        set_at("pipeline", "repository", value="inferstack"),
        "pipeline.repository: String should match pattern",
    ),
    "unknown stage": (
        set_at("pipeline", "stages", value=["dev", "qa"]),
        "pipeline.stages.1: unknown environment 'qa'; known: dev, staging, prod",
    ),
    "stage twice": (
        set_at("pipeline", "stages", value=["dev", "staging", "dev"]),
        "pipeline.stages.2: dev is deployed twice",
    ),
    "no stages": (set_at("pipeline", "stages", value=[]), "pipeline.stages: Tuple should have at least 1 item"),
    "approval outside the stages": (
        set_at("pipeline", "approval_before", value=["qa"]),
        "pipeline.approval_before.0: 'qa' is not one of pipeline.stages (dev, staging, prod)",
    ),
    "unknown key": (set_at("pipeline", "approvals", value=["prod"]), "pipeline.approvals: unknown key"),
    "bad smoke role name": (
        set_at("pipeline", "smoke_role_name", value="smoke role"),
        "pipeline.smoke_role_name: String should match pattern",
    ),
    # each foundation creates the smoke role by name, and IAM names are unique per account
    "two environments in one account": (
        set_at("environments", "staging", "account", value="111111111111"),
        "environments.staging.account: account 111111111111 is also dev's: each environment's foundation creates "
        "the IAM role inferstack-smoke (the smoke test's), and role names are unique per account; give each "
        "environment its own account",
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_pipeline_rejection(config_copy, case):
    change, expected = CASES[case]
    assert_rejected(config_copy, FILE, change, expected)


def test_problem_line_points_at_the_stage(config_copy):
    edit_yaml(config_copy / FILE, set_at("pipeline", "stages", value=["dev", "qa", "prod"]))
    text = (config_copy / FILE).read_text().splitlines()
    (problem,) = problems_of(config_copy)
    line = int(problem.split(":")[1])
    assert text[line - 1].strip() == "- qa"


def test_pipeline_block_is_optional(config_copy):
    data = yaml.safe_load((config_copy / FILE).read_text())
    del data["pipeline"]
    (config_copy / FILE).write_text(yaml.safe_dump(data, sort_keys=False))
    assert config.load(config_copy).pipeline is None


def test_shipped_pipeline_block(config_copy):
    pipeline = config.load(config_copy).pipeline
    assert pipeline is not None
    assert (pipeline.stages, pipeline.approval_before) == (("dev", "staging", "prod"), ("prod",))
    assert pipeline.account not in {e.account for e in config.load(config_copy).environments.values()}


def test_a_fleet_too_large_for_one_pipeline_stage_is_rejected(config_copy):
    source = (config_copy / "t5-spelling.yaml").read_text()

    def add(i: int) -> None:
        (config_copy / f"extra-{i:02d}.yaml").write_text(source.replace("name: t5-spelling", f"name: extra-{i:02d}"))

    for i in range(18):
        add(i)
    # 23 models; dev deploys its 2 fleets' stacks and 21 models' (intent-pack's two members have none):
    # 2 x (foundation + 23 serving stacks) + smoke = 49 actions, under CodePipeline's 50
    assert len(config.load(config_copy).models) == 23
    add(18)
    problems = problems_of(config_copy)
    assert problems == [
        f"model_configs/{FILE}:{problems[0].split(':')[1]}: pipeline.stages: 24 serving stacks need 51 "
        "actions in the dev stage; CodePipeline allows 50 per stage: remove the pipeline block "
        "and deploy with the CLI (docs/how-to/external-ci.md)"
    ]
