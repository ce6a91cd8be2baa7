"""Per-environment shared resources: network, KMS key, alarm topic, log settings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from inferstack.aws import stack_outputs
from inferstack.config import Environment
from inferstack.constructs import sagemaker_hosting as hosting
from inferstack.constructs.alarm_topic import AlarmTopic
from inferstack.constructs.network import InferenceNetwork
from inferstack.constructs.platform_key import PlatformKey
from inferstack.constructs.smoke_access import SmokeAccess
from inferstack.delivery import smoke_probe
from stacks.base import EnvironmentStack

PROBE_CODE_DIRECTORY = Path(smoke_probe.__file__).resolve().parent

RETENTION = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS,
    545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS,
    1096: logs.RetentionDays.THREE_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS,
    2192: logs.RetentionDays.SIX_YEARS,
    2557: logs.RetentionDays.SEVEN_YEARS,
    2922: logs.RetentionDays.EIGHT_YEARS,
    3288: logs.RetentionDays.NINE_YEARS,
    3653: logs.RetentionDays.TEN_YEARS,
}


@dataclass(frozen=True)
class SharedResources:
    """What every serving stack of an environment receives from the foundation."""

    vpc: ec2.IVpc
    vpc_owner_account: str  # another account's for a VPC shared with this one
    private_subnets: ec2.SubnetSelection
    key: kms.IKey
    alarm_topic: sns.ITopic
    log_retention: logs.RetentionDays
    removal_policy: cdk.RemovalPolicy


@dataclass(frozen=True)
class ToolRole:
    """A role a tool assumes in this environment's account (`inferstack smoke`'s, `inferstack loadtest`'s), and
    the one account trusted to. `trusted_role_prefix`: when set, only roles of that account whose names start
    with it may."""

    name: str
    trusted_account: str
    trusted_role_prefix: str | None = None


class FoundationStack(EnvironmentStack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment: Environment,
        env_name: str,
        smoke_role: ToolRole,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, environment=environment, **kwargs)
        defaults = environment.defaults
        removal = cdk.RemovalPolicy.RETAIN if defaults.retain_stateful_resources else cdk.RemovalPolicy.DESTROY
        retention = RETENTION[defaults.log_retention_days]

        key = PlatformKey(self, "PlatformKey", removal_policy=removal).key
        network = InferenceNetwork(
            self,
            "Network",
            network=environment.network,
            availability_zones=environment.availability_zones,
            key=key,
            log_retention=retention,
            removal_policy=removal,
        )
        topic = AlarmTopic(
            self, "Alarms", existing_topic_arn=environment.alarms.topic_arn, emails=environment.alarms.emails, key=key
        ).topic

        self.shared = SharedResources(
            vpc=network.vpc,
            vpc_owner_account=network.vpc_owner_account,
            private_subnets=network.private_subnets,
            key=key,
            alarm_topic=topic,
            log_retention=retention,
            removal_policy=removal,
        )
        self._export_shared_values()

        self.smoke = SmokeAccess(
            self,
            "Smoke",
            probe_code_directory=str(PROBE_CODE_DIRECTORY),
            vpc=network.vpc,
            subnets=network.private_subnets,
            vpc_cidr=environment.network.cidr,
            key=key,
            log_retention=retention,
            removal_policy=removal,
            role_name=smoke_role.name,
            trusted_account=smoke_role.trusted_account,
            trusted_role_prefix=smoke_role.trusted_role_prefix,
            stack_name_prefix=stack_outputs.stack_name(env_name, ""),
            endpoint_name_prefix=stack_outputs.stack_name(env_name, ""),
        )
        # inferstack.delivery.smoke reads these by name to reach internal load balancers through the probe.
        cdk.CfnOutput(
            self,
            stack_outputs.PROBE_FUNCTION_NAME,
            value=self.smoke.probe.function_name,
            description="smoke probe Lambda function (in the private subnets)",
        )
        cdk.CfnOutput(
            self,
            "SmokeProbeFunctionArn",
            value=self.smoke.probe.function_arn,
            description="smoke probe Lambda function ARN",
        )
        cdk.CfnOutput(
            self,
            "SmokeRoleArn",
            value=self.smoke.role.role_arn,
            description="role the smoke test assumes in this account",
        )
        # Where tools start tasks in this environment (inferstack/loadtest/fargate.py: the load-test generators).
        cdk.CfnOutput(
            self,
            stack_outputs.PRIVATE_SUBNETS,
            value=cdk.Fn.join(",", hosting.subnet_ids(network.vpc, network.private_subnets)),
            description="the private subnets' ids, comma-joined (no public IP)",
        )

    def _export_shared_values(self) -> None:
        """Export every value serving stacks may import, whether or not a model uses it yet, so adding
        or removing a model never changes this stack's outputs (an export in use cannot be deleted)."""
        shared = self.shared
        values = [
            shared.vpc.vpc_id,
            shared.vpc.vpc_cidr_block,
            shared.key.key_arn,
            shared.key.key_id,
            shared.alarm_topic.topic_arn,
        ]
        values += [subnet.subnet_id for subnet in shared.vpc.private_subnets]
        values += [subnet.subnet_id for subnet in shared.vpc.public_subnets]
        for value in values:
            if cdk.Token.is_unresolved(value):  # imported ids are literals and need no export
                self.export_value(value)
