"""The CLI deploy rehearsal's day two (rehearsal/cli_deploy.py): what ECS and autoscaling change on a
running deployment, done through the same APIs against the emulator; the config changes of a next release; the
read-back that an update kept production traffic and the scaled counts; a model retired; and the sample models
a platform team would add (one of each kind, named to sort before, between and after the shipped ones).

What ECS does after a completed blue/green deployment is to leave the production rule forwarding to the other
target group (weights 0/100); Application Auto Scaling sets a service's desired count and an inference
component's copies. Here those calls are made by hand (moto runs no deployment and no scaling), so the next
deploy meets what a real account would hold."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

# The next release's config change: a Neuron model's batch size, and its fleet's maximum in dev.
CHANGED_MODEL, CHANGED_BATCH_SIZE = "intent-bert", 8
CHANGED_FLEET, CHANGED_FLEET_MAX = "intent-pack", 4
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


@dataclass
class LiveState:
    """What the rehearsal set on the running deployment and expects every later deploy to keep."""

    rules: dict[str, tuple[str, str]] = field(default_factory=dict)  # rule ARN -> (serving group, drained group)
    tasks: dict[tuple[str, str], int] = field(default_factory=dict)  # (cluster, service) -> desired count
    copies: dict[str, int] = field(default_factory=dict)  # inference component -> desired copies


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
    for stack, outputs in sorted(outputs_by_stack.items()):
        if "ServiceName" in outputs:
            cluster, service_name = outputs["ClusterName"], outputs["ServiceName"]
            (service,) = ecs.describe_services(cluster=cluster, services=[service_name])["services"]
            for balancer in service.get("loadBalancers") or []:
                advanced = balancer.get("advancedConfiguration")
                if not advanced:
                    continue
                rule = advanced["productionListenerRule"]
                primary, alternate = balancer["targetGroupArn"], advanced["alternateTargetGroupArn"]
                elbv2.modify_rule(RuleArn=rule, Actions=[{"Type": "forward", "ForwardConfig": {"TargetGroups": [
                    {"TargetGroupArn": primary, "Weight": 0}, {"TargetGroupArn": alternate, "Weight": 100}]}}])
                state.rules[rule] = (alternate, primary)
            ecs.update_service(cluster=cluster, service=service_name, desiredCount=SCALED_TASKS)
            state.tasks[(cluster, service_name)] = SCALED_TASKS
        elif "InferenceComponentName" in outputs:
            members.append(outputs["InferenceComponentName"])
    for index, component in enumerate(sorted(members)):
        copies = SCALED_COPIES[0] if index == 0 else SCALED_COPIES[1]
        sagemaker.update_inference_component_runtime_config(InferenceComponentName=component,
                                                            DesiredRuntimeConfig={"CopyCount": copies})
        state.copies[component] = copies
    return state


def check_kept(aws, state: LiveState, after: str, gone: Callable[[str], bool] = lambda _name: False
               ) -> tuple[list[str], list[str]]:
    """(checks passed, problems): production still forwards to the group that served before `after`, on every
    production rule (a listener's default action is never reached behind the catch-all rule and ECS does not move
    it: not checked here); desired counts and copies as set. `gone(component or rule ARN)`: retired on purpose."""
    ecs, elbv2, sagemaker = aws.client("ecs"), aws.client("elbv2"), aws.client("sagemaker")
    checks, problems = [], []
    for rule, (serving, drained) in sorted(state.rules.items()):
        if gone(rule):
            continue
        (found,) = elbv2.describe_rules(RuleArns=[rule])["Rules"]
        weights = {g["TargetGroupArn"]: g.get("Weight") for g in _forward_pair(found["Actions"])}
        if weights.get(serving) == 100 and weights.get(drained) == 0:
            checks.append(f"after {after}: production rule {rule.rsplit('/', 3)[-3]}/.../{rule.rsplit('/', 1)[-1]} "
                          f"still forwards 100% to the target group ECS left serving")
        else:
            problems.append(f"after {after}: production rule {rule} moved: weights {weights} (serving {serving})")
    for (cluster, service), desired in sorted(state.tasks.items()):
        (found,) = ecs.describe_services(cluster=cluster, services=[service])["services"]
        if found["desiredCount"] == desired:
            checks.append(f"after {after}: {service} keeps the {desired} tasks autoscaling set")
        else:
            problems.append(f"after {after}: {service} desired count {found['desiredCount']}, autoscaling set {desired}")
    for component, copies in sorted(state.copies.items()):
        if gone(component):
            continue
        found = sagemaker.describe_inference_component(InferenceComponentName=component)["RuntimeConfig"]
        if found["DesiredCopyCount"] == copies:
            checks.append(f"after {after}: {component} keeps the {copies} copies autoscaling set")
        else:
            problems.append(f"after {after}: {component} has {found['DesiredCopyCount']} copies, autoscaling set "
                            f"{copies}")
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
    """The config change of release N+1: a batch size, a fleet's capacity, and the fleet reordered (its first member
    moved to the end, so RETIRED_FLEET_MEMBER leads it). Returns what changed."""
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
    return [f"{CHANGED_MODEL}: serving.max_batch_size {before} -> {CHANGED_BATCH_SIZE}",
            f"{CHANGED_FLEET}: dev capacity.max {old_max} -> {CHANGED_FLEET_MAX}",
            f"{CHANGED_FLEET}: models {members} -> {order}"]


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
    ("a-sentiment", "bert-large-classifier", None),            # Triton, a dedicated endpoint
    ("faq-bert", "duplicate-bert", "intent-pack"),              # Neuron, a neuron-cores fleet member
    ("m-spelling", "t5-spelling", "triton-shared"),             # Triton, an inference component on a fleet
    ("zz-router", "intent-bert-inf2", None),                    # Neuron, a service of its own
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
            taken = [(_load(config_dir / f"{m}.yaml").get("serving") or {}).get("port", 8080)
                     for m in environments["fleets"][fleet]["models"]]
            data["serving"]["port"] = max(taken) + 1
            _dump(config_dir / f"{name}.yaml", data)
        if fleet:
            environments["fleets"][fleet]["models"].append(name)
        added.append(f"{name} (copy of {source}{', on fleet ' + fleet if fleet else ''})")
    _dump(env_file, environments)
    return added
