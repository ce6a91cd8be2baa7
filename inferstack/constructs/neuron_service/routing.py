"""Which target group a request reaches. One model keeps the whole listener; a fleet's models each get a target
group and a listener rule for their paths, and a 404 naming them for any other path. A traffic-shifting
rollout gives each model a second (alternate) target group and a production rule forwarding to both, weighted,
which ECS re-weights on every deployment and a stack update must write back as ECS left it. Priorities and the
target-group limit are inferstack.neuron.routing's, shared with validation."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct

from inferstack.constructs import nag
from inferstack.constructs.live_values import LiveValues
from inferstack.constructs.neuron_service.context import ServiceContext
from inferstack.constructs.neuron_service.load_balancer import LoadBalancer, add_listener
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


@dataclass(frozen=True)
class Routes:
    """What add_routes makes, by model name: each model's target group, and with a traffic-shifting rollout its
    alternate target group and production rule (empty otherwise); the listener; and with a traffic-shifting
    rollout the role ECS shifts traffic with (None otherwise)."""

    listener: elbv2.ApplicationListener
    target_groups: Mapping[str, elbv2.ApplicationTargetGroup]
    alternate_target_groups: Mapping[str, elbv2.ApplicationTargetGroup]
    production_rules: Mapping[str, elbv2.ApplicationListenerRule]
    load_balancer_role: iam.Role | None


def check_fleet(fleet: str, served: Sequence[ServedModel], rollout: EcsRollout) -> None:
    """What the fleet's listener and service could not hold: more target groups than a service takes, two rules
    at one priority, or two members on one port."""
    if len(served) > neuron_routing.MAX_TARGET_GROUPS:
        raise ValueError(
            f"fleet {fleet}: {len(served)} models need as many target groups; an "
            f"ECS service takes at most {neuron_routing.MAX_TARGET_GROUPS}"
        )
    clashes = neuron_routing.priority_clashes([s.name for s in served], shifting=rollout.shifts_traffic)
    if clashes:
        raise ValueError(f"fleet {fleet}: two models' listener rule priorities collide: {clashes[0][1]}")
    ports: dict[int, str] = {}
    for model in served:
        other = ports.setdefault(model.port, model.name)
        if other != model.name:
            raise ValueError(f"fleet {fleet}: {model.name} and {other} both listen on port {model.port}")


def add_routes(
    scope: Construct,
    context: ServiceContext,
    vpc: ec2.IVpc,
    certificate_arn: str | None,
    load_balancer: LoadBalancer,
    ecs_service: ecs.Ec2Service,
    live_values: Callable[[], LiveValues],
) -> Routes:
    """`live_values`: the service's reader of live values, made on first use (a traffic-shifting rollout's
    weights)."""
    target_groups: dict[str, elbv2.ApplicationTargetGroup] = {}
    alternate_target_groups: dict[str, elbv2.ApplicationTargetGroup] = {}
    default: dict[str, object]  # the listener's default action, or its default target groups
    if context.rollout.shifts_traffic:
        # Targets are registered once the production rules exist (their alternate target names the rule).
        for served in context.served:
            parent = model_scope(scope, served) if context.packed else scope
            target_groups[served.name] = _target_group(parent, "Targets", vpc, served, attach_to=None)
            alternate_target_groups[served.name] = _target_group(
                parent, "AlternateTargets", vpc, served, attach_to=None
            )
        # A forward, like every rule: ECS refuses blue/green on a listener mixing forward with fixed-response
        # actions. The catch-all production rule (`/*`) answers every path first, so this is never used.
        first = context.served[0].name
        default = {"default_action": _weighted_forward(target_groups[first], alternate_target_groups[first])}
    elif context.packed:
        # Any path but a served model's: a 404 that says what is served here.
        default = {
            "default_action": elbv2.ListenerAction.fixed_response(
                404, content_type="application/json", message_body=_not_found_body(context)
            )
        }
    else:
        (only_model,) = context.served
        target_groups[only_model.name] = _target_group(scope, "Targets", vpc, only_model, attach_to=ecs_service)
        default = {"default_target_groups": list(target_groups.values())}
    listener = add_listener(load_balancer, certificate_arn, default)
    if context.rollout.shifts_traffic:
        shifting = _Shifting(context, load_balancer, listener, target_groups, alternate_target_groups, live_values)
        production_rules, role = _add_production_rules(scope, shifting, ecs_service)
        shifting.keep_live_weights(listener.node.default_child, "DefaultActions", "ListenerWeights", context.served[0])
        return Routes(listener, target_groups, alternate_target_groups, production_rules, role)
    if context.packed:
        for served in context.served:
            parent = model_scope(scope, served)
            target_group = _target_group(parent, "Targets", vpc, served, attach_to=ecs_service)
            elbv2.ApplicationListenerRule(
                parent,
                "Route",
                listener=listener,
                priority=neuron_routing.rule_priority(served.name),
                conditions=[elbv2.ListenerCondition.path_patterns([served.path, f"{served.path}/*"])],
                target_groups=[target_group],
            )
            target_groups[served.name] = target_group
    return Routes(listener, target_groups, alternate_target_groups, {}, None)


def _weighted_forward(
    primary: elbv2.ApplicationTargetGroup, alternate: elbv2.ApplicationTargetGroup
) -> elbv2.ListenerAction:
    return elbv2.ListenerAction.weighted_forward(
        [
            elbv2.WeightedTargetGroup(target_group=primary, weight=PRIMARY_WEIGHT),
            elbv2.WeightedTargetGroup(target_group=alternate, weight=ALTERNATE_WEIGHT),
        ]
    )


@dataclass(frozen=True)
class _Shifting:
    """What a traffic-shifting rollout's rules are made from: each model's pair of target groups, the listener,
    and the live-values reader that keeps their weights."""

    context: ServiceContext
    load_balancer: LoadBalancer
    listener: elbv2.ApplicationListener
    target_groups: Mapping[str, elbv2.ApplicationTargetGroup]
    alternate_target_groups: Mapping[str, elbv2.ApplicationTargetGroup]
    live_values: Callable[[], LiveValues]

    def forward(self, served: ServedModel) -> elbv2.ListenerAction:
        return _weighted_forward(self.target_groups[served.name], self.alternate_target_groups[served.name])

    def keep_live_weights(
        self, resource: IConstruct | None, actions_key: str, reader_id: str, served: ServedModel
    ) -> None:
        """A stack update writes the weights ECS left on the production rule, not the template's 100/0."""
        assert isinstance(resource, cdk.CfnResource)
        self.live_values().forward_weights(
            reader_id,
            resource=resource,
            actions_key=actions_key,
            load_balancer_arn=self.load_balancer.load_balancer.load_balancer_arn,
            port=self.load_balancer.listener_port,
            target_group_arns=(
                self.target_groups[served.name].target_group_arn,
                self.alternate_target_groups[served.name].target_group_arn,
            ),
            planned=(PRIMARY_WEIGHT, ALTERNATE_WEIGHT),
        )


def _add_production_rules(
    scope: Construct, shifting: _Shifting, ecs_service: ecs.Ec2Service
) -> tuple[dict[str, elbv2.ApplicationListenerRule], iam.Role]:
    """Per model: the production listener rule (its paths; the first model's takes `/*`, evaluated last; every
    priority from the model's name, so a reorder or a retirement asks for no priority another rule holds),
    forwarding to its target group and its alternate, weighted 100/0; then the service's tasks registered
    with the target group, the alternate named for ECS with the rule and the role it shifts traffic with.
    Returns the rules, by model name, and that role.

    ECS rewrites the rule's weights on every deployment, and after one the tasks sit in the alternate target
    group. A stack update that rewrote the rule's action with the template's weights would send all traffic
    to a target group that may be empty (aws-cdk issue 36649): the weights are read live at deploy time
    (inferstack.constructs.live_values), so an update writes back what ECS left."""
    context, listener = shifting.context, shifting.listener
    role = iam.Role(
        scope,
        "LoadBalancerRole",
        assumed_by=iam.ServicePrincipal("ecs.amazonaws.com"),
        description="ECS infrastructure role for load balancers: registers this service's tasks and shifts "
        "its production listener rules between their two target groups",
    )
    production_rules: dict[str, elbv2.ApplicationListenerRule] = {}
    for index, served in enumerate(context.served):
        parent = model_scope(scope, served) if context.packed else scope
        catch_all = index == 0
        paths = [CATCH_ALL_PATH] if catch_all else [served.path, f"{served.path}/*"]
        rule = elbv2.ApplicationListenerRule(
            parent,
            "Route",
            listener=listener,
            priority=(neuron_routing.catch_all_priority if catch_all else neuron_routing.rule_priority)(served.name),
            conditions=[elbv2.ListenerCondition.path_patterns(paths)],
            action=shifting.forward(served),
        )
        production_rules[served.name] = rule
        shifting.keep_live_weights(
            rule.node.default_child,
            "Actions",
            f"{served.name}RouteWeights" if context.packed else "RouteWeights",
            served,
        )
        target = ecs_service.load_balancer_target(
            container_name=CONTAINER_NAME,
            container_port=served.port,
            alternate_target=ecs.AlternateTarget(
                "AlternateTarget",
                alternate_target_group=(shifting.alternate_target_groups[served.name]),
                production_listener=ecs.ListenerRuleConfiguration.application_listener_rule(rule),
                role=role,
            ),
        )
        shifting.target_groups[served.name].add_target(target)
    # What the managed AmazonECSInfrastructureRolePolicyForLoadBalancers grants for an ALB, narrowed to this
    # service's target groups, listener and production rules (as AWS's blue/green sample scopes it).
    groups = [
        g.target_group_arn
        for pair in zip(shifting.target_groups.values(), shifting.alternate_target_groups.values(), strict=True)
        for g in pair
    ]
    role.add_to_policy(
        iam.PolicyStatement(
            sid="ReadLoadBalancing",
            resources=["*"],
            actions=[
                "elasticloadbalancing:DescribeListeners",
                "elasticloadbalancing:DescribeRules",
                "elasticloadbalancing:DescribeTargetGroups",
                "elasticloadbalancing:DescribeTargetHealth",
            ],
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="RegisterTasks",
            resources=groups,
            actions=["elasticloadbalancing:RegisterTargets", "elasticloadbalancing:DeregisterTargets"],
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="ShiftTraffic",
            actions=["elasticloadbalancing:ModifyRule"],
            resources=[rule.listener_rule_arn for rule in production_rules.values()],
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="ModifyListener", actions=["elasticloadbalancing:ModifyListener"], resources=[listener.listener_arn]
        )
    )
    nag.acknowledge(
        role.node.find_child("DefaultPolicy"),
        "IAM5[Resource::*]",
        "elasticloadbalancing:Describe* supports no resource-level permission (Service "
        "Authorization Reference); every write is limited to this service's target groups, "
        "listener and production rules",
    )
    # ECS assumes the role as soon as the service exists, and on deletion while it deregisters the tasks:
    # the service is created after the role's policy and deleted before it (the role itself it names).
    ecs_service.node.add_dependency(role.node.find_child("DefaultPolicy"))
    # CDK makes a service depend on every rule forwarding to its target groups (the routes exist before tasks
    # register); a production rule is also referenced, which cfn-lint reports as an obsolete DependsOn.
    resource = ecs_service.node.default_child
    assert isinstance(resource, ecs.CfnService)
    resource.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3005"]}})
    return production_rules, role


def _target_group(
    scope: Construct, construct_id: str, vpc: ec2.IVpc, served: ServedModel, *, attach_to: ecs.Ec2Service | None
) -> elbv2.ApplicationTargetGroup:
    """`attach_to`: the service whose tasks register now (a rolling service's only target group), or None."""
    targets = (
        [attach_to.load_balancer_target(container_name=CONTAINER_NAME, container_port=served.port)]
        if attach_to is not None
        else None
    )
    return elbv2.ApplicationTargetGroup(
        scope,
        construct_id,
        vpc=vpc,
        port=served.port,
        protocol=elbv2.ApplicationProtocol.HTTP,
        target_type=elbv2.TargetType.IP,
        targets=targets,
        deregistration_delay=cdk.Duration.seconds(served.model.load_balancer.deregistration_delay_seconds),
        health_check=elbv2.HealthCheck(
            path=served.readiness_path,
            healthy_http_codes="200",
            interval=cdk.Duration.seconds(10),
            timeout=cdk.Duration.seconds(5),
            healthy_threshold_count=2,
            unhealthy_threshold_count=3,
        ),
    )


def _not_found_body(context: ServiceContext) -> str:
    paths = [f"{s.path}/infer" for s in context.served]
    body = json.dumps(
        {
            "error": f"no model at this path; {context.name} serves {', '.join(paths)}",
            "models": [s.name for s in context.served],
        },
        separators=(",", ":"),
    )
    if len(body) > MAX_FIXED_RESPONSE_CHARS:  # five 40-character names stay far below
        raise ValueError(
            f"{context.name}: the 404 body naming the models exceeds {MAX_FIXED_RESPONSE_CHARS} characters"
        )
    return body
