"""The Neuron services read the serving container's own CloudWatch metrics (EMF) exactly as the container writes
them: every alarm, dashboard graph and scaling policy on namespace inferstack/Serving names a metric, a dimension
set and a Service value that inferstack/neuron/metrics.py declares (tests/container/neuron/test_metrics_contract.py
holds that module equal to the container's emf.py and neuron_monitor_emf.py) and that the task sets
(SERVER_METRICS_SERVICE). Checked on every Neuron stack of every environment of the shipped config, and the
concurrency policies' targets against the planner."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from inferstack.capacity import packing, planning
from inferstack.neuron import metrics
from tests.support.dashboard_body import render_dashboard_body

ENVS = ["dev", "staging", "prod"]
NEURON_STACKS = ("intent-pack", "intent-bert-inf2")
# What each metric is written under: the serving metrics per model and per worker, neuron-monitor's per model
# and per task (dimension keys as sets: a template lists them sorted by name).
DIMENSION_SETS = {
    **{
        name: {frozenset(s) for s in metrics.SERVING_DIMENSION_SETS}
        for name in {**metrics.SERVING_UNITS, **metrics.ADMISSION_UNITS}
    },
    **{name: {frozenset(s) for s in metrics.NEURON_MONITOR_DIMENSION_SETS} for name in metrics.NEURON_MONITOR_UNITS},
}


def container_environment(template: dict) -> dict[str, str]:
    (task,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::ECS::TaskDefinition"]
    (definition,) = task["Properties"]["ContainerDefinitions"]
    return {e["Name"]: e["Value"] for e in definition["Environment"]}


def served_models(template: dict) -> set[str]:
    environment = container_environment(template)
    if "SERVER_MODELS" in environment:
        return {m["name"] for m in json.loads(environment["SERVER_MODELS"])}
    return {environment["MODEL_NAME"]}


def serving_metrics_read(template: dict) -> Iterator[tuple[str, str, dict[str, str]]]:
    """(where, metric name, dimensions) of every inferstack/Serving metric an alarm, a scaling policy or a
    dashboard graph reads."""
    for logical_id, resource in template["Resources"].items():
        props = resource["Properties"]
        if resource["Type"] == "AWS::CloudWatch::Alarm":
            queries = [q["MetricStat"]["Metric"] for q in props.get("Metrics", []) if "MetricStat" in q]
            single = [props] if "MetricName" in props else []
            for metric in single + queries:
                if metric.get("Namespace") == metrics.NAMESPACE:
                    yield logical_id, metric["MetricName"], {d["Name"]: d["Value"] for d in metric["Dimensions"]}
        elif resource["Type"] == "AWS::ApplicationAutoScaling::ScalingPolicy":
            custom = props["TargetTrackingScalingPolicyConfiguration"].get("CustomizedMetricSpecification", {})
            if custom.get("Namespace") == metrics.NAMESPACE:
                yield logical_id, custom["MetricName"], {d["Name"]: d["Value"] for d in custom["Dimensions"]}
            for query in custom.get("Metrics", []):
                metric = query.get("MetricStat", {}).get("Metric", {})
                if metric.get("Namespace") == metrics.NAMESPACE:
                    yield logical_id, metric["MetricName"], {d["Name"]: d["Value"] for d in metric["Dimensions"]}
        elif resource["Type"] == "AWS::CloudWatch::Dashboard":
            body = render_dashboard_body(props["DashboardBody"])
            for widget in body["widgets"]:
                for entry in widget["properties"].get("metrics", []):
                    if entry and entry[0] == metrics.NAMESPACE:
                        names = [x for x in entry[2:] if isinstance(x, str)]
                        yield (
                            f"{logical_id}: {widget['properties']['title']}",
                            entry[1],
                            dict(zip(names[::2], names[1::2], strict=True)),
                        )


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("stack", NEURON_STACKS)
def test_the_task_names_its_service_dimension_at_synth(synthesized, env, stack):
    environment = container_environment(synthesized.template(env, stack))
    assert (
        environment[metrics.METRICS_SERVICE_ENV]
        == f"{env}-{stack}"
        == synthesized.stages[env].node.find_child(stack).stack_name
    )  # a literal: the stack's name
    assert environment[metrics.METRICS_INTERVAL_ENV] == "60"
    assert metrics.METRICS_ENV not in environment  # EMF is the container's default


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("stack", NEURON_STACKS)
def test_alarms_dashboards_and_policies_read_what_the_container_writes(synthesized, env, stack):
    template = synthesized.template(env, stack)
    service = container_environment(template)[metrics.METRICS_SERVICE_ENV]
    models = served_models(template)
    read = list(serving_metrics_read(template))
    for where, name, dimensions in read:
        assert name in DIMENSION_SETS, (where, name)
        assert frozenset(dimensions) in DIMENSION_SETS[name], (where, name, dimensions)
        assert dimensions[metrics.SERVICE] == service, where
        assert dimensions.get(metrics.MODEL, next(iter(models))) in models, where
    kinds = {(where.split(":")[0], name) for where, name, _ in read}
    by_type = {logical_id: r["Type"] for logical_id, r in template["Resources"].items()}
    read_by = {(by_type[logical_id], name) for logical_id, name in kinds}
    # at least: a Neuron alarm, the concurrency policy, the dashboard's serving and NeuronCore graphs
    assert {
        ("AWS::CloudWatch::Alarm", metrics.EXECUTION_ERRORS),
        ("AWS::ApplicationAutoScaling::ScalingPolicy", metrics.IN_FLIGHT),
        *{
            ("AWS::CloudWatch::Dashboard", name)
            for name in (
                metrics.IN_FLIGHT,
                metrics.QUEUE_DEPTH,
                metrics.BATCH_SIZE,
                metrics.INFERENCE_LATENCY,
                metrics.NEURONCORE_UTILIZATION,
                metrics.DEVICE_MEMORY_USED,
            )
        },
    } <= read_by
    # the 5xx and shedding alarms read the app's admission rejections
    assert ("AWS::CloudWatch::Alarm", metrics.REJECTED) in read_by
    # the task-level NeuronCore graph: Service alone
    assert any(name == metrics.NEURONCORE_UTILIZATION and set(dims) == {metrics.SERVICE} for _, name, dims in read)
    # every model has its Neuron alarm and its concurrency policy
    for resource_type, name in (
        ("AWS::CloudWatch::Alarm", metrics.EXECUTION_ERRORS),
        ("AWS::ApplicationAutoScaling::ScalingPolicy", metrics.IN_FLIGHT),
    ):
        assert {
            dims[metrics.MODEL]
            for where, n, dims in read
            if n == name and by_type[where.split(":")[0]] == resource_type
        } == models


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("stack", NEURON_STACKS)
def test_concurrency_targets_are_the_planners_per_worker(synthesized, project, env, stack):
    """InFlight's Average over a model's workers is per worker: the planner's per-task concurrency target
    (planning.target_in_flight: throughput x safety factor x profiled p99) over the model's workers in a task."""
    template = synthesized.template(env, stack)
    if stack in project.fleets:
        plan = packing.plan_fleet(
            stack, project.fleets[stack], project.fleet_members(stack), env, project.environments[env]
        )
        assert isinstance(plan, packing.NeuronFleetPlan)
        expected = {s.model: plan.target_in_flight_per_task(s.model) / s.workers for s in plan.shares}
    else:
        model = project.model(stack)
        expected = {
            stack: planning.plan(model, env, project.environments[env]).target_in_flight_per_instance
            / model.serving.workers
        }
    found = {}
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::ApplicationAutoScaling::ScalingPolicy":
            continue
        tracking = resource["Properties"]["TargetTrackingScalingPolicyConfiguration"]
        custom = tracking.get("CustomizedMetricSpecification", {})
        if custom.get("MetricName") == metrics.IN_FLIGHT:
            assert custom["Statistic"] == "Average"
            model = next(d["Value"] for d in custom["Dimensions"] if d["Name"] == metrics.MODEL)
            found[model] = tracking["TargetValue"]
    assert found == pytest.approx(expected)


def test_dev_fleet_concurrency_targets_worked_out_by_hand(synthesized):
    """dev intent-pack: intent-bert on 3 inf1 cores (250/s each), 3 workers, p99 8 ms; duplicate-bert on 1 core
    (242.5/s), 1 worker, p99 20 ms; safety factor 0.5."""
    found = {}
    for resource in synthesized.template("dev", "intent-pack")["Resources"].values():
        custom = (
            resource.get("Properties", {})
            .get("TargetTrackingScalingPolicyConfiguration", {})
            .get("CustomizedMetricSpecification", {})
        )
        if custom.get("MetricName") == metrics.IN_FLIGHT:
            model = next(d["Value"] for d in custom["Dimensions"] if d["Name"] == metrics.MODEL)
            found[model] = resource["Properties"]["TargetTrackingScalingPolicyConfiguration"]["TargetValue"]
    assert found == pytest.approx(
        {"intent-bert": 3 * 250 * 0.5 * 0.008 / 3, "duplicate-bert": 1 * 242.5 * 0.5 * 0.020 / 1}
    )


def test_rejected_is_what_the_container_writes():
    """emf.py writes Rejected beside its UNITS (RECORDED_UNITS), so tests/container/neuron/test_metrics_contract.py,
    which holds UNITS equal to SERVING_UNITS, does not see it: checked here, reading emf.py (standard library only)
    from its file."""
    import importlib.util
    import sys

    from tests.support.paths import ROOT

    spec = importlib.util.spec_from_file_location("_emf_contract", ROOT / "container" / "neuron" / "serving" / "emf.py")
    assert spec is not None and spec.loader is not None
    emf = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = emf  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(emf)
    finally:
        del sys.modules[spec.name]
    assert emf.REJECTED == metrics.REJECTED
    assert {emf.REJECTED: emf.RECORDED_UNITS[emf.REJECTED]} == dict(metrics.ADMISSION_UNITS)
    assert tuple(map(tuple, emf.DIMENSION_SETS)) == metrics.SERVING_DIMENSION_SETS
