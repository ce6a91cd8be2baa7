"""Classes of change a CI job can fail on (`inferstack diff --fail-on CLASS`): what takes traffic away, what
puts an autoscaled count back to the template's, what stops autoscaling for the length of an update, what
rewrites a production listener rule's weights, what replaces a serving resource, and what adds or removes
resources and stacks. An update AWS would refuse is an environment warning (the deploy fails, nothing changes).

Each class is decided from the two templates of one stack (and the change diff.py computed), never from the
live account: a change is flagged when a deploy of the head *would* do the harmful thing."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from inferstack.review.assembly import Environment
from inferstack.review.changes import CLASSES, PROTECTED_TYPES, EnvironmentDiff, Report, ResourceChange
from inferstack.review.template import references

ANY = "any"  # --fail-on any: every class

LOAD_BALANCER = "AWS::ElasticLoadBalancingV2::LoadBalancer"
LISTENER = "AWS::ElasticLoadBalancingV2::Listener"
RULE = "AWS::ElasticLoadBalancingV2::ListenerRule"
TARGET_GROUP = "AWS::ElasticLoadBalancingV2::TargetGroup"
SERVICE = "AWS::ECS::Service"
ENDPOINT = "AWS::SageMaker::Endpoint"
COMPONENT = "AWS::SageMaker::InferenceComponent"
ASG = "AWS::AutoScaling::AutoScalingGroup"
ENDPOINT_CONFIG = "AWS::SageMaker::EndpointConfig"
SCALABLE_TARGET = "AWS::ApplicationAutoScaling::ScalableTarget"
# inferstack.constructs.scaling_handover: deregisters a variant's scalable target before UpdateEndpoint, registers it
# again after.
SCALING_HANDOVER = "Custom::ScalingHandover"
AUTOSCALING_UPDATE_DOC = "https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-scaling-update.html"

# replaces-serving-resource: the protected (serving and stateful) types, plus listeners and listener rules
# (every load balancer of this app fronts a serving service) and a target group a listener forwards to or a
# service registers its tasks in.
# Not AWS::SageMaker::EndpointConfig: a new EndpointConfig is the normal way an endpoint changes (instance
# type, image, model): SageMaker moves the Endpoint to the new config under its deployment guardrails
# (blue/green, auto-rollback) and CloudFormation deletes the old config once the Endpoint no longer uses it.
# Nothing serves from a config; the Endpoint does, and the Endpoint is a protected type.
SERVING_TYPES = PROTECTED_TYPES | {LISTENER, RULE}
# interrupts-traffic: replacing one of these, or removing it while its stack stays, takes requests away
# (plus a target group a listener or rule forwards to).
TRAFFIC_TYPES = {
    LOAD_BALANCER: "a new load balancer (new DNS name) takes over and the old one is deleted with its listeners",
    LISTENER: "the listener is deleted and created again: requests on its port fail in between",
    SERVICE: "a new service starts its tasks while the old one is deleted",
    ENDPOINT: "a new endpoint is created and the old one deleted",
    COMPONENT: "the component's model copies are deleted and created again",
    TARGET_GROUP: "the listener forwards to a new, empty target group until tasks register in it",
}


@dataclass
class _Stack:
    """What one stack's templates (base and head together) say about its load balancing."""

    stays: bool  # the stack exists in the head: a removal here is of a resource, not of a retired model
    production_rules: set[str] = field(default_factory=set)
    weighted_listeners: set[str] = field(default_factory=set)  # default action is a weighted forward
    forwarded: set[str] = field(default_factory=set)  # what listeners and rules forward to (target groups)
    registered: set[str] = field(default_factory=set)  # target groups ECS services register tasks in
    head: dict[str, dict] = field(default_factory=dict)  # the head template's resources
    base: dict[str, dict] = field(default_factory=dict)  # the base template's resources


def _targets(value: Any) -> set[str]:
    """Logical ids `value` refers to (Ref, Fn::GetAtt, Fn::Sub), pseudo parameters left out."""
    return {t for _, t in references(value, ()) if not t.startswith("AWS::")}


def _weighted_forward(actions: Any) -> bool:
    """A forward action that splits between two or more target groups (ECS blue/green's production rule)."""
    return isinstance(actions, list) and any(
        isinstance(a, dict)
        and isinstance((a.get("ForwardConfig") or {}).get("TargetGroups"), list)
        and len(a["ForwardConfig"]["TargetGroups"]) >= 2
        for a in actions
    )


def _stack_context(
    templates: Iterable[dict[str, dict]], head: dict[str, dict], base: dict[str, dict], stays: bool
) -> _Stack:
    context = _Stack(stays, head=head, base=base)
    for resources in templates:
        for logical_id, resource in resources.items():
            if not isinstance(resource, dict):
                continue
            props = resource.get("Properties") or {}
            kind = resource.get("Type")
            if kind == SERVICE:
                for balancer in props.get("LoadBalancers") or []:
                    if not isinstance(balancer, dict):
                        continue
                    advanced = balancer.get("AdvancedConfiguration") or {}
                    # Ref or Fn::GetAtt of the rule's logical id (an ARN literal names no rule of this stack).
                    context.production_rules |= _targets(advanced.get("ProductionListenerRule"))
                    context.registered |= _targets(balancer.get("TargetGroupArn"))
                    context.registered |= _targets(advanced.get("AlternateTargetGroupArn"))
            elif kind == RULE:
                if _weighted_forward(props.get("Actions")):
                    context.production_rules.add(logical_id)
                context.forwarded |= _targets(props.get("Actions"))
            elif kind == LISTENER:
                if _weighted_forward(props.get("DefaultActions")):
                    context.weighted_listeners.add(logical_id)
                context.forwarded |= _targets(props.get("DefaultActions"))
    return context


def classify(env: EnvironmentDiff, base: Environment, head: Environment) -> None:
    """Set `classes` and `class_reasons` on every resource change of a compared environment, and on its
    added and removed stacks."""
    for stack in env.stacks:
        stack.classes = {"added": ["adds"], "removed": ["removes"]}.get(stack.status, [])
        base_stack, head_stack = base.stacks.get(stack.name), head.stacks.get(stack.name)
        templates = [s.resources for s in (base_stack, head_stack) if s is not None]
        context = _stack_context(
            templates,
            head_stack.resources if head_stack else {},
            base_stack.resources if base_stack else {},
            head_stack is not None,
        )
        for change in stack.resources:
            found = _classes(change, context)
            change.classes = [c for c in CLASSES if c in found]
            change.class_reasons = {c: found[c] for c in change.classes}
            env.warnings += [
                f"{stack.name}: {change.logical_id}: {refused}"
                for refused in _refused_autoscaled_variants(change, context)
            ]
    _moved_addresses(env, base, head)


# --- a model's address ------------------------------------------------------------------------------

# What callers reach a model at: a load balancer's DNS name (a Neuron service), an endpoint's name (SageMaker).
ADDRESS_TYPES = {LOAD_BALANCER: "load balancer", ENDPOINT: "endpoint"}
NOT_SERVING_STACKS = ("Foundation", "LoadTest", "Pipeline")


def served_models(stack) -> set[str]:
    """The models a stack serves at its address: a neuron-cores fleet's members (its ModelPaths output), else the
    model a stack is named after when it holds a load balancer or an endpoint of its own."""
    outputs = stack.template.get("Outputs") or {}
    paths = (outputs.get("ModelPaths") or {}).get("Value")
    if isinstance(paths, str):
        try:
            return set(json.loads(paths))
        except ValueError:
            return set()
    if stack.name in NOT_SERVING_STACKS:
        return set()
    kinds = {str((r or {}).get("Type")) for r in stack.resources.values() if isinstance(r, dict)}
    return {stack.name} if kinds & set(ADDRESS_TYPES) else set()


def _moved_addresses(env: EnvironmentDiff, base: Environment, head: Environment) -> None:
    """A load balancer or endpoint that goes (its stack removed, or the resource removed or replaced) while a model
    it served is still served in the head, from another address: its callers must move. Classed interrupts-traffic
    (the resource, and a removed stack), and said in the environment's warnings."""
    head_servers = {model: stack.name for stack in head.stacks.values() for model in served_models(stack)}
    for stack in env.stacks:
        before = base.stacks.get(stack.name)
        if before is None:
            continue
        for change in stack.resources:
            kind = ADDRESS_TYPES.get(change.base_type or change.type or "")
            gone = change.action == "removed" or (change.replacement is not None and change.action != "added")
            if kind is None or not gone:
                continue
            for model in sorted(served_models(before)):
                server = head_servers.get(model)
                if server is None:
                    continue  # retired with it
                how = (
                    "replaced"
                    if change.action != "removed"
                    else ("removed with its stack" if stack.status == "removed" else "removed")
                )
                reason = (
                    f"{model} is still served (by {server}) but this {kind} is {how}: its address changes, "
                    f"and its callers must move to the new one"
                )
                if "interrupts-traffic" not in change.classes:
                    change.classes = [c for c in CLASSES if c in {*change.classes, "interrupts-traffic"}]
                earlier = change.class_reasons.get("interrupts-traffic")
                change.class_reasons["interrupts-traffic"] = f"{earlier}; {reason}" if earlier else reason
                if stack.status == "removed" and "interrupts-traffic" not in stack.classes:
                    stack.classes = [c for c in CLASSES if c in {*stack.classes, "interrupts-traffic"}]
                env.warnings.append(
                    f"{model}'s address changes: the {kind} {stack.name}/{change.logical_id} is "
                    f"{how} while {server} serves {model}; move its callers "
                    f"(docs/how-to/retire-a-model.md)"
                )


# --- one change ------------------------------------------------------------------------------------


def _paths(change: ResourceChange) -> list[str]:
    """Every property path the update writes: changed values, moved asset hashes, and references to
    replaced resources (their new physical ids flow in)."""
    found = [c.path for c in change.changes] + [a.path for a in change.asset_updates]
    found += [c["path"] for c in change.caused_by]
    return list(dict.fromkeys(found))


def _touched(change: ResourceChange, path: str) -> list[str]:
    """Paths of `change` at `path`, below it, or above it (a whole block added or removed)."""
    return [
        p for p in _paths(change) if p == path or p.startswith((path + ".", path + "[")) or path.startswith(p + ".")
    ]


def _value(resource: dict | None, *keys: str) -> Any:
    value: Any = (resource or {}).get("Properties") or {}
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _literal(value: Any) -> bool:
    return value is not None and not isinstance(value, (dict, list))


def _live(value: Any, resources: dict[str, dict]) -> bool:
    """Fn::GetAtt of a custom resource: a value read at deploy time (the live weights, range or count),
    not one the template fixes."""
    if not (isinstance(value, dict) and set(value) == {"Fn::GetAtt"}):
        return False
    target = next(iter(_targets(value)), "")
    kind = str((resources.get(target) or {}).get("Type", ""))
    return kind.startswith("Custom::") or kind == "AWS::CloudFormation::CustomResource"


def _replacement_text(change: ResourceChange) -> str:
    how = "replaced" if change.replacement == "always" else "may be replaced"
    reasons = [f"{r['path']} is {r['why']}" if r["path"] else r["why"] for r in change.replacement_reasons[:2]]
    more = len(change.replacement_reasons) - len(reasons)
    return how + (f" ({'; '.join(reasons)}" + (f"; {more} more" if more > 0 else "") + ")" if reasons else "")


def _classes(change: ResourceChange, stack: _Stack) -> dict[str, str]:
    if change.logical_id == "(template)":
        return {}
    found: dict[str, str] = {}
    if change.action == "removed":
        found["removes"] = "removed" + (f", kept by {change.kept_by_policy}" if change.kept_by_policy else "")
    elif change.action == "added" and not change.replaces:
        found["adds"] = "added"
    types = {t for t in (change.type, change.base_type) if t is not None}
    replaced = change.replacement is not None and change.action != "removed"
    removed_here = change.action == "removed" and stack.stays
    target_group = TARGET_GROUP in types
    forwarded = target_group and change.logical_id in stack.forwarded

    served_group = target_group and change.logical_id in stack.forwarded | stack.registered
    if replaced and (types & SERVING_TYPES or served_group):
        found["replaces-serving-resource"] = _replacement_text(change)

    traffic = [TRAFFIC_TYPES[t] for t in sorted(types) if t in TRAFFIC_TYPES and (t != TARGET_GROUP or forwarded)]
    if traffic and replaced:
        found["interrupts-traffic"] = f"{_replacement_text(change)}: {traffic[0]}"
    elif traffic and removed_here:
        found["interrupts-traffic"] = "removed while its stack stays: what it served stops"

    if change.action in ("modified", "asset-update"):
        reset = _resets(change, stack.head.get(change.logical_id), stack.head)
        if reset:
            found["resets-scaled-count"] = reset

    paused = [why for why, handed_over in _autoscaled_variant_changes(change, stack) if handed_over]
    if paused:
        found["pauses-autoscaling"] = "; ".join(paused)

    production = _production(change, stack, replaced, removed_here)
    if production:
        found["touches-production-rule"] = production
    return found


# --- an autoscaled variant's instance type ---------------------------------------------------------


def _config_variants(resources: dict[str, dict], endpoint: dict | None) -> dict[Any, Any]:
    """Variant name -> instance type of the EndpointConfig `endpoint` names by Fn::GetAtt, in `resources`."""
    config = next(iter(_targets(_value(endpoint, "EndpointConfigName"))), None)
    if config is None or (resources.get(config) or {}).get("Type") != ENDPOINT_CONFIG:
        return {}
    return {
        v.get("VariantName"): v.get("InstanceType")
        for v in _value(resources[config], "ProductionVariants") or []
        if isinstance(v, dict)
    }


def _scalable_variant(resources: dict[str, dict], resource_id: str) -> dict | None:
    """The ScalableTarget registering `resource_id` (endpoint/<name>/variant/<variant>), if the template has one."""
    return next(
        (
            r
            for r in resources.values()
            if isinstance(r, dict) and r.get("Type") == SCALABLE_TARGET and _value(r, "ResourceId") == resource_id
        ),
        None,
    )


def _handed_over(resources: dict[str, dict], endpoint_id: str, resource_id: str) -> bool:
    """The head has a scaling handover for `resource_id` that the Endpoint waits for."""
    depends = (resources.get(endpoint_id) or {}).get("DependsOn") or []
    depends = [depends] if isinstance(depends, str) else depends
    return any(
        (resources.get(d) or {}).get("Type") == SCALING_HANDOVER
        and _value(resources[d], "Target", "ResourceId") == resource_id
        for d in depends
    )


def _autoscaled_variant_changes(change: ResourceChange, stack: _Stack) -> list[tuple[str, bool]]:
    """(what happens, whether a scaling handover deregisters the target first) for each variant of an updated
    Endpoint that is a registered scalable target (a ScalableTarget in the base) and that the new EndpointConfig
    gives another instance type or drops: AWS refuses such an UpdateEndpoint while the target is registered."""
    if (
        change.type != ENDPOINT
        or change.action not in ("modified", "asset-update")
        or not _touched(change, "Properties.EndpointConfigName")
    ):
        return []
    base_endpoint, head_endpoint = stack.base.get(change.logical_id), stack.head.get(change.logical_id)
    name = _value(head_endpoint, "EndpointName")
    if not isinstance(name, str) or _value(base_endpoint, "EndpointName") != name:
        return []
    before, after = _config_variants(stack.base, base_endpoint), _config_variants(stack.head, head_endpoint)
    found = []
    for variant, instance_type in sorted(before.items()):
        resource_id = f"endpoint/{name}/variant/{variant}"
        if variant in after and after[variant] == instance_type:
            continue
        if _scalable_variant(stack.base, resource_id) is None:
            continue
        handed_over = _handed_over(stack.head, change.logical_id, resource_id)
        target = _scalable_variant(stack.head, resource_id)
        what = (
            f"variant {variant} moves from {instance_type} to {after[variant]}"
            if variant in after
            else f"variant {variant} ({instance_type}) is removed"
        )
        if not handed_over:
            found.append(
                (
                    f"{what} while it is a registered scalable target, and no scaling handover deregisters it "
                    f"first: AWS refuses the UpdateEndpoint and CloudFormation rolls the stack back "
                    f"({AUTOSCALING_UPDATE_DOC})",
                    False,
                )
            )
            continue
        low, high = _value(target, "MinCapacity"), _value(target, "MaxCapacity")
        base_target = _scalable_variant(stack.base, resource_id)
        if not (_literal(low) and _literal(high)):
            then = "CloudFormation's target takes the range read live at deploy time"
        elif (_value(base_target, "MinCapacity"), _value(base_target, "MaxCapacity")) == (low, high):
            then = f"the template's range ({low}-{high}) does not change"
        else:
            then = f"CloudFormation's target then sets the template's new range ({low}-{high})"
        found.append(
            (
                f"{what}: the scaling handover deregisters its scalable target (policies and scheduled "
                f"actions with it) before UpdateEndpoint; SageMaker starts the new instances at the variant's "
                f"current count (RetainAllVariantProperties) and moves traffic to them under the deployment "
                f"guardrails, and nothing scales until the update completes; then the target is registered "
                f"again with the range it had and the template's policies and schedule, and {then}. The "
                f"scaled count is kept, within that range",
                True,
            )
        )
    return found


def _refused_autoscaled_variants(change: ResourceChange, stack: _Stack) -> list[str]:
    return [why for why, handed_over in _autoscaled_variant_changes(change, stack) if not handed_over]


def _resets(change: ResourceChange, resource: dict | None, resources: dict[str, dict]) -> str | None:
    """Why this update would put an autoscaled count (or range) back to the template's, if it would."""

    def fixed(*keys: str) -> bool:  # the head sets it, and not to a value read live at deploy time
        value = _value(resource, *keys)
        return value is not None and not _live(value, resources)

    if change.type == SERVICE and _touched(change, "Properties.DesiredCount") and fixed("DesiredCount"):
        return (
            f"DesiredCount set to {_value(resource, 'DesiredCount')}: the update sets the service's task "
            "count, whatever autoscaling had set"
        )
    if change.type == ASG:
        for key in ("DesiredCapacity", "MinSize", "MaxSize"):
            # MinSize/MaxSize as for a scalable target: a literal written back over an off-hours window's range.
            literal_only = key != "DesiredCapacity"
            if (
                _touched(change, f"Properties.{key}")
                and fixed(key)
                and (not literal_only or _literal(_value(resource, key)))
            ):
                what = "desired capacity" if key == "DesiredCapacity" else "size range"
                return (
                    f"{key} set to {_value(resource, key)}: the update sets the group's {what}, "
                    "whatever scaling had set"
                )
    if change.type == ENDPOINT and _touched(change, "Properties.EndpointConfigName"):
        retain = _value(resource, "RetainAllVariantProperties")
        excluded = {
            str(v.get("VariantPropertyType"))
            for v in _value(resource, "ExcludeRetainedVariantProperties") or []
            if isinstance(v, dict)
        }
        if retain not in (True, "true", "True"):
            return (
                "a new EndpointConfig is applied without RetainAllVariantProperties: true: each variant's "
                "instance count goes back to the config's InitialInstanceCount"
            )
        if "DesiredInstanceCount" in excluded:
            return (
                "a new EndpointConfig is applied with DesiredInstanceCount excluded from the retained "
                "variant properties: the instance count goes back to InitialInstanceCount"
            )
    if change.type == COMPONENT:
        copies = _value(resource, "RuntimeConfig", "CopyCount")
        # From the type's CloudFormation resource provider: its update handler sends RuntimeConfig.CopyCount with
        # every UpdateInferenceComponent call, so with a literal CopyCount any update of the component (a new
        # Model, a changed specification) sets the copy count back to it; inferstack/constructs/live_values.py
        # relies on the same behaviour. That provider is not among the public
        # aws-cloudformation-resource-providers-sagemaker handlers, so no line of it can be cited here.
        if _literal(copies):
            return (
                f"RuntimeConfig.CopyCount is the literal {copies}: CloudFormation's handler sends it on "
                "every update, so the copy count goes back to it, whatever autoscaling had set"
            )
        changed = _touched(change, "Properties.RuntimeConfig.CopyCount")
        if copies is not None and changed and not _live(copies, resources):
            return "RuntimeConfig.CopyCount changes: the update sets the copy count, whatever autoscaling had set"
    if change.type == SCALABLE_TARGET:
        for key in ("MinCapacity", "MaxCapacity"):
            value = _value(resource, key)
            if _touched(change, f"Properties.{key}") and _literal(value):
                return (
                    f"{key} set to {value}: the update registers the template's range again, over the range "
                    "an off-hours window or an operator set"
                )
    return None


def _production(change: ResourceChange, stack: _Stack, replaced: bool, removed_here: bool) -> str | None:
    types = {change.type, change.base_type}
    if RULE in types and change.logical_id in stack.production_rules:
        paths = _touched(change, "Properties.Actions")
        if paths and change.action in ("modified", "asset-update"):
            return (
                f"{paths[0]} changes on a production listener rule: CloudFormation writes the template's "
                "actions, weights included, over the weights ECS set in its last deployment"
            )
        if replaced:
            return f"production listener rule {_replacement_text(change)}"
        if removed_here:
            return "production listener rule removed while its stack stays"
    updated = change.action in ("modified", "asset-update")
    if LISTENER in types and change.logical_id in stack.weighted_listeners and updated:
        paths = _touched(change, "Properties.DefaultActions")
        if paths:
            return (
                f"{paths[0]} changes on a listener whose default action is a weighted forward: CloudFormation "
                "writes the template's weights"
            )
    return None


# --- --fail-on -------------------------------------------------------------------------------------


def parse(values: Iterable[str]) -> list[str]:
    """--fail-on values (each may be comma-separated) -> classes; ValueError naming the valid ones."""
    wanted: list[str] = []
    for value in values:
        for name in (part.strip() for part in value.split(",")):
            if name == ANY:
                wanted += CLASSES
            elif name in CLASSES:
                wanted.append(name)
            else:
                raise ValueError(f"unknown class {name!r}; valid: {', '.join(CLASSES + (ANY,))}")
    return [c for c in CLASSES if c in wanted]


def offending(report: Report, wanted: Iterable[str]) -> list[str]:
    """One line per change with a wanted class: `env/stack/logical-id (type): class: why`. A whole stack added
    or removed is one line, not one per resource."""
    wanted = set(wanted)
    lines = []
    for env in report.environments:
        for stack in env.stacks:
            stack_hits = [c for c in stack.classes if c in wanted]
            if stack_hits:
                lines.append(
                    f"{env.name}/{stack.name}: stack {stack.status} ({stack.resource_count} resources): "
                    + ", ".join(stack_hits)
                )
            for change in stack.resources:
                hits = [c for c in change.classes if c in wanted and c not in stack.classes]
                if hits:
                    lines.append(
                        f"{env.name}/{change.stack}/{change.logical_id} ({change.type}): "
                        + "; ".join(f"{c}: {change.class_reasons[c]}" for c in hits)
                    )
    return lines
