"""NeuronEcsService, the one construct: it checks what it is given into a read-only ServiceContext, then runs the
parts, handing each the context and the resources it needs and keeping what it returns. Each creates its
resources in this construct's scope (or a fleet model's, under it) with the ids they have always had, so the
logical ids stay; they run in the order the resources have always been created, which the templates' resource
order follows."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_logs as logs
from constructs import Construct

from inferstack.capacity.packing import NeuronFleetPlan
from inferstack.capacity.planning import CapacityPlan
from inferstack.constructs.live_values import LiveValues
from inferstack.constructs.neuron_service import served as serving
from inferstack.constructs.neuron_service.capacity import add_capacity, release_capacity_on_delete
from inferstack.constructs.neuron_service.context import ServiceContext
from inferstack.constructs.neuron_service.load_balancer import add_load_balancer
from inferstack.constructs.neuron_service.metrics import Metrics
from inferstack.constructs.neuron_service.observability import add_alarms, add_dashboard
from inferstack.constructs.neuron_service.rollout import roll_back_on_alarms
from inferstack.constructs.neuron_service.routing import add_routes, check_fleet
from inferstack.constructs.neuron_service.scaling import add_off_hours, add_scaling
from inferstack.constructs.neuron_service.served import NeuronImage, ScheduledWindow
from inferstack.constructs.neuron_service.task import add_service, add_task
from inferstack.neuron import deployment as neuron_deployment
from inferstack.neuron import task as neuron_task
from inferstack.neuron.deployment import EcsRollout
from inferstack.schema.neuron_ecs import NeuronEcsModel

# Without a `deployment:`: rolling, the whole new fleet started before the old one stops.
ROLLING = neuron_deployment.rollout(None)


class NeuronEcsService(Construct):
    """One model, or a neuron-cores fleet's models, served by ECS on Inferentia behind an Application Load
    Balancer.

    One model keeps the single-model layout: its port, `/v2/health/ready` as the health check, the listener
    forwarding everything to it. Several models: one port mapping, target group (health check
    `/v2/models/<name>/ready` on its port), listener rule (`/v2/models/<name>` and below) and scaling policy
    each, and a 404 naming the served models for any other path.

    A traffic-shifting rollout (blue/green, linear, canary) gives each model a second target group and a
    production listener rule forwarding to both, weighted, which ECS re-weights during a deployment; the rule of
    the first model (a dedicated model's only one) takes every path (`/*`) at the lowest precedence, because ECS
    refuses listeners that mix forward with fixed-response actions: unknown paths reach that model's server,
    which answers them with its own JSON 404.

    Args:
        scope: The construct to create the service in.
        construct_id: The service's id, which its resources' logical ids start from.
        models: The models the task serves: a dedicated model alone, or a neuron-cores fleet's members.
            Required.
        capacity: For a dedicated model its plan (inferstack.capacity.planning, `models` being that one
            model); for a fleet the fleet's plan (inferstack.capacity.packing, `models` being its members): the
            instance type, the task count range, each model's core range, port and requests-per-task target.
            Required.
        vpc: The VPC of the instances, the tasks and the load balancer. Required.
        vpc_cidr: The VPC's range as a literal: an internal load balancer admits only it (a literal keeps the
            rule reviewable). Required.
        subnets: Hold the instances and the tasks, and the load balancer too unless `public`. Required.
        log_group: The serving container's logs (and its EMF metrics), and those of the functions that
            release the instances on deletion and read live values at deploy time. Required.
        alarm_topic_arn: The SNS topic every alarm notifies. Required.
        public: True: an internet-facing load balancer in the VPC's public subnets, HTTPS only (needs
            `certificate_arn`); False: an internal one in `subnets`. Required.
        certificate_arn: The ACM certificate of an HTTPS listener on port 443; None: an internal load
            balancer listens on plain HTTP, port 80. Required (None allowed).
        image: The serving image: an `ImageBuild` (built from container/neuron/ at deploy time) or a promoted
            `PinnedImage` (by digest). Required.
        access_log_retention: How long the load balancer's access logs are kept. Required.
        removal_policy: The access-log bucket's; DESTROY also empties it when the stack is deleted. Required.
        metrics_service: The Service dimension of the task's CloudWatch metrics (SERVER_METRICS_SERVICE), a
            literal known at synth (the stack's name), so that the alarms, dashboards and scaling policies name
            it without a token. Required.
        rollout: How ECS replaces the tasks (inferstack.neuron.deployment): rolling, or a traffic-shifting
            rollout; every strategy rolls back on the models' SLO alarms. Default: `ROLLING`, a rolling update
            that starts the whole new fleet before the old one stops (`inferstack.neuron.deployment.rollout(None)`).
        off_hours: A dedicated model's off-hours windows, which scale the service and its instances down and
            back (a fleet's come with its plan). Default: none (`()`), the planned range at all times.

    Attributes:
        cluster: The ECS cluster.
        auto_scaling_group: The Inferentia instances' Auto Scaling group.
        capacity_provider: Its ECS capacity provider.
        task_definition: The task definition (one task per instance, owning every Neuron device).
        service: The ECS service.
        load_balancer: The Application Load Balancer.
        url: The service's base URL (`http://` or `https://` and the load balancer's DNS name).
        listener: The load balancer's one listener.
        target_groups: Model name -> its target group.
        alternate_target_groups: Model name -> its second target group (a traffic-shifting rollout; else empty).
        production_rules: Model name -> its production listener rule (a traffic-shifting rollout; else empty).
        load_balancer_role: The role ECS shifts traffic with (a traffic-shifting rollout; else None).
        served: The models, in port order (ServedModel).
        access_logs: The load balancer's access-log bucket.
        alarms: Alarm key -> alarm (an L1: its name is its `ref`, its ARN `attr_arn`).
        deployment_alarms: The alarms ECS rolls a deployment back on.
        dashboard: The dashboard (an L1)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        models: Sequence[NeuronEcsModel],
        capacity: CapacityPlan | NeuronFleetPlan,
        vpc: ec2.IVpc,
        vpc_cidr: str,
        subnets: ec2.SubnetSelection,
        log_group: logs.ILogGroup,
        alarm_topic_arn: str,
        public: bool,
        certificate_arn: str | None,
        image: NeuronImage,
        access_log_retention: cdk.Duration,
        removal_policy: cdk.RemovalPolicy,
        metrics_service: str,
        rollout: EcsRollout = ROLLING,
        off_hours: Sequence[ScheduledWindow] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        context = _context(models, capacity, rollout, off_hours, metrics_service)
        if public and not certificate_arn:
            raise ValueError(f"{context.name}: a public load balancer needs a certificate_arn (HTTPS only)")

        # Made by the first part that needs one (routing's live weights, scaling's off-hours range), where it
        # has always been made.
        live_values = functools.cache(lambda: LiveValues(self, "LiveValues", log_group=log_group))
        cluster = ecs.Cluster(self, "Cluster", vpc=vpc, container_insights_v2=ecs.ContainerInsights.ENABLED)
        instances = add_capacity(self, context, cluster, vpc, subnets)
        task = add_task(self, context, log_group, image)
        service = add_service(self, context, vpc, subnets, cluster, task.task_definition, instances.capacity_provider)
        release = release_capacity_on_delete(self, log_group, cluster, instances, service.service)
        load_balancer = add_load_balancer(
            self, vpc, vpc_cidr, subnets, public, certificate_arn, access_log_retention, removal_policy
        )
        routes = add_routes(self, context, vpc, certificate_arn, load_balancer, service.service, live_values)
        metrics = Metrics(context, cluster, service.service, instances.capacity_provider, routes)
        scalable_task_count = add_scaling(context, service.service, routes, metrics)
        add_off_hours(context, scalable_task_count, instances.auto_scaling_group, release, live_values)
        alarms = add_alarms(self, context, metrics, alarm_topic_arn)
        deployment_alarms = roll_back_on_alarms(context, service.service, alarms)
        dashboard = add_dashboard(self, context, metrics, alarms)

        self.cluster = cluster
        self.auto_scaling_group = instances.auto_scaling_group
        self.capacity_provider = instances.capacity_provider
        self.task_definition = task.task_definition
        self.service = service.service
        self.load_balancer = load_balancer.load_balancer
        self.url = load_balancer.url
        self.listener = routes.listener
        self.target_groups = routes.target_groups
        self.alternate_target_groups = routes.alternate_target_groups
        self.production_rules = routes.production_rules
        self.load_balancer_role = routes.load_balancer_role
        self.served = context.served
        self.access_logs = load_balancer.access_logs
        self.alarms = alarms
        self.deployment_alarms = deployment_alarms
        self.dashboard = dashboard


def _context(
    models: Sequence[NeuronEcsModel],
    capacity: CapacityPlan | NeuronFleetPlan,
    rollout: EcsRollout,
    off_hours: Sequence[ScheduledWindow],
    metrics_service: str,
) -> ServiceContext:
    """What the parts share, once what the service is given is known to fit together."""
    if not metrics_service or cdk.Token.is_unresolved(metrics_service):
        raise ValueError(
            "metrics_service must be a literal known at synth (e.g. the stack's name): the "
            "alarms, dashboards and scaling policies name it as a metric dimension"
        )
    if isinstance(capacity, CapacityPlan):
        if [m.name for m in models] != [capacity.model]:
            raise ValueError(f"capacity plan is for {capacity.model}, not {', '.join(m.name for m in models)}")
        (model,) = models
        # The environment's SLO, which the server admits requests within.
        return ServiceContext(
            name=model.name,
            task=neuron_task.for_instance(model, capacity.instance_type, slo_p99_ms=capacity.slo_p99_ms),
            capacity=capacity,
            rollout=rollout,
            metrics_service=metrics_service,
            served=(serving.dedicated(model, capacity),),
            off_hours=tuple(off_hours),
        )
    if off_hours:
        raise ValueError(f"fleet {capacity.fleet}: its off-hours windows come with its plan")
    task = neuron_task.for_fleet(capacity, models)
    served = serving.fleet(capacity, models)
    check_fleet(capacity.fleet, served, rollout)
    return ServiceContext(
        name=capacity.fleet,
        task=task,
        capacity=capacity,
        rollout=rollout,
        metrics_service=metrics_service,
        served=served,
        off_hours=capacity.windows,
    )
