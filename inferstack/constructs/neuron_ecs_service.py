"""Models served on Inferentia by ECS: EC2 capacity from the ECS-optimized AL2023 Neuron AMI, one task
per instance owning every Neuron device, behind an Application Load Balancer, scaled on requests per
task, with alarms and a dashboard. The task serves one model (a dedicated model, planned by
inferstack.capacity.planning) or several on disjoint NeuronCore ranges and ports (a neuron-cores fleet,
planned by inferstack.capacity.packing): then each model has its own target group, listener rule, scaling
policy, alarms and dashboard row. Optional off-hours windows scale the service, and the instances with it,
down (to zero) and back.

Deploys follow the model's or fleet's ECS rollout (inferstack.neuron.deployment): rolling, or ECS native
blue/green, linear or canary with a second (alternate) target group and a production listener rule per model;
every strategy rolls back on the models' SLO alarms. The task writes its own CloudWatch metrics (EMF, names
in inferstack.neuron.metrics) under a Service dimension fixed at synth; dashboards, a Neuron alarm and a
concurrency scaling policy per model read them."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import aws_cdk as cdk
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct, Dependable, DependencyGroup, IConstruct

from inferstack.constructs import checkov, nag
from inferstack.constructs.live_values import LiveValues
from inferstack.constructs.scale_in_release import ScaleInProtectionRelease
from inferstack.neuron import deployment as neuron_deployment
from inferstack.neuron import metrics as serving_metrics
from inferstack.neuron import task as neuron_task
from inferstack.neuron.routing import CATCH_ALL_PRIORITY, MAX_RULE_PRIORITY, rule_priority  # noqa: F401 (re-exported)
from inferstack.neuron.routing import MAX_TARGET_GROUPS
from inferstack.neuron.task import CONTAINER_NAME
from inferstack.neuron.deployment import EcsRollout
from inferstack.schema.models import NeuronEcsModel
from inferstack.config.release_pin import PinnedImage
from inferstack.constructs import cloudwatch_l1 as cwl1
from inferstack.capacity import schedule
from inferstack.capacity.packing import NeuronFleetPlan
from inferstack.capacity.planning import CapacityPlan

# Resolved by CloudFormation at deploy time, so synth needs no lookup. Not ecs.EcsOptimizedImage: some
# CDK versions build the AL2023 Neuron path wrongly (".../inf/...").
AMI_PARAMETER = "/aws/service/ecs/optimized-ami/amazon-linux-2023/neuron/recommended/image_id"
ROOT_DEVICE = "/dev/xvda"  # Amazon Linux 2023
READINESS_PATH = "/v2/health/ready"  # 200 only after the model is loaded and warmed up
# Several models in one task: the serving app answers each model's readiness on that model's port.
MODEL_PATH = "/v2/models/{name}"
MODEL_READINESS_PATH = MODEL_PATH + "/ready"
# An ALB fixed response carries at most 1024 characters; listener rule priorities run 1..50000.
MAX_FIXED_RESPONSE_CHARS = 1024
CATCH_ALL_PATH = "/*"
# A production rule is created on the primary target group; ECS rewrites the weights on every deployment, and a
# stack update writes back the live ones (inferstack.constructs.live_values), never these.
PRIMARY_WEIGHT, ALTERNATE_WEIGHT = 100, 0
# The serving app's EMF flush interval: one data point per minute and dimension set, what the alarms and the
# scaling policies evaluate (60 s periods).
METRICS_INTERVAL_SECONDS = 60
HTTP_PORT = 80
HTTPS_PORT = 443
# An Inferentia instance boots and joins the cluster in minutes; wanting more capacity than the group
# delivers for longer than this means launches fail (e.g. InsufficientInstanceCapacity) or max is reached.
CAPACITY_SHORTFALL_MINUTES = 15
# TLS 1.2 and 1.3 only, forward-secret ciphers (an HTTPS listener without a policy would admit TLS 1.0).
TLS_POLICY = elbv2.SslPolicy.RECOMMENDED_TLS
PLAIN_HTTP_REASON = ("internal load balancer without a certificate (defaults.certificate_arn): it listens only inside "
                     "the VPC, admitting the VPC's range alone; setting a certificate makes this listener HTTPS")


@dataclass(frozen=True)
class ImageBuild:
    """Build the serving image at deploy time from this Docker context (container/neuron/); the
    Dockerfile and build args follow from the model and instance type."""

    directory: str


# Either built from source (dev) or a promoted image pinned by digest (staging, prod).
NeuronImage = ImageBuild | PinnedImage


class ScheduledWindow(Protocol):
    """An off-hours window: a model's `OffHours` or a fleet plan's `Window` (crons in Application Auto
    Scaling's format, their IANA zone, and the task range inside the window)."""

    @property
    def start(self) -> str: ...
    @property
    def end(self) -> str: ...
    @property
    def time_zone(self) -> str: ...
    @property
    def min(self) -> int: ...
    @property
    def max(self) -> int: ...


@dataclass(frozen=True)
class ServedModel:
    """One model the task serves: where it listens and how it is health-checked, and the planner's numbers
    that alarm and scale it."""

    model: NeuronEcsModel
    port: int
    readiness_path: str
    slo_p99_ms: float
    requests_per_task_per_minute: float
    in_flight_per_task: float  # the planner's concurrency target per task (inferstack.capacity.planning)
    workers: int  # this model's worker processes in the task, each emitting its own InFlight

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def in_flight_per_worker(self) -> float:
        """The InFlight target as the scaling policy reads it: every worker writes its own InFlight under the
        model's (Service, Model) dimensions, so their Average is per worker; a task runs `workers` of them."""
        return self.in_flight_per_task / self.workers

    @property
    def path(self) -> str:
        """The model's routes on the load balancer (KServe v2): `<path>` and `<path>/...`."""
        return MODEL_PATH.format(name=self.name)


class _ClusterCapacityProviderAssociation(Dependable):
    """The AWS::ECS::ClusterCapacityProviderAssociations that ecs.Cluster adds at synth time."""

    def __init__(self, cluster: ecs.Cluster) -> None:
        super().__init__()
        self._cluster = cluster

    @property
    def dependency_roots(self) -> list[IConstruct]:
        return [child for child in self._cluster.node.children
                if isinstance(child, ecs.CfnClusterCapacityProviderAssociations)]


class NeuronEcsService(Construct):
    """Exposes `cluster`, `auto_scaling_group`, `capacity_provider`, `task_definition`, `service`,
    `load_balancer`, `listener`, `target_groups` (model name -> its target group), `served` (the models, in
    port order), `access_logs`, `alarms` and `dashboard` (alarms and dashboard are L1s: an alarm's name is its
    `ref`, its ARN `attr_arn`), `deployment_alarms` (the alarms ECS rolls back on), and for traffic-shifting
    rollouts `alternate_target_groups`, `production_rules` (model name -> each) and `load_balancer_role`.

    `capacity`: a dedicated model's plan (inferstack.capacity.planning; `models` is that one model) or a
    neuron-cores fleet's (inferstack.capacity.packing; `models` are its members): the instance type, the task
    count range, each model's core range, port and requests-per-task target. `off_hours`: a dedicated model's
    windows (a fleet's come with its plan). `subnets` hold the instances and tasks, and the load balancer too
    unless `public`. `vpc_cidr` is the VPC's range as a literal (an internal load balancer admits only it; a
    literal keeps the rule reviewable).

    One model keeps the single-model layout: its port, `/v2/health/ready` as the health check, the listener
    forwarding everything to it. Several models: one port mapping, target group (health check
    `/v2/models/<name>/ready` on its port), listener rule (`/v2/models/<name>` and below) and scaling policy
    each, and a 404 naming the served models for any other path.

    `rollout`: how ECS replaces the tasks (default: rolling, the whole new fleet started before the old one
    stops). A traffic-shifting rollout (blue/green, linear, canary) gives each model a second target group and
    a production listener rule forwarding to both, weighted, which ECS re-weights during a deployment; the
    rule of the first model (a dedicated model's only one) takes every path (`/*`) at the lowest precedence,
    because ECS refuses listeners that mix forward with fixed-response actions: unknown paths reach that
    model's server, which answers them with its own JSON 404. `metrics_service`: the Service dimension of the
    task's CloudWatch metrics (SERVER_METRICS_SERVICE), a literal known at synth (the stack's name), so the
    alarms, dashboards and scaling policies name it without a token."""

    def __init__(self, scope: Construct, construct_id: str, *, models: Sequence[NeuronEcsModel],
                 capacity: CapacityPlan | NeuronFleetPlan, vpc: ec2.IVpc, vpc_cidr: str,
                 subnets: ec2.SubnetSelection, log_group: logs.ILogGroup, alarm_topic_arn: str, public: bool,
                 certificate_arn: str | None, image: NeuronImage, access_log_retention: cdk.Duration,
                 removal_policy: cdk.RemovalPolicy, metrics_service: str,
                 rollout: EcsRollout = neuron_deployment.rollout(None),
                 off_hours: Sequence[ScheduledWindow] = ()) -> None:
        super().__init__(scope, construct_id)
        if not metrics_service or cdk.Token.is_unresolved(metrics_service):
            raise ValueError("metrics_service must be a literal known at synth (e.g. the stack's name): the "
                             "alarms, dashboards and scaling policies name it as a metric dimension")
        self.metrics_service = metrics_service
        self.rollout = rollout
        if isinstance(capacity, CapacityPlan):
            if [m.name for m in models] != [capacity.model]:
                raise ValueError(f"capacity plan is for {capacity.model}, not {', '.join(m.name for m in models)}")
            (model,) = models
            self.name = model.name
            self.task = neuron_task.for_instance(model, capacity.instance_type)
            # One task per instance: the planner's per-instance targets are per task.
            self.served = (ServedModel(model, model.serving.port, READINESS_PATH, capacity.slo_p99_ms,
                                       capacity.target_per_instance_per_minute,
                                       capacity.target_in_flight_per_instance, model.serving.workers),)
            self.off_hours: tuple[ScheduledWindow, ...] = tuple(off_hours)
        else:
            if off_hours:
                raise ValueError(f"fleet {capacity.fleet}: its off-hours windows come with its plan")
            self.name = capacity.fleet
            self.task = neuron_task.for_fleet(capacity, models)
            by_name = {m.name: m for m in models}
            self.served = tuple(
                ServedModel(by_name[share.model], share.port, MODEL_READINESS_PATH.format(name=share.model),
                            share.slo_p99_ms, capacity.target_per_task_per_minute(share.model),
                            capacity.target_in_flight_per_task(share.model), share.workers)
                for share in capacity.shares)
            self.off_hours = capacity.windows
            if len(self.served) > MAX_TARGET_GROUPS:
                raise ValueError(f"fleet {capacity.fleet}: {len(self.served)} models need as many target groups; an "
                                 f"ECS service takes at most {MAX_TARGET_GROUPS}")
            priorities = [rule_priority(s.name) for s in self.served]
            if rollout.shifts_traffic:  # the first model's rule takes every other path, evaluated last
                priorities[0] = CATCH_ALL_PRIORITY
            if len(set(priorities)) != len(priorities):
                raise ValueError(f"fleet {capacity.fleet}: two models' listener rule priorities collide; rename one")
        # A fleet's models are routed by path; one model keeps the whole listener (and its template).
        self.packed = isinstance(capacity, NeuronFleetPlan)
        self.models = tuple(s.model for s in self.served)
        self.capacity = capacity
        self._log_group = log_group
        if public and not certificate_arn:
            raise ValueError(f"{self.name}: a public load balancer needs a certificate_arn (HTTPS only)")

        self.cluster = ecs.Cluster(self, "Cluster", vpc=vpc, container_insights_v2=ecs.ContainerInsights.ENABLED)
        self._add_capacity(vpc, subnets)
        self._add_task(log_group, image)
        self._add_service(vpc, subnets)
        self._release_capacity_on_delete(log_group)
        self._add_load_balancer(vpc, vpc_cidr, subnets, public, certificate_arn, access_log_retention,
                                removal_policy)
        self._add_scaling()
        self._add_off_hours()
        self.alarms = self._add_alarms(alarm_topic_arn)
        self._roll_back_on_alarms()
        self.dashboard = self._add_dashboard()

    # What the task needs of every model it serves (one model: that model's own values).

    @property
    def _root_volume_gib(self) -> int:
        return max(m.serving.root_volume_gib for m in self.models)

    @property
    def _health_check_grace_seconds(self) -> int:
        """The task is healthy once every model has loaded and warmed up."""
        return max(m.serving.health_check_grace_seconds for m in self.models)

    # ------------------------------------------------------------------ capacity

    def _add_capacity(self, vpc: ec2.IVpc, subnets: ec2.SubnetSelection) -> None:
        self.instance_security_group = ec2.SecurityGroup(
            self, "InstanceSecurityGroup", vpc=vpc, allow_all_outbound=False,
            description="Inferentia container instances: no inbound; HTTPS out to ECS, ECR and CloudWatch")
        self.instance_security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(HTTPS_PORT),
                                                     "ECS, ECR, S3 and CloudWatch Logs APIs")

        # Written here rather than left to Cluster.addAsgCapacityProvider, which also grants logs:* on "*"
        # and ECR pulls the agent does not need (the task execution role pulls the image and ships logs).
        role = iam.Role(self, "InstanceRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
                        description="ECS agent on Inferentia container instances")
        role.add_to_policy(iam.PolicyStatement(
            sid="RegisterWithThisCluster",
            actions=["ecs:RegisterContainerInstance", "ecs:DeregisterContainerInstance",
                     "ecs:SubmitContainerStateChange", "ecs:SubmitTaskStateChange",
                     "ecs:SubmitAttachmentStateChanges"],
            resources=[self.cluster.cluster_arn]))
        role.add_to_policy(iam.PolicyStatement(
            sid="PollThisCluster",
            actions=["ecs:Poll", "ecs:StartTelemetrySession"],
            resources=["*"],
            conditions={"ArnEquals": {"ecs:cluster": self.cluster.cluster_arn}}))
        role.add_to_policy(iam.PolicyStatement(
            sid="DiscoverEndpoint", actions=["ecs:DiscoverPollEndpoint"], resources=["*"]))
        nag.acknowledge(role.node.find_child("DefaultPolicy"), "IAM5[Resource::*]",
                        "ecs:DiscoverPollEndpoint supports no resource-level permission; ecs:Poll and "
                        "ecs:StartTelemetrySession act on container instances that do not exist yet and are "
                        "limited to this cluster by the ecs:cluster condition")

        user_data = ec2.UserData.for_linux()
        # Tasks get their own ENI (awsvpc): keep them away from the instance role's credentials.
        # Nothing Neuron-related here: the AMI ships the driver matching its generation (on Inf1 it pins the
        # driver itself at boot), and upgrading Neuron packages in user data breaks that.
        user_data.add_commands("echo ECS_AWSVPC_BLOCK_IMDS=true >> /etc/ecs/ecs.config")
        launch_template = ec2.LaunchTemplate(
            self, "LaunchTemplate",
            instance_type=ec2.InstanceType(self.task.instance_type),
            machine_image=ec2.MachineImage.from_ssm_parameter(AMI_PARAMETER, os=ec2.OperatingSystemType.LINUX),
            user_data=user_data,
            role=role.without_policy_updates(),
            security_group=self.instance_security_group,
            require_imdsv2=True,
            detailed_monitoring=True,
            block_devices=[ec2.BlockDevice(device_name=ROOT_DEVICE, volume=ec2.BlockDeviceVolume.ebs(
                self._root_volume_gib, encrypted=True, delete_on_termination=True,
                volume_type=ec2.EbsDeviceVolumeType.GP3))],
        )
        self.instance_role = role
        self.launch_template = launch_template

        # One task per instance, and a deploy starts new tasks before stopping old ones (a rolling update up to
        # its maximumPercent; blue/green, linear and canary start the whole green fleet beside blue): the group
        # must be able to hold that many instances at the top of the range.
        self.auto_scaling_group = autoscaling.AutoScalingGroup(
            self, "Capacity", vpc=vpc, vpc_subnets=subnets, launch_template=launch_template,
            min_capacity=self.capacity.min_capacity,
            max_capacity=math.ceil(self.capacity.max_capacity * self.rollout.peak_percent / 100),
        )
        self.capacity_provider = ecs.AsgCapacityProvider(
            self, "CapacityProvider", auto_scaling_group=self.auto_scaling_group,
            enable_managed_scaling=True, enable_managed_termination_protection=True,
            enable_managed_draining=True, target_capacity_percent=100)
        self.cluster.add_asg_capacity_provider(self.capacity_provider)
        nag.acknowledge(self.auto_scaling_group, "AS3",
                        "the ECS capacity provider launches and terminates instances routinely; a failure to "
                        "get capacity alarms on CapacityProviderReservation instead (CapacityShortfallAlarm); "
                        "publishing to the KMS-encrypted alarm topic would need its key to trust the Auto "
                        "Scaling service-linked role")

    # ------------------------------------------------------------------ task

    def _container_image(self, image: NeuronImage) -> ecs.ContainerImage:
        """Both ways grant the execution role pulls from that one repository (plus ecr:GetAuthorizationToken)."""
        if isinstance(image, ImageBuild):
            self.image: ecr_assets.DockerImageAsset | None = ecr_assets.DockerImageAsset(
                self, "Image", directory=image.directory, file=self.task.dockerfile,
                build_args=dict(self.task.build_args), platform=ecr_assets.Platform.LINUX_AMD64)
            return ecs.ContainerImage.from_docker_image_asset(self.image)
        self.image = None
        repository = ecr.Repository.from_repository_attributes(
            self, "PinnedRepository", repository_name=image.repository_name,
            repository_arn=cdk.Stack.of(self).format_arn(service="ecr", resource="repository",
                                                         resource_name=image.repository_name,
                                                         account=image.account, region=image.region))
        # A digest, never a tag: the task runs exactly the promoted image.
        return ecs.ContainerImage.from_ecr_repository(repository, image.digest)

    def _add_task(self, log_group: logs.ILogGroup, image: NeuronImage) -> None:
        task = self.task
        container_image = self._container_image(image)

        self.task_definition = ecs.Ec2TaskDefinition(self, "Task", network_mode=ecs.NetworkMode.AWS_VPC)
        linux = ecs.LinuxParameters(self, "LinuxParameters")
        linux.add_capabilities(ecs.Capability.IPC_LOCK)
        # ECS does not schedule Neuron devices: the task maps every device of the host, read and write
        # (CDK's default permission is read-only, which the Neuron runtime cannot use).
        linux.add_devices(*[
            ecs.Device(host_path=path, container_path=path,
                       permissions=[ecs.DevicePermission.READ, ecs.DevicePermission.WRITE])
            for path in task.device_paths])
        self.container = self.task_definition.add_container(
            CONTAINER_NAME,
            image=container_image,
            cpu=task.cpu_units,
            memory_limit_mib=task.memory_mib,
            environment={**task.environment,
                         serving_metrics.METRICS_SERVICE_ENV: self.metrics_service,
                         serving_metrics.METRICS_INTERVAL_ENV: str(METRICS_INTERVAL_SECONDS)},
            linux_parameters=linux,
            # One model: one mapping named http; several: one per model, named after it.
            port_mappings=[ecs.PortMapping(container_port=s.port, name=s.name if self.packed else "http")
                           for s in self.served],
            logging=ecs.LogDrivers.aws_logs(stream_prefix="serving", log_group=log_group,
                                            mode=ecs.AwsLogDriverMode.NON_BLOCKING,
                                            max_buffer_size=cdk.Size.mebibytes(25)),
        )
        nag.acknowledge(self.task_definition, "ECS2",
                        "the environment carries serving settings (port, workers, batch size, NeuronCore "
                        "range), none of them secret")
        execution_policy = self.task_definition.obtain_execution_role().node.find_child("DefaultPolicy")
        nag.acknowledge(execution_policy, "IAM5[Resource::*]",
                        "ecr:GetAuthorizationToken supports no resource-level permission; image pulls are "
                        "limited to the serving image's repository")

    # ------------------------------------------------------------------ service

    def _add_service(self, vpc: ec2.IVpc, subnets: ec2.SubnetSelection) -> None:
        self.task_security_group = ec2.SecurityGroup(
            self, "TaskSecurityGroup", vpc=vpc, allow_all_outbound=False,
            description="Neuron serving tasks: inbound from the load balancer only; no outbound (the image "
                        "holds the model, the host pulls the image and ships the logs)")
        self.service = ecs.Ec2Service(
            self, "Service",
            cluster=self.cluster,
            task_definition=self.task_definition,
            vpc_subnets=subnets,
            security_groups=[self.task_security_group],
            capacity_provider_strategies=[ecs.CapacityProviderStrategy(
                capacity_provider=self.capacity_provider.capacity_provider_name, weight=1)],
            # The task owns every NeuronCore of its host: never two on one instance, never on another type.
            placement_constraints=[
                ecs.PlacementConstraint.distinct_instances(),
                ecs.PlacementConstraint.member_of(f"attribute:ecs.instance-type == {self.task.instance_type}"),
            ],
            placement_strategies=[ecs.PlacementStrategy.spread_across(ecs.BuiltInAttributes.AVAILABILITY_ZONE)],
            min_healthy_percent=self.rollout.minimum_healthy_percent,
            max_healthy_percent=self.rollout.maximum_percent,
            health_check_grace_period=cdk.Duration.seconds(self._health_check_grace_seconds),
            enable_ecs_managed_tags=True,
            propagate_tags=ecs.PropagatedTagSource.SERVICE,
            # No desired count: a deploy must not reset what autoscaling chose.
            **self._deployment_options(),
        )
        if self.rollout.shifts_traffic:
            # maximumPercent and minimumHealthyPercent are rolling-update parameters (ECS API,
            # DeploymentConfiguration): blue/green, linear and canary scale green to the full count instead. CDK
            # renders both whatever the strategy (its defaults 200 and 50 when unset), so they are removed.
            service = self.service.node.default_child
            assert isinstance(service, ecs.CfnService)
            service.add_property_deletion_override("DeploymentConfiguration.MaximumPercent")
            service.add_property_deletion_override("DeploymentConfiguration.MinimumHealthyPercent")
            cdk.Annotations.of(self.service).acknowledge_warning(
                "@aws-cdk/aws-ecs:shouldUseCircuitBreaker",
                "the circuit breaker applies to rolling updates only (ECS API, DeploymentCircuitBreaker); this "
                "blue/green-family deployment rolls back on the models' SLO alarms (deployment alarms)")
        # The strategy names the provider, which must be associated with the cluster first. CDK creates
        # that association during synth (an aspect), so the dependency is resolved late.
        association = DependencyGroup()
        Dependable.implement(association, _ClusterCapacityProviderAssociation(self.cluster))
        self.service.node.add_dependency(association)

    def _deployment_options(self) -> dict:
        """Ec2Service keyword arguments for the rollout. The strategy is always explicit, ROLLING included: an
        update that drops the property would leave the service on the strategy it had. The circuit breaker
        applies to rolling updates only (ECS API, DeploymentCircuitBreaker); the blue/green family rolls back on
        the deployment alarms (enabled on every strategy once the alarms exist: `_roll_back_on_alarms`)."""
        rollout = self.rollout
        options: dict = {"deployment_strategy": ecs.DeploymentStrategy[rollout.strategy]}
        if not rollout.shifts_traffic:
            options["circuit_breaker"] = ecs.DeploymentCircuitBreaker(enable=True, rollback=True)
            return options
        assert rollout.bake_time_minutes is not None
        options["bake_time"] = cdk.Duration.minutes(rollout.bake_time_minutes)
        if rollout.strategy == "CANARY":
            assert rollout.canary_percent is not None and rollout.canary_bake_minutes is not None
            options["canary_configuration"] = ecs.TrafficShiftConfig(
                step_percent=rollout.canary_percent, step_bake_time=cdk.Duration.minutes(rollout.canary_bake_minutes))
        elif rollout.strategy == "LINEAR":
            assert rollout.step_percent is not None and rollout.step_bake_minutes is not None
            options["linear_configuration"] = ecs.TrafficShiftConfig(
                step_percent=rollout.step_percent, step_bake_time=cdk.Duration.minutes(rollout.step_bake_minutes))
        return options

    def _release_capacity_on_delete(self, log_group: logs.ILogGroup) -> None:
        """Managed termination protection keeps every instance protected from scale-in while the service
        runs; on stack deletion that protection would keep CloudFormation from emptying the group
        (aws-cdk issue 18179). Deletion runs against the dependencies: the service goes first (its tasks
        stop), then this release (protection off, group to zero), then the cluster association, the
        capacity provider and the group."""
        self.scale_in_release = ScaleInProtectionRelease(
            self, "ScaleInRelease", auto_scaling_group=self.auto_scaling_group, log_group=log_group)
        release = self.scale_in_release.resource
        association = DependencyGroup()
        Dependable.implement(association, _ClusterCapacityProviderAssociation(self.cluster))
        release.node.add_dependency(self.capacity_provider, association)
        self.service.node.add_dependency(release)

    # ------------------------------------------------------------------ traffic

    def _add_load_balancer(self, vpc: ec2.IVpc, vpc_cidr: str, subnets: ec2.SubnetSelection, public: bool,
                           certificate_arn: str | None, access_log_retention: cdk.Duration,
                           removal_policy: cdk.RemovalPolicy) -> None:
        # Public load balancers always have a certificate; internal ones serve HTTPS when the environment has one.
        tls = certificate_arn is not None
        port = self.listener_port = HTTPS_PORT if tls else HTTP_PORT
        scheme = "HTTPS" if tls else "HTTP"
        self.load_balancer_security_group = ec2.SecurityGroup(
            self, "LoadBalancerSecurityGroup", vpc=vpc, allow_all_outbound=False,
            description=("HTTPS from the internet" if public else f"{scheme} from inside the VPC")
            + " to the model load balancer")
        if public:
            self.load_balancer_security_group.add_ingress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(port),
                                                               "HTTPS from clients")
            nag.acknowledge(self.load_balancer_security_group, "EC23",
                            "configured as a public endpoint: HTTPS (TLS only) from any client is the purpose")
        else:
            self.load_balancer_security_group.add_ingress_rule(ec2.Peer.ipv4(vpc_cidr),
                                                               ec2.Port.tcp(port), f"{scheme} from the VPC")
        self.load_balancer = elbv2.ApplicationLoadBalancer(
            self, "LoadBalancer", vpc=vpc, internet_facing=public,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PUBLIC) if public else subnets,
            security_group=self.load_balancer_security_group, drop_invalid_header_fields=True)

        # ALB log delivery writes only to SSE-S3 buckets (not SSE-KMS).
        auto_delete = removal_policy == cdk.RemovalPolicy.DESTROY
        self.access_logs = s3.Bucket(
            self, "AccessLogs", encryption=s3.BucketEncryption.S3_MANAGED, enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(expiration=access_log_retention)],
            removal_policy=removal_policy, auto_delete_objects=auto_delete)
        if auto_delete:
            _lint_ignore_cdk_provider(self, "Custom::S3AutoDeleteObjectsCustomResourceProvider")
            checkov.skip_provider_handler(self, "Custom::S3AutoDeleteObjectsCustomResourceProvider")
        nag.acknowledge(self.access_logs, "S1",
                        "this bucket is the load balancer's access-log destination; logging access to the "
                        "log bucket itself would need another bucket, and so on")
        checkov.skip(self.access_logs, "CKV_AWS_18",
                     "this bucket is the load balancer's access-log destination; logging access to the log "
                     "bucket itself would need another bucket, and so on")
        checkov.skip(self.access_logs, "CKV_AWS_21",
                     "load balancer logs are written once under unique keys and never overwritten; the lifecycle "
                     "rule deletes them at the environment's log retention, which versioning would defeat by "
                     "keeping them as noncurrent versions")
        self.load_balancer.log_access_logs(self.access_logs)

        self.target_groups: dict[str, elbv2.ApplicationTargetGroup] = {}
        self.alternate_target_groups: dict[str, elbv2.ApplicationTargetGroup] = {}
        self.production_rules: dict[str, elbv2.ApplicationListenerRule] = {}
        if self.rollout.shifts_traffic:
            # Targets are registered once the production rules exist (their alternate target names the rule).
            for served in self.served:
                scope = self._model_scope(served) if self.packed else self
                self.target_groups[served.name] = self._target_group(scope, "Targets", vpc, served, attach=False)
                self.alternate_target_groups[served.name] = self._target_group(scope, "AlternateTargets", vpc,
                                                                               served, attach=False)
            # A forward, like every rule: ECS refuses blue/green on a listener mixing forward with fixed-response
            # actions. The catch-all production rule (`/*`) answers every path first, so this is never used.
            default = {"default_action": self._weighted_forward(self.served[0])}
        elif self.packed:
            # Any path but a served model's: a 404 that says what is served here.
            default = {"default_action": elbv2.ListenerAction.fixed_response(
                404, content_type="application/json", message_body=self._not_found_body())}
        else:
            (only_model,) = self.served
            self.target_groups = {only_model.name: self._target_group(self, "Targets", vpc, only_model)}
            default = {"default_target_groups": list(self.target_groups.values())}
        if tls:
            assert certificate_arn is not None
            self.listener = self.load_balancer.add_listener(
                "Listener", port=port, protocol=elbv2.ApplicationProtocol.HTTPS, open=False,
                certificates=[elbv2.ListenerCertificate.from_arn(certificate_arn)], ssl_policy=TLS_POLICY, **default)
        else:
            self.listener = self.load_balancer.add_listener(
                "Listener", port=port, protocol=elbv2.ApplicationProtocol.HTTP, open=False, **default)
            checkov.skip(self.listener, "CKV_AWS_2", PLAIN_HTTP_REASON)
            checkov.skip(self.listener, "CKV_AWS_103", PLAIN_HTTP_REASON)
        if self.rollout.shifts_traffic:
            self._add_production_rules()
            self._keep_live_weights(self.listener.node.default_child, "DefaultActions", "ListenerWeights",
                                    self.served[0])
        elif self.packed:
            for served in self.served:
                scope = self._model_scope(served)
                target_group = self._target_group(scope, "Targets", vpc, served)
                elbv2.ApplicationListenerRule(
                    scope, "Route", listener=self.listener, priority=rule_priority(served.name),
                    conditions=[elbv2.ListenerCondition.path_patterns([served.path, f"{served.path}/*"])],
                    target_groups=[target_group])
                self.target_groups[served.name] = target_group
        self.url = f"{scheme.lower()}://{self.load_balancer.load_balancer_dns_name}"

    def _weighted_forward(self, served: ServedModel) -> elbv2.ListenerAction:
        return elbv2.ListenerAction.weighted_forward([
            elbv2.WeightedTargetGroup(target_group=self.target_groups[served.name], weight=PRIMARY_WEIGHT),
            elbv2.WeightedTargetGroup(target_group=self.alternate_target_groups[served.name],
                                      weight=ALTERNATE_WEIGHT)])

    @functools.cached_property
    def live_values(self) -> LiveValues:
        """The readers of what a deploy must write back as it is live (inferstack.constructs.live_values)."""
        return LiveValues(self, "LiveValues", log_group=self._log_group)

    def _keep_live_weights(self, resource: IConstruct | None, actions_key: str, reader_id: str,
                           served: ServedModel) -> None:
        """A stack update writes the weights ECS left on the production rule, not the template's 100/0."""
        assert isinstance(resource, cdk.CfnResource)
        self.live_values.forward_weights(
            reader_id, resource=resource, actions_key=actions_key,
            load_balancer_arn=self.load_balancer.load_balancer_arn, port=self.listener_port,
            target_group_arns=(self.target_groups[served.name].target_group_arn,
                               self.alternate_target_groups[served.name].target_group_arn),
            planned=(PRIMARY_WEIGHT, ALTERNATE_WEIGHT))

    def _add_production_rules(self) -> None:
        """Per model: the production listener rule (its paths; the first model's takes `/*`, evaluated last),
        forwarding to its target group and its alternate, weighted 100/0; then the service's tasks registered
        with the target group, the alternate named for ECS with the rule and the role it shifts traffic with.

        ECS rewrites the rule's weights on every deployment, and after one the tasks sit in the alternate target
        group. A stack update that rewrote the rule's action with the template's weights would send all traffic
        to a target group that may be empty (aws-cdk issue 36649): the weights are read live at deploy time
        (inferstack.constructs.live_values), so an update writes back what ECS left."""
        self.load_balancer_role = iam.Role(
            self, "LoadBalancerRole", assumed_by=iam.ServicePrincipal("ecs.amazonaws.com"),
            description="ECS infrastructure role for load balancers: registers this service's tasks and shifts "
                        "its production listener rules between their two target groups")
        for index, served in enumerate(self.served):
            scope = self._model_scope(served) if self.packed else self
            catch_all = index == 0
            paths = [CATCH_ALL_PATH] if catch_all else [served.path, f"{served.path}/*"]
            rule = elbv2.ApplicationListenerRule(
                scope, "Route", listener=self.listener,
                priority=CATCH_ALL_PRIORITY if catch_all else rule_priority(served.name),
                conditions=[elbv2.ListenerCondition.path_patterns(paths)], action=self._weighted_forward(served))
            self.production_rules[served.name] = rule
            self._keep_live_weights(rule.node.default_child, "Actions",
                                    f"{served.name}RouteWeights" if self.packed else "RouteWeights", served)
            target = self.service.load_balancer_target(
                container_name=CONTAINER_NAME, container_port=served.port,
                alternate_target=ecs.AlternateTarget("AlternateTarget", alternate_target_group=(
                    self.alternate_target_groups[served.name]),
                    production_listener=ecs.ListenerRuleConfiguration.application_listener_rule(rule),
                    role=self.load_balancer_role))
            self.target_groups[served.name].add_target(target)
        # What the managed AmazonECSInfrastructureRolePolicyForLoadBalancers grants for an ALB, narrowed to this
        # service's target groups, listener and production rules (as AWS's blue/green sample scopes it).
        groups = [g.target_group_arn for pair in zip(self.target_groups.values(),
                                                      self.alternate_target_groups.values()) for g in pair]
        self.load_balancer_role.add_to_policy(iam.PolicyStatement(
            sid="ReadLoadBalancing", resources=["*"],
            actions=["elasticloadbalancing:DescribeListeners", "elasticloadbalancing:DescribeRules",
                     "elasticloadbalancing:DescribeTargetGroups", "elasticloadbalancing:DescribeTargetHealth"]))
        self.load_balancer_role.add_to_policy(iam.PolicyStatement(
            sid="RegisterTasks", resources=groups,
            actions=["elasticloadbalancing:RegisterTargets", "elasticloadbalancing:DeregisterTargets"]))
        self.load_balancer_role.add_to_policy(iam.PolicyStatement(
            sid="ShiftTraffic", actions=["elasticloadbalancing:ModifyRule"],
            resources=[rule.listener_rule_arn for rule in self.production_rules.values()]))
        self.load_balancer_role.add_to_policy(iam.PolicyStatement(
            sid="ModifyListener", actions=["elasticloadbalancing:ModifyListener"],
            resources=[self.listener.listener_arn]))
        nag.acknowledge(self.load_balancer_role.node.find_child("DefaultPolicy"), "IAM5[Resource::*]",
                        "elasticloadbalancing:Describe* supports no resource-level permission (Service "
                        "Authorization Reference); every write is limited to this service's target groups, "
                        "listener and production rules")
        # ECS assumes the role as soon as the service exists, and on deletion while it deregisters the tasks:
        # the service is created after the role's policy and deleted before it (the role itself it names).
        self.service.node.add_dependency(self.load_balancer_role.node.find_child("DefaultPolicy"))
        # CDK makes a service depend on every rule forwarding to its target groups (the routes exist before tasks
        # register); a production rule is also referenced, which cfn-lint reports as an obsolete DependsOn.
        service = self.service.node.default_child
        assert isinstance(service, ecs.CfnService)
        service.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3005"]}})

    def _model_scope(self, served: ServedModel) -> Construct:
        """A fleet model's own resources (target group, rule, alarms) live under its name."""
        existing = self.node.try_find_child(served.name)
        return existing if isinstance(existing, Construct) else Construct(self, served.name)

    def _target_group(self, scope: Construct, construct_id: str, vpc: ec2.IVpc, served: ServedModel, *,
                      attach: bool = True) -> elbv2.ApplicationTargetGroup:
        """`attach`: register the service's tasks now (a rolling service's only target group)."""
        targets = ([self.service.load_balancer_target(container_name=CONTAINER_NAME, container_port=served.port)]
                   if attach else None)
        return elbv2.ApplicationTargetGroup(
            scope, construct_id, vpc=vpc, port=served.port, protocol=elbv2.ApplicationProtocol.HTTP,
            target_type=elbv2.TargetType.IP,
            targets=targets,
            deregistration_delay=cdk.Duration.seconds(served.model.load_balancer.deregistration_delay_seconds),
            health_check=elbv2.HealthCheck(path=served.readiness_path, healthy_http_codes="200",
                                           interval=cdk.Duration.seconds(10), timeout=cdk.Duration.seconds(5),
                                           healthy_threshold_count=2, unhealthy_threshold_count=3))

    def _not_found_body(self) -> str:
        paths = [f"{s.path}/infer" for s in self.served]
        body = json.dumps({"error": f"no model at this path; {self.name} serves {', '.join(paths)}",
                           "models": [s.name for s in self.served]}, separators=(",", ":"))
        if len(body) > MAX_FIXED_RESPONSE_CHARS:  # five 40-character names stay far below
            raise ValueError(f"{self.name}: the 404 body naming the models exceeds {MAX_FIXED_RESPONSE_CHARS} "
                             f"characters")
        return body

    # ------------------------------------------------------------------ scaling

    def _add_scaling(self) -> None:
        self.scalable_task_count = self.service.auto_scale_task_count(
            min_capacity=self.capacity.min_capacity, max_capacity=self.capacity.max_capacity)
        # One task per instance, so the planned per-instance target is the per-task target. Per model two
        # policies: its requests per task (the load balancer's count) and its requests in the server at once
        # (the app's InFlight). Application Auto Scaling scales out when any policy asks and in only when all
        # agree (target-tracking-scaling-policy-overview, "Multiple scaling policies").
        for served in self.served:
            scaling = served.model.scaling
            suffix = f"-{served.name}" if self.packed else ""
            scale_out = cdk.Duration.seconds(scaling.scale_out_cooldown_seconds)
            scale_in = cdk.Duration.seconds(scaling.scale_in_cooldown_seconds)
            if self.rollout.shifts_traffic:
                self._scale_on_requests_of_both_target_groups(f"RequestsPerTask{suffix}", served)
            else:
                self.scalable_task_count.scale_on_request_count(
                    f"RequestsPerTask{suffix}", requests_per_target=served.requests_per_task_per_minute,
                    target_group=self.target_groups[served.name], scale_out_cooldown=scale_out,
                    scale_in_cooldown=scale_in)
            # Concurrency falls as tasks are added, as target tracking needs. Average over the model's workers
            # (each emits its own InFlight under the model's dimensions) is per worker: the planner's per-task
            # target divided by the workers of a task.
            self.scalable_task_count.scale_to_track_custom_metric(
                f"InFlightPerTask{suffix}", metric=cw.Metric(
                    namespace=serving_metrics.NAMESPACE, metric_name=serving_metrics.IN_FLIGHT,
                    dimensions_map=self._model_dimensions(served), statistic="Average",
                    period=cdk.Duration.seconds(METRICS_INTERVAL_SECONDS)),
                target_value=served.in_flight_per_worker, scale_out_cooldown=scale_out, scale_in_cooldown=scale_in)

    def _model_dimensions(self, served: ServedModel) -> dict[str, str]:
        return {serving_metrics.SERVICE: self.metrics_service, serving_metrics.MODEL: served.name}

    def _scale_on_requests_of_both_target_groups(self, policy_id: str, served: ServedModel) -> None:
        """ALBRequestCountPerTarget follows one target group, and a traffic-shifting deployment leaves the tasks
        in the other one every second time: the policy would read zero and scale in. The sum of both groups'
        RequestCountPerTarget is the requests per task whichever holds them, and during a shift too (each group
        holds the full task count). Metric math needs the L1 (CDK's target tracking renders one metric); it
        takes the construct path and name the L2 policy had, so a change of strategy updates it in place."""
        scalable_target = self.scalable_task_count.node.find_child("Target")
        assert isinstance(scalable_target, appscaling.ScalableTarget)
        scope = Construct(scalable_target, policy_id)
        per_target = self._model_metrics[served.name]["requests_per_task"]
        assert isinstance(per_target, cwl1.MathExpression)
        queries = [appscaling.CfnScalingPolicy.TargetTrackingMetricDataQueryProperty(
            id=query_id, return_data=False, metric_stat=appscaling.CfnScalingPolicy.TargetTrackingMetricStatProperty(
                stat=metric.statistic, metric=appscaling.CfnScalingPolicy.TargetTrackingMetricProperty(
                    namespace=metric.namespace, metric_name=metric.metric_name,
                    dimensions=[appscaling.CfnScalingPolicy.TargetTrackingMetricDimensionProperty(name=k, value=v)
                                for k, v in sorted(metric.dimensions.items())])))
            for query_id, metric in per_target.using.items()]
        queries.append(appscaling.CfnScalingPolicy.TargetTrackingMetricDataQueryProperty(
            id="requests_per_task", expression=per_target.expression, label=per_target.label, return_data=True))
        scaling = served.model.scaling
        appscaling.CfnScalingPolicy(
            scope, "Resource", policy_name=cdk.Names.unique_id(scope), policy_type="TargetTrackingScaling",
            scaling_target_id=scalable_target.scalable_target_id,
            target_tracking_scaling_policy_configuration=(
                appscaling.CfnScalingPolicy.TargetTrackingScalingPolicyConfigurationProperty(
                    target_value=served.requests_per_task_per_minute,
                    scale_out_cooldown=scaling.scale_out_cooldown_seconds,
                    scale_in_cooldown=scaling.scale_in_cooldown_seconds,
                    customized_metric_specification=appscaling.CfnScalingPolicy.CustomizedMetricSpecificationProperty(
                        metrics=queries))))

    def _add_off_hours(self) -> None:
        """Each window scales the service to its range at `start` (its zone) and back to the planned range at
        `end`; the Auto Scaling group's minimum follows, so ECS managed scaling can empty the group (it never
        changes a group's minimum or maximum itself, and scales out only while the maximum is above zero:
        cluster-auto-scaling) and the planned instances return with the tasks. The group's maximum is left
        alone. With managed termination protection ECS releases an instance's scale-in protection once its
        tasks have stopped (managed-termination-protection), so an emptied service lets the group drain."""
        for index, window in enumerate(self.off_hours, start=1):
            zone = cdk.TimeZone.of(window.time_zone)
            self.scalable_task_count.scale_on_schedule(
                f"OffHours{index}Start", schedule=appscaling.Schedule.expression(window.start),
                min_capacity=window.min, max_capacity=window.max, time_zone=zone)
            self.scalable_task_count.scale_on_schedule(
                f"OffHours{index}End", schedule=appscaling.Schedule.expression(window.end),
                min_capacity=self.capacity.min_capacity, max_capacity=self.capacity.max_capacity, time_zone=zone)
            for suffix, cron, minimum in (("Start", window.start, window.min),
                                          ("End", window.end, self.capacity.min_capacity)):
                recurrence = autoscaling.Schedule.expression(schedule.unix_recurrence(cron))
                action = self.auto_scaling_group.scale_on_schedule(
                    f"OffHours{index}{suffix}", schedule=recurrence, min_capacity=minimum, time_zone=window.time_zone)
                # Deleted before the scale-in release runs (deletion follows dependencies backwards), so no
                # window's end can raise the minimum again while the stack empties the group.
                action.node.add_dependency(self.scale_in_release.resource)
        # A deploy inside a window keeps the window's range instead of registering the planned one (which would
        # start the tasks until the next window starts).
        target = self.scalable_task_count.node.find_child("Target")
        assert isinstance(target, appscaling.ScalableTarget)
        if self.off_hours:
            self.live_values.window_range("TaskRange", target=target,
                                          planned=(self.capacity.min_capacity, self.capacity.max_capacity),
                                          windows=[(window.min, window.max) for window in self.off_hours])

    # ------------------------------------------------------------------ observability
    # Alarms and dashboard as L1 resources built from plain values (inferstack.constructs.cloudwatch_l1):
    # the L2 API costs a jsii round trip per metric, widget and call, which dominates synth at fleet scale.
    # The template is the one the L2 wrote (same logical ids, properties and dashboard JSON).

    @functools.cached_property
    def _service_metrics(self) -> dict[str, cwl1.Metric]:
        """The task's (service, cluster, capacity provider), shared by alarms and dashboard. Each token-valued
        name is read once: every read is a round trip."""
        cluster_name = self.cluster.cluster_name
        ecs_service = {"ClusterName": cluster_name, "ServiceName": self.service.service_name}
        return {
            "capacity_reservation": cwl1.Metric(
                "AWS/ECS/ManagedScaling", "CapacityProviderReservation",
                {"ClusterName": cluster_name,
                 "CapacityProviderName": self.capacity_provider.capacity_provider_name}, "Minimum"),
            "cpu": cwl1.Metric("AWS/ECS", "CPUUtilization", ecs_service, "Average"),
            "memory": cwl1.Metric("AWS/ECS", "MemoryUtilization", ecs_service, "Average"),
            "task_count": cwl1.Metric("ECS/ContainerInsights", "RunningTaskCount", ecs_service, "Average"),
        }

    @functools.cached_property
    def _model_metrics(self) -> dict[str, dict[str, cwl1.AnyMetric]]:
        """Per served model, from its target group (and its alternate, with a traffic-shifting rollout)."""
        out = {}
        for index, served in enumerate(self.served):
            group = self.target_groups[served.name]
            alternate = self.alternate_target_groups.get(served.name)
            out[served.name] = (self._target_group_metrics(group) if alternate is None
                                else self._target_group_pair_metrics(group, alternate, index))
        return out

    @staticmethod
    def _alb_metric_factory(tg: elbv2.ApplicationTargetGroup):
        # As tg.metrics names them: the load balancer by the full name in the first listener's ARN.
        alb = {"LoadBalancer": tg.first_load_balancer_full_name, "TargetGroup": tg.target_group_full_name}

        def target_group(metric_name: str, statistic: str) -> cwl1.Metric:
            return cwl1.Metric("AWS/ApplicationELB", metric_name, alb, statistic)
        return target_group

    @classmethod
    def _target_group_pair_metrics(cls, primary: elbv2.ApplicationTargetGroup,
                                   alternate: elbv2.ApplicationTargetGroup, index: int) -> dict[str, cwl1.AnyMetric]:
        """A model behind two target groups (ECS native blue/green, linear, canary): the tasks sit in either, and
        in both while a deployment shifts traffic. Counts are summed over the two; latency, error rate and
        unhealthy targets are the worse of the two, so a failing canary alarms (and rolls back) even while it
        takes a small share of the requests. Missing data (an empty group reports nothing) counts as 0. Ids carry
        the model's index: a fleet's graph may show several models' expressions, and ids must be unique there."""
        sources = (cls._alb_metric_factory(primary), cls._alb_metric_factory(alternate))

        def pair(key: str, metric_name: str, statistic: str) -> tuple[tuple[str, cwl1.Metric], ...]:
            return tuple((f"{key}_{index}{suffix}", source(metric_name, statistic))
                         for suffix, source in zip(("", "_alt"), sources))

        def combined(label: str, template: str, *pairs: tuple[tuple[str, cwl1.Metric], ...]) -> cwl1.MathExpression:
            ids = [query_id for p in pairs for query_id, _ in p]
            using = {query_id: metric for p in pairs for query_id, metric in p}
            return cwl1.MathExpression(expression=template.format(*ids), using=using, label=label)

        requests = pair("requests", "RequestCount", "Sum")
        errors = pair("errors", "HTTPCode_Target_5XX_Count", "Sum")
        (r1, _), (r2, _) = requests
        (e1, _), (e2, _) = errors
        rate = "IF(FILL({r}, 0) > 0, 100 * FILL({e}, 0) / FILL({r}, 1), 0)"
        return {
            "requests": combined("requests (both target groups)", "FILL({}, 0) + FILL({}, 0)", requests),
            "requests_per_task": combined("requests per task (both target groups)", "FILL({}, 0) + FILL({}, 0)",
                                          pair("per_task", "RequestCountPerTarget", "Sum")),
            "p99": combined("p99 (worse target group)", "MAX([FILL({}, 0), FILL({}, 0)])",
                            pair("p99", "TargetResponseTime", "p99")),
            "p50": combined("p50 (worse target group)", "MAX([FILL({}, 0), FILL({}, 0)])",
                            pair("p50", "TargetResponseTime", "p50")),
            "error_rate": cwl1.MathExpression(
                expression=f"MAX([{rate.format(r=r1, e=e1)}, {rate.format(r=r2, e=e2)}])",
                using=dict(requests + errors), label="target 5xx, % of requests (worse target group)"),
            "unhealthy": combined("unhealthy targets (worse target group)", "MAX([FILL({}, 0), FILL({}, 0)])",
                                  pair("unhealthy", "UnHealthyHostCount", "Maximum")),
            "healthy": combined("healthy targets (both target groups)", "FILL({}, 0) + FILL({}, 0)",
                                pair("healthy", "HealthyHostCount", "Minimum")),
        }

    @classmethod
    def _target_group_metrics(cls, tg: elbv2.ApplicationTargetGroup) -> dict[str, cwl1.AnyMetric]:
        target_group = cls._alb_metric_factory(tg)
        requests = target_group("RequestCount", "Sum")
        return {
            "requests": requests,
            "requests_per_task": target_group("RequestCountPerTarget", "Sum"),
            "p99": target_group("TargetResponseTime", "p99"),
            "p50": target_group("TargetResponseTime", "p50"),
            "error_rate": cwl1.MathExpression(
                expression="IF(requests > 0, 100 * FILL(errors, 0) / requests, 0)",
                using={"requests": requests, "errors": target_group("HTTPCode_Target_5XX_Count", "Sum")},
                label="target 5xx, % of requests"),
            "unhealthy": target_group("UnHealthyHostCount", "Maximum"),
            "healthy": target_group("HealthyHostCount", "Minimum"),
        }

    @functools.cached_property
    def _emf_metrics(self) -> dict[str, dict[str, cwl1.Metric]]:
        """What the task writes itself (inferstack.neuron.metrics, EMF through the awslogs driver), per served
        model under (Service, Model), and the task's NeuronCores under (Service) alone (key "" below)."""
        namespace, m = serving_metrics.NAMESPACE, serving_metrics

        def metric(name: str, dimensions: dict[str, str], statistic: str) -> cwl1.Metric:
            return cwl1.Metric(namespace, name, dimensions, statistic, METRICS_INTERVAL_SECONDS)

        out = {}
        for served in self.served:
            dims = self._model_dimensions(served)
            out[served.name] = {
                "in_flight": metric(m.IN_FLIGHT, dims, "Average"),
                "queue_depth": metric(m.QUEUE_DEPTH, dims, "Average"),
                "batch_size": metric(m.BATCH_SIZE, dims, "Average"),
                "inference_p50": metric(m.INFERENCE_LATENCY, dims, "p50"),
                "inference_p99": metric(m.INFERENCE_LATENCY, dims, "p99"),
                "core_utilization": metric(m.NEURONCORE_UTILIZATION, dims, "Average"),
                "device_memory": metric(m.DEVICE_MEMORY_USED, dims, "Maximum"),
                "execution_errors": metric(m.EXECUTION_ERRORS, dims, "Sum"),
            }
        out[""] = {"core_utilization": metric(m.NEURONCORE_UTILIZATION, {m.SERVICE: self.metrics_service},
                                              "Average")}
        return out

    def _label(self, served: ServedModel) -> str:
        return f"{served.name} ({self.name})" if self.packed else served.name

    def _add_alarms(self, alarm_topic_arn: str) -> dict[str, cw.CfnAlarm]:
        """Per model: p99 above its SLO, 5xx rate, targets failing readiness. Per task: CPU, memory, capacity
        shortfall (a fleet's at the strictest of its models' limits). One model keeps the alarm ids it had."""
        s = self._service_metrics
        name = self.name
        # A new task fails the readiness check until its models are loaded and warm (the grace period):
        # look past that, or every deploy and scale-out would page.
        grace_minutes = math.ceil(self._health_check_grace_seconds / 60)
        either = " in either target group" if self.rollout.shifts_traffic else ""
        per_model: dict[str, dict[str, tuple]] = {}
        for served in self.served:
            m, limits, label = self._model_metrics[served.name], served.model.alarms, self._label(served)
            periods = limits.evaluation_minutes
            per_model[served.name] = {
                "LatencyAlarm": (m["p99"], served.slo_p99_ms / 1000, periods, f"{label}: p99 target response time "
                                 f"above the {served.slo_p99_ms:g} ms SLO{either}"),
                "ErrorRateAlarm": (m["error_rate"], limits.error_rate_percent, periods,
                                   f"{label}: target 5xx above {limits.error_rate_percent:g}% of requests{either}"),
                "UnhealthyTargetsAlarm": (m["unhealthy"], 0, grace_minutes + periods,
                                          f"{label}: targets failing {served.readiness_path} beyond the warm-up "
                                          f"grace period"),
                # neuron-monitor's failed, timed-out or erroneous executions: never expected on a healthy device.
                "NeuronExecutionErrorsAlarm": (self._emf_metrics[served.name]["execution_errors"], 0, periods,
                                               f"{label}: Neuron runtime execution errors (neuron-monitor) in "
                                               f"{periods} consecutive minutes"),
            }
        cpu = min(m.alarms.cpu_percent for m in self.models)
        memory = min(m.alarms.memory_percent for m in self.models)
        periods = min(m.alarms.evaluation_minutes for m in self.models)
        task_level = {
            "CpuAlarm": (s["cpu"], cpu, periods, f"{name}: service CPU above {cpu:g}%"),
            "MemoryAlarm": (s["memory"], memory, periods, f"{name}: service memory above {memory:g}%"),
            "CapacityShortfallAlarm": (s["capacity_reservation"], 100, CAPACITY_SHORTFALL_MINUTES,
                                       f"{name}: tasks waiting for {self.task.instance_type} capacity for "
                                       f"{CAPACITY_SHORTFALL_MINUTES} minutes (launch failures or the group at "
                                       f"its maximum)"),
        }
        alarms: dict[str, cw.CfnAlarm] = {}

        def add(scope: Construct, key: str, alarm_id: str, spec: tuple) -> None:
            metric, threshold, evaluation, description = spec
            alarms[key] = cwl1.alarm(scope, alarm_id, metric=metric, threshold=threshold,
                                     evaluation_periods=evaluation, datapoints_to_alarm=evaluation,
                                     description=description, action_arn=alarm_topic_arn)

        if not self.packed:
            (model_specs,) = per_model.values()
            specs = {**{k: model_specs[k] for k in ("LatencyAlarm", "ErrorRateAlarm")},
                     **{k: task_level[k] for k in ("CpuAlarm", "MemoryAlarm")},
                     "UnhealthyTargetsAlarm": model_specs["UnhealthyTargetsAlarm"],
                     "CapacityShortfallAlarm": task_level["CapacityShortfallAlarm"],
                     "NeuronExecutionErrorsAlarm": model_specs["NeuronExecutionErrorsAlarm"]}
            for alarm_id, spec in specs.items():
                add(self, alarm_id, alarm_id, spec)
            return alarms
        for served in self.served:
            for alarm_id, spec in per_model[served.name].items():
                add(self._model_scope(served), f"{served.name}/{alarm_id}", alarm_id, spec)
        for alarm_id, spec in task_level.items():
            add(self, alarm_id, alarm_id, spec)
        return alarms

    def _roll_back_on_alarms(self) -> None:
        """ECS watches these during every deployment (and a blue/green-family bake time) and rolls back when one
        fires (deployment-alarm-failure): each model's SLO alarms, the ones its dashboard row shows. With a
        traffic-shifting rollout they read both target groups, so a canary's errors count."""
        keys = [(f"{s.name}/" if self.packed else "") + alarm_id
                for s in self.served for alarm_id in ("LatencyAlarm", "ErrorRateAlarm")]
        self.deployment_alarms = [self.alarms[key] for key in keys]
        self.service.enable_deployment_alarms([alarm.ref for alarm in self.deployment_alarms],
                                              behavior=ecs.AlarmBehavior.ROLLBACK_ON_ALARM)

    def _add_dashboard(self) -> cw.CfnDashboard:
        s = self._service_metrics
        region = cdk.Aws.REGION

        def graph(title: str, *metrics: cwl1.AnyMetric, width: int, right: Sequence[cwl1.AnyMetric] = (),
                  left_annotations: Sequence[cwl1.Annotation] = ()) -> cwl1.Widget:
            return cwl1.graph(title, metrics, region=region, width=width, right=right,
                              left_annotations=left_annotations)

        def serving_row(served: ServedModel, prefix: str) -> list[cwl1.Widget]:
            """What the model's workers report (EMF): concurrency against its scaling target, batching,
            inference latency and its NeuronCores."""
            e = self._emf_metrics[served.name]
            return [
                graph(f"{prefix}in flight and queue depth per worker", e["in_flight"], e["queue_depth"],
                      left_annotations=[cwl1.Annotation(served.in_flight_per_worker, "scaling target")], width=6),
                graph(f"{prefix}batch size (rows)", e["batch_size"], width=6),
                graph(f"{prefix}inference latency (ms)", e["inference_p50"], e["inference_p99"], width=6),
                graph(f"{prefix}NeuronCore utilization (%), device memory (bytes)", e["core_utilization"],
                      right=[e["device_memory"]], width=6)]

        def annotations(served: ServedModel) -> tuple[cwl1.Annotation, cwl1.Annotation]:
            return (cwl1.Annotation(served.slo_p99_ms / 1000, "p99 SLO"),
                    cwl1.Annotation(served.requests_per_task_per_minute, "scaling target"))

        alarm_arns = [alarm.attr_arn for alarm in self.alarms.values()]
        if not self.packed:
            (served,) = self.served
            m = self._model_metrics[served.name]
            slo, target = annotations(served)
            rows = [
                [graph("Requests per minute", m["requests"], width=8),
                 graph("Requests per task per minute", m["requests_per_task"], left_annotations=[target], width=8),
                 graph("Running tasks", s["task_count"], width=8)],
                [graph("Target response time (s)", m["p50"], m["p99"], left_annotations=[slo], width=8),
                 graph("Target 5xx (% of requests)", m["error_rate"], width=8),
                 graph("Targets", m["healthy"], m["unhealthy"], width=8)],
                serving_row(served, ""),
                [graph("Service CPU and memory (%)", s["cpu"], s["memory"], width=8),
                 graph("NeuronCore utilization, task (%)", self._emf_metrics[""]["core_utilization"], width=8),
                 cwl1.alarm_status("Alarms", alarm_arns, width=8)],
            ]
            return cwl1.dashboard(self, "Dashboard", rows, start="-PT3H")  # the last three hours
        # A fleet: the task's row, then two rows per model (load balancer, container), then every alarm.
        rows = [[graph("Requests per minute, by model",
                       *[self._model_metrics[served.name]["requests"] for served in self.served], width=6),
                 graph("Running tasks", s["task_count"], width=6),
                 graph("Service CPU and memory (%)", s["cpu"], s["memory"], width=6),
                 graph("NeuronCore utilization, task (%)", self._emf_metrics[""]["core_utilization"], width=6)]]
        for served in self.served:
            m = self._model_metrics[served.name]
            slo, target = annotations(served)
            rows.append([
                graph(f"{served.name}: requests per task per minute", m["requests_per_task"],
                      left_annotations=[target], width=6),
                graph(f"{served.name}: target response time (s)", m["p50"], m["p99"], left_annotations=[slo],
                      width=6),
                graph(f"{served.name}: target 5xx (% of requests)", m["error_rate"], width=6),
                graph(f"{served.name}: targets", m["healthy"], m["unhealthy"], width=6)])
            rows.append(serving_row(served, f"{served.name}: "))
        rows.append([cwl1.alarm_status("Alarms", alarm_arns, width=24)])
        return cwl1.dashboard(self, "Dashboard", rows, start="-PT3H")


def _lint_ignore_cdk_provider(scope: Construct, provider_id: str) -> None:
    """CDK's custom-resource provider handlers declare a DependsOn their role that a GetAtt already
    implies; cfn-lint warns (W3005). The template is CDK's, so silence that check on that resource only."""
    provider = cdk.Stack.of(scope).node.try_find_child(provider_id)
    handler = provider.node.try_find_child("Handler") if provider else None
    if isinstance(handler, cdk.CfnResource):
        handler.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3005"]}})
