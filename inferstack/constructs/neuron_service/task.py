"""The task definition and the ECS service that runs it: one task per Inferentia instance, owning every Neuron
device of its host, from the image built here or promoted by digest. The facts of the task itself (devices,
cores, sizes, environment) are inferstack.neuron.task's; this module turns them into ECS resources."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_logs as logs

from inferstack.constructs import nag
from inferstack.constructs.neuron_service.capacity import cluster_association
from inferstack.constructs.neuron_service.metrics import METRICS_INTERVAL_SECONDS
from inferstack.constructs.neuron_service.rollout import deployment_options, drop_rolling_parameters
from inferstack.constructs.neuron_service.scope import ServiceScope
from inferstack.constructs.neuron_service.served import ImageBuild, NeuronImage, health_check_grace_seconds
from inferstack.neuron import metrics as serving_metrics
from inferstack.neuron.task import CONTAINER_NAME


def _container_image(service: ServiceScope, image: NeuronImage) -> ecs.ContainerImage:
    """Both ways grant the execution role pulls from that one repository (plus ecr:GetAuthorizationToken)."""
    if isinstance(image, ImageBuild):
        service.image = ecr_assets.DockerImageAsset(
            service, "Image", directory=image.directory, file=service.task.dockerfile,
            build_args=dict(service.task.build_args), platform=ecr_assets.Platform.LINUX_AMD64)
        return ecs.ContainerImage.from_docker_image_asset(service.image)
    service.image = None
    repository = ecr.Repository.from_repository_attributes(
        service, "PinnedRepository", repository_name=image.repository_name,
        repository_arn=cdk.Stack.of(service).format_arn(service="ecr", resource="repository",
                                                        resource_name=image.repository_name,
                                                        account=image.account, region=image.region))
    # A digest, never a tag: the task runs exactly the promoted image.
    return ecs.ContainerImage.from_ecr_repository(repository, image.digest)


def add_task(service: ServiceScope, log_group: logs.ILogGroup, image: NeuronImage) -> None:
    """Sets the service's `image` (None for a pinned one), `task_definition` and `container`."""
    task = service.task
    container_image = _container_image(service, image)

    service.task_definition = ecs.Ec2TaskDefinition(service, "Task", network_mode=ecs.NetworkMode.AWS_VPC)
    linux = ecs.LinuxParameters(service, "LinuxParameters")
    linux.add_capabilities(ecs.Capability.IPC_LOCK)
    # ECS does not schedule Neuron devices: the task maps every device of the host, read and write
    # (CDK's default permission is read-only, which the Neuron runtime cannot use).
    linux.add_devices(*[
        ecs.Device(host_path=path, container_path=path,
                   permissions=[ecs.DevicePermission.READ, ecs.DevicePermission.WRITE])
        for path in task.device_paths])
    service.container = service.task_definition.add_container(
        CONTAINER_NAME,
        image=container_image,
        cpu=task.cpu_units,
        memory_limit_mib=task.memory_mib,
        environment={**task.environment,
                     serving_metrics.METRICS_SERVICE_ENV: service.metrics_service,
                     serving_metrics.METRICS_INTERVAL_ENV: str(METRICS_INTERVAL_SECONDS)},
        linux_parameters=linux,
        # One model: one mapping named http; several: one per model, named after it.
        port_mappings=[ecs.PortMapping(container_port=s.port, name=s.name if service.packed else "http")
                       for s in service.served],
        logging=ecs.LogDrivers.aws_logs(stream_prefix="serving", log_group=log_group,
                                        mode=ecs.AwsLogDriverMode.NON_BLOCKING,
                                        max_buffer_size=cdk.Size.mebibytes(25)),
    )
    nag.acknowledge(service.task_definition, "ECS2",
                    "the environment carries serving settings (port, workers, batch size, NeuronCore "
                    "range), none of them secret")
    execution_policy = service.task_definition.obtain_execution_role().node.find_child("DefaultPolicy")
    nag.acknowledge(execution_policy, "IAM5[Resource::*]",
                    "ecr:GetAuthorizationToken supports no resource-level permission; image pulls are "
                    "limited to the serving image's repository")


def add_service(service: ServiceScope, vpc: ec2.IVpc, subnets: ec2.SubnetSelection) -> None:
    """Sets the service's `task_security_group` and `service` (the ECS service)."""
    service.task_security_group = ec2.SecurityGroup(
        service, "TaskSecurityGroup", vpc=vpc, allow_all_outbound=False,
        description="Neuron serving tasks: inbound from the load balancer only; no outbound (the image "
                    "holds the model, the host pulls the image and ships the logs)")
    service.service = ecs.Ec2Service(
        service, "Service",
        cluster=service.cluster,
        task_definition=service.task_definition,
        vpc_subnets=subnets,
        security_groups=[service.task_security_group],
        capacity_provider_strategies=[ecs.CapacityProviderStrategy(
            capacity_provider=service.capacity_provider.capacity_provider_name, weight=1)],
        # The task owns every NeuronCore of its host: never two on one instance, never on another type.
        placement_constraints=[
            ecs.PlacementConstraint.distinct_instances(),
            ecs.PlacementConstraint.member_of(f"attribute:ecs.instance-type == {service.task.instance_type}"),
        ],
        placement_strategies=[ecs.PlacementStrategy.spread_across(ecs.BuiltInAttributes.AVAILABILITY_ZONE)],
        min_healthy_percent=service.rollout.minimum_healthy_percent,
        max_healthy_percent=service.rollout.maximum_percent,
        health_check_grace_period=cdk.Duration.seconds(health_check_grace_seconds(service.models)),
        enable_ecs_managed_tags=True,
        propagate_tags=ecs.PropagatedTagSource.SERVICE,
        # No desired count: a deploy must not reset what autoscaling chose.
        **deployment_options(service.rollout),
    )
    if service.rollout.shifts_traffic:
        drop_rolling_parameters(service.service)
    # The strategy names the provider, which must be associated with the cluster first.
    service.service.node.add_dependency(cluster_association(service.cluster))
