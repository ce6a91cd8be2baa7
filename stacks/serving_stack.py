"""One stack per model: what every model needs (log group, alarm wiring) plus its serving construct."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_logs as logs
from constructs import Construct

from inferstack import planning
from inferstack.config import Environment
from inferstack.config.loader import Model
from inferstack.config.models import NeuronEcsModel
from inferstack.constructs.neuron_ecs_service import NeuronEcsService
from stacks.base import EnvironmentStack
from stacks.foundation_stack import SharedResources

# Build context of the Neuron serving image (its Dockerfiles and serving app).
NEURON_IMAGE_DIRECTORY = Path(__file__).resolve().parent.parent / "container" / "neuron"


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

        if isinstance(model, NeuronEcsModel):
            self.neuron = NeuronEcsService(
                self, "Neuron",
                model=model,
                capacity=planning.plan(model, env_name, environment),
                vpc=shared.vpc,
                vpc_cidr=environment.network.cidr,
                subnets=shared.private_subnets,
                log_group=self.log_group,
                alarm_action=self.alarm_action,
                public=model.public_load_balancer(environment),
                certificate_arn=environment.defaults.certificate_arn,
                image_directory=str(NEURON_IMAGE_DIRECTORY),
                access_log_retention=cdk.Duration.days(environment.defaults.log_retention_days),
                removal_policy=shared.removal_policy,
            )
            cdk.CfnOutput(self, "LoadBalancerDnsName", value=self.neuron.load_balancer.load_balancer_dns_name,
                          description=f"{model.name}: load balancer DNS name")
            cdk.CfnOutput(self, "Url", value=self.neuron.url, description=f"{model.name}: base URL of the model server")
            cdk.CfnOutput(self, "ClusterName", value=self.neuron.cluster.cluster_name,
                          description=f"{model.name}: ECS cluster")
            cdk.CfnOutput(self, "ServiceName", value=self.neuron.service.service_name,
                          description=f"{model.name}: ECS service")
