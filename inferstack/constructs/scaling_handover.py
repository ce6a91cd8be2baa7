"""An instance-type change of an autoscaled SageMaker endpoint in one deploy: the variant's scalable target is
deregistered just before CloudFormation updates the Endpoint and registered again just after.

"If the update would change the instance type for any model that is a target for auto scaling, the update fails
[...] Before you update the endpoint, delete any scaling policies configured for it and deregister the variant as
a scalable target [...] After you update the endpoint, you can register the updated variant as a scalable target
and attach a scaling policy"; both steps "are required only if you are updating an endpoint with the following
changes: Changing the instance type for a production variant that has auto scaling configured; Removing a
production variant that has auto scaling configured" (SageMaker developer guide, "Update endpoints that use auto
scaling", https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-scaling-update.html). CloudFormation cannot
order that by itself: it deletes what a template removes or replaces only in its cleanup phase, after every
update, UpdateEndpoint included; and renaming the variant (a new scalable target, the old one removed) removes a
variant that has auto scaling configured, which needs the same deregistration first. So two custom resources
(Custom::ScalingHandover) run one handler (inferstack.constructs.scaling_handover_handler): `release`, which the
Endpoint depends on, and `restore`, which depends on the Endpoint and which the ScalableTarget depends on. Both
act on what the live endpoint runs, so they also hold in a rollback, whichever order CloudFormation runs them in.

Deregistering "deletes the scaling policies and the scheduled actions that are associated with it"
(https://docs.aws.amazon.com/autoscaling/application/APIReference/API_DeregisterScalableTarget.html): the
handover carries the target's and its policies' properties as the template renders them, and registers them
again, with the range the target had when it was released (then CloudFormation's own ScalableTarget applies a new
planned range, if the new instance type has one). The instance count is not reset: the Endpoint retains its
variants' properties (RetainAllVariantProperties), so the new fleet starts at the count the old one had, and
registering a target keeps a count inside its range. Nothing scales while SageMaker replaces the fleet, as the
first page says of any update ("auto scaling is blocked while the update operation is in progress").

When the instance type does not change, both resources find the target registered and do nothing; they only run
when their properties change (the instance type, the target's or policies' properties)."""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
import jsii
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from inferstack.constructs import checkov, nag
from inferstack.constructs.handler_function import (
    NO_DEAD_LETTER,
    NO_RESERVED_CONCURRENCY,
    OUTSIDE_VPC,
    handler_function,
)
from inferstack.constructs.scaling_handover_handler import HANDLER

RESOURCE_TYPE = "Custom::ScalingHandover"
TIMEOUT = cdk.Duration.minutes(2)
# What Application Auto Scaling's callers need for a SageMaker variant besides its own API (SageMaker developer
# guide, "Auto scaling prerequisites",
# https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-prerequisites.html): the endpoint and its
# config read, its instance counts set, and the target-tracking alarms written.
SCALING_ACTIONS = [
    "application-autoscaling:DescribeScalableTargets",
    "application-autoscaling:DeregisterScalableTarget",
    "application-autoscaling:RegisterScalableTarget",
    "application-autoscaling:PutScalingPolicy",
    "application-autoscaling:PutScheduledAction",
    "cloudwatch:DescribeAlarms",
]


@jsii.implements(cdk.IStableAnyProducer)
class _Rendered:
    """A resource's properties as its template renders them (CloudFormation's names), without `drop` and with
    `replace`: taken at synthesis, after everything (scheduled actions, policies) has been added to it."""

    def __init__(self, resource: cdk.CfnResource, *, drop: Sequence[str] = (), replace: dict | None = None) -> None:
        self._resource, self._drop, self._replace = resource, tuple(drop), dict(replace or {})

    def produce(self) -> object:
        resource = self._resource
        properties = resource._render_properties(  # jsii's protected member
            cdk.Stack.of(resource).resolve(resource._cfn_properties)
        )
        return {k: v for k, v in properties.items() if k not in self._drop} | self._replace


class ScalingHandover(Construct):
    """Exposes `release` (before the Endpoint), `restore` (after it) and `function`. `capacity_range`: the
    (MinCapacity, MaxCapacity) the template gives `target` (values read live at deploy time included);
    `log_group`: where the function logs."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        endpoint: sagemaker.CfnEndpoint,
        endpoint_name: str,
        variant_name: str,
        instance_type: str,
        target: appscaling.ScalableTarget,
        capacity_range: tuple[object, object],
        log_group: logs.ILogGroup,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        target_resource = target.node.default_child
        assert isinstance(target_resource, appscaling.CfnScalableTarget)
        resource_id = target_resource.resource_id
        endpoint_arn = stack.format_arn(service="sagemaker", resource="endpoint", resource_name=endpoint_name.lower())
        # CloudFormation names the endpoint configs; a handover reads whichever the endpoint runs.
        configs_arn = stack.format_arn(service="sagemaker", resource="endpoint-config", resource_name="*")
        # Target tracking names its alarms TargetTracking-<resource id>-AlarmHigh-<id> (and -AlarmLow-).
        alarms_arn = stack.format_arn(
            service="cloudwatch",
            resource="alarm",
            resource_name=f"TargetTracking-{resource_id}-*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="deregisters and registers again one endpoint variant's scalable target around an instance-"
            "type change",
            inline_policies={
                "HandOver": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            sid="ThisEndpoint",
                            resources=[endpoint_arn],
                            actions=["sagemaker:DescribeEndpoint", "sagemaker:UpdateEndpointWeightsAndCapacities"],
                        ),
                        iam.PolicyStatement(
                            sid="EndpointConfigs", resources=[configs_arn], actions=["sagemaker:DescribeEndpointConfig"]
                        ),
                        iam.PolicyStatement(sid="ScalableTarget", resources=["*"], actions=list(SCALING_ACTIONS)),
                        iam.PolicyStatement(
                            sid="TargetTrackingAlarms",
                            resources=[alarms_arn],
                            actions=["cloudwatch:PutMetricAlarm", "cloudwatch:DeleteAlarms"],
                        ),
                        iam.PolicyStatement(
                            sid="WriteLogs",
                            resources=[log_group.log_group_arn],
                            actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                        ),
                    ]
                )
            },
        )
        nag.acknowledge(
            role,
            "IAM5[Resource::*]",
            "Application Auto Scaling's scalable targets have generated ids (no resource-level permission "
            "names one endpoint's), and cloudwatch:DescribeAlarms takes none; the handler calls them for "
            "this one variant's target only",
        )
        nag.acknowledge(
            role,
            f"IAM5[Resource::{nag.rendered(stack, configs_arn)}]",
            "CloudFormation generates the endpoint configs' names; the handler only describes the one "
            "this endpoint runs",
        )
        nag.acknowledge(
            role,
            f"IAM5[Resource::{nag.rendered(stack, alarms_arn)}]",
            "target tracking names its alarms after the scalable target with a generated suffix; the "
            "prefix pins this variant's",
        )
        checkov.skip(
            role,
            "CKV_AWS_111",
            "Application Auto Scaling's scalable targets have generated ids, so its Register/Deregister/Put "
            "calls cannot be scoped to one endpoint's; the handler makes them for this variant's target only",
        )
        self.function = handler_function(
            self,
            "Function",
            code=HANDLER,
            role=role,
            timeout=TIMEOUT,
            log_group=log_group,
            description="deregisters a variant's scalable target before an instance-type change and registers it "
            "again after",
            skips={
                NO_DEAD_LETTER: "invoked only by CloudFormation as a custom resource, synchronously: a failure fails "
                "the stack operation itself; a dead-letter queue only receives failed asynchronous "
                "invocations",
                NO_RESERVED_CONCURRENCY: "runs only during this stack's deploys, twice at most; reserved concurrency "
                "would take from the account's shared pool and bound nothing",
                OUTSIDE_VPC: "calls only the SageMaker, Application Auto Scaling and CloudWatch APIs; outside the VPC "
                "it needs no NAT route or interface endpoint, and it reaches nothing inside the VPC",
            },
        )

        policies = [p for p in target.node.find_all() if isinstance(p, appscaling.CfnScalingPolicy)]
        minimum, maximum = capacity_range
        properties = {
            "EndpointName": endpoint_name,
            "VariantName": variant_name,
            "InstanceType": instance_type,
            "Target": cdk.Lazy.any(
                _Rendered(target_resource, replace={"MinCapacity": minimum, "MaxCapacity": maximum})
            ),
            # The policy names its target by Ref; the handler has the target's key itself (and a Ref would make
            # the handover before the Endpoint depend on the target after it).
            "Policies": [cdk.Lazy.any(_Rendered(p, drop=["ScalingTargetId"])) for p in policies],
        }
        self.release = cdk.CustomResource(
            self,
            "Release",
            service_token=self.function.function_arn,
            resource_type=RESOURCE_TYPE,
            properties=properties,
        )
        # What the release did, and the range the target had when it deregistered it (kept when registering it
        # again: a range an off-hours window or an operator set survives the instance-type change).
        self.restore = cdk.CustomResource(
            self,
            "Restore",
            service_token=self.function.function_arn,
            resource_type=RESOURCE_TYPE,
            properties={
                **properties,
                "Released": self.release.get_att_string("Released"),
                "ReleasedRange": [
                    self.release.get_att_string("MinCapacity"),
                    self.release.get_att_string("MaxCapacity"),
                ],
            },
        )
        for resource in (self.release, self.restore):
            resource.node.add_dependency(role)  # its permissions before it runs
        endpoint.node.add_dependency(self.release)
        self.restore.node.add_dependency(endpoint)
        target.node.add_dependency(self.restore)
