"""The role a load test run from outside the environment assumes (the pipeline's step before the prod
approval, `inferstack loadtest --env ENV --role-arn ...`): read this environment's stacks and which image each
model runs (the results are named by that digest), start and stop the load test's own Fargate tasks, pass them
their two roles, and read the results bucket. Nothing else: it cannot invoke a model itself, nor write results."""

from __future__ import annotations

from typing import cast

import aws_cdk as cdk
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from inferstack.constructs import checkov, nag

# Reads `inferstack loadtest` makes to find the digest each model runs (aws/ecr_images.running_image): through the
# serving stacks' outputs to the ECS service's task definition, or the SageMaker endpoint's model, then ECR.
IMAGE_READS = (
    "ecs:DescribeServices",
    "ecs:DescribeTaskDefinition",
    "sagemaker:DescribeEndpoint",
    "sagemaker:DescribeEndpointConfig",
    "sagemaker:DescribeModel",
    "sagemaker:DescribeInferenceComponent",
    "ecr:DescribeImages",
)
IMAGE_READS_REASON = (
    "read-only Describe calls that find the image digest each model runs, which names its "
    "results (the promotion gate checks that exact image): ecs:DescribeTaskDefinition has no "
    "resource-level permissions, and the services, SageMaker models and repositories are named by "
    "CloudFormation and the CDK bootstrap in stacks this one cannot list without changing whenever "
    "a model is added"
)


class LoadTestAccess(Construct):
    """Exposes `role`. `role_name`: the name the pipeline assumes; `trusted_account`: the only account whose
    principals may assume it (the tooling account), narrowed to its roles whose names start with
    `trusted_role_prefix` when set (the pipeline stack's, as the smoke role is); `stack_name_prefix`: every stack of
    this environment starts with it. `task_definitions`: the master's and workers'; `pass_roles`: their task and
    execution roles.

    Args:
        trusted_role_prefix: Narrows who may assume the role to `trusted_account`'s roles whose names start
            with it. Default: None, any principal of `trusted_account` that its own IAM policies allow.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        role_name: str,
        trusted_account: str,
        stack_name_prefix: str,
        cluster: ecs.ICluster,
        task_definitions: list[ecs.TaskDefinition],
        pass_roles: list[iam.IRole],
        bucket: s3.IBucket,
        key: kms.IKey,
        trusted_role_prefix: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if not stack_name_prefix:
            raise ValueError("stack_name_prefix must not be empty (it scopes the role)")
        stack = cdk.Stack.of(self)
        stacks = stack.format_arn(service="cloudformation", resource="stack", resource_name=f"{stack_name_prefix}*/*")
        tasks = stack.format_arn(service="ecs", resource="task", resource_name=f"{cluster.cluster_name}/*")
        statements = [
            iam.PolicyStatement(
                sid="ReadThisEnvironmentsStacks", actions=["cloudformation:DescribeStacks"], resources=[stacks]
            ),
            iam.PolicyStatement(sid="FindTheImagesUnderTest", actions=list(IMAGE_READS), resources=["*"]),
            # RunTask is granted on the task definitions, in this cluster only.
            iam.PolicyStatement(
                sid="StartLoadTestTasks",
                actions=["ecs:RunTask"],
                resources=[_family_arn(stack, t) for t in task_definitions],
                conditions={"ArnEquals": {"ecs:cluster": cluster.cluster_arn}},
            ),
            iam.PolicyStatement(
                sid="WatchAndStopLoadTestTasks", actions=["ecs:DescribeTasks", "ecs:StopTask"], resources=[tasks]
            ),
            # RunTask tags each task with its run id; ECS authorizes those tags as TagResource at creation.
            iam.PolicyStatement(
                sid="TagTasksAtRunTask",
                actions=["ecs:TagResource"],
                resources=[tasks],
                conditions={"StringEquals": {"ecs:CreateAction": "RunTask"}},
            ),
            iam.PolicyStatement(
                sid="PassTheTasksRoles",
                actions=["iam:PassRole"],
                resources=[r.role_arn for r in pass_roles],
                conditions={"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}},
            ),
            iam.PolicyStatement(sid="ListResults", actions=["s3:ListBucket"], resources=[bucket.bucket_arn]),
            iam.PolicyStatement(sid="ReadResults", actions=["s3:GetObject"], resources=[bucket.arn_for_objects("*")]),
            iam.PolicyStatement(sid="DecryptResults", actions=["kms:Decrypt"], resources=[key.key_arn]),
        ]
        account = iam.AccountPrincipal(trusted_account)
        principal: iam.IPrincipal = account
        if trusted_role_prefix:
            principal = account.with_conditions(
                {
                    "ArnLike": {
                        "aws:PrincipalArn": stack.format_arn(
                            service="iam",
                            region="",
                            account=trusted_account,
                            resource="role",
                            resource_name=f"{trusted_role_prefix}*",
                        )
                    }
                }
            )
        self.role = iam.Role(
            self,
            "Role",
            role_name=role_name,
            assumed_by=principal,
            description="inferstack load test: start this environment's load test tasks, read their results",
            max_session_duration=cdk.Duration.hours(2),
            inline_policies={"LoadTest": iam.PolicyDocument(statements=statements)},
        )
        nag.acknowledge(
            self.role,
            f"IAM5[Resource::{nag.rendered(stack, stacks)}]",
            "stacks of this environment only, by the name prefix the stage gives them; the trailing "
            "stack id is generated by CloudFormation",
        )
        nag.acknowledge(self.role, "IAM5[Resource::*]", IMAGE_READS_REASON)
        for definition in task_definitions:
            nag.acknowledge(
                self.role,
                f"IAM5[Resource::{_rendered_family(stack, definition)}]",
                "every revision of this load test's own task definition: a revision is made at each "
                "deploy, and RunTask names the one the stack output gives",
            )
        nag.acknowledge(
            self.role,
            f"IAM5[Resource::{_rendered_tasks(stack, cluster)}]",
            "tasks of the load test's own cluster: their ids are made at RunTask",
        )
        nag.acknowledge(
            self.role,
            f"IAM5[Resource::<{stack.get_logical_id(cast(s3.CfnBucket, bucket.node.default_child))}.Arn>/*]",
            "result objects of this load test's own bucket, keyed by release, model and run id",
        )
        checkov.skip(self.role, "CKV_AWS_111", IMAGE_READS_REASON)
        checkov.skip(self.role, "CKV_AWS_356", IMAGE_READS_REASON)


def _family_arn(stack: cdk.Stack, definition: ecs.TaskDefinition) -> str:
    return stack.format_arn(service="ecs", resource="task-definition", resource_name=f"{definition.family}:*")


def _rendered_family(stack: cdk.Stack, definition: ecs.TaskDefinition) -> str:
    return _rendered_or_token(stack, _family_arn(stack, definition))


def _rendered_tasks(stack: cdk.Stack, cluster: ecs.ICluster) -> str:
    return _rendered_or_token(
        stack, stack.format_arn(service="ecs", resource="task", resource_name=f"{cluster.cluster_name}/*")
    )


def _rendered_or_token(stack: cdk.Stack, arn: str) -> str:
    """How cdk-nag names a resource that holds a reference: `<LogicalId>` in place of each Ref."""
    value = stack.resolve(arn)
    if isinstance(value, str):
        return value
    parts = value["Fn::Join"][1]
    return "".join(p if isinstance(p, str) else f"<{p['Ref']}>" if "Ref" in p else str(p) for p in parts)
