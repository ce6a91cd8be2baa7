"""ECS native rollouts of the Neuron services (inferstack/neuron/deployment.py -> NeuronEcsService), asserted on the
shipped config's templates: the fleet intent-pack (canary 10 % for 10 minutes, bake 5; dev all at once) and the
dedicated intent-bert-inf2 (linear 25 % every 5 minutes, bake 5; dev all at once) in every environment: strategy
and steps, rollback alarms, no circuit breaker or rolling percentages, the alternate target group and
production listener rule of every model, the load-balancer role ECS shifts traffic with, and room for the whole
green fleet. The construct used directly for what the shipped config does not hold: a fleet that rolls (its
404 default stays), a rolling `deployment:` with its own maximum."""

from __future__ import annotations

import json
import math

import pytest
from aws_cdk.assertions import Template

from inferstack import config
from inferstack.capacity import packing, planning
from inferstack.neuron import deployment as neuron_deployment
from inferstack.neuron import routing
from inferstack.neuron.routing import catch_all_priority, rule_priority
from inferstack.schema.deployment import Deployment
from tests.support.live_values import as_created
from tests.support.neuron_service import build_direct
from tests.support.paths import CONFIG_DIR
from tests.support.templates import only

ENVS = ["dev", "staging", "prod"]
FLEET, FLEET_MEMBERS = "intent-pack", ("intent-bert", "duplicate-bert")
DEDICATED = "intent-bert-inf2"
# Worked out by hand from the YAML (wait_interval_seconds / 60 -> step bake, termination_wait_seconds / 60 ->
# bake; all-at-once bakes both): environments.yaml's intent-pack and intent-bert-inf2.yaml.
EXPECTED = {
    (FLEET, "dev"): {"Strategy": "BLUE_GREEN", "BakeTimeInMinutes": 3},
    (FLEET, "staging"): {
        "Strategy": "CANARY",
        "BakeTimeInMinutes": 5,
        "CanaryConfiguration": {"CanaryPercent": 10, "CanaryBakeTimeInMinutes": 10},
    },
    (FLEET, "prod"): {
        "Strategy": "CANARY",
        "BakeTimeInMinutes": 5,
        "CanaryConfiguration": {"CanaryPercent": 10, "CanaryBakeTimeInMinutes": 10},
    },
    (DEDICATED, "dev"): {"Strategy": "BLUE_GREEN", "BakeTimeInMinutes": 3},
    (DEDICATED, "staging"): {
        "Strategy": "LINEAR",
        "BakeTimeInMinutes": 5,
        "LinearConfiguration": {"StepPercent": 25, "StepBakeTimeInMinutes": 5},
    },
    (DEDICATED, "prod"): {
        "Strategy": "LINEAR",
        "BakeTimeInMinutes": 5,
        "LinearConfiguration": {"StepPercent": 25, "StepBakeTimeInMinutes": 5},
    },
}
STACKS = sorted(EXPECTED)


def resources(synthesized, stack: str, env: str) -> dict[str, dict]:
    """As a first deploy creates them (live-read weights at their planned values:
    tests/constructs/test_live_values.py)."""
    return as_created(synthesized.template(env, stack))["Resources"]


def served_models(stack: str) -> tuple[str, ...]:
    return FLEET_MEMBERS if stack == FLEET else (stack,)


def alarm_ids(res: dict, stack: str) -> dict[str, dict[str, str]]:
    """Model -> {"latency" | "errors": the logical id of its SLO alarm}, by the alarm's description."""
    found: dict[str, dict[str, str]] = {}
    for logical_id, resource in res.items():
        if resource["Type"] != "AWS::CloudWatch::Alarm":
            continue
        description = resource["Properties"]["AlarmDescription"]
        model = description.split(" ", 1)[0].removesuffix(":")
        if "p99 target response time" in description:
            found.setdefault(model, {})["latency"] = logical_id
        elif "target 5xx" in description:
            found.setdefault(model, {})["errors"] = logical_id
    assert set(found) == set(served_models(stack)), found
    return found


@pytest.mark.parametrize("stack, env", STACKS)
def test_strategy_steps_and_bake_time_per_environment(synthesized, project, stack, env):
    deployment = (project.fleets[stack] if stack == FLEET else project.model(stack)).deployment_for(env)
    rollout = neuron_deployment.rollout(deployment)
    assert rollout.shifts_traffic and not rollout.circuit_breaker
    _, service = only(Template.from_json(synthesized.template(env, stack)), "AWS::ECS::Service")
    settings = service["Properties"]["DeploymentConfiguration"]
    alarms = settings.pop("Alarms")
    # No circuit breaker (rolling only) and no rolling percentages (green scales to the full count instead).
    assert settings == EXPECTED[(stack, env)]
    assert settings["Strategy"] == rollout.strategy and settings["BakeTimeInMinutes"] == rollout.bake_time_minutes
    # Rollback on each model's SLO alarms: p99 latency and 5xx, the ones its dashboard row shows.
    ids = alarm_ids(resources(synthesized, stack, env), stack)
    assert alarms == {
        "Enable": True,
        "Rollback": True,
        "AlarmNames": [{"Ref": ids[model][kind]} for model in served_models(stack) for kind in ("latency", "errors")],
    }


@pytest.mark.parametrize("stack, env", STACKS)
def test_every_model_has_an_alternate_target_group_and_a_production_rule(synthesized, stack, env):
    res = resources(synthesized, stack, env)
    (service,) = [r for r in res.values() if r["Type"] == "AWS::ECS::Service"]
    (role_id,) = [
        k
        for k, r in res.items()
        if r["Type"] == "AWS::IAM::Role"
        and r["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "ecs.amazonaws.com"}
    ]
    entries = service["Properties"]["LoadBalancers"]
    assert len(entries) == len(served_models(stack))
    rules = []
    for entry in entries:
        advanced = entry["AdvancedConfiguration"]
        primary, alternate = entry["TargetGroupArn"]["Ref"], advanced["AlternateTargetGroupArn"]["Ref"]
        assert primary != alternate
        groups = [res[primary]["Properties"], res[alternate]["Properties"]]
        assert groups[0] == groups[1]  # same port, protocol, target type and readiness check
        assert groups[0]["Port"] == entry["ContainerPort"]
        assert advanced["RoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}
        assert "TestListenerRule" not in advanced
        rule = res[advanced["ProductionListenerRule"]["Ref"]]
        assert rule["Type"] == "AWS::ElasticLoadBalancingV2::ListenerRule"
        # Both groups on the rule, weighted: ECS fails the deployment unless both are associated with it.
        assert rule["Properties"]["Actions"] == [
            {
                "Type": "forward",
                "ForwardConfig": {
                    "TargetGroups": [
                        {"TargetGroupArn": {"Ref": primary}, "Weight": 100},
                        {"TargetGroupArn": {"Ref": alternate}, "Weight": 0},
                    ]
                },
            }
        ]
        rules.append((rule["Properties"]["Priority"], rule["Properties"]["Conditions"]))
    # The first model's rule takes every path, evaluated last; the others their own paths first.
    first, *others = served_models(stack)
    catch_all = {"Field": "path-pattern", "PathPatternConfig": {"Values": ["/*"]}}
    assert rules == [(catch_all_priority(first), [catch_all])] + [
        (
            rule_priority(m),
            [{"Field": "path-pattern", "PathPatternConfig": {"Values": [f"/v2/models/{m}", f"/v2/models/{m}/*"]}}],
        )
        for m in others
    ]
    # No fixed response anywhere on the listener: ECS blue/green refuses a mix of forward and other actions.
    for resource in res.values():
        if resource["Type"] == "AWS::ElasticLoadBalancingV2::Listener":
            assert {a["Type"] for a in resource["Properties"]["DefaultActions"]} == {"forward"}


@pytest.mark.parametrize("stack, env", STACKS)
def test_the_load_balancer_role_reaches_only_this_services_groups_rules_and_listener(synthesized, stack, env):
    res = resources(synthesized, stack, env)
    ((service_id, service),) = [(k, r) for k, r in res.items() if r["Type"] == "AWS::ECS::Service"]
    role_id = service["Properties"]["LoadBalancers"][0]["AdvancedConfiguration"]["RoleArn"]["Fn::GetAtt"][0]
    assert "ManagedPolicyArns" not in res[role_id]["Properties"]
    ((policy_id, policy),) = [
        (k, r)
        for k, r in res.items()
        if r["Type"] == "AWS::IAM::Policy" and r["Properties"]["Roles"] == [{"Ref": role_id}]
    ]
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    entries = service["Properties"]["LoadBalancers"]
    groups = sorted(
        [{"Ref": e["TargetGroupArn"]["Ref"]} for e in entries]
        + [{"Ref": e["AdvancedConfiguration"]["AlternateTargetGroupArn"]["Ref"]} for e in entries],
        key=json.dumps,
    )
    rules = sorted([e["AdvancedConfiguration"]["ProductionListenerRule"] for e in entries], key=json.dumps)
    (listener_id,) = [k for k, r in res.items() if r["Type"] == "AWS::ElasticLoadBalancingV2::Listener"]

    def as_list(value):
        return sorted(value if isinstance(value, list) else [value], key=json.dumps)

    assert set(statements) == {"ReadLoadBalancing", "RegisterTasks", "ShiftTraffic", "ModifyListener"}
    assert statements["ReadLoadBalancing"]["Resource"] == "*"  # Describe* takes no resource-level permission
    assert all(a.startswith("elasticloadbalancing:Describe") for a in statements["ReadLoadBalancing"]["Action"])
    assert sorted(statements["RegisterTasks"]["Action"]) == [
        "elasticloadbalancing:DeregisterTargets",
        "elasticloadbalancing:RegisterTargets",
    ]
    assert as_list(statements["RegisterTasks"]["Resource"]) == groups
    assert statements["ShiftTraffic"]["Action"] == "elasticloadbalancing:ModifyRule"
    assert as_list(statements["ShiftTraffic"]["Resource"]) == rules
    assert statements["ModifyListener"]["Resource"] == {"Ref": listener_id}
    # The service is created after the role can act and deleted before it stops being able to (the role by
    # the reference, its policy by DependsOn).
    assert policy_id in service["DependsOn"], service_id
    assert json.dumps({"Fn::GetAtt": [role_id, "Arn"]}) in json.dumps(service["Properties"])


@pytest.mark.parametrize("stack, env", STACKS)
def test_the_instance_group_holds_the_whole_green_fleet(synthesized, project, stack, env):
    plan = (
        packing.plan_fleet(stack, project.fleets[stack], project.fleet_members(stack), env, project.environments[env])
        if stack == FLEET
        else planning.plan(project.model(stack), env, project.environments[env])
    )
    (group,) = [
        r for r in resources(synthesized, stack, env).values() if r["Type"] == "AWS::AutoScaling::AutoScalingGroup"
    ]
    assert int(group["Properties"]["MaxSize"]) == 2 * plan.max_capacity


@pytest.mark.parametrize("stack, env", STACKS)
def test_scaling_and_alarms_read_both_target_groups(synthesized, stack, env):
    """The tasks sit in either group, and in both during a shift: a policy or an alarm on one would read an
    empty group every second deployment (and miss a failing canary)."""
    res = resources(synthesized, stack, env)
    (service,) = [r for r in res.values() if r["Type"] == "AWS::ECS::Service"]
    for entry in service["Properties"]["LoadBalancers"]:
        pair = {entry["TargetGroupArn"]["Ref"], entry["AdvancedConfiguration"]["AlternateTargetGroupArn"]["Ref"]}
        readers = [
            r
            for r in res.values()
            if r["Type"] in ("AWS::CloudWatch::Alarm", "AWS::ApplicationAutoScaling::ScalingPolicy")
            and any(f'"{g}"' in json.dumps(r) for g in pair)
        ]
        assert len(readers) == 4  # latency, 5xx and unhealthy-target alarms, the request-count policy
        for reader in readers:
            text = json.dumps(reader)
            assert all(f'"{g}"' in text for g in pair)
            assert "PredefinedMetricSpecification" not in text


# ----------------------------------------------------------------------------- the construct on its own


@pytest.fixture(scope="module")
def project_config():
    return config.load(CONFIG_DIR)


def test_a_fleet_that_rolls_keeps_one_target_group_per_model_and_its_404(project_config):
    members = project_config.fleet_members(FLEET)
    plan = packing.plan_fleet(
        FLEET, project_config.fleets[FLEET], members, "staging", project_config.environments["staging"]
    )
    tpl = build_direct(members[0], plan.instance_type, models=members, capacity=plan)  # rollout: default, ROLLING
    _, service = only(tpl, "AWS::ECS::Service")
    settings = service["Properties"]["DeploymentConfiguration"]
    assert (
        settings["Strategy"],
        settings["DeploymentCircuitBreaker"],
        settings["MaximumPercent"],
        settings["MinimumHealthyPercent"],
    ) == ("ROLLING", {"Enable": True, "Rollback": True}, 200, 100)
    assert len(settings["Alarms"]["AlarmNames"]) == 2 * len(members)
    assert not any("AdvancedConfiguration" in lb for lb in service["Properties"]["LoadBalancers"])
    assert len(tpl.find_resources("AWS::ElasticLoadBalancingV2::TargetGroup")) == len(members)
    _, listener = only(tpl, "AWS::ElasticLoadBalancingV2::Listener")
    (default,) = listener["Properties"]["DefaultActions"]
    assert default["Type"] == "fixed-response"
    assert json.loads(default["FixedResponseConfig"]["MessageBody"])["models"] == list(FLEET_MEMBERS)
    rules = tpl.find_resources("AWS::ElasticLoadBalancingV2::ListenerRule")
    assert sorted(r["Properties"]["Priority"] for r in rules.values()) == sorted(map(rule_priority, FLEET_MEMBERS))
    assert (
        tpl.find_resources(
            "AWS::IAM::Role",
            {
                "Properties": {
                    "AssumeRolePolicyDocument": {
                        "Statement": [
                            {
                                "Action": "sts:AssumeRole",
                                "Effect": "Allow",
                                "Principal": {"Service": "ecs.amazonaws.com"},
                            }
                        ]
                    }
                }
            },
        )
        == {}
    )


def test_a_rolling_deployment_sizes_the_group_to_its_maximum_percent(project_config):
    rollout = neuron_deployment.rollout(Deployment(strategy="rolling", size_percent=25))
    tpl = build_direct(project_config.model("intent-bert"), "inf1.xlarge", rollout=rollout)
    _, service = only(tpl, "AWS::ECS::Service")
    settings = service["Properties"]["DeploymentConfiguration"]
    assert (settings["Strategy"], settings["MaximumPercent"], settings["MinimumHealthyPercent"]) == (
        "ROLLING",
        125,
        100,
    )
    _, group = only(tpl, "AWS::AutoScaling::AutoScalingGroup")
    assert group["Properties"]["MaxSize"] == str(math.ceil(3 * 1.25))  # build_direct plans 1..3 tasks


def test_a_dedicated_canary_routes_every_path_through_its_production_rule(project_config):
    rollout = neuron_deployment.rollout(
        Deployment(strategy="canary", size_percent=5, wait_interval_seconds=120, termination_wait_seconds=60)
    )
    tpl = build_direct(project_config.model("intent-bert"), "inf1.xlarge", rollout=rollout)
    _, service = only(tpl, "AWS::ECS::Service")
    settings = service["Properties"]["DeploymentConfiguration"]
    assert {k: v for k, v in settings.items() if k != "Alarms"} == {
        "Strategy": "CANARY",
        "BakeTimeInMinutes": 1,
        "CanaryConfiguration": {"CanaryPercent": 5, "CanaryBakeTimeInMinutes": 2},
    }
    (entry,) = service["Properties"]["LoadBalancers"]
    _, rule = only(tpl, "AWS::ElasticLoadBalancingV2::ListenerRule")
    assert rule["Properties"]["Priority"] == catch_all_priority("intent-bert")
    assert rule["Properties"]["Conditions"][0]["PathPatternConfig"]["Values"] == ["/*"]
    assert entry["AdvancedConfiguration"]["ProductionListenerRule"] == {
        "Ref": next(iter(tpl.find_resources("AWS::ElasticLoadBalancingV2::ListenerRule")))
    }
    _, group = only(tpl, "AWS::AutoScaling::AutoScalingGroup")
    assert group["Properties"]["MaxSize"] == "6"


def test_members_whose_catch_all_priorities_collide_are_refused_once_traffic_shifts(project_config, monkeypatch):
    members = project_config.fleet_members(FLEET)
    plan = packing.plan_fleet(
        FLEET, project_config.fleets[FLEET], members, "staging", project_config.environments["staging"]
    )
    # Both members drawing one catch-all priority: fine while the fleet rolls (no catch-all rule), refused once the
    # first member's production rule takes every other path, since either may become first.
    monkeypatch.setattr(routing, "catch_all_priority", lambda model: 45_000)
    build_direct(members[0], plan.instance_type, models=members, capacity=plan)
    rollout = neuron_deployment.rollout(project_config.fleets[FLEET].deployment_for("staging"))
    with pytest.raises(ValueError, match="listener rule priorities collide.*catch-all rule priority 45000"):
        build_direct(members[0], plan.instance_type, models=members, capacity=plan, rollout=rollout)


# ----------------------------------------------------------------------------- a fleet reordered or its first retired


def fleet_rules_and_ports(models, plan, rollout) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """(rule logical id -> priority, target group logical id -> port, member -> port) of a traffic-shifting fleet
    built from `models` in that order."""
    tpl = build_direct(models[0], plan.instance_type, models=models, capacity=plan, rollout=rollout)
    rules = {
        k: r["Properties"]["Priority"]
        for k, r in tpl.find_resources("AWS::ElasticLoadBalancingV2::ListenerRule").items()
    }
    groups = {
        k: g["Properties"]["Port"] for k, g in tpl.find_resources("AWS::ElasticLoadBalancingV2::TargetGroup").items()
    }
    (task,) = tpl.find_resources("AWS::ECS::TaskDefinition").values()
    (container,) = task["Properties"]["ContainerDefinitions"]
    ports = {m["Name"]: m["ContainerPort"] for m in container["PortMappings"]}
    return rules, groups, ports


def update_clashes(before: dict[str, int], after: dict[str, int]) -> list[str]:
    """Rules of the new template asking for a priority another rule of the old one holds when the update starts
    (CloudFormation updates the rules in parallel, and deletes removed ones only in cleanup): PriorityInUse."""
    return [
        f"{rule} -> {priority}"
        for rule, priority in after.items()
        if priority != before.get(rule) and any(p == priority and r != rule for r, p in before.items())
    ]


def test_a_reordered_fleet_or_one_without_its_first_member_updates_without_a_priority_clash_or_new_ports(
    project_config,
):
    """Reordering a traffic-shifting fleet or retiring its first member moves no port (a member's target groups
    stay where they are) and asks for no listener rule priority another rule holds during the update."""
    members = project_config.fleet_members(FLEET)
    environment = project_config.environments["staging"]
    rollout = neuron_deployment.rollout(project_config.fleets[FLEET].deployment_for("staging"))
    plan = packing.plan_fleet(FLEET, project_config.fleets[FLEET], members, "staging", environment)
    rules, groups, ports = fleet_rules_and_ports(members, plan, rollout)

    reordered = list(reversed(members))
    plan_reordered = packing.plan_fleet(FLEET, project_config.fleets[FLEET], reordered, "staging", environment)
    rules_after, groups_after, ports_after = fleet_rules_and_ports(reordered, plan_reordered, rollout)
    assert ports_after == ports and groups_after == groups  # same target groups on the same ports
    assert set(rules_after) == set(rules) and rules_after != rules  # the two rules traded catch-all and paths
    assert update_clashes(rules, rules_after) == []

    first_gone = reordered[1:]  # the new first member (reordered[0]) retired
    plan_left = packing.plan_fleet(FLEET, project_config.fleets[FLEET], first_gone, "staging", environment)
    rules_left, groups_left, ports_left = fleet_rules_and_ports(first_gone, plan_left, rollout)
    assert ports_left == {m.name: ports[m.name] for m in first_gone}
    assert all(groups_left[k] == groups[k] for k in groups_left)
    assert update_clashes(rules_after, rules_left) == []


def test_positional_priorities_would_clash_on_both_updates():
    """What the update check above catches: today's rule ids with the priorities a position-given catch-all had
    (50000 for whichever member is first)."""
    before = {"FirstRoute": 50_000, "SecondRoute": rule_priority("duplicate-bert")}
    assert update_clashes(before, {"FirstRoute": rule_priority("intent-bert"), "SecondRoute": 50_000})
    assert update_clashes(before, {"SecondRoute": 50_000})
