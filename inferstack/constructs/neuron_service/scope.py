"""ServiceScope: what the parts read and set on the service, declared below them so that they never import
service.py. NeuronEcsService (service.py) is the one ServiceScope: the parts are handed it and create their
resources in it, which is why this is a Construct class (a scope they pass on) and not a typing.Protocol (which
cannot be one). It has no constructor of its own and adds no construct node."""

from __future__ import annotations

import functools

from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from inferstack.capacity.packing import NeuronFleetPlan
from inferstack.capacity.planning import CapacityPlan
from inferstack.constructs.live_values import LiveValues
from inferstack.constructs.neuron_service.served import ScheduledWindow, ServedModel
from inferstack.constructs.scale_in_release import ScaleInProtectionRelease
from inferstack.neuron.deployment import EcsRollout
from inferstack.neuron.task import NeuronTask
from inferstack.schema.models import NeuronEcsModel


class ServiceScope(Construct):
    """The service's state as its parts share it. Set by NeuronEcsService before any part runs: `name`, `task`,
    `capacity`, `rollout`, `metrics_service`, `served`, `models`, `off_hours`, `packed` and `cluster`; the rest
    by the parts, in the order they run (each noted at its first attribute)."""

    name: str
    task: NeuronTask
    capacity: CapacityPlan | NeuronFleetPlan
    rollout: EcsRollout
    metrics_service: str
    served: tuple[ServedModel, ...]
    models: tuple[NeuronEcsModel, ...]
    off_hours: tuple[ScheduledWindow, ...]
    packed: bool
    cluster: ecs.Cluster
    _log_group: logs.ILogGroup  # what live_values logs to
    instance_security_group: ec2.SecurityGroup  # capacity
    instance_role: iam.Role
    launch_template: ec2.LaunchTemplate
    auto_scaling_group: autoscaling.AutoScalingGroup
    capacity_provider: ecs.AsgCapacityProvider
    image: ecr_assets.DockerImageAsset | None  # task (None: a pinned image)
    task_definition: ecs.Ec2TaskDefinition
    container: ecs.ContainerDefinition
    task_security_group: ec2.SecurityGroup
    service: ecs.Ec2Service
    scale_in_release: ScaleInProtectionRelease  # capacity
    listener_port: int  # load_balancer
    load_balancer_security_group: ec2.SecurityGroup
    load_balancer: elbv2.ApplicationLoadBalancer
    access_logs: s3.Bucket
    url: str
    target_groups: dict[str, elbv2.ApplicationTargetGroup]  # routing
    alternate_target_groups: dict[str, elbv2.ApplicationTargetGroup]
    production_rules: dict[str, elbv2.ApplicationListenerRule]
    listener: elbv2.ApplicationListener
    load_balancer_role: iam.Role
    scalable_task_count: ecs.ScalableTaskCount  # scaling
    alarms: dict[str, cw.CfnAlarm]  # observability (NeuronEcsService sets it from add_alarms)
    deployment_alarms: list[cw.CfnAlarm]  # rollout

    @functools.cached_property
    def live_values(self) -> LiveValues:
        """The readers of what a deploy must write back as it is live (inferstack.constructs.live_values); made
        by the first part that needs one (routing's live weights, scaling's off-hours range)."""
        return LiveValues(self, "LiveValues", log_group=self._log_group)
