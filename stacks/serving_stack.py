"""One stack per model: what every model needs (log group, alarm wiring) plus its serving construct."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_logs as logs
from constructs import Construct

from inferstack.config import Environment
from inferstack.config.loader import Model
from stacks.base import EnvironmentStack
from stacks.foundation_stack import SharedResources


class ServingStack(EnvironmentStack):
    def __init__(self, scope: Construct, construct_id: str, *, model: Model, environment: Environment,
                 env_name: str, shared: SharedResources, **kwargs) -> None:
        super().__init__(scope, construct_id, environment=environment, **kwargs)
        self.model = model
        self.log_group = logs.LogGroup(self, "Logs", encryption_key=shared.key, retention=shared.log_retention,
                                       removal_policy=shared.removal_policy)
        self.alarm_action = cw_actions.SnsAction(shared.alarm_topic)
        cdk.CfnOutput(self, "LogGroupName", value=self.log_group.log_group_name,
                      description=f"{model.name}: serving logs")
