"""Deployment guardrails sized to the fleet they deploy onto. SageMaker sizes each step against the
variant's instance count: CanarySize at most 50%, LinearStepSize 10-50%
(https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_TrafficRoutingConfig.html), a rolling
MaximumBatchSize 5-50% (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_RollingUpdatePolicy.html)."""

from __future__ import annotations

import pytest

from inferstack.schema.deployment import MIN_INSTANCES_FOR_STEPPED_DEPLOYMENT
from inferstack.schema.triton_sagemaker import TritonDeployment

STEPPED = [
    TritonDeployment(strategy="canary", size_percent=10, wait_interval_seconds=600),
    TritonDeployment(strategy="linear", size_percent=25),
    TritonDeployment(strategy="rolling", size_percent=20, rollback_size_percent=50),
]


@pytest.mark.parametrize("deployment", STEPPED, ids=lambda d: d.strategy)
def test_one_instance_is_replaced_blue_green_all_at_once(deployment):
    applied = deployment.for_fleet(1)
    assert applied.strategy == "all-at-once"
    assert applied.size_percent is None and applied.rollback_size_percent is None
    # Still baked against the rollback alarms for as long as configured.
    assert applied.wait_interval_seconds == deployment.wait_interval_seconds
    assert applied.maximum_execution_timeout_seconds == deployment.maximum_execution_timeout_seconds


@pytest.mark.parametrize("deployment", STEPPED, ids=lambda d: d.strategy)
@pytest.mark.parametrize("fleet", [MIN_INSTANCES_FOR_STEPPED_DEPLOYMENT, 3, 10])
def test_two_or_more_instances_keep_the_configured_steps(deployment, fleet):
    # From two instances on, a one-instance step is at most 50% of the fleet.
    assert deployment.for_fleet(fleet) == deployment


def test_all_at_once_is_unchanged():
    deployment = TritonDeployment(strategy="all-at-once")
    assert deployment.for_fleet(1) is deployment


def test_an_off_hours_minimum_counts_as_the_fleet():
    """A deploy at night meets the off-hours fleet: the smallest of the planned and off-hours minimums."""
    import aws_cdk as cdk
    from aws_cdk import aws_ec2 as ec2
    from aws_cdk import aws_ecr as ecr
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_logs as logs

    from inferstack import config
    from inferstack.capacity import planning
    from inferstack.constructs.triton_endpoint import TritonEndpoint
    from inferstack.schema.off_hours import OffHours
    from tests.support.paths import CONFIG_DIR

    project = config.load(CONFIG_DIR)
    model = project.model("bert-large-classifier")
    environment = project.environments["prod"]
    plan = planning.plan(model, "prod", environment)
    assert plan.min_capacity >= MIN_INSTANCES_FOR_STEPPED_DEPLOYMENT
    from tests.support.synth import cdk_json_context

    # The app's context (cdk.json), as synth runs: partition literals among it.
    stack = cdk.Stack(
        cdk.App(context=cdk_json_context()),
        "prod-bert",
        env={"account": environment.account, "region": environment.region},
    )
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0123456789abcdef0",
        availability_zones=["us-west-2a", "us-west-2b"],
        private_subnet_ids=["subnet-0a", "subnet-0b"],
    )
    night = OffHours(start="cron(0 20 ? * MON-FRI *)", end="cron(0 7 ? * MON-FRI *)", min=1, max=1)
    endpoint = TritonEndpoint(
        stack,
        "Triton",
        model=model,
        plan=plan,
        off_hours=[night],
        image_uri="example/image@sha256:0",
        image_repository=ecr.Repository.from_repository_name(stack, "Repo", "serving"),
        vpc=vpc,
        subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
        key=kms.Key.from_key_arn(stack, "Key", "arn:aws:kms:us-west-2:333333333333:key/0"),
        alarm_topic_arn="arn:aws:sns:us-west-2:333333333333:topic",
        removal_policy=cdk.RemovalPolicy.DESTROY,
        log_group=logs.LogGroup.from_log_group_name(stack, "Logs", "serving"),
    )
    assert model.deployment.strategy == "canary"
    assert endpoint.deployment.strategy == "all-at-once"
