"""The CLI deploy rehearsal's day two (rehearsal/cli_deploy.py): what ECS and autoscaling change on a
running deployment, done through the same APIs against the emulator; the config changes of a next release; the
read-back that an update kept production traffic, the scaled counts and the variants' scalable targets; a model
retired; and the sample models a platform team would add (one of each kind, named to sort before, between and
after the shipped ones).

What ECS does after a completed blue/green deployment is to leave the production rule forwarding to the other
target group (weights 0/100); Application Auto Scaling sets a service's desired count and an inference
component's copies; CloudFormation registers each endpoint variant's scalable target (moto's CloudFormation does
not model AWS::ApplicationAutoScaling::*). Here those calls are made by hand (moto runs no deployment and no
scaling), so the next deploy meets what a real account would hold."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml

from rehearsal.aws_rules.sagemaker import VARIANT_DIMENSION
from rehearsal.moto_patches import LIVE_VALUE

# The next release's config change: a Neuron model's batch size, and its fleet's maximum in dev.
CHANGED_MODEL, CHANGED_BATCH_SIZE = "intent-bert", 8
CHANGED_FLEET, CHANGED_FLEET_MAX = "intent-pack", 4
# And an autoscaled dedicated endpoint moved to another instance type, in the same deploy (the scaling handover,
# inferstack.constructs.scaling_handover). A sample model (add_sample_models): without it, reported as not run.
RETYPED_MODEL, RETYPED_TO = "a-sentiment", "ml.g4dn.2xlarge"
# Retired in the last day-two step: a member of the triton-shared fleet (its component goes, the endpoint stays),
# and the neuron-cores fleet's first member once release N+1 reordered it (its catch-all rule goes in cleanup
# while the new first member's takes a catch-all priority of its own; the others keep their ports and rules).
RETIRED_MODEL = "t5-spelling"
RETIRED_FLEET_MEMBER = "duplicate-bert"
# The load-test generators the rehearsal deploys in dev (the shipped dev has none): staging's settings.
LOAD_TEST_FROM = "staging"
# Set through the APIs as autoscaling would, then expected to survive the next deploys.
SCALED_TASKS = 2
SCALED_COPIES = (0, 2)  # the first fleet member scaled to zero, the others to two copies


@dataclass(frozen=True)
class Target:
    """A scalable target as Application Auto Scaling describes it: its range, the names of its policies and
    scheduled actions, and when it was registered."""

    resource_id: str
    capacity: tuple[int, int]
    policies: tuple[str, ...]
    scheduled: tuple[str, ...]
    registered_at: datetime


@dataclass
class LiveState:
    """What the rehearsal set on the running deployment and expects every later deploy to keep."""

    rules: dict[str, tuple[str, str]] = field(default_factory=dict)  # rule ARN -> (serving group, drained group)
    tasks: dict[tuple[str, str], int] = field(default_factory=dict)  # (cluster, service) -> desired count
    copies: dict[str, int] = field(default_factory=dict)  # inference component -> desired copies
    targets: dict[str, Target] = field(default_factory=dict)  # variant resource id -> its target as registered


def _forward_pair(actions: list[dict]) -> list[dict]:
    (action,) = [a for a in actions if a.get("Type") == "forward"]
    return (action.get("ForwardConfig") or {}).get("TargetGroups") or []


def shift_and_scale(aws, outputs_by_stack: dict[str, dict[str, str]]) -> LiveState:
    """On every traffic-shifting service, move each production rule to its alternate target group (what ECS
    leaves after a blue/green deployment: 0/100), set each service's desired count and each component's copies
    (what autoscaling does). Returns what was set."""
    ecs, elbv2, sagemaker = aws.client("ecs"), aws.client("elbv2"), aws.client("sagemaker")
    state = LiveState()
    members = []
    for _stack, outputs in sorted(outputs_by_stack.items()):
        if "ServiceName" in outputs:
            cluster, service_name = outputs["ClusterName"], outputs["ServiceName"]
            (service,) = ecs.describe_services(cluster=cluster, services=[service_name])["services"]
            for balancer in service.get("loadBalancers") or []:
                advanced = balancer.get("advancedConfiguration")
                if not advanced:
                    continue
                rule = advanced["productionListenerRule"]
                primary, alternate = balancer["targetGroupArn"], advanced["alternateTargetGroupArn"]
                elbv2.modify_rule(
                    RuleArn=rule,
                    Actions=[
                        {
                            "Type": "forward",
                            "ForwardConfig": {
                                "TargetGroups": [
                                    {"TargetGroupArn": primary, "Weight": 0},
                                    {"TargetGroupArn": alternate, "Weight": 100},
                                ]
                            },
                        }
                    ],
                )
                state.rules[rule] = (alternate, primary)
            ecs.update_service(cluster=cluster, service=service_name, desiredCount=SCALED_TASKS)
            state.tasks[(cluster, service_name)] = SCALED_TASKS
        elif "InferenceComponentName" in outputs:
            members.append(outputs["InferenceComponentName"])
    for index, component in enumerate(sorted(members)):
        copies = SCALED_COPIES[0] if index == 0 else SCALED_COPIES[1]
        sagemaker.update_inference_component_runtime_config(
            InferenceComponentName=component, DesiredRuntimeConfig={"CopyCount": copies}
        )
        state.copies[component] = copies
    return state


def _first_deploy_value(resources: dict, value) -> int:
    """A ScalableTarget's MinCapacity or MaxCapacity as its stack's first deploy resolved it: a number, or a
    scalable-range reader's (Custom::LiveValue) Min or Max, which answers the planned range while no target is
    registered (inferstack.constructs.live_values_handler)."""
    if isinstance(value, int):
        return value
    reader, attribute = (value.get("Fn::GetAtt") or [None, None]) if isinstance(value, dict) else (None, None)
    read = ((resources.get(reader) or {}).get("Properties") or {}).get("Read") or {}
    if (
        resources.get(reader, {}).get("Type") != LIVE_VALUE
        or read.get("Kind") != "scalable-range"
        or attribute not in ("Min", "Max")
    ):
        raise ValueError(f"a scalable target's capacity the rehearsal cannot resolve: {value}")
    return int(read["Planned"][0 if attribute == "Min" else 1])


def described_target(scaling, resource_id: str) -> Target | None:
    """`resource_id`'s variant target as Application Auto Scaling holds it now, or None."""
    key = {"ServiceNamespace": "sagemaker", "ScalableDimension": VARIANT_DIMENSION}
    found = scaling.describe_scalable_targets(**key, ResourceIds=[resource_id])["ScalableTargets"]
    if not found:
        return None
    policies = scaling.describe_scaling_policies(**key, ResourceId=resource_id)["ScalingPolicies"]
    scheduled = scaling.describe_scheduled_actions(**key, ResourceId=resource_id)["ScheduledActions"]
    return Target(
        resource_id,
        (found[0]["MinCapacity"], found[0]["MaxCapacity"]),
        tuple(sorted(p["PolicyName"] for p in policies)),
        tuple(sorted(a["ScheduledActionName"] for a in scheduled)),
        found[0]["CreationTime"],
    )


def register_variant_targets(aws, templates: dict[str, dict]) -> dict[str, Target]:
    """Register each endpoint variant's scalable target of `templates` (stack name -> template), with its scheduled
    actions and scaling policies, as CloudFormation does on AWS when it creates the stack's ScalableTarget and
    ScalingPolicy: moto's CloudFormation models neither, so without this no variant is autoscaled here and the next
    release's instance-type change would meet none (rule autoscaled-variant-update refuses an update that changes
    the instance type of a registered variant, as SageMaker does). Returns resource id -> the target as
    registered."""
    scaling = aws.client("application-autoscaling")
    registered = {}
    for _stack, template in sorted(templates.items()):
        resources = template.get("Resources") or {}
        for logical, resource in sorted(resources.items()):
            properties = resource.get("Properties") or {}
            if (
                resource["Type"] != "AWS::ApplicationAutoScaling::ScalableTarget"
                or properties.get("ScalableDimension") != VARIANT_DIMENSION
            ):
                continue
            key = {k: properties[k] for k in ("ServiceNamespace", "ResourceId", "ScalableDimension")}
            extra = {"RoleARN": properties["RoleARN"]} if isinstance(properties.get("RoleARN"), str) else {}
            if properties.get("Tags"):
                extra["Tags"] = {t["Key"]: t["Value"] for t in properties["Tags"]}
            low, high = (_first_deploy_value(resources, properties[k]) for k in ("MinCapacity", "MaxCapacity"))
            scaling.register_scalable_target(**key, MinCapacity=low, MaxCapacity=high, **extra)
            for action in properties.get("ScheduledActions") or []:
                scaling.put_scheduled_action(**key, **action)
            for policy in (
                r.get("Properties") or {}
                for r in resources.values()
                if r["Type"] == "AWS::ApplicationAutoScaling::ScalingPolicy"
            ):
                if policy.get("ScalingTargetId") == {"Ref": logical}:
                    scaling.put_scaling_policy(**key, **{k: v for k, v in policy.items() if k != "ScalingTargetId"})
            registered[key["ResourceId"]] = described_target(scaling, key["ResourceId"])
    return registered


def check_kept(
    aws, state: LiveState, after: str, gone: Callable[[str], bool] = lambda _name: False
) -> tuple[list[str], list[str]]:
    """(checks passed, problems): production still forwards to the group that served before `after`, on every
    production rule (a listener's default action is never reached behind the catch-all rule and ECS does not move
    it: not checked here); desired counts and copies as set; each variant still a scalable target with the range,
    policies and scheduled actions it was registered with. `gone(component, rule ARN or target)`: retired on
    purpose."""
    ecs, elbv2, sagemaker = aws.client("ecs"), aws.client("elbv2"), aws.client("sagemaker")
    checks, problems = [], []
    for rule, (serving, drained) in sorted(state.rules.items()):
        if gone(rule):
            continue
        (found,) = elbv2.describe_rules(RuleArns=[rule])["Rules"]
        weights = {g["TargetGroupArn"]: g.get("Weight") for g in _forward_pair(found["Actions"])}
        if weights.get(serving) == 100 and weights.get(drained) == 0:
            checks.append(
                f"after {after}: production rule {rule.rsplit('/', 3)[-3]}/.../{rule.rsplit('/', 1)[-1]} "
                f"still forwards 100% to the target group ECS left serving"
            )
        else:
            problems.append(f"after {after}: production rule {rule} moved: weights {weights} (serving {serving})")
    for (cluster, service), desired in sorted(state.tasks.items()):
        (found,) = ecs.describe_services(cluster=cluster, services=[service])["services"]
        if found["desiredCount"] == desired:
            checks.append(f"after {after}: {service} keeps the {desired} tasks autoscaling set")
        else:
            problems.append(
                f"after {after}: {service} desired count {found['desiredCount']}, autoscaling set {desired}"
            )
    for component, copies in sorted(state.copies.items()):
        if gone(component):
            continue
        found = sagemaker.describe_inference_component(InferenceComponentName=component)["RuntimeConfig"]
        if found["DesiredCopyCount"] == copies:
            checks.append(f"after {after}: {component} keeps the {copies} copies autoscaling set")
        else:
            problems.append(
                f"after {after}: {component} has {found['DesiredCopyCount']} copies, autoscaling set {copies}"
            )
    scaling = aws.client("application-autoscaling")
    for resource_id, target in sorted(state.targets.items()):
        if gone(resource_id):
            continue
        found = described_target(scaling, resource_id)
        if found is None:
            problems.append(f"after {after}: {resource_id} is no longer a scalable target")
        elif (found.capacity, found.policies, found.scheduled) != (target.capacity, target.policies, target.scheduled):
            problems.append(f"after {after}: {resource_id}'s scalable target is {found}, registered as {target}")
        else:
            checks.append(
                f"after {after}: {resource_id} keeps its scalable target ({target.capacity[0]}-"
                f"{target.capacity[1]}; scaling policies: {len(target.policies)}, scheduled actions: "
                f"{len(target.scheduled)})"
            )
    return checks, problems


# ----------------------------------------------------------------------------- config changes


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _dump(path: Path, data: dict) -> None:
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def enable_load_test(config_dir: Path, env_name: str) -> str:
    """Give `env_name` the load-test generators (a LoadTest stack) with LOAD_TEST_FROM's settings."""
    env_file = config_dir / "environments.yaml"
    environments = _load(env_file)
    settings = environments["environments"][LOAD_TEST_FROM]["load_test"]
    environments["environments"][env_name]["load_test"] = dict(settings)
    _dump(env_file, environments)
    return f"{env_name}: load_test as {LOAD_TEST_FROM}'s ({', '.join(f'{k} {v}' for k, v in settings.items())})"


def change_for_next_release(config_dir: Path) -> list[str]:
    """The config change of release N+1: a batch size, a fleet's capacity, the fleet reordered (its first member
    moved to the end, so RETIRED_FLEET_MEMBER leads it) and, where RETYPED_MODEL is configured, its dev instance
    type. Returns what changed."""
    model_file = config_dir / f"{CHANGED_MODEL}.yaml"
    model = _load(model_file)
    before = model["serving"]["max_batch_size"]
    model["serving"]["max_batch_size"] = CHANGED_BATCH_SIZE
    _dump(model_file, model)
    env_file = config_dir / "environments.yaml"
    environments = _load(env_file)
    dev = environments["fleets"][CHANGED_FLEET].setdefault("environments", {}).setdefault("dev", {})
    capacity = dev.setdefault("capacity", {})
    old_max = capacity.get("max")
    capacity["max"] = CHANGED_FLEET_MAX
    members = environments["fleets"][CHANGED_FLEET]["models"]
    order = [*members[1:], members[0]]
    if order[0] != RETIRED_FLEET_MEMBER:
        raise ValueError(f"{CHANGED_FLEET} reordered as {order}: {RETIRED_FLEET_MEMBER} should lead it")
    environments["fleets"][CHANGED_FLEET]["models"] = order
    _dump(env_file, environments)
    changes = [
        f"{CHANGED_MODEL}: serving.max_batch_size {before} -> {CHANGED_BATCH_SIZE}",
        f"{CHANGED_FLEET}: dev capacity.max {old_max} -> {CHANGED_FLEET_MAX}",
        f"{CHANGED_FLEET}: models {members} -> {order}",
    ]
    if (config_dir / f"{RETYPED_MODEL}.yaml").exists():
        changes.append(change_instance_type(config_dir))
    return changes


def change_instance_type(config_dir: Path) -> str:
    """Move RETYPED_MODEL's dev endpoint to RETYPED_TO, with a throughput profile for it (the planner sizes the
    fleet from it): the same single T4 GPU as ml.g4dn.xlarge, so that type's figures. Returns what changed."""
    path = config_dir / f"{RETYPED_MODEL}.yaml"
    model = _load(path)
    capacity = model.setdefault("environments", {}).setdefault("dev", {}).setdefault("capacity", {})
    before = capacity.get("instance_type", model["capacity"]["instance_type"])
    profile = model["throughput_profile"][before]
    model["throughput_profile"][RETYPED_TO] = {
        "throughput_per_second": profile["throughput_per_second"],
        "p99_latency_ms": profile["p99_latency_ms"],
        "source": f"rehearsal estimate: the same single T4 GPU as {before}, so its figures",
    }
    capacity["instance_type"] = RETYPED_TO
    _dump(path, model)
    return f"{RETYPED_MODEL}: dev capacity.instance_type {before} -> {RETYPED_TO}"


def retire(config_dir: Path, model: str) -> str:
    """Remove `model`'s file, its fleet membership and its image from the environments' pins (what a team does
    to retire it: validate refuses a pin naming a model that no longer exists)."""
    (config_dir / f"{model}.yaml").unlink()
    for pin in sorted((config_dir / "releases").glob("*.json")):
        data = json.loads(pin.read_text())
        if model in data.get("images", {}):
            del data["images"][model]
            pin.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    env_file = config_dir / "environments.yaml"
    environments = _load(env_file)
    fleets = [name for name, fleet in (environments.get("fleets") or {}).items() if model in fleet["models"]]
    for name in fleets:
        environments["fleets"][name]["models"].remove(model)
    _dump(env_file, environments)
    return f"{model}: file removed" + (f", left fleet {', '.join(fleets)}" if fleets else "")


# Added by `add_sample_models`: (new name, shipped file it copies, fleet it joins or None). Their names sort
# before, between and after the shipped models', one of each kind.
SAMPLE_MODELS = (
    ("a-sentiment", "bert-large-classifier", None),  # Triton, a dedicated endpoint
    ("faq-bert", "duplicate-bert", "intent-pack"),  # Neuron, a neuron-cores fleet member
    ("m-spelling", "t5-spelling", "triton-shared"),  # Triton, an inference component on a fleet
    ("zz-router", "intent-bert-inf2", None),  # Neuron, a service of its own
)


SAMPLE_PEAK_TPS = 50


def add_sample_models(config_dir: Path) -> list[str]:
    """Copy one shipped model of each kind under a new name (and into its fleet): what a platform team adds."""
    env_file = config_dir / "environments.yaml"
    environments = _load(env_file)
    added = []
    for name, source, fleet in SAMPLE_MODELS:
        data = _load(config_dir / f"{source}.yaml")
        data["name"] = name
        if fleet is None or environments["fleets"][fleet].get("deploy_in"):
            data["deploy_in"] = environments["fleets"][fleet]["deploy_in"] if fleet else ["dev", "staging"]
            for env_name in list(data.get("environments") or {}):
                if env_name not in data["deploy_in"]:  # an override where it is not deployed is refused
                    del data["environments"][env_name]
        else:  # on a fleet every environment deploys: a small share of it, so the fleet's maximum still holds
            data["slo"]["peak_tps"] = SAMPLE_PEAK_TPS
            for overrides in (data.get("environments") or {}).values():
                overrides.get("slo", {}).pop("peak_tps", None)
        _dump(config_dir / f"{name}.yaml", data)
        if fleet and "serving" in data and "port" in data["serving"]:
            # A neuron-cores member listens on a port of its own in the fleet's task.
            taken = [
                (_load(config_dir / f"{m}.yaml").get("serving") or {}).get("port", 8080)
                for m in environments["fleets"][fleet]["models"]
            ]
            data["serving"]["port"] = max(taken) + 1
            _dump(config_dir / f"{name}.yaml", data)
        if fleet:
            environments["fleets"][fleet]["models"].append(name)
        added.append(f"{name} (copy of {source}{', on fleet ' + fleet if fleet else ''})")
    _dump(env_file, environments)
    return added
