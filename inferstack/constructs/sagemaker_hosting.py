"""What the SageMaker hosting constructs (a dedicated TritonEndpoint, a fleet's SharedEndpoint and its
TritonComponents) share: deterministic names, the no-ingress security group and private subnets, the
execution-role statements and their cdk-nag acknowledgements, the invocation alarms from the SLO, the
scaling role and off-hours schedules. Each helper renders exactly what TritonEndpoint rendered before it
was shared, so a dedicated endpoint's template does not change."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from inferstack.constructs import cloudwatch_l1 as cwl1
from inferstack.constructs import nag
from inferstack.schema.triton_sagemaker import TritonSageMakerModel
from inferstack.triton import config as triton_config

# The variant name must never change: guardrails and scaling are keyed on it, and a new name removes the
# autoscaled variant, which AWS refuses while its scalable target is registered (constructs/scaling_handover.py).
VARIANT = "AllTraffic"
METRICS_NAMESPACE = "AWS/SageMaker"
INSTANCE_METRICS_NAMESPACE = "/aws/sagemaker/Endpoints"
# Share of the p99 SLO that SageMaker's own overhead may take before it is alarmed on: more means
# requests queue in front of the container.
OVERHEAD_SHARE_OF_SLO = 0.2
CLIENT_ERROR_PERCENT = 5.0
GPU_SATURATION_PERCENT = 90.0  # per GPU
NAME_MAX = 63  # SageMaker endpoint and inference component names
ENDPOINT_NAME_MAX = NAME_MAX
ECR_PULL_ACTIONS = ["ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage"]
LOG_ACTIONS = ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]
SCALING_ROLE = (
    "aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
    "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
)
WILDCARD_REASON = (
    "ecr:GetAuthorizationToken, cloudwatch:PutMetricData (limited to /aws/sagemaker/* by "
    "condition), the EC2 Describe calls and the VPC ENI calls (limited to this VPC by condition) "
    "have no resource-level permissions narrower than *"
)


def endpoint_name_for(stack_name: str) -> str:
    """A readable, deterministic name from the stack name (SageMaker allows 63 characters of letters,
    digits and dashes), for an endpoint or an inference component. Known at synth, so alarms and the
    scaling target can name it without a reference cycle with the resource that lists those alarms for
    rollback."""
    clean = re.sub(r"-+", "-", re.sub(r"[^A-Za-z0-9-]", "-", stack_name)).strip("-")
    if len(clean) <= NAME_MAX:
        return clean
    digest = hashlib.sha256(clean.encode()).hexdigest()[:8]
    return f"{clean[: NAME_MAX - 9].rstrip('-')}-{digest}"


# ---------------------------------------------------------------------------------------------- network


def no_ingress_security_group(
    scope: Construct, construct_id: str, *, vpc: ec2.IVpc, description: str
) -> ec2.SecurityGroup:
    """SageMaker hosting needs no ingress (InvokeEndpoint reaches the container through SageMaker), and
    egress only to AWS APIs over HTTPS."""
    group = ec2.SecurityGroup(scope, construct_id, vpc=vpc, allow_all_outbound=False, description=description)
    group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS to AWS APIs (VPC endpoints, S3 gateway)")
    return group


def subnet_ids(vpc: ec2.IVpc, subnets: ec2.SubnetSelection) -> list[str]:
    return vpc.select_subnets(
        subnet_type=subnets.subnet_type,
        subnet_group_name=subnets.subnet_group_name,
        subnets=subnets.subnets,
        availability_zones=subnets.availability_zones,
        one_per_az=subnets.one_per_az,
        subnet_filters=subnets.subnet_filters,
    ).subnet_ids


def vpc_arn(stack: cdk.Stack, vpc: ec2.IVpc, owner_account: str | None) -> str:
    """A VPC's ARN (arn:aws:ec2:<region>:<account>:vpc/<id>) names the account that owns it: for a VPC
    shared with this account, the owner's (https://docs.aws.amazon.com/vpc/latest/userguide/vpc-share-limitations.html,
    https://repost.aws/knowledge-center/vpc-interface-endpoint-creation-errors). ec2:Vpc must match it."""
    return stack.format_arn(
        service="ec2", resource="vpc", resource_name=vpc.vpc_id, account=owner_account or stack.account
    )


# ---------------------------------------------------------------------------------------------- IAM


def triton_model(
    scope: Construct,
    *,
    role: iam.IRole,
    image_uri: str,
    model: TritonSageMakerModel,
    security_group_id: str,
    subnet_ids: Sequence[str],
) -> sagemaker.CfnModel:
    """The SageMaker Model of a Triton image: the start-up contract's environment, the given network, no
    network access of its own (the image holds the model repository)."""
    return sagemaker.CfnModel(
        scope,
        "Model",
        execution_role_arn=role.role_arn,
        primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
            image=image_uri, mode="SingleModel", environment=triton_config.server_environment(model)
        ),
        vpc_config=sagemaker.CfnModel.VpcConfigProperty(
            security_group_ids=[security_group_id], subnets=list(subnet_ids)
        ),
        enable_network_isolation=True,
    )


def execution_role(scope: Construct, construct_id: str, description: str) -> iam.Role:
    return iam.Role(
        scope, construct_id, assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"), description=description
    )


def log_group_arn(stack: cdk.Stack, name: str) -> str:
    return stack.format_arn(
        service="logs", resource="log-group", resource_name=name, arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME
    )


def pull_statement(repository: ecr.IRepository) -> iam.PolicyStatement:
    return iam.PolicyStatement(
        sid="PullServingImage", resources=[repository.repository_arn], actions=list(ECR_PULL_ACTIONS)
    )


def log_statement(sid: str, group_arn: str) -> iam.PolicyStatement:
    return iam.PolicyStatement(sid=sid, resources=[group_arn, f"{group_arn}:log-stream:*"], actions=list(LOG_ACTIONS))


def host_statements(vpc_arn_value: str) -> list[iam.PolicyStatement]:
    """ECR login, instance metrics and the VPC network interfaces every SageMaker host needs."""
    return [
        iam.PolicyStatement(sid="EcrLogin", actions=["ecr:GetAuthorizationToken"], resources=["*"]),
        iam.PolicyStatement(
            sid="InstanceMetrics",
            actions=["cloudwatch:PutMetricData"],
            resources=["*"],
            conditions={"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}},
        ),
        iam.PolicyStatement(
            sid="VpcDescribe",
            resources=["*"],
            actions=[
                "ec2:DescribeNetworkInterfaces",
                "ec2:DescribeVpcs",
                "ec2:DescribeDhcpOptions",
                "ec2:DescribeSubnets",
                "ec2:DescribeSecurityGroups",
            ],
        ),
        iam.PolicyStatement(
            sid="VpcInterfaces",
            resources=["*"],
            actions=[
                "ec2:CreateNetworkInterface",
                "ec2:CreateNetworkInterfacePermission",
                "ec2:DeleteNetworkInterface",
                "ec2:DeleteNetworkInterfacePermission",
            ],
            conditions={"ArnEquals": {"ec2:Vpc": vpc_arn_value}},
        ),
    ]


def execution_statements(
    repository: ecr.IRepository, group_arn: str, vpc_arn_value: str, log_sid: str = "EndpointLogs"
) -> list[iam.PolicyStatement]:
    """A Triton container's execution role: pull its image, write its log group, report its instances'
    metrics, attach to the VPC (the order a dedicated endpoint's policy has always had)."""
    login, metrics, describe, interfaces = host_statements(vpc_arn_value)
    return [pull_statement(repository), login, log_statement(log_sid, group_arn), metrics, describe, interfaces]


def rollback_alarms_statement(alarms: Sequence[cw.CfnAlarm]) -> iam.PolicyStatement:
    """Deployment guardrails read the auto-rollback alarms with the execution role: "Ensure that your IAM
    execution role has permission to perform the cloudwatch:DescribeAlarms action on the auto-rollback
    alarms you specify" (https://docs.aws.amazon.com/sagemaker/latest/dg/deployment-guardrails-configuration.html).
    Scoped to exactly those alarms."""
    return iam.PolicyStatement(
        sid="RollbackAlarms", actions=["cloudwatch:DescribeAlarms"], resources=[alarm.attr_arn for alarm in alarms]
    )


def wildcard_acknowledgements(group_arn: str, group_description: str) -> list[tuple[str, str]]:
    """(cdk-nag IAM5 finding, reason) for what `execution_statements`/`host_statements` cannot scope."""
    return [
        ("Resource::*", WILDCARD_REASON),
        (
            f"Resource::{group_arn}:log-stream:*",
            f"SageMaker names the log streams of {group_description} per instance at runtime",
        ),
    ]


def acknowledge(policy: iam.Policy, acknowledgements: Sequence[tuple[str, str]]) -> None:
    for resource, reason in acknowledgements:
        nag.acknowledge(policy, f"IAM5[{resource}]", reason)


# ---------------------------------------------------------------------------------------------- scaling


def scaling_role(scope: Construct) -> iam.IRole:
    """Application Auto Scaling's service-linked role for SageMaker (variants and inference components):
    AWS keeps it (so teardown can always deregister the target) and it holds exactly the SageMaker and
    CloudWatch calls scaling needs."""
    stack = cdk.Stack.of(scope)
    return iam.Role.from_role_arn(
        scope,
        "ScalingRole",
        mutable=False,
        role_arn=stack.format_arn(service="iam", region="", resource="role", resource_name=SCALING_ROLE),
    )


@dataclass(frozen=True)
class ScheduledCapacity:
    """One off-hours window as scheduled actions: `inside` (min, max) from `start` to `end`, then `outside`."""

    start: str
    end: str
    time_zone: str
    inside: tuple[int, int]
    outside: tuple[int, int]


def schedule(target: appscaling.ScalableTarget, windows: Sequence[ScheduledCapacity]) -> None:
    for index, window in enumerate(windows, start=1):
        zone = cdk.TimeZone.of(window.time_zone)
        target.scale_on_schedule(
            f"OffHours{index}Start",
            schedule=appscaling.Schedule.expression(window.start),
            min_capacity=window.inside[0],
            max_capacity=window.inside[1],
            time_zone=zone,
        )
        target.scale_on_schedule(
            f"OffHours{index}End",
            schedule=appscaling.Schedule.expression(window.end),
            min_capacity=window.outside[0],
            max_capacity=window.outside[1],
            time_zone=zone,
        )


# ---------------------------------------------------------------------------------------------- alarms

# name -> (metric, threshold, evaluation periods, datapoints to alarm, description)
AlarmDefinition = tuple[cwl1.AnyMetric, float, int, int, str]


def invocation_alarm_definitions(
    metric: Callable[[str, str], cwl1.Metric], slo_p99_ms: float
) -> dict[str, AlarmDefinition]:
    """The SLO alarms on SageMaker's invocation metrics (AWS/SageMaker), for whatever `metric(name,
    statistic)` selects: an endpoint variant, or one inference component."""
    slo_us = slo_p99_ms * 1000  # SageMaker reports latencies in microseconds
    client_error_rate = cwl1.MathExpression(
        expression="IF(invocations > 0, 100 * errors / invocations, 0)",
        label="4xx %",
        using={"errors": metric("Invocation4XXErrors", "Sum"), "invocations": metric("Invocations", "Sum")},
    )
    return {
        "ModelLatencyP99": (
            metric("ModelLatency", "p99"),
            slo_us,
            3,
            3,
            f"p99 model latency above the {slo_p99_ms:g} ms SLO",
        ),
        "OverheadLatencyP99": (
            metric("OverheadLatency", "p99"),
            slo_us * OVERHEAD_SHARE_OF_SLO,
            5,
            5,
            "p99 SageMaker overhead above a fifth of the SLO: requests queue",
        ),
        "Invocation5XXErrors": (
            metric("Invocation5XXErrors", "Sum"),
            1,
            3,
            2,
            "the model container returns server errors",
        ),
        "Invocation4XXErrorRate": (
            client_error_rate,
            CLIENT_ERROR_PERCENT,
            5,
            5,
            f"more than {CLIENT_ERROR_PERCENT:g}% of requests are rejected",
        ),
    }


def alarms(
    scope: Construct, definitions: Mapping[str, AlarmDefinition], *, described: str, topic_arn: str
) -> dict[str, cw.CfnAlarm]:
    """Each definition as an alarm notifying `topic_arn` when it fires and clears. No traffic is not an
    outage; and during a deployment's bake a missing datapoint must not roll back a healthy one."""
    return {
        name: cwl1.alarm(
            scope,
            name,
            metric=metric,
            threshold=threshold,
            evaluation_periods=periods,
            datapoints_to_alarm=datapoints,
            comparison_operator=(
                "GreaterThanOrEqualToThreshold" if name == "Invocation5XXErrors" else "GreaterThanThreshold"
            ),
            treat_missing_data="notBreaching",
            description=f"{described}: {description}",
            action_arn=topic_arn,
        )
        for name, (metric, threshold, periods, datapoints, description) in definitions.items()
    }
