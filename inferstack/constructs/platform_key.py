"""The environment's customer-managed KMS key: logs, alarm topic, volumes and buckets encrypt with it."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct


class PlatformKey(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, removal_policy: cdk.RemovalPolicy) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        self.key = kms.Key(
            self,
            "Key",
            description="inferstack: logs, alarms, model volumes and artifacts",
            enable_key_rotation=True,
            removal_policy=removal_policy,
            pending_window=cdk.Duration.days(30),
        )
        # CloudWatch Logs encrypts log groups of this account and region only.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchLogs",
                principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
                actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
                resources=["*"],  # in a key policy, "*" means this key
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": (
                            f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:*"
                        )
                    }
                },
            )
        )
        # CloudWatch alarms publish to the encrypted alarm topic.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarms",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
                conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
            )
        )
