"""Values a deploy writes as they are live, not as the template planned them: the forward weights of a
production listener rule (ECS native blue/green, linear and canary move them; after a completed deployment the
other target group serves), an off-hours window's capacity range while the window is in effect, and an
inference component's autoscaled copy count.

CloudFormation updates a resource only when its resolved properties change, and then writes all of them: a
rule update with weights 100/0 in the template sends every request to the target group ECS drained (aws-cdk
issue 36649), a scalable target update registers the planned range inside a window, a component update sends
the template's CopyCount. So each such value is read at deploy time by a custom resource (Custom::LiveValue)
and the resource takes it through Fn::GetAtt. The reader's properties carry every other property of the
resource it serves (its `Trigger`), so whenever CloudFormation would update that resource it first updates the
reader, which reads the live value again; the dependency (GetAtt) orders the read before the write. When the
resource is not updated, nothing is read and nothing written. On creation there is nothing live yet: the
reader answers the planned value."""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
import jsii
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from inferstack.constructs import nag
from inferstack.constructs.handler_function import (
    NO_DEAD_LETTER,
    NO_RESERVED_CONCURRENCY,
    OUTSIDE_VPC,
    handler_function,
)
from inferstack.constructs.live_values_handler import HANDLER

RESOURCE_TYPE = "Custom::LiveValue"
TIMEOUT = cdk.Duration.minutes(2)
# The kinds of value a reader reads (its `Read.Kind`).
FORWARD_WEIGHTS = "forward-weights"
SCALABLE_RANGE = "scalable-range"
COPY_COUNT = "copy-count"


@jsii.implements(cdk.IStableAnyProducer)
class _TagsOf:
    """A resource's tags as rendered into its template (the stack's tags reach it only when synthesis applies
    them, after the reader is made)."""

    def __init__(self, manager: cdk.TagManager) -> None:
        self._manager = manager

    def produce(self) -> object:
        return self._manager.render_tags()


def properties_of(resource: cdk.CfnResource) -> dict:
    """A resource's properties as its construct set them (the L1's own names, camelCase) and its tags, without
    property overrides: the live values are overrides, so they are not part of what triggers their own read.
    Tokens stay tokens, resolved with the template (a reference to another stack becomes its import there).
    Taken when the reader is made, after the serving construct has set them (tests/constructs/test_live_values.py
    holds them equal to the synthesized resource's)."""
    properties = dict(resource._cfn_properties)  # jsii's protected member
    manager = cdk.TagManager.of(resource)
    if manager is not None:
        properties["tags"] = cdk.Lazy.any(_TagsOf(manager))
    return properties


class LiveValues(Construct):
    """One reader function per scope (a serving construct), and one Custom::LiveValue per value. Each method
    overrides the value on `resource` with the reader's answer and returns the reader."""

    def __init__(self, scope: Construct, construct_id: str, *, log_group: logs.ILogGroup) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="reads live forward weights, capacity ranges and copy counts at deploy "
            "time, so that an update writes them back unchanged",
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="WriteLogs",
                resources=[log_group.log_group_arn],
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
            )
        )
        self._granted: dict[str, list[str]] = {}
        self.function = handler_function(
            self,
            "Function",
            code=HANDLER,
            role=self.role,
            timeout=TIMEOUT,
            log_group=log_group,
            description="reads the live values a deploy must keep (traffic weights, scaled counts)",
            skips={
                NO_DEAD_LETTER: "invoked only by CloudFormation as a custom resource, synchronously: a failure fails "
                "the stack operation itself; a dead-letter queue only receives failed asynchronous "
                "invocations",
                NO_RESERVED_CONCURRENCY: "runs only during this stack's deploys, once per value it reads; reserved "
                "concurrency would take from the account's shared pool and bound nothing",
                OUTSIDE_VPC: "calls only the ELB, Application Auto Scaling and SageMaker read APIs; outside the VPC "
                "it needs no NAT route or interface endpoint, and it reaches nothing inside the VPC",
            },
        )

    # ------------------------------------------------------------------ the three kinds

    def forward_weights(
        self,
        construct_id: str,
        *,
        resource: cdk.CfnResource,
        actions_key: str,
        load_balancer_arn: str,
        port: int | str,
        target_group_arns: tuple[str, str],
        planned: tuple[int, int],
    ) -> cdk.CustomResource:
        """`resource`'s first action (under `actions_key`: Actions of a rule, DefaultActions of a listener) is a
        forward to (primary, alternate): its weights become the live ones of the rule that forwards to that pair
        on the listener at `port` (a rule ECS moves before the listener's default action), `planned` when none
        does yet. Found by load balancer and port, not by the rule or listener, which depend on the reader."""
        self._grant(
            "ReadListenerRules", ["elasticloadbalancing:DescribeListeners", "elasticloadbalancing:DescribeRules"], ["*"]
        )
        reader = self._reader(
            construct_id,
            resource,
            {
                "Kind": FORWARD_WEIGHTS,
                "LoadBalancerArn": load_balancer_arn,
                "Port": port,
                "TargetGroupArns": list(target_group_arns),
                "Planned": list(planned),
            },
        )
        for index, key in enumerate(("Primary", "Alternate")):
            resource.add_property_override(
                f"{actions_key}.0.ForwardConfig.TargetGroups.{index}.Weight", reader.get_att(key)
            )
        return reader

    def scalable_range(
        self,
        construct_id: str,
        *,
        resource: cdk.CfnResource,
        service_namespace: str,
        resource_id: str,
        scalable_dimension: str,
        planned: tuple[int, int],
        windows: Sequence[tuple[int, int]],
    ) -> cdk.CustomResource:
        """`resource` (an AWS::ApplicationAutoScaling::ScalableTarget) keeps the range an off-hours window set
        while that window is in effect (its live range is one of `windows` and not `planned`); otherwise it
        takes `planned`."""
        self._grant("ReadScalableTargets", ["application-autoscaling:DescribeScalableTargets"], ["*"])
        reader = self._reader(
            construct_id,
            resource,
            {
                "Kind": SCALABLE_RANGE,
                "ServiceNamespace": service_namespace,
                "ResourceId": resource_id,
                "ScalableDimension": scalable_dimension,
                "Planned": list(planned),
                "Windows": [list(window) for window in windows],
            },
        )
        resource.add_property_override("MinCapacity", reader.get_att("Min"))
        resource.add_property_override("MaxCapacity", reader.get_att("Max"))
        return reader

    def window_range(
        self,
        construct_id: str,
        *,
        target: appscaling.ScalableTarget,
        planned: tuple[int, int],
        windows: Sequence[tuple[int, int]],
    ) -> cdk.CustomResource | None:
        """`scalable_range` for an L2 scalable target and its off-hours windows' ranges; None without windows."""
        if not windows:
            return None
        resource = target.node.default_child
        assert isinstance(resource, appscaling.CfnScalableTarget)
        return self.scalable_range(
            construct_id,
            resource=resource,
            service_namespace=resource.service_namespace,
            resource_id=resource.resource_id,
            scalable_dimension=resource.scalable_dimension,
            planned=planned,
            windows=windows,
        )

    def copy_count(
        self, construct_id: str, *, resource: cdk.CfnResource, component_name: str, planned: int
    ) -> cdk.CustomResource:
        """`resource` (an AWS::SageMaker::InferenceComponent named `component_name`) keeps its live
        DesiredCopyCount (what autoscaling set, possibly zero); `planned` when it does not exist yet."""
        component_arn = cdk.Stack.of(self).format_arn(
            service="sagemaker", resource="inference-component", resource_name=component_name.lower()
        )
        self._grant(
            "Describe" + "".join(c for c in component_name.title() if c.isalnum()),
            ["sagemaker:DescribeInferenceComponent"],
            [component_arn],
        )
        reader = self._reader(
            construct_id, resource, {"Kind": COPY_COUNT, "InferenceComponentName": component_name, "Planned": planned}
        )
        resource.add_property_override("RuntimeConfig.CopyCount", reader.get_att("CopyCount"))
        return reader

    # ------------------------------------------------------------------ shared

    def _reader(self, construct_id: str, resource: cdk.CfnResource, read: dict) -> cdk.CustomResource:
        reader = cdk.CustomResource(
            self,
            construct_id,
            service_token=self.function.function_arn,
            resource_type=RESOURCE_TYPE,
            properties={"Read": read, "Trigger": properties_of(resource)},
        )
        # The function's permissions must be in place before it reads.
        reader.node.add_dependency(self.role)
        return reader

    def _grant(self, sid: str, actions: list[str], resources: list[str]) -> None:
        if sid in self._granted:
            return
        if resources == ["*"] and not any(r == ["*"] for r in self._granted.values()):
            nag.acknowledge(
                self.role,
                "IAM5[Resource::*]",
                "elasticloadbalancing:DescribeListeners/DescribeRules and application-autoscaling:"
                "DescribeScalableTargets support no resource-level permission (Service Authorization "
                "Reference); the function only reads",
            )
        self._granted[sid] = resources
        self.role.add_to_policy(iam.PolicyStatement(sid=sid, actions=actions, resources=resources))
