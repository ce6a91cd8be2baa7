"""Which target group a request reaches. One model keeps the whole listener; a fleet's models each get a target
group and a listener rule for their paths, and a 404 naming them for any other path. A traffic-shifting
rollout gives each model a second (alternate) target group and a production rule forwarding to both, weighted,
which ECS re-weights on every deployment and a stack update must write back as ECS left it. Priorities and the
target-group limit are inferstack.neuron.routing's, shared with validation."""

from __future__ import annotations

import json
from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct

from inferstack.constructs import nag
from inferstack.constructs.neuron_service.load_balancer import add_listener
from inferstack.constructs.neuron_service.scope import ServiceScope
from inferstack.constructs.neuron_service.served import ServedModel, model_scope
from inferstack.neuron import routing as neuron_routing
from inferstack.neuron.deployment import EcsRollout
from inferstack.neuron.task import CONTAINER_NAME

# An ALB fixed response carries at most 1024 characters (rule priorities: inferstack.neuron.routing).
MAX_FIXED_RESPONSE_CHARS = 1024
CATCH_ALL_PATH = "/*"
# A production rule is created on the primary target group; ECS rewrites the weights on every deployment, and a
# stack update writes back the live ones (inferstack.constructs.live_values), never these.
PRIMARY_WEIGHT, ALTERNATE_WEIGHT = 100, 0


def check_fleet(fleet: str, served: Sequence[ServedModel], rollout: EcsRollout) -> None:
    """What the fleet's listener and service could not hold: more target groups than a service takes, two rules
    at one priority, or two members on one port."""
    if len(served) > neuron_routing.MAX_TARGET_GROUPS:
        raise ValueError(f"fleet {fleet}: {len(served)} models need as many target groups; an "
                         f"ECS service takes at most {neuron_routing.MAX_TARGET_GROUPS}")
    clashes = neuron_routing.priority_clashes([s.name for s in served], shifting=rollout.shifts_traffic)
    if clashes:
        raise ValueError(f"fleet {fleet}: two models' listener rule priorities collide: {clashes[0][1]}")
    ports: dict[int, str] = {}
    for model in served:
        other = ports.setdefault(model.port, model.name)
        if other != model.name:
            raise ValueError(f"fleet {fleet}: {model.name} and {other} both listen on port {model.port}")


def add_routes(service: ServiceScope, vpc: ec2.IVpc, certificate_arn: str | None) -> None:
    """Sets the service's `target_groups`, `alternate_target_groups`, `production_rules` and `listener` (and
    `load_balancer_role` with a traffic-shifting rollout)."""
    service.target_groups = {}
    service.alternate_target_groups = {}
    service.production_rules = {}
    if service.rollout.shifts_traffic:
        # Targets are registered once the production rules exist (their alternate target names the rule).
        for served in service.served:
            scope = model_scope(service, served) if service.packed else service
            service.target_groups[served.name] = _target_group(service, scope, "Targets", vpc, served, attach=False)
            service.alternate_target_groups[served.name] = _target_group(service, scope, "AlternateTargets", vpc,
                                                                         served, attach=False)
        # A forward, like every rule: ECS refuses blue/green on a listener mixing forward with fixed-response
        # actions. The catch-all production rule (`/*`) answers every path first, so this is never used.
        default = {"default_action": _weighted_forward(service, service.served[0])}
    elif service.packed:
        # Any path but a served model's: a 404 that says what is served here.
        default = {"default_action": elbv2.ListenerAction.fixed_response(
            404, content_type="application/json", message_body=_not_found_body(service))}
    else:
        (only_model,) = service.served
        service.target_groups = {only_model.name: _target_group(service, service, "Targets", vpc, only_model)}
        default = {"default_target_groups": list(service.target_groups.values())}
    service.listener = add_listener(service, certificate_arn, default)
    if service.rollout.shifts_traffic:
        _add_production_rules(service)
        _keep_live_weights(service, service.listener.node.default_child, "DefaultActions", "ListenerWeights",
                           service.served[0])
    elif service.packed:
        for served in service.served:
            scope = model_scope(service, served)
            target_group = _target_group(service, scope, "Targets", vpc, served)
            elbv2.ApplicationListenerRule(
                scope, "Route", listener=service.listener, priority=neuron_routing.rule_priority(served.name),
                conditions=[elbv2.ListenerCondition.path_patterns([served.path, f"{served.path}/*"])],
                target_groups=[target_group])
            service.target_groups[served.name] = target_group


def _weighted_forward(service: ServiceScope, served: ServedModel) -> elbv2.ListenerAction:
    return elbv2.ListenerAction.weighted_forward([
        elbv2.WeightedTargetGroup(target_group=service.target_groups[served.name], weight=PRIMARY_WEIGHT),
        elbv2.WeightedTargetGroup(target_group=service.alternate_target_groups[served.name],
                                  weight=ALTERNATE_WEIGHT)])


def _keep_live_weights(service: ServiceScope, resource: IConstruct | None, actions_key: str, reader_id: str,
                       served: ServedModel) -> None:
    """A stack update writes the weights ECS left on the production rule, not the template's 100/0."""
    assert isinstance(resource, cdk.CfnResource)
    service.live_values.forward_weights(
        reader_id, resource=resource, actions_key=actions_key,
        load_balancer_arn=service.load_balancer.load_balancer_arn, port=service.listener_port,
        target_group_arns=(service.target_groups[served.name].target_group_arn,
                           service.alternate_target_groups[served.name].target_group_arn),
        planned=(PRIMARY_WEIGHT, ALTERNATE_WEIGHT))


def _add_production_rules(service: ServiceScope) -> None:
    """Per model: the production listener rule (its paths; the first model's takes `/*`, evaluated last; every
    priority from the model's name, so a reorder or a retirement asks for no priority another rule holds),
    forwarding to its target group and its alternate, weighted 100/0; then the service's tasks registered
    with the target group, the alternate named for ECS with the rule and the role it shifts traffic with.

    ECS rewrites the rule's weights on every deployment, and after one the tasks sit in the alternate target
    group. A stack update that rewrote the rule's action with the template's weights would send all traffic
    to a target group that may be empty (aws-cdk issue 36649): the weights are read live at deploy time
    (inferstack.constructs.live_values), so an update writes back what ECS left."""
    service.load_balancer_role = iam.Role(
        service, "LoadBalancerRole", assumed_by=iam.ServicePrincipal("ecs.amazonaws.com"),
        description="ECS infrastructure role for load balancers: registers this service's tasks and shifts "
                    "its production listener rules between their two target groups")
    for index, served in enumerate(service.served):
        scope = model_scope(service, served) if service.packed else service
        catch_all = index == 0
        paths = [CATCH_ALL_PATH] if catch_all else [served.path, f"{served.path}/*"]
        rule = elbv2.ApplicationListenerRule(
            scope, "Route", listener=service.listener,
            priority=(neuron_routing.catch_all_priority if catch_all else neuron_routing.rule_priority)(served.name),
            conditions=[elbv2.ListenerCondition.path_patterns(paths)], action=_weighted_forward(service, served))
        service.production_rules[served.name] = rule
        _keep_live_weights(service, rule.node.default_child, "Actions",
                           f"{served.name}RouteWeights" if service.packed else "RouteWeights", served)
        target = service.service.load_balancer_target(
            container_name=CONTAINER_NAME, container_port=served.port,
            alternate_target=ecs.AlternateTarget("AlternateTarget", alternate_target_group=(
                service.alternate_target_groups[served.name]),
                production_listener=ecs.ListenerRuleConfiguration.application_listener_rule(rule),
                role=service.load_balancer_role))
        service.target_groups[served.name].add_target(target)
    # What the managed AmazonECSInfrastructureRolePolicyForLoadBalancers grants for an ALB, narrowed to this
    # service's target groups, listener and production rules (as AWS's blue/green sample scopes it).
    groups = [g.target_group_arn for pair in zip(service.target_groups.values(),
                                                 service.alternate_target_groups.values()) for g in pair]
    role = service.load_balancer_role
    role.add_to_policy(iam.PolicyStatement(
        sid="ReadLoadBalancing", resources=["*"],
        actions=["elasticloadbalancing:DescribeListeners", "elasticloadbalancing:DescribeRules",
                 "elasticloadbalancing:DescribeTargetGroups", "elasticloadbalancing:DescribeTargetHealth"]))
    role.add_to_policy(iam.PolicyStatement(
        sid="RegisterTasks", resources=groups,
        actions=["elasticloadbalancing:RegisterTargets", "elasticloadbalancing:DeregisterTargets"]))
    role.add_to_policy(iam.PolicyStatement(
        sid="ShiftTraffic", actions=["elasticloadbalancing:ModifyRule"],
        resources=[rule.listener_rule_arn for rule in service.production_rules.values()]))
    role.add_to_policy(iam.PolicyStatement(
        sid="ModifyListener", actions=["elasticloadbalancing:ModifyListener"],
        resources=[service.listener.listener_arn]))
    nag.acknowledge(role.node.find_child("DefaultPolicy"), "IAM5[Resource::*]",
                    "elasticloadbalancing:Describe* supports no resource-level permission (Service "
                    "Authorization Reference); every write is limited to this service's target groups, "
                    "listener and production rules")
    # ECS assumes the role as soon as the service exists, and on deletion while it deregisters the tasks:
    # the service is created after the role's policy and deleted before it (the role itself it names).
    service.service.node.add_dependency(role.node.find_child("DefaultPolicy"))
    # CDK makes a service depend on every rule forwarding to its target groups (the routes exist before tasks
    # register); a production rule is also referenced, which cfn-lint reports as an obsolete DependsOn.
    resource = service.service.node.default_child
    assert isinstance(resource, ecs.CfnService)
    resource.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3005"]}})


def _target_group(service: ServiceScope, scope: Construct, construct_id: str, vpc: ec2.IVpc,
                  served: ServedModel, *, attach: bool = True) -> elbv2.ApplicationTargetGroup:
    """`attach`: register the service's tasks now (a rolling service's only target group)."""
    targets = ([service.service.load_balancer_target(container_name=CONTAINER_NAME, container_port=served.port)]
               if attach else None)
    return elbv2.ApplicationTargetGroup(
        scope, construct_id, vpc=vpc, port=served.port, protocol=elbv2.ApplicationProtocol.HTTP,
        target_type=elbv2.TargetType.IP,
        targets=targets,
        deregistration_delay=cdk.Duration.seconds(served.model.load_balancer.deregistration_delay_seconds),
        health_check=elbv2.HealthCheck(path=served.readiness_path, healthy_http_codes="200",
                                       interval=cdk.Duration.seconds(10), timeout=cdk.Duration.seconds(5),
                                       healthy_threshold_count=2, unhealthy_threshold_count=3))


def _not_found_body(service: ServiceScope) -> str:
    paths = [f"{s.path}/infer" for s in service.served]
    body = json.dumps({"error": f"no model at this path; {service.name} serves {', '.join(paths)}",
                       "models": [s.name for s in service.served]}, separators=(",", ":"))
    if len(body) > MAX_FIXED_RESPONSE_CHARS:  # five 40-character names stay far below
        raise ValueError(f"{service.name}: the 404 body naming the models exceeds {MAX_FIXED_RESPONSE_CHARS} "
                         f"characters")
    return body
