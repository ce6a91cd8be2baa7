"""What a post-deploy smoke test from outside the environment needs: a probe Lambda function inside the
VPC that can reach internal load balancers, and the IAM role the smoke test assumes, allowed to read this
environment's stacks, invoke the probe and invoke this environment's SageMaker endpoints, nothing else."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from inferstack.constructs import checkov, nag

PROBE_RUNTIME = lambda_.Runtime.PYTHON_3_14
PROBE_HANDLER = "handler.handler"
# The probe caps one request at 50 s (inferstack/delivery/smoke_probe/handler.py); the function outlives it.
PROBE_TIMEOUT = cdk.Duration.seconds(60)
# Internal load balancers listen on HTTP, or on HTTPS where the environment has a certificate
# (inferstack/constructs/neuron_service/load_balancer.py).
PROBE_PORTS = (80, 443)
# What AWSLambdaVPCAccessExecutionRole grants, written inline for this one function.
ENI_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
)


class SmokeAccess(Construct):
    """Exposes `probe` (the function), `probe_security_group`, `probe_log_group` and `role` (the smoke role).

    `probe_code_directory`: the probe's code (inferstack/delivery/smoke_probe/), packaged as is. `vpc_cidr`: the
    VPC's range as a literal; the probe may only open connections into it, to hosts named like this
    region's load balancers. `role_name`: the smoke role's name (the pipeline assumes it by name);
    `trusted_account`: the only account whose principals may assume it; `trusted_role_prefix`, when set,
    narrows that to its roles whose names start with it. `stack_name_prefix` and
    `endpoint_name_prefix`: every stack and SageMaker endpoint of this environment starts with them.

    Args:
        trusted_role_prefix: Narrows who may assume the role to `trusted_account`'s roles whose names start
            with it. Default: None, any principal of `trusted_account` that its own IAM policies allow.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        probe_code_directory: str,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        vpc_cidr: str,
        key: kms.IKey,
        log_retention: logs.RetentionDays,
        removal_policy: cdk.RemovalPolicy,
        role_name: str,
        trusted_account: str,
        stack_name_prefix: str,
        endpoint_name_prefix: str,
        trusted_role_prefix: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if not stack_name_prefix or not endpoint_name_prefix:
            raise ValueError("stack_name_prefix and endpoint_name_prefix must not be empty (they scope the role)")
        self._add_probe(probe_code_directory, vpc, subnets, vpc_cidr, key, log_retention, removal_policy)
        self._add_role(role_name, trusted_account, trusted_role_prefix, stack_name_prefix, endpoint_name_prefix)

    def _add_probe(
        self,
        code_directory: str,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        vpc_cidr: str,
        key: kms.IKey,
        log_retention: logs.RetentionDays,
        removal_policy: cdk.RemovalPolicy,
    ) -> None:
        stack = cdk.Stack.of(self)
        self.probe_security_group = ec2.SecurityGroup(
            self,
            "ProbeSecurityGroup",
            vpc=vpc,
            allow_all_outbound=False,
            description="smoke probe: no inbound; HTTP(S) out to load balancers inside the VPC only",
        )
        for port in PROBE_PORTS:
            self.probe_security_group.add_egress_rule(
                ec2.Peer.ipv4(vpc_cidr), ec2.Port.tcp(port), f"TCP {port} to load balancers in the VPC"
            )
        self.probe_log_group = logs.LogGroup(
            self, "ProbeLogs", encryption_key=key, retention=log_retention, removal_policy=removal_policy
        )
        # An explicit role with inline permissions instead of CDK's default, which attaches the AWS managed
        # AWSLambdaBasicExecutionRole (logs anywhere) and AWSLambdaVPCAccessExecutionRole.
        probe_role = iam.Role(
            self,
            "ProbeRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="smoke probe function: its own log group and its network interfaces",
            inline_policies={
                "Probe": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            sid="WriteOwnLogs",
                            actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                            resources=[self.probe_log_group.log_group_arn],
                        ),
                        iam.PolicyStatement(sid="VpcNetworkInterfaces", actions=list(ENI_ACTIONS), resources=["*"]),
                    ]
                )
            },
        )
        nag.acknowledge(
            probe_role,
            "IAM5[Resource::*]",
            "a function in a VPC needs these network-interface actions, as AWS's "
            "AWSLambdaVPCAccessExecutionRole grants them: the Describe calls have no resource-level "
            "permissions, and Lambda creates and deletes interfaces it names itself, in subnets that "
            "may belong to a shared VPC's owner account",
        )
        checkov.skip(
            probe_role,
            "CKV_AWS_111",
            "the network-interface actions a function in a VPC needs, as AWS's "
            "AWSLambdaVPCAccessExecutionRole grants them: Lambda creates and deletes interfaces it names "
            "itself, in subnets that may belong to a shared VPC's owner account",
        )
        self.probe = lambda_.Function(
            self,
            "Probe",
            description="inferstack smoke probe: POSTs one JSON request to a load balancer inside the VPC",
            runtime=PROBE_RUNTIME,
            architecture=lambda_.Architecture.ARM_64,
            handler=PROBE_HANDLER,
            code=lambda_.Code.from_asset(code_directory, exclude=["__pycache__", "*.pyc"]),
            role=probe_role,
            timeout=PROBE_TIMEOUT,
            memory_size=256,
            vpc=vpc,
            vpc_subnets=subnets,
            security_groups=[self.probe_security_group],
            log_group=self.probe_log_group,
            environment={
                "PROBE_ALLOWED_HOST_SUFFIXES": f".{stack.region}.elb.{stack.url_suffix}",
                "PROBE_ALLOWED_NETWORKS": vpc_cidr,
            },
        )
        # lambda.Function adds a DependsOn on its role that the Role GetAtt already implies (cfn-lint W3005);
        # its other DependsOn (the private subnets' routes) must stay, so the check is silenced, not removed.
        function = self.probe.node.default_child
        assert isinstance(function, cdk.CfnResource)
        function.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3005"]}})
        checkov.skip(
            self.probe,
            "CKV_AWS_116",
            "invoked synchronously (RequestResponse) by `inferstack smoke`, which gets any error in the "
            "answer and fails; a dead-letter queue only receives failed asynchronous invocations",
        )
        checkov.skip(
            self.probe,
            "CKV_AWS_115",
            "called only by the smoke test, one request at a time; reserved concurrency would take "
            "from the account's shared pool (Lambda refuses to leave less than 100 unreserved, so "
            "accounts at the default quota could not deploy) and bound nothing that needs bounding",
        )
        checkov.skip(
            self.probe,
            "CKV_AWS_173",
            "the variables hold the allowed host suffix and the VPC's range, neither secret; Lambda "
            "encrypts them at rest with its AWS managed key, and a customer key would only add a grant",
        )

    def _add_role(
        self,
        role_name: str,
        trusted_account: str,
        trusted_role_prefix: str | None,
        stack_name_prefix: str,
        endpoint_name_prefix: str,
    ) -> None:
        stack = cdk.Stack.of(self)
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
        stacks = stack.format_arn(service="cloudformation", resource="stack", resource_name=f"{stack_name_prefix}*/*")
        # SageMaker writes endpoint names into ARNs in lower case.
        endpoints = stack.format_arn(
            service="sagemaker", resource="endpoint", resource_name=f"{endpoint_name_prefix.lower()}*"
        )
        # A model on a shared endpoint is invoked by its inference component (InferenceComponentName), named
        # after the environment as the endpoints are; granted too, in case IAM checks the component's ARN.
        components = stack.format_arn(
            service="sagemaker", resource="inference-component", resource_name=f"{endpoint_name_prefix.lower()}*"
        )
        self.role = iam.Role(
            self,
            "Role",
            role_name=role_name,
            assumed_by=principal,
            description="inferstack smoke test: read this environment's stacks, call its models",
            max_session_duration=cdk.Duration.hours(1),
            inline_policies={
                "Smoke": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            sid="ReadThisEnvironmentsStacks",
                            actions=["cloudformation:DescribeStacks"],
                            resources=[stacks],
                        ),
                        iam.PolicyStatement(
                            sid="InvokeTheProbe", actions=["lambda:InvokeFunction"], resources=[self.probe.function_arn]
                        ),
                        iam.PolicyStatement(
                            sid="InvokeThisEnvironmentsEndpoints",
                            actions=["sagemaker:InvokeEndpoint"],
                            resources=[endpoints, components],
                        ),
                    ]
                )
            },
        )
        # cdk-nag names a finding by the resource as it renders in the template.
        nag.acknowledge(
            self.role,
            f"IAM5[Resource::{nag.rendered(stack, stacks)}]",
            "stacks of this environment only, by the name prefix the stage gives them; the trailing "
            "stack id is generated by CloudFormation, and listing the models' stacks here would "
            "change this stack whenever a model is added",
        )
        nag.acknowledge(
            self.role,
            f"IAM5[Resource::{nag.rendered(stack, endpoints)}]",
            "endpoints of this environment only: each is named after its stack, which starts with "
            "the environment's name; listing them here would change this stack whenever a model is "
            "added",
        )
        nag.acknowledge(
            self.role,
            f"IAM5[Resource::{nag.rendered(stack, components)}]",
            "inference components of this environment only, named after it as the endpoints are; "
            "listing them here would change this stack whenever a model joins a shared endpoint",
        )
