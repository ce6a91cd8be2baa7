"""rehearsal/aws_rules/cloudformation.py at the moto-backend level: a stack update whose new resource takes the
name a removed one holds, on plain moto and with the rule."""

from __future__ import annotations

import json

import boto3
from moto import mock_aws

from rehearsal import moto_patches

REGION = "us-east-1"


def parameter(name: str, value: str) -> dict:
    return {"Type": "AWS::SSM::Parameter", "Properties": {"Type": "String", "Name": name, "Value": value}}


def update(stack: str, before: dict, after: dict) -> str:
    cloudformation = boto3.client("cloudformation", region_name=REGION)
    cloudformation.create_stack(StackName=stack, TemplateBody=json.dumps({"Resources": before}))
    try:
        cloudformation.update_stack(StackName=stack, TemplateBody=json.dumps({"Resources": after}))
    except Exception as exc:  # the error's name is what is compared
        return type(exc).__name__ + ": " + " ".join(str(exc).split())
    return "updated"


def test_rule_removals_in_cleanup(moto_env):
    # The parameter /a moves to a new logical id: AWS creates the new one first, and /a still exists then.
    moved = ({"Old": parameter("/a", "1")}, {"New": parameter("/a", "2")})
    with mock_aws():
        assert update("plain", *moved) == "updated"  # moto deleted Old before it created New
    with mock_aws(), moto_patches.applied("removals-in-cleanup"):
        assert "ParameterAlreadyExists" in update("ruled", *moved)
    # What AWS accepts: a removed resource goes after the updates, and then it is gone.
    with mock_aws(), moto_patches.applied("removals-in-cleanup"):
        assert (
            update(
                "ruled",
                {"Old": parameter("/a", "1"), "Kept": parameter("/k", "1")},
                {"New": parameter("/b", "2"), "Kept": parameter("/k", "2")},
            )
            == "updated"
        )
        ssm = boto3.client("ssm", region_name=REGION)
        assert sorted(p["Name"] for p in ssm.describe_parameters()["Parameters"]) == ["/b", "/k"]
        resources = boto3.client("cloudformation", region_name=REGION).describe_stack_resources(StackName="ruled")[
            "StackResources"
        ]
        assert sorted(r["LogicalResourceId"] for r in resources) == ["Kept", "New"]
