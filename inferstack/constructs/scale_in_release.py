"""Stack deletion for an ECS capacity provider with managed termination protection (aws-cdk issue 18179):
the Auto Scaling group's instances stay protected from scale-in, so CloudFormation cannot empty the group
and `cdk destroy` hangs. A custom resource that does nothing until it is deleted releases the protection
and scales the group to zero; the dependencies put that after the service and before the capacity
provider, its cluster association and the group itself.

Facts it relies on: with managed termination protection "The Auto Scaling group and each instance in the
Auto Scaling group must have instance protection from scale-in actions on"
(https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_AutoScalingGroupProvider.html), and "To
terminate all instances before deleting the Auto Scaling group, call the UpdateAutoScalingGroup API and
set the minimum size and desired capacity of the Auto Scaling group to zero"
(https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_DeleteAutoScalingGroup.html); protected
instances block that until SetInstanceProtection releases them."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_autoscaling as autoscaling
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

RESOURCE_TYPE = "Custom::ScaleInProtectionRelease"
# Long enough to watch the group drain while ECS still manages it; CloudFormation's own group deletion
# waits for whatever is left.
TIMEOUT = cdk.Duration.minutes(10)

# Inline (no asset, under Lambda's 4 KB ZipFile limit): on Delete, release every instance's scale-in
# protection, stop protecting new ones, scale to zero and wait while time allows; Create and Update do
# nothing. A group that no longer exists is already released.
HANDLER = """
import json, time, urllib.request
import boto3

def release(client, name, seconds_left=lambda: 0):
    try:
        client.update_auto_scaling_group(AutoScalingGroupName=name, MinSize=0, DesiredCapacity=0,
                                         NewInstancesProtectedFromScaleIn=False)
    except client.exceptions.ClientError as exc:
        if "not found" in str(exc).lower():
            return
        raise
    while True:
        groups = client.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]
        instances = groups[0]["Instances"] if groups else []
        protected = [i["InstanceId"] for i in instances if i.get("ProtectedFromScaleIn")]
        for start in range(0, len(protected), 50):
            client.set_instance_protection(AutoScalingGroupName=name, ProtectedFromScaleIn=False,
                                           InstanceIds=protected[start:start + 50])
        if not instances or seconds_left() < 60:
            return
        time.sleep(15)

def handler(event, context):
    name = event["ResourceProperties"]["AutoScalingGroupName"]
    status, reason = "SUCCESS", ""
    if event["RequestType"] == "Delete":
        try:
            release(boto3.client("autoscaling"), name,
                    lambda: context.get_remaining_time_in_millis() / 1000)
        except Exception as exc:
            status, reason = "FAILED", f"{type(exc).__name__}: {exc}"[:500]
    body = json.dumps({"Status": status, "Reason": reason or "see " + context.log_stream_name,
                       "PhysicalResourceId": name, "StackId": event["StackId"],
                       "RequestId": event["RequestId"], "LogicalResourceId": event["LogicalResourceId"]})
    request = urllib.request.Request(event["ResponseURL"], data=body.encode(), method="PUT",
                                     headers={"Content-Type": ""})
    urllib.request.urlopen(request, timeout=30)
"""


class ScaleInProtectionRelease(Construct):
    """Exposes `resource` (the custom resource: delete it after the service, before the capacity provider)
    and `function`. `log_group`: where the function logs (it writes there and nowhere else)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        auto_scaling_group: autoscaling.AutoScalingGroup,
        log_group: logs.ILogGroup,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        group_name = auto_scaling_group.auto_scaling_group_name
        # Group ARNs carry a generated id before the name.
        group_arn = stack.format_arn(
            service="autoscaling",
            resource="autoScalingGroup",
            resource_name=f"*:autoScalingGroupName/{group_name}",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="releases one Auto Scaling group's scale-in protection when its stack is deleted",
            inline_policies={
                "Release": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            sid="ReleaseThisGroup",
                            resources=[group_arn],
                            actions=["autoscaling:UpdateAutoScalingGroup", "autoscaling:SetInstanceProtection"],
                        ),
                        iam.PolicyStatement(
                            sid="DescribeGroups", resources=["*"], actions=["autoscaling:DescribeAutoScalingGroups"]
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
            "autoscaling:DescribeAutoScalingGroups supports no resource-level permission; the calls "
            "that change anything are limited to this one group",
        )
        nag.acknowledge(
            role,
            f"IAM5[Resource::{_rendered(stack, group_arn)}]",
            "Auto Scaling group ARNs carry a generated id before the group's name; the name pins this one group",
        )
        self.function = handler_function(
            self,
            "Function",
            code=HANDLER,
            role=role,
            timeout=TIMEOUT,
            log_group=log_group,
            description="on stack deletion: release scale-in protection and scale the group to zero",
            skips={
                NO_DEAD_LETTER: "invoked only by CloudFormation as a custom resource, synchronously: a failure fails "
                "the stack operation itself; a dead-letter queue only receives failed asynchronous "
                "invocations",
                NO_RESERVED_CONCURRENCY: "runs once per stack deletion; reserved concurrency would take from the "
                "account's shared pool (Lambda keeps 100 unreserved) and bound nothing that "
                "needs bounding",
                OUTSIDE_VPC: "calls only the Auto Scaling API; outside the VPC it needs no NAT route or interface "
                "endpoint, and it reaches no resource inside the VPC",
            },
        )
        self.resource = cdk.CustomResource(
            self,
            "Release",
            service_token=self.function.function_arn,
            resource_type=RESOURCE_TYPE,
            properties={"AutoScalingGroupName": group_name},
        )


def _rendered(stack: cdk.Stack, arn: str) -> str:
    """The ARN as cdk-nag names it in a finding: tokens as <LogicalId> and <AWS::Pseudo>."""
    value = stack.resolve(arn)
    if isinstance(value, str):
        return value
    parts = []
    for part in value["Fn::Join"][1]:
        if isinstance(part, str):
            parts.append(part)
        elif "Ref" in part:
            parts.append(f"<{part['Ref']}>")
        else:
            raise ValueError(f"cannot render {part} for a cdk-nag acknowledgement")
    return "".join(parts)
