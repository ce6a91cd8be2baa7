"""`cdk destroy` of a Neuron stack completes while managed termination protection stays on (aws-cdk issue
18179): the release custom resource, its least-privilege role, the deletion order the dependencies give
(off-hours scheduled actions included), and its handler run against emulated Auto Scaling (moto). Asserted
on dev's neuron-cores fleet, whose off-hours window scales its group to zero at night."""

from __future__ import annotations

import json

import boto3
import pytest
from aws_cdk.assertions import Template

from inferstack.constructs import scale_in_release
from tests.support.neuron_service import FLEET, PINNED_IDS
from tests.support.templates import only

ASG_ID = PINNED_IDS["AWS::AutoScaling::AutoScalingGroup"]
SERVICE_ID = PINNED_IDS["AWS::ECS::Service"]


@pytest.fixture(scope="module")
def resources(synthesized) -> dict:
    return synthesized.template("dev", FLEET)["Resources"]


def test_protection_stays_on_while_the_service_runs(resources):
    tpl = Template.from_json({"Resources": resources})
    _, provider = only(tpl, "AWS::ECS::CapacityProvider")
    assert provider["Properties"]["AutoScalingGroupProvider"]["ManagedTerminationProtection"] == "ENABLED"
    assert resources[ASG_ID]["Properties"]["NewInstancesProtectedFromScaleIn"] is True


def test_deleted_after_the_service_and_before_provider_association_and_group(resources):
    """CloudFormation deletes a resource before everything it depends on."""
    tpl = Template.from_json({"Resources": resources})
    release_id, release = only(tpl, scale_in_release.RESOURCE_TYPE)
    assert release["Properties"]["AutoScalingGroupName"] == {"Ref": ASG_ID}  # so: before the group
    provider_id, _ = only(tpl, "AWS::ECS::CapacityProvider")
    association_id, _ = only(tpl, "AWS::ECS::ClusterCapacityProviderAssociations")
    assert {provider_id, association_id} <= set(release["DependsOn"])
    assert release_id in resources[SERVICE_ID]["DependsOn"]  # the service (its tasks) goes first
    function_id = release["Properties"]["ServiceToken"]["Fn::GetAtt"][0]
    assert resources[function_id]["Properties"]["Timeout"] == 600


def test_off_hours_actions_are_deleted_before_the_release_runs(resources):
    """A window's end raises the group's minimum: its scheduled action must be gone before the release empties
    the group, so every one depends on the release (and is deleted first)."""
    tpl = Template.from_json({"Resources": resources})
    release_id, _ = only(tpl, scale_in_release.RESOURCE_TYPE)
    actions = tpl.find_resources("AWS::AutoScaling::ScheduledAction")
    assert len(actions) == 2  # dev's one window: its start and its end
    for action in actions.values():
        assert action["Properties"]["AutoScalingGroupName"] == {"Ref": ASG_ID}
        assert release_id in action["DependsOn"]


def test_role_may_change_only_this_group(resources):
    tpl = Template.from_json({"Resources": resources})
    release_id, release = only(tpl, scale_in_release.RESOURCE_TYPE)
    function = resources[release["Properties"]["ServiceToken"]["Fn::GetAtt"][0]]
    role = resources[function["Properties"]["Role"]["Fn::GetAtt"][0]]["Properties"]
    assert "ManagedPolicyArns" not in role
    (policy,) = role["Policies"]
    statements = {s["Sid"]: s for s in policy["PolicyDocument"]["Statement"]}
    assert set(statements) == {"ReleaseThisGroup", "DescribeGroups", "WriteLogs"}
    assert sorted(statements["ReleaseThisGroup"]["Action"]) == [
        "autoscaling:SetInstanceProtection",
        "autoscaling:UpdateAutoScalingGroup",
    ]
    arn = json.dumps(statements["ReleaseThisGroup"]["Resource"])
    assert ":autoScalingGroup:*:autoScalingGroupName/" in arn and ASG_ID in arn
    assert statements["DescribeGroups"]["Action"] == "autoscaling:DescribeAutoScalingGroups"
    assert statements["WriteLogs"]["Action"] == ["logs:CreateLogStream", "logs:PutLogEvents"]


def test_inline_handler_fits_lambdas_zipfile_limit():
    assert len(scale_in_release.HANDLER.encode()) < 4096


# ---------------------------------------------------------------- the handler, against moto


def _handler_namespace() -> dict:
    namespace: dict = {}
    exec(compile(scale_in_release.HANDLER, "index.py", "exec"), namespace)
    return namespace


@pytest.fixture
def protected_group(aws):
    ec2 = boto3.client("ec2", region_name="us-east-1")
    client = boto3.client("autoscaling", region_name="us-east-1")
    image = ec2.describe_images()["Images"][0]["ImageId"]
    ec2.create_launch_template(
        LaunchTemplateName="neuron-lt", LaunchTemplateData={"ImageId": image, "InstanceType": "t3.micro"}
    )
    client.create_auto_scaling_group(
        AutoScalingGroupName="neuron",
        LaunchTemplate={"LaunchTemplateName": "neuron-lt"},
        MinSize=2,
        MaxSize=4,
        DesiredCapacity=2,
        NewInstancesProtectedFromScaleIn=True,
        AvailabilityZones=["us-east-1a"],
    )
    (group,) = client.describe_auto_scaling_groups(AutoScalingGroupNames=["neuron"])["AutoScalingGroups"]
    assert group["Instances"] and all(i["ProtectedFromScaleIn"] for i in group["Instances"])
    return client


def test_release_unprotects_every_instance_and_scales_to_zero(protected_group):
    _handler_namespace()["release"](protected_group, "neuron")
    (group,) = protected_group.describe_auto_scaling_groups(AutoScalingGroupNames=["neuron"])["AutoScalingGroups"]
    assert group["MinSize"] == 0 and group["DesiredCapacity"] == 0
    assert group["NewInstancesProtectedFromScaleIn"] is False
    assert not any(i.get("ProtectedFromScaleIn") for i in group["Instances"])


class _Context:
    log_stream_name = "stream"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 0


def _event(request_type: str) -> dict:
    return {
        "RequestType": request_type,
        "ResourceProperties": {"AutoScalingGroupName": "neuron"},
        "ResponseURL": "https://cloudformation-response.example/",
        "StackId": "stack",
        "RequestId": "r",
        "LogicalResourceId": "NeuronScaleInRelease",
    }


@pytest.mark.parametrize("request_type", ["Create", "Update", "Delete"])
def test_handler_answers_cloudformation(protected_group, monkeypatch, request_type):
    namespace = _handler_namespace()
    sent = []
    monkeypatch.setattr(
        namespace["urllib"].request, "urlopen", lambda request, timeout: sent.append(json.loads(request.data))
    )
    namespace["handler"](_event(request_type), _Context())
    (response,) = sent
    assert response["Status"] == "SUCCESS" and response["PhysicalResourceId"] == "neuron"
    (group,) = protected_group.describe_auto_scaling_groups(AutoScalingGroupNames=["neuron"])["AutoScalingGroups"]
    # Protection is only ever released on Delete.
    assert group["NewInstancesProtectedFromScaleIn"] is (request_type != "Delete")


def test_a_group_emptied_by_its_off_hours_window_is_released(protected_group):
    """At night the window has set the minimum to zero and ECS has drained the group: nothing is left to
    unprotect, and the release still stops protecting new instances."""
    protected_group.put_scheduled_update_group_action(
        AutoScalingGroupName="neuron", ScheduledActionName="OffHours1Start", Recurrence="0 20 * * MON-FRI", MinSize=0
    )
    protected_group.update_auto_scaling_group(AutoScalingGroupName="neuron", MinSize=0, DesiredCapacity=0)
    _handler_namespace()["release"](protected_group, "neuron")
    (group,) = protected_group.describe_auto_scaling_groups(AutoScalingGroupNames=["neuron"])["AutoScalingGroups"]
    assert (group["MinSize"], group["DesiredCapacity"], group["NewInstancesProtectedFromScaleIn"]) == (0, 0, False)


def test_a_group_already_gone_is_released(aws, monkeypatch):
    namespace = _handler_namespace()
    sent = []
    monkeypatch.setattr(
        namespace["urllib"].request, "urlopen", lambda request, timeout: sent.append(json.loads(request.data))
    )
    namespace["handler"](_event("Delete"), _Context())
    assert sent[0]["Status"] == "SUCCESS", sent
