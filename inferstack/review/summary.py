"""What a stack runs and may do, read from its template alone, so a reviewer of an added or removed stack
(a model added or retired) need not open the template: its capacity (instance type, min and max), the IAM
actions its policies grant, and a monthly cost at list price.

The cost is the on-demand list price table the planner uses (inferstack.capacity.pricing) times the
template's min and max instance counts: the diff reads no config, so an environment's `prices:` overrides
and off-hours windows are not applied, and a model on a shared endpoint has no instances of its own."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from inferstack.capacity import pricing
from inferstack.review.assembly import Stack
from inferstack.review.template import references

ASG = "AWS::AutoScaling::AutoScalingGroup"
LAUNCH_TEMPLATE = "AWS::EC2::LaunchTemplate"
LAUNCH_CONFIGURATION = "AWS::AutoScaling::LaunchConfiguration"
SCALABLE_TARGET = "AWS::ApplicationAutoScaling::ScalableTarget"
ENDPOINT = "AWS::SageMaker::Endpoint"
ENDPOINT_CONFIG = "AWS::SageMaker::EndpointConfig"
COMPONENT = "AWS::SageMaker::InferenceComponent"
UNITS = {
    "ecs:service:DesiredCount": "tasks",
    "sagemaker:variant:DesiredInstanceCount": "instances",
    "sagemaker:inference-component:DesiredCopyCount": "copies",
}
KINDS = {
    "ecs:service:DesiredCount": "ECS service autoscaling",
    "sagemaker:variant:DesiredInstanceCount": "endpoint variant autoscaling",
    "sagemaker:inference-component:DesiredCopyCount": "inference component autoscaling",
}
POLICY_TYPES = ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
POLICY_HOLDERS = ("AWS::IAM::Role", "AWS::IAM::User", "AWS::IAM::Group")
AT_DEPLOY = "(set at deploy)"  # a count that is an intrinsic (e.g. read live by a custom resource)


@dataclass
class Capacity:
    resource: str  # logical id of what scales (or holds the count)
    kind: str  # "EC2 Auto Scaling group", "ECS service autoscaling", "managed instance scaling", ... (see KINDS)
    unit: str  # "instances" | "tasks" | "copies" | the scalable dimension
    min: int | str | None
    max: int | str | None
    instance_type: str | None = None
    on: str | None = None  # the endpoint an inference component's copies run on

    def range(self) -> str:
        return f"{self.min}" if self.min == self.max else f"{self.min}–{self.max}"


@dataclass
class StackSummary:
    capacity: list[Capacity] = field(default_factory=list)
    iam_actions: list[str] = field(default_factory=list)  # granted (Allow), deduplicated and sorted
    denied_actions: list[str] = field(default_factory=list)
    managed_policies: list[str] = field(default_factory=list)
    # {"usd_per_month_min", "usd_per_month_max"} at the template's min and max instance counts; None: see note
    cost: dict | None = None
    cost_note: str = ""

    def to_json(self) -> dict:
        return {
            "capacity": [asdict(c) for c in self.capacity],
            "iam_actions": self.iam_actions,
            "denied_actions": self.denied_actions,
            "managed_policies": self.managed_policies,
            "cost": self.cost,
            "cost_note": self.cost_note,
        }


def _text(value: Any) -> str:
    """A template value as text: literals as they are, references as ${Name} / ${Name.Attribute}."""
    if isinstance(value, (str, int, float)):
        return str(value)
    if isinstance(value, dict) and len(value) == 1:
        key, arg = next(iter(value.items()))
        if key == "Ref":
            return f"${{{arg}}}"
        if key == "Fn::GetAtt":
            return "${" + (".".join(map(str, arg)) if isinstance(arg, list) else str(arg)) + "}"
        if key == "Fn::Join" and isinstance(arg, list) and len(arg) == 2 and isinstance(arg[1], list):
            return str(arg[0]).join(_text(v) for v in arg[1])
        if key == "Fn::Sub":
            return str(arg[0] if isinstance(arg, list) else arg)
        if key == "Fn::ImportValue":
            return f"${{import {_text(arg)}}}"
    return json.dumps(value, sort_keys=True)


def _count(value: Any) -> int | str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return AT_DEPLOY


def _props(resource: dict | None) -> dict:
    props = (resource or {}).get("Properties") if isinstance(resource, dict) else None
    return props if isinstance(props, dict) else {}


def _target(value: Any) -> str | None:
    return next((t for _, t in references(value, ()) if not t.startswith("AWS::")), None)


def _of_type(resources: dict[str, dict], kind: str) -> list[tuple[str, dict]]:
    return sorted((k, r) for k, r in resources.items() if isinstance(r, dict) and r.get("Type") == kind)


# --- capacity --------------------------------------------------------------------------------------


def _asg(resources: dict[str, dict], logical_id: str, resource: dict) -> Capacity:
    props = _props(resource)
    instance_type = None
    spec = props.get("LaunchTemplate") or ((props.get("MixedInstancesPolicy") or {}).get("LaunchTemplate") or {}).get(
        "LaunchTemplateSpecification"
    )
    overrides = ((props.get("MixedInstancesPolicy") or {}).get("LaunchTemplate") or {}).get("Overrides") or []
    if isinstance(spec, dict):
        template = resources.get(_target(spec.get("LaunchTemplateId") or spec.get("LaunchTemplateName")) or "")
        instance_type = (_props(template).get("LaunchTemplateData") or {}).get("InstanceType")
    if overrides and isinstance(overrides, list):
        types = [str(o.get("InstanceType")) for o in overrides if isinstance(o, dict) and o.get("InstanceType")]
        instance_type = ", ".join(types) or instance_type
    if props.get("LaunchConfigurationName"):
        instance_type = _props(resources.get(_target(props["LaunchConfigurationName"]) or "")).get("InstanceType")
    return Capacity(
        logical_id,
        "EC2 Auto Scaling group",
        "instances",
        _count(props.get("MinSize")),
        _count(props.get("MaxSize")),
        _text(instance_type) if instance_type is not None else None,
    )


def _endpoint_variant(resources: dict[str, dict], endpoint_name: str, variant: str) -> tuple[str, dict] | None:
    """(config logical id, production variant) of the endpoint a scalable target names."""
    endpoints = _of_type(resources, ENDPOINT)
    named = [
        (k, r)
        for k, r in endpoints
        if _text(_props(r).get("EndpointName")) == endpoint_name
        or endpoint_name in (f"${{{k}}}", f"${{{k}.EndpointName}}")
    ]
    if not named and len(endpoints) == 1:
        named = endpoints
    for _, endpoint in named[:1]:
        config_id = _target(_props(endpoint).get("EndpointConfigName"))
        variants = [
            v for v in _props(resources.get(config_id or "")).get("ProductionVariants") or [] if isinstance(v, dict)
        ]
        chosen = [v for v in variants if v.get("VariantName") == variant] or variants[:1]
        if chosen and config_id:
            return config_id, chosen[0]
    return None


def _scalable_target(
    resources: dict[str, dict], logical_id: str, resource: dict, covered: set[tuple[str, str]]
) -> Capacity:
    props = _props(resource)
    dimension = _text(props.get("ScalableDimension"))
    capacity = Capacity(
        logical_id,
        KINDS.get(dimension, "scalable target"),
        UNITS.get(dimension, dimension),
        _count(props.get("MinCapacity")),
        _count(props.get("MaxCapacity")),
    )
    resource_id = _text(props.get("ResourceId"))
    parts = resource_id.split("/")
    if dimension == "sagemaker:variant:DesiredInstanceCount" and len(parts) == 4 and parts[0] == "endpoint":
        found = _endpoint_variant(resources, parts[1], parts[3])
        if found:
            config_id, variant = found
            covered.add((config_id, str(variant.get("VariantName"))))
            capacity.instance_type = _text(variant.get("InstanceType")) if variant.get("InstanceType") else None
            capacity.on = parts[1]
    elif dimension == "sagemaker:inference-component:DesiredCopyCount" and len(parts) == 2:
        for _, component in _of_type(resources, COMPONENT):
            if _text(_props(component).get("InferenceComponentName")) == parts[1]:
                capacity.on = _text(_props(component).get("EndpointName"))
    return capacity


def _endpoint_configs(resources: dict[str, dict], covered: set[tuple[str, str]]) -> list[Capacity]:
    """Variants no scalable target sizes: managed instance scaling's range, or a fixed instance count."""
    found = []
    for config_id, config in _of_type(resources, ENDPOINT_CONFIG):
        for variant in _props(config).get("ProductionVariants") or []:
            if not isinstance(variant, dict) or (config_id, str(variant.get("VariantName"))) in covered:
                continue
            instance_type = _text(variant["InstanceType"]) if variant.get("InstanceType") else None
            managed = variant.get("ManagedInstanceScaling") or {}
            if isinstance(managed, dict) and managed.get("Status") == "ENABLED":
                found.append(
                    Capacity(
                        config_id,
                        "managed instance scaling",
                        "instances",
                        _count(managed.get("MinInstanceCount")),
                        _count(managed.get("MaxInstanceCount")),
                        instance_type,
                    )
                )
            elif instance_type:
                count = _count(variant.get("InitialInstanceCount"))
                found.append(
                    Capacity(config_id, "endpoint variant (no autoscaling)", "instances", count, count, instance_type)
                )
    return found


def capacity(resources: dict[str, dict]) -> list[Capacity]:
    found = [_asg(resources, k, r) for k, r in _of_type(resources, ASG)]
    covered: set[tuple[str, str]] = set()
    found += [_scalable_target(resources, k, r, covered) for k, r in _of_type(resources, SCALABLE_TARGET)]
    return found + _endpoint_configs(resources, covered)


# --- IAM -------------------------------------------------------------------------------------------


def _documents(resources: dict[str, dict]) -> list[Any]:
    documents = []
    for _, resource in sorted(resources.items()):
        if not isinstance(resource, dict):
            continue
        props = _props(resource)
        if resource.get("Type") in POLICY_TYPES:
            documents.append(props.get("PolicyDocument"))
        elif resource.get("Type") in POLICY_HOLDERS:
            documents += [p.get("PolicyDocument") for p in props.get("Policies") or [] if isinstance(p, dict)]
    return documents


def _actions(value: Any) -> list[str]:
    values = value if isinstance(value, list) else [value]
    return [_text(v) for v in values if v is not None]


def iam(resources: dict[str, dict]) -> tuple[list[str], list[str], list[str]]:
    """(granted actions, denied actions, managed policies attached), each deduplicated and sorted."""
    granted: set[str] = set()
    denied: set[str] = set()
    managed: set[str] = set()
    for document in _documents(resources):
        statements = (document or {}).get("Statement") if isinstance(document, dict) else None
        for statement in statements if isinstance(statements, list) else [statements]:
            if not isinstance(statement, dict):
                continue
            actions = _actions(statement.get("Action"))
            actions += [f"all except {a}" for a in _actions(statement.get("NotAction"))]
            (denied if statement.get("Effect") == "Deny" else granted).update(actions)
    for _, resource in _of_type(resources, "AWS::IAM::Role"):
        for arn in _props(resource).get("ManagedPolicyArns") or []:
            text = _text(arn)
            managed.add(text.split(":policy/", 1)[1] if ":policy/" in text else text)
    return sorted(granted), sorted(denied), sorted(managed)


# --- cost ------------------------------------------------------------------------------------------


def _cost(found: list[Capacity]) -> tuple[dict | None, str]:
    instances = [c for c in found if c.unit == "instances" and c.instance_type]
    if not instances:
        copies = [c for c in found if c.unit == "copies" and c.on]
        if copies:
            return None, f"not estimated: its copies run on the instances of endpoint {copies[0].on} (the fleet's)"
        return None, "none: no instances of its own"
    low = high = 0.0
    sources = set()
    for c in instances:
        price = pricing.PRICES.get(c.instance_type or "")
        if price is None:
            return None, f"not estimated: no list price for {c.instance_type} in inferstack.capacity.pricing"
        if not isinstance(c.min, int) or not isinstance(c.max, int):
            return None, f"not estimated: the instance count of {c.resource} is {AT_DEPLOY}"
        low += price.usd_per_hour * c.min * pricing.HOURS_PER_MONTH
        high += price.usd_per_hour * c.max * pricing.HOURS_PER_MONTH
        sources.add(f"{price.source}, {price.recorded}")
    return (
        {"usd_per_month_min": round(low, 2), "usd_per_month_max": round(high, 2)},
        f"on-demand list price ({'; '.join(sorted(sources))}) x {pricing.HOURS_PER_MONTH} h at the template's "
        "min and max instances; environments.yaml price overrides and off-hours windows not applied",
    )


def summarize(stack: Stack) -> StackSummary:
    resources = stack.resources
    found = capacity(resources)
    granted, denied, managed = iam(resources)
    cost, note = _cost(found)
    return StackSummary(found, granted, denied, managed, cost, note)
