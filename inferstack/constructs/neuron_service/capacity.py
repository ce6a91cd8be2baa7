"""The Inferentia instances the task runs on: an Auto Scaling group from the ECS-optimized AL2023 Neuron AMI,
sized for a deploy's peak, behind an ECS capacity provider, and what releases them when the stack is deleted.
Apart from the task because ECS places tasks on capacity it does not create: the instances, their role and
the provider's cluster association are this project's to get right."""

from __future__ import annotations

import math
from dataclasses import dataclass

from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct, Dependable, DependencyGroup, IConstruct

from inferstack.constructs import nag
from inferstack.constructs.neuron_service.context import ServiceContext
from inferstack.constructs.neuron_service.load_balancer import HTTPS_PORT
from inferstack.constructs.scale_in_release import ScaleInProtectionRelease

# Resolved by CloudFormation at deploy time, so synth needs no lookup. Not ecs.EcsOptimizedImage: some
# CDK versions build the AL2023 Neuron path wrongly (".../inf/...").
AMI_PARAMETER = "/aws/service/ecs/optimized-ami/amazon-linux-2023/neuron/recommended/image_id"
ROOT_DEVICE = "/dev/xvda"  # Amazon Linux 2023


class _ClusterCapacityProviderAssociation(Dependable):
    """The AWS::ECS::ClusterCapacityProviderAssociations that ecs.Cluster adds at synth time."""

    def __init__(self, cluster: ecs.Cluster) -> None:
        super().__init__()
        self._cluster = cluster

    @property
    def dependency_roots(self) -> list[IConstruct]:
        return [
            child
            for child in self._cluster.node.children
            if isinstance(child, ecs.CfnClusterCapacityProviderAssociations)
        ]


def cluster_association(cluster: ecs.Cluster) -> DependencyGroup:
    """The cluster's capacity provider association, to depend on. CDK creates it during synth (an aspect), so
    the dependency is resolved late."""
    association = DependencyGroup()
    Dependable.implement(association, _ClusterCapacityProviderAssociation(cluster))
    return association


@dataclass(frozen=True)
class Capacity:
    """What add_capacity makes: the instances' security group, role and launch template, their Auto Scaling
    group and its ECS capacity provider (associated with the cluster)."""

    instance_security_group: ec2.SecurityGroup
    instance_role: iam.Role
    launch_template: ec2.LaunchTemplate
    auto_scaling_group: autoscaling.AutoScalingGroup
    capacity_provider: ecs.AsgCapacityProvider


def add_capacity(
    scope: Construct, context: ServiceContext, cluster: ecs.Cluster, vpc: ec2.IVpc, subnets: ec2.SubnetSelection
) -> Capacity:
    instance_security_group = ec2.SecurityGroup(
        scope,
        "InstanceSecurityGroup",
        vpc=vpc,
        allow_all_outbound=False,
        description="Inferentia container instances: no inbound; HTTPS out to ECS, ECR and CloudWatch",
    )
    instance_security_group.add_egress_rule(
        ec2.Peer.any_ipv4(), ec2.Port.tcp(HTTPS_PORT), "ECS, ECR, S3 and CloudWatch Logs APIs"
    )

    # Written here rather than left to Cluster.addAsgCapacityProvider, which also grants logs:* on "*"
    # and ECR pulls the agent does not need (the task execution role pulls the image and ships logs).
    role = iam.Role(
        scope,
        "InstanceRole",
        assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
        description="ECS agent on Inferentia container instances",
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="RegisterWithThisCluster",
            actions=[
                "ecs:RegisterContainerInstance",
                "ecs:DeregisterContainerInstance",
                "ecs:SubmitContainerStateChange",
                "ecs:SubmitTaskStateChange",
                "ecs:SubmitAttachmentStateChanges",
            ],
            resources=[cluster.cluster_arn],
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="PollThisCluster",
            actions=["ecs:Poll", "ecs:StartTelemetrySession"],
            resources=["*"],
            conditions={"ArnEquals": {"ecs:cluster": cluster.cluster_arn}},
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(sid="DiscoverEndpoint", actions=["ecs:DiscoverPollEndpoint"], resources=["*"])
    )
    nag.acknowledge(
        role.node.find_child("DefaultPolicy"),
        "IAM5[Resource::*]",
        "ecs:DiscoverPollEndpoint supports no resource-level permission; ecs:Poll and "
        "ecs:StartTelemetrySession act on container instances that do not exist yet and are "
        "limited to this cluster by the ecs:cluster condition",
    )

    user_data = ec2.UserData.for_linux()
    # Tasks get their own ENI (awsvpc): keep them away from the instance role's credentials.
    # Nothing Neuron-related here: the AMI ships the driver matching its generation (on Inf1 it pins the
    # driver itself at boot), and upgrading Neuron packages in user data breaks that.
    user_data.add_commands("echo ECS_AWSVPC_BLOCK_IMDS=true >> /etc/ecs/ecs.config")
    launch_template = ec2.LaunchTemplate(
        scope,
        "LaunchTemplate",
        instance_type=ec2.InstanceType(context.task.instance_type),
        machine_image=ec2.MachineImage.from_ssm_parameter(AMI_PARAMETER, os=ec2.OperatingSystemType.LINUX),
        user_data=user_data,
        role=role.without_policy_updates(),
        security_group=instance_security_group,
        require_imdsv2=True,
        detailed_monitoring=True,
        block_devices=[
            ec2.BlockDevice(
                device_name=ROOT_DEVICE,
                volume=ec2.BlockDeviceVolume.ebs(
                    max(m.serving.root_volume_gib for m in context.models),
                    encrypted=True,
                    delete_on_termination=True,
                    volume_type=ec2.EbsDeviceVolumeType.GP3,
                ),
            )
        ],
    )

    # One task per instance, and a deploy starts new tasks before stopping old ones (a rolling update up to
    # its maximumPercent; blue/green, linear and canary start the whole green fleet beside blue): the group
    # must be able to hold that many instances at the top of the range.
    auto_scaling_group = autoscaling.AutoScalingGroup(
        scope,
        "Capacity",
        vpc=vpc,
        vpc_subnets=subnets,
        launch_template=launch_template,
        min_capacity=context.capacity.min_capacity,
        max_capacity=math.ceil(context.capacity.max_capacity * context.rollout.peak_percent / 100),
    )
    capacity_provider = ecs.AsgCapacityProvider(
        scope,
        "CapacityProvider",
        auto_scaling_group=auto_scaling_group,
        enable_managed_scaling=True,
        enable_managed_termination_protection=True,
        enable_managed_draining=True,
        target_capacity_percent=100,
    )
    cluster.add_asg_capacity_provider(capacity_provider)
    nag.acknowledge(
        auto_scaling_group,
        "AS3",
        "the ECS capacity provider launches and terminates instances routinely; a failure to "
        "get capacity alarms on CapacityProviderReservation instead (CapacityShortfallAlarm); "
        "publishing to the KMS-encrypted alarm topic would need its key to trust the Auto "
        "Scaling service-linked role",
    )
    return Capacity(instance_security_group, role, launch_template, auto_scaling_group, capacity_provider)


def release_capacity_on_delete(
    scope: Construct, log_group: logs.ILogGroup, cluster: ecs.Cluster, capacity: Capacity, ecs_service: ecs.Ec2Service
) -> ScaleInProtectionRelease:
    """Managed termination protection keeps every instance protected from scale-in while the service
    runs; on stack deletion that protection would keep CloudFormation from emptying the group
    (aws-cdk issue 18179). Deletion runs against the dependencies: the service goes first (its tasks
    stop), then this release (protection off, group to zero), then the cluster association, the
    capacity provider and the group."""
    scale_in_release = ScaleInProtectionRelease(
        scope, "ScaleInRelease", auto_scaling_group=capacity.auto_scaling_group, log_group=log_group
    )
    release = scale_in_release.resource
    release.node.add_dependency(capacity.capacity_provider, cluster_association(cluster))
    ecs_service.node.add_dependency(release)
    return scale_in_release
