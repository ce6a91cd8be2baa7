"""A neuron-cores fleet (environments.yaml `fleets:`, kind neuron-cores): intent-bert and duplicate-bert on the
same Inferentia instances, served by one task of the fleet's stack, asserted on the synthesized templates of
the shipped config against inferstack.capacity.packing's plan (and, for dev, against numbers worked out by
hand from the YAML): the packed task (SERVER_MODELS on disjoint core ranges, one port each), one target group
and listener rule per model, one scaling policy per model with the planner's target, per-model alarms and
dashboard rows, dev's off-hours window on the service and on the Auto Scaling group, the outputs smoke reads,
and one image for every environment."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Template

from inferstack.aws import stack_outputs
from inferstack.capacity import packing
from inferstack.neuron.routing import CATCH_ALL_FIRST, MAX_TARGET_GROUPS, catch_all_priority, rule_priority
from tests.support.live_values import as_created
from tests.support.neuron_service import FLEET, PINNED_IDS
from tests.support.templates import image_asset, only

MEMBERS = ("intent-bert", "duplicate-bert")  # port and core order
ENVS = ["dev", "staging", "prod"]


def template(synthesized, env: str) -> Template:
    """The fleet's stack as a first deploy creates it (live-read weights and ranges at their planned values;
    tests/constructs/test_live_values.py tests that wiring)."""
    return Template.from_json(as_created(synthesized.template(env, FLEET)))


def plan_of(project, env: str) -> packing.NeuronFleetPlan:
    plan = packing.plan_fleet(
        FLEET, project.fleets[FLEET], project.fleet_members(FLEET), env, project.environments[env]
    )
    assert isinstance(plan, packing.NeuronFleetPlan)
    return plan


def container(tpl: Template) -> dict:
    _, task = only(tpl, "AWS::ECS::TaskDefinition")
    (definition,) = task["Properties"]["ContainerDefinitions"]
    return definition


def served_models(tpl: Template) -> list[dict]:
    environment = {e["Name"]: e["Value"] for e in container(tpl)["Environment"]}
    return json.loads(environment["SERVER_MODELS"])


def target_groups(tpl: Template, *, alternate: bool = False) -> dict[str, tuple[str, dict]]:
    """Model -> (logical id, properties), by the health check path (each model's readiness): the target group
    the service registers with, or (`alternate`) the one ECS's traffic-shifting deployments move it to."""
    _, service = only(tpl, "AWS::ECS::Service")
    wanted = {
        (lb.get("AdvancedConfiguration", {}).get("AlternateTargetGroupArn") if alternate else lb["TargetGroupArn"])[
            "Ref"
        ]
        for lb in service["Properties"]["LoadBalancers"]
    }
    found = {}
    for logical_id, group in tpl.find_resources("AWS::ElasticLoadBalancingV2::TargetGroup").items():
        if logical_id in wanted:
            path = group["Properties"]["HealthCheckPath"]
            found[path.removeprefix("/v2/models/").removesuffix("/ready")] = (logical_id, group["Properties"])
    return found


# ----------------------------------------------------------------------------- stacks


@pytest.mark.parametrize("env", ENVS)
def test_the_fleet_stack_serves_the_members_which_get_no_stack_of_their_own(synthesized, env):
    stacks = synthesized.templates[env]
    assert FLEET in stacks
    assert not set(MEMBERS) & set(stacks)
    tpl = template(synthesized, env)
    for resource_type, logical_id in PINNED_IDS.items():  # the same construct ids as a dedicated model's
        assert list(tpl.find_resources(resource_type)) == [logical_id]


# ----------------------------------------------------------------------------- the packed task


def test_dev_task_splits_the_cores_as_worked_out_from_the_yaml(synthesized):
    # dev: inf1.xlarge (4 cores), safety 0.5; intent-bert 1000/s per instance (250 per core) at 400 TPS,
    # duplicate-bert 970/s (242.5 per core) at 100 TPS. Two instances carry both with 2 + 1 cores; the spare
    # core goes to intent-bert (least headroom); 3 copies -> 3 workers (a divisor of 3, at most its 4).
    served = served_models(template(synthesized, "dev"))
    assert [(s["name"], s["port"], s["visible_cores"], s["workers"]) for s in served] == [
        ("intent-bert", 8080, "0-2", 3),
        ("duplicate-bert", 8081, "3", 1),
    ]
    assert [(s["max_batch_size"], s["max_queue_delay_ms"]) for s in served] == [(16, 1), (24, 5)]


def _cores(visible: str) -> set[int]:
    first, _, last = visible.partition("-")
    return set(range(int(first), int(last or first) + 1))


@pytest.mark.parametrize("env", ENVS)
def test_each_model_on_its_own_cores_and_port_as_planned(synthesized, project, env):
    plan = plan_of(project, env)
    tpl = template(synthesized, env)
    served = served_models(tpl)
    assert [(s["name"], s["port"], s["visible_cores"], s["workers"]) for s in served] == [
        (s.model, s.port, s.visible_cores, s.workers) for s in plan.shares
    ]
    ranges = [_cores(s["visible_cores"]) for s in served]
    assert not ranges[0] & ranges[1], "core ranges overlap"
    assert set().union(*ranges) <= set(range(plan.neuron_cores))
    environment = {e["Name"]: e["Value"] for e in container(tpl)["Environment"]}
    assert environment["NEURON_RT_VISIBLE_CORES"] == f"0-{plan.neuron_cores - 1}"  # the task owns the host
    assert "MODEL_NAME" not in environment and "PORT" not in environment  # not beside SERVER_MODELS
    assert container(tpl)["PortMappings"] == [
        {"ContainerPort": s.port, "Name": s.model, "Protocol": "tcp"} for s in plan.shares
    ]
    _, service = only(tpl, "AWS::ECS::Service")
    groups = target_groups(tpl)
    assert sorted(
        (lb["ContainerPort"], lb["TargetGroupArn"]["Ref"]) for lb in service["Properties"]["LoadBalancers"]
    ) == sorted((s.port, groups[s.model][0]) for s in plan.shares)


def test_one_image_with_every_member_compiled_for_the_generation(synthesized):
    sources = {
        env: image_asset(synthesized.outdir, synthesized.stages[env].fleets[FLEET].artifact_id, env) for env in ENVS
    }
    dev = sources["dev"]
    assert dev["dockerFile"] == "Dockerfile.inf1" and dev["platform"] == "linux/amd64"
    assert set(dev["dockerBuildArgs"]) == {"MODELS", "NEURON_TARGET"}  # no MODEL_SOURCE beside MODELS
    assert dev["dockerBuildArgs"]["NEURON_TARGET"] == "inf1"
    models = json.loads(dev["dockerBuildArgs"]["MODELS"])
    assert [m["name"] for m in models] == list(MEMBERS)
    assert models[1] == {
        "name": "duplicate-bert",
        "model": "bert-base-uncased",
        "revision": None,
        "task": "text-classification",
        "labels": ["distinct", "duplicate"],
        "batch_size": 6,
        "sequence_length": 128,
        "neuron_cores": 1,
        "parallelism": "data-parallel",
        "compiler_args": ["--fp32-cast=all"],
    }
    # The same build in every environment (inf1.xlarge in dev, inf1.6xlarge elsewhere): one image promotes.
    assert all(source == dev for source in sources.values())


# ----------------------------------------------------------------------------- traffic


@pytest.mark.parametrize("env", ENVS)
def test_two_target_groups_per_model_on_its_port_checking_its_readiness(synthesized, project, env):
    """Every environment rolls the fleet out blue/green or canary: each model has its target group and the
    alternate one ECS moves it to, alike."""
    plan = plan_of(project, env)
    tpl = template(synthesized, env)
    assert len(tpl.find_resources("AWS::ElasticLoadBalancingV2::TargetGroup")) == 2 * len(MEMBERS)
    for groups in (target_groups(tpl), target_groups(tpl, alternate=True)):
        assert set(groups) == set(MEMBERS)
        for share in plan.shares:
            _, props = groups[share.model]
            assert (props["Port"], props["Protocol"], props["TargetType"]) == (share.port, "HTTP", "ip")
            assert props["HealthCheckPath"] == f"/v2/models/{share.model}/ready"


@pytest.mark.parametrize("env", ENVS)
def test_listener_routes_each_models_paths_and_the_first_model_every_other_path(synthesized, env):
    """Production rules ECS re-weights: each model's paths to its two target groups (100/0); the first model's
    rule takes every other path too, evaluated last, and the default action is a forward (never reached): a
    listener mixing forward with fixed-response actions fails ECS blue/green. Unknown paths get the first
    model's own JSON 404."""
    tpl = template(synthesized, env)
    groups, alternates = target_groups(tpl), target_groups(tpl, alternate=True)
    (listener_id,) = tpl.find_resources("AWS::ElasticLoadBalancingV2::Listener")

    def weighted(model: str) -> list[dict]:
        return [
            {
                "Type": "forward",
                "ForwardConfig": {
                    "TargetGroups": [
                        {"TargetGroupArn": {"Ref": groups[model][0]}, "Weight": 100},
                        {"TargetGroupArn": {"Ref": alternates[model][0]}, "Weight": 0},
                    ]
                },
            }
        ]

    routed = {}
    for rule in tpl.find_resources("AWS::ElasticLoadBalancingV2::ListenerRule").values():
        props = rule["Properties"]
        assert props["ListenerArn"] == {"Ref": listener_id}
        (condition,) = props["Conditions"]
        routed[tuple(condition["PathPatternConfig"]["Values"])] = (props["Actions"], props["Priority"])
    first, *others = MEMBERS
    assert routed == {
        ("/*",): (weighted(first), catch_all_priority(first)),
        **{(f"/v2/models/{m}", f"/v2/models/{m}/*"): (weighted(m), rule_priority(m)) for m in others},
    }
    assert all(rule_priority(m) < CATCH_ALL_FIRST <= catch_all_priority(first) for m in others)
    _, listener = only(tpl, "AWS::ElasticLoadBalancingV2::Listener")
    assert listener["Properties"]["DefaultActions"] == weighted(first)


def test_rule_priorities_come_from_the_names_in_two_ranges():
    # A model keeps its priorities when others join, leave or move (tests/constructs/test_neuron_rollouts.py
    # updates a reordered fleet); every path rule sits below every catch-all, which is evaluated last.
    for name in ("intent-bert", "duplicate-bert", "a", "z" * 40):
        assert 1 <= rule_priority(name) < CATCH_ALL_FIRST <= catch_all_priority(name) <= 50_000
    assert MAX_TARGET_GROUPS == 5


# ----------------------------------------------------------------------------- scaling


def policies(tpl: Template) -> dict[str, dict]:
    """Model -> its request-count target tracking configuration, by the target groups its metrics name."""
    groups = {logical_id: model for model, (logical_id, _) in target_groups(tpl).items()}
    found = {}
    for policy in tpl.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy").values():
        tracking = policy["Properties"]["TargetTrackingScalingPolicyConfiguration"]
        if "RequestCountPerTarget" not in json.dumps(tracking):
            continue  # the InFlight policies: tests/neuron/test_neuron_metrics.py
        (model,) = {m for logical_id, m in groups.items() if f'"{logical_id}"' in json.dumps(tracking)}
        found[model] = tracking
    return found


def request_queries(tracking: dict) -> tuple[list[dict], dict]:
    """(the metric queries, the returned expression) of a request-count policy on both target groups."""
    queries = tracking["CustomizedMetricSpecification"]["Metrics"]
    (expression,) = [q for q in queries if q["ReturnData"]]
    return [q for q in queries if not q["ReturnData"]], expression


@pytest.mark.parametrize("env", ENVS)
def test_one_request_count_policy_per_model_with_the_planners_target(synthesized, project, env):
    plan = plan_of(project, env)
    tpl = template(synthesized, env)
    _, target = only(tpl, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert (target["Properties"]["MinCapacity"], target["Properties"]["MaxCapacity"]) == (
        plan.min_capacity,
        plan.max_capacity,
    )
    found = policies(tpl)
    assert set(found) == set(MEMBERS)
    groups, alternates = target_groups(tpl), target_groups(tpl, alternate=True)
    for model, tracking in found.items():
        # ALBRequestCountPerTarget follows one target group; the tasks move between two, so the policy sums both
        metrics, expression = request_queries(tracking)
        assert [
            (
                q["MetricStat"]["Metric"]["MetricName"],
                q["MetricStat"]["Stat"],
                q["MetricStat"]["Metric"]["Dimensions"][1],
            )
            for q in metrics
        ] == [
            (
                "RequestCountPerTarget",
                "Sum",
                {"Name": "TargetGroup", "Value": {"Fn::GetAtt": [g, "TargetGroupFullName"]}},
            )
            for g in (groups[model][0], alternates[model][0])
        ]
        a, b = (q["Id"] for q in metrics)
        assert expression["Expression"] == f"FILL({a}, 0) + FILL({b}, 0)"
        assert tracking["TargetValue"] == pytest.approx(plan.target_per_task_per_minute(model))
    _, asg = only(tpl, "AWS::AutoScaling::AutoScalingGroup")
    # blue/green and canary start the whole green fleet beside blue: one task per instance, twice the max
    assert (asg["Properties"]["MinSize"], asg["Properties"]["MaxSize"]) == (
        str(plan.min_capacity),
        str(plan.max_capacity * 2),
    )


def test_dev_targets_worked_out_by_hand(synthesized):
    # cores x per-core throughput x safety factor 0.5 x 60 s
    found = policies(template(synthesized, "dev"))
    assert found["intent-bert"]["TargetValue"] == 3 * 250 * 0.5 * 60 == 22500
    assert found["duplicate-bert"]["TargetValue"] == pytest.approx(1 * 242.5 * 0.5 * 60) == 7275


# ----------------------------------------------------------------------------- off hours


def test_dev_closes_at_night_on_the_service_and_the_instances(synthesized, project):
    plan = plan_of(project, "dev")
    tpl = template(synthesized, "dev")
    _, target = only(tpl, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert target["Properties"]["ScheduledActions"] == [
        {
            "ScalableTargetAction": {"MinCapacity": 0, "MaxCapacity": 0},
            "Schedule": "cron(0 20 ? * MON-FRI *)",
            "ScheduledActionName": "OffHours1Start",
            "Timezone": "Europe/Berlin",
        },
        {
            "ScalableTargetAction": {"MinCapacity": plan.min_capacity, "MaxCapacity": plan.max_capacity},
            "Schedule": "cron(0 7 ? * MON-FRI *)",
            "ScheduledActionName": "OffHours1End",
            "Timezone": "Europe/Berlin",
        },
    ]
    asg_id, asg = only(tpl, "AWS::AutoScaling::AutoScalingGroup")
    actions = sorted(
        (a["Properties"] for a in tpl.find_resources("AWS::AutoScaling::ScheduledAction").values()),
        key=lambda a: a["MinSize"],
    )
    # The group's minimum follows (ECS never changes it), its maximum stays above zero (or managed scaling
    # could not scale out again), and the desired count stays ECS's.
    assert actions == [
        {
            "AutoScalingGroupName": {"Ref": asg_id},
            "MinSize": 0,
            "Recurrence": "0 20 * * MON-FRI",
            "TimeZone": "Europe/Berlin",
        },
        {
            "AutoScalingGroupName": {"Ref": asg_id},
            "MinSize": plan.min_capacity,
            "Recurrence": "0 7 * * MON-FRI",
            "TimeZone": "Europe/Berlin",
        },
    ]
    assert int(asg["Properties"]["MaxSize"]) > 0
    # a deploy inside the window does not reset the group to the template's sizes
    assert asg["UpdatePolicy"]["AutoScalingScheduledAction"] == {"IgnoreUnmodifiedGroupSizeProperties": True}
    _, provider = only(tpl, "AWS::ECS::CapacityProvider")
    settings = provider["Properties"]["AutoScalingGroupProvider"]
    assert settings["ManagedScaling"]["Status"] == "ENABLED"
    assert settings["ManagedTerminationProtection"] == "ENABLED"
    assert asg["Properties"]["NewInstancesProtectedFromScaleIn"] is True


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_no_window_no_schedule(synthesized, env):
    tpl = template(synthesized, env)
    _, target = only(tpl, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert "ScheduledActions" not in target["Properties"]
    assert tpl.find_resources("AWS::AutoScaling::ScheduledAction") == {}


# ----------------------------------------------------------------------------- observability


@pytest.mark.parametrize("env", ENVS)
def test_alarms_per_model_against_its_slo_and_per_task(synthesized, project, env):
    plan = plan_of(project, env)
    tpl = template(synthesized, env)
    groups = target_groups(tpl)
    alternates = target_groups(tpl, alternate=True)
    alarms = [a["Properties"] for a in tpl.find_resources("AWS::CloudWatch::Alarm").values()]
    assert len(alarms) == 5 * len(MEMBERS) + 3  # latency, 5xx, unhealthy targets, Neuron errors, shedding; 3 per task
    for share in plan.shares:
        group_id, alternate_id = groups[share.model][0], alternates[share.model][0]
        mine = [a for a in alarms if f'"{group_id}"' in json.dumps(a)]
        assert all(f'"{alternate_id}"' in json.dumps(a) for a in mine)  # both target groups, every alarm
        read = {a["AlarmDescription"].split(": ", 1)[1].split(" ")[0]: a for a in mine}
        assert set(read) == {"p99", "target", "targets"}  # latency, 5xx, unhealthy targets
        latency = read["p99"]
        assert latency["AlarmDescription"].startswith(f"{share.model} ({FLEET}): p99 target response time")
        assert latency["Threshold"] == share.slo_p99_ms / 1000
        stats = [
            (q["MetricStat"]["Metric"]["MetricName"], q["MetricStat"]["Stat"])
            for q in latency["Metrics"]
            if "MetricStat" in q
        ]
        assert stats == [("TargetResponseTime", "p99")] * 2
        (expression,) = [q["Expression"] for q in latency["Metrics"] if "Expression" in q]
        assert expression.startswith("MAX([")  # the worse group: a slow canary alarms however little it takes
    task_level = {a["MetricName"] for a in alarms if a.get("Namespace") in ("AWS/ECS", "AWS/ECS/ManagedScaling")}
    assert task_level == {"CPUUtilization", "MemoryUtilization", "CapacityProviderReservation"}
    # intent-bert's SLO is 10 ms, duplicate-bert's 50 ms: each alarm its own
    assert sorted(a["Threshold"] for a in alarms if "p99 target response time" in a["AlarmDescription"]) == [0.01, 0.05]


def test_dashboard_has_a_row_per_model(synthesized):
    _, dashboard = only(template(synthesized, "dev"), "AWS::CloudWatch::Dashboard")
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for model in MEMBERS:
        for title in (
            "requests per task per minute",
            "target response time (s)",
            "target 5xx (% of requests)",
            "targets",
            "in flight and queue depth per worker",
            "batch size (rows)",
            "inference latency (ms)",
            "NeuronCore utilization (%), device memory (bytes)",
        ):
            assert f"{model}: {title}" in body
    assert "Requests per minute, by model" in body and "RunningTaskCount" in body
    assert "NeuronCore utilization, task (%)" in body


# ----------------------------------------------------------------------------- outputs


def test_outputs_let_smoke_and_promote_reach_every_member(synthesized):
    outputs = synthesized.template("dev", FLEET)["Outputs"]
    assert {
        "Url",
        "LoadBalancerDnsName",
        "ClusterName",
        "ServiceName",
        "LogGroupName",
        stack_outputs.MODEL_PATHS,
    } <= set(outputs)
    assert outputs["ServiceName"]["Value"] == {"Fn::GetAtt": [PINNED_IDS["AWS::ECS::Service"], "Name"]}
    assert json.loads(outputs[stack_outputs.MODEL_PATHS]["Value"]) == {m: f"/v2/models/{m}" for m in MEMBERS}
