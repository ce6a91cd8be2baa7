"""rehearsal/aws_rules/elbv2.py at the moto-backend level: a stack update moving listener rules between
priorities, on plain moto and with the rule."""

from __future__ import annotations

import json

import boto3
from moto import mock_aws

from rehearsal import moto_patches

REGION = "us-east-1"
FIRST, SECOND = 50_000, 22_530  # the positional catch-all, and a name-derived path rule
# The rule, over CloudFormation's order of an update (removed resources deleted in cleanup), as the emulator runs.
RULES = ("removals-in-cleanup", "listener-rule-priority-in-use")


def template(vpc: str, subnets: list[str], rules: dict[str, tuple[int, str]]) -> str:
    """A load balancer, its listener and one target group per rule: {logical id: (priority, path)}."""
    resources = {
        "Balancer": {
            "Type": "AWS::ElasticLoadBalancingV2::LoadBalancer",
            "Properties": {"Scheme": "internal", "Subnets": subnets},
        },
        "Listener": {
            "Type": "AWS::ElasticLoadBalancingV2::Listener",
            "Properties": {
                "LoadBalancerArn": {"Ref": "Balancer"},
                "Port": 80,
                "Protocol": "HTTP",
                "DefaultActions": [{"Type": "fixed-response", "FixedResponseConfig": {"StatusCode": "404"}}],
            },
        },
    }
    for name, (priority, path) in rules.items():
        resources[f"{name}Group"] = {
            "Type": "AWS::ElasticLoadBalancingV2::TargetGroup",
            "Properties": {"VpcId": vpc, "Port": 8080, "Protocol": "HTTP", "TargetType": "ip"},
        }
        resources[name] = {
            "Type": "AWS::ElasticLoadBalancingV2::ListenerRule",
            "Properties": {
                "ListenerArn": {"Ref": "Listener"},
                "Priority": priority,
                "Conditions": [{"Field": "path-pattern", "Values": [path]}],
                "Actions": [{"Type": "forward", "TargetGroupArn": {"Ref": f"{name}Group"}}],
            },
        }
    return json.dumps({"Resources": resources})


def deploy(rules_before: dict, rules_after: dict) -> tuple[str, dict[str, int]]:
    """Create the stack, update it; (how the update ended, the listener's rule priorities by path)."""
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=f"{REGION}{z}")["Subnet"]["SubnetId"]
        for i, z in enumerate("ab")
    ]
    cloudformation = boto3.client("cloudformation", region_name=REGION)
    cloudformation.create_stack(StackName="fleet", TemplateBody=template(vpc, subnets, rules_before))
    try:
        cloudformation.update_stack(StackName="fleet", TemplateBody=template(vpc, subnets, rules_after))
        ended = "updated"
    except Exception as exc:  # the error's name and message are what is compared
        ended = " ".join(str(exc).split())
    elbv2 = boto3.client("elbv2", region_name=REGION)
    (listener,) = elbv2.describe_listeners(
        LoadBalancerArn=elbv2.describe_load_balancers()["LoadBalancers"][0]["LoadBalancerArn"]
    )["Listeners"]
    rules = elbv2.describe_rules(ListenerArn=listener["ListenerArn"])["Rules"]
    return ended, {r["Conditions"][0]["Values"][0]: int(r["Priority"]) for r in rules if not r["IsDefault"]}


REORDERED = (
    {"FirstRoute": (FIRST, "/*"), "SecondRoute": (SECOND, "/b/*")},
    {"FirstRoute": (34_109, "/a/*"), "SecondRoute": (FIRST, "/*")},
)
FIRST_RETIRED = ({"FirstRoute": (FIRST, "/*"), "SecondRoute": (SECOND, "/b/*")}, {"SecondRoute": (FIRST, "/*")})
STABLE = (
    {"FirstRoute": (44_109, "/*"), "SecondRoute": (SECOND, "/b/*")},
    {"FirstRoute": (34_109, "/a/*"), "SecondRoute": (42_530, "/*")},
)


def test_rule_listener_rule_priority_in_use(moto_env):
    # Plain moto: the reorder "succeeds" and keeps the old priorities; the first member's retirement takes the
    # priority its rule, deleted first, held. (With removals-in-cleanup alone the reorder also "succeeds".)
    with mock_aws():
        assert deploy(*REORDERED) == ("updated", {"/a/*": FIRST, "/*": SECOND})
    with mock_aws():
        assert deploy(*FIRST_RETIRED) == ("updated", {"/*": SECOND})
    with mock_aws(), moto_patches.applied(*RULES):
        ended, priorities = deploy(*REORDERED)
        assert "PriorityInUse" in ended and priorities == {"/*": FIRST, "/b/*": SECOND}  # nothing changed
    with mock_aws(), moto_patches.applied(*RULES):
        ended, priorities = deploy(*FIRST_RETIRED)
        assert "PriorityInUse" in ended
    # What AWS accepts: every rule to a priority no other rule holds; a removed rule goes after the updates.
    with mock_aws(), moto_patches.applied(*RULES):
        assert deploy(*STABLE) == ("updated", {"/a/*": 34_109, "/*": 42_530})
    with mock_aws(), moto_patches.applied(*RULES):
        assert deploy(
            {"FirstRoute": (44_109, "/*"), "SecondRoute": (SECOND, "/b/*")}, {"SecondRoute": (42_530, "/*")}
        ) == ("updated", {"/*": 42_530})
