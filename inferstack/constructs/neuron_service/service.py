"""NeuronEcsService, the one construct: it checks what it is given, then runs the parts. Each creates its
resources in this construct's scope (or a fleet model's, under it) with the ids they have always had, so the
logical ids stay; they run in the order the resources have always been created, which the templates' resource
order follows."""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_logs as logs
from constructs import Construct

from inferstack.capacity.packing import NeuronFleetPlan
from inferstack.capacity.planning import CapacityPlan
from inferstack.constructs.neuron_service import served as serving
from inferstack.constructs.neuron_service.capacity import add_capacity, release_capacity_on_delete
from inferstack.constructs.neuron_service.load_balancer import add_load_balancer
from inferstack.constructs.neuron_service.metrics import Metrics
from inferstack.constructs.neuron_service.observability import add_alarms, add_dashboard
from inferstack.constructs.neuron_service.rollout import roll_back_on_alarms
from inferstack.constructs.neuron_service.routing import add_routes, check_fleet
from inferstack.constructs.neuron_service.scaling import add_off_hours, add_scaling
from inferstack.constructs.neuron_service.scope import ServiceScope
from inferstack.constructs.neuron_service.served import NeuronImage, ScheduledWindow
from inferstack.constructs.neuron_service.task import add_service, add_task
from inferstack.neuron import deployment as neuron_deployment
from inferstack.neuron import task as neuron_task
from inferstack.neuron.deployment import EcsRollout
from inferstack.schema.models import NeuronEcsModel


class NeuronEcsService(ServiceScope):
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

    # The state the parts share is declared on ServiceScope (scope.py); the dashboard is this class's own.
    dashboard: cw.CfnDashboard  # observability

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
            # The environment's SLO, which the server admits requests within.
            self.task = neuron_task.for_instance(model, capacity.instance_type, slo_p99_ms=capacity.slo_p99_ms)
            self.served = (serving.dedicated(model, capacity),)
            self.off_hours = tuple(off_hours)
        else:
            if off_hours:
                raise ValueError(f"fleet {capacity.fleet}: its off-hours windows come with its plan")
            self.name = capacity.fleet
            self.task = neuron_task.for_fleet(capacity, models)
            self.served = serving.fleet(capacity, models)
            self.off_hours = capacity.windows
            check_fleet(capacity.fleet, self.served, rollout)
        # A fleet's models are routed by path; one model keeps the whole listener (and its template).
        self.packed = isinstance(capacity, NeuronFleetPlan)
        self.models = tuple(s.model for s in self.served)
        self.capacity = capacity
        self._log_group = log_group
        if public and not certificate_arn:
            raise ValueError(f"{self.name}: a public load balancer needs a certificate_arn (HTTPS only)")

        self.cluster = ecs.Cluster(self, "Cluster", vpc=vpc, container_insights_v2=ecs.ContainerInsights.ENABLED)
        add_capacity(self, vpc, subnets)
        add_task(self, log_group, image)
        add_service(self, vpc, subnets)
        release_capacity_on_delete(self, log_group)
        add_load_balancer(self, vpc, vpc_cidr, subnets, public, certificate_arn, access_log_retention,
                          removal_policy)
        add_routes(self, vpc, certificate_arn)
        metrics = Metrics(self)
        add_scaling(self, metrics)
        add_off_hours(self)
        self.alarms = add_alarms(self, metrics, alarm_topic_arn)
        roll_back_on_alarms(self)
        self.dashboard = add_dashboard(self, metrics)
