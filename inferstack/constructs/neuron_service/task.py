"""The task definition and the ECS service that runs it: one task per Inferentia instance, owning every Neuron
device of its host, from the image built here or promoted by digest. The facts of the task itself (devices,
cores, sizes, environment) are inferstack.neuron.task's; this module turns them into ECS resources."""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_logs as logs
from constructs import Construct

from inferstack.constructs import nag
from inferstack.constructs.neuron_service.capacity import cluster_association
from inferstack.constructs.neuron_service.context import ServiceContext
from inferstack.constructs.neuron_service.metrics import METRICS_INTERVAL_SECONDS
from inferstack.constructs.neuron_service.rollout import deployment_options, drop_rolling_parameters
from inferstack.constructs.neuron_service.served import ImageBuild, NeuronImage, health_check_grace_seconds
from inferstack.neuron import metrics as serving_metrics
from inferstack.neuron.task import CONTAINER_NAME


@dataclass(frozen=True)
class Task:
    """What add_task makes: the image asset built at deploy time (None for a pinned image), the task definition
    and its serving container."""

    image: ecr_assets.DockerImageAsset | None
    task_definition: ecs.Ec2TaskDefinition
    container: ecs.ContainerDefinition


@dataclass(frozen=True)
class Service:
    """What add_service makes: the tasks' security group and the ECS service."""

    task_security_group: ec2.SecurityGroup
    service: ecs.Ec2Service


def _container_image(
    scope: Construct, context: ServiceContext, image: NeuronImage
) -> tuple[ecr_assets.DockerImageAsset | None, ecs.ContainerImage]:
    """Both ways grant the execution role pulls from that one repository (plus ecr:GetAuthorizationToken)."""
    if isinstance(image, ImageBuild):
        asset = ecr_assets.DockerImageAsset(
            scope,
            "Image",
            directory=image.directory,
            file=context.task.dockerfile,
            build_args=dict(context.task.build_args),
            platform=ecr_assets.Platform.LINUX_AMD64,
        )
        return asset, ecs.ContainerImage.from_docker_image_asset(asset)
    repository = ecr.Repository.from_repository_attributes(
        scope,
        "PinnedRepository",
        repository_name=image.repository_name,
        repository_arn=cdk.Stack.of(scope).format_arn(
            service="ecr",
            resource="repository",
            resource_name=image.repository_name,
            account=image.account,
            region=image.region,
        ),
    )
    # A digest, never a tag: the task runs exactly the promoted image.
    return None, ecs.ContainerImage.from_ecr_repository(repository, image.digest)


def add_task(scope: Construct, context: ServiceContext, log_group: logs.ILogGroup, image: NeuronImage) -> Task:
    task = context.task
    asset, container_image = _container_image(scope, context, image)

    task_definition = ecs.Ec2TaskDefinition(scope, "Task", network_mode=ecs.NetworkMode.AWS_VPC)
    linux = ecs.LinuxParameters(scope, "LinuxParameters")
    linux.add_capabilities(ecs.Capability.IPC_LOCK)
    # ECS does not schedule Neuron devices: the task maps every device of the host, read and write
    # (CDK's default permission is read-only, which the Neuron runtime cannot use).
    linux.add_devices(
        *[
            ecs.Device(
                host_path=path, container_path=path, permissions=[ecs.DevicePermission.READ, ecs.DevicePermission.WRITE]
            )
            for path in task.device_paths
        ]
    )
    container = task_definition.add_container(
        CONTAINER_NAME,
        image=container_image,
        cpu=task.cpu_units,
        memory_limit_mib=task.memory_mib,
        environment={
            **task.environment,
            serving_metrics.METRICS_SERVICE_ENV: context.metrics_service,
            serving_metrics.METRICS_INTERVAL_ENV: str(METRICS_INTERVAL_SECONDS),
        },
        linux_parameters=linux,
        # One model: one mapping named http; several: one per model, named after it.
        port_mappings=[
            ecs.PortMapping(container_port=s.port, name=s.name if context.packed else "http") for s in context.served
        ],
        logging=ecs.LogDrivers.aws_logs(
            stream_prefix="serving",
            log_group=log_group,
            mode=ecs.AwsLogDriverMode.NON_BLOCKING,
            max_buffer_size=cdk.Size.mebibytes(25),
        ),
    )
    nag.acknowledge(
        task_definition,
        "ECS2",
        "the environment carries serving settings (port, workers, batch size, NeuronCore range), none of them secret",
    )
    execution_policy = task_definition.obtain_execution_role().node.find_child("DefaultPolicy")
    nag.acknowledge(
        execution_policy,
        "IAM5[Resource::*]",
        "ecr:GetAuthorizationToken supports no resource-level permission; image pulls are "
        "limited to the serving image's repository",
    )
    return Task(asset, task_definition, container)


def add_service(
    scope: Construct,
    context: ServiceContext,
    vpc: ec2.IVpc,
    subnets: ec2.SubnetSelection,
    cluster: ecs.Cluster,
    task_definition: ecs.Ec2TaskDefinition,
    capacity_provider: ecs.AsgCapacityProvider,
) -> Service:
    task_security_group = ec2.SecurityGroup(
        scope,
        "TaskSecurityGroup",
        vpc=vpc,
        allow_all_outbound=False,
        description="Neuron serving tasks: inbound from the load balancer only; no outbound (the image "
        "holds the model, the host pulls the image and ships the logs)",
    )
    ecs_service = ecs.Ec2Service(
        scope,
        "Service",
        cluster=cluster,
        task_definition=task_definition,
        vpc_subnets=subnets,
        security_groups=[task_security_group],
        capacity_provider_strategies=[
            ecs.CapacityProviderStrategy(capacity_provider=capacity_provider.capacity_provider_name, weight=1)
        ],
        # The task owns every NeuronCore of its host: never two on one instance, never on another type.
        placement_constraints=[
            ecs.PlacementConstraint.distinct_instances(),
            ecs.PlacementConstraint.member_of(f"attribute:ecs.instance-type == {context.task.instance_type}"),
        ],
        placement_strategies=[ecs.PlacementStrategy.spread_across(ecs.BuiltInAttributes.AVAILABILITY_ZONE)],
        min_healthy_percent=context.rollout.minimum_healthy_percent,
        max_healthy_percent=context.rollout.maximum_percent,
        health_check_grace_period=cdk.Duration.seconds(health_check_grace_seconds(context.models)),
        enable_ecs_managed_tags=True,
        propagate_tags=ecs.PropagatedTagSource.SERVICE,
        # No desired count: a deploy must not reset what autoscaling chose.
        **deployment_options(context.rollout),
    )
    if context.rollout.shifts_traffic:
        drop_rolling_parameters(ecs_service)
    # The strategy names the provider, which must be associated with the cluster first.
    ecs_service.node.add_dependency(cluster_association(cluster))
    return Service(task_security_group, ecs_service)
