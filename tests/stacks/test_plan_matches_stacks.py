"""What `python -m inferstack plan --json` prints is what the stacks deploy: instance types, task and
instance ranges, scaling targets, the NeuronCore split of a neuron-cores fleet and the copies of an
inference-components fleet, read from the synthesized templates of the shipped config (every environment)."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import run
from tests.support.live_values import as_created


@pytest.fixture(scope="module")
def printed() -> dict:
    result = run("-m", "inferstack", "plan", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def resources(template: dict, kind: str) -> list[dict]:
    return [r["Properties"] for r in template["Resources"].values() if r["Type"] == kind]


# A traffic-shifting rollout sums RequestCountPerTarget over both target groups (metric math): the same
# signal as the predefined ALBRequestCountPerTarget of a service on one target group.
REQUESTS_PER_TARGET = {"ALBRequestCountPerTarget", "RequestCountPerTarget"}


def tracking_targets(template: dict) -> list[tuple[str, float]]:
    """(metric, target) of every target-tracking policy: the predefined metric type, the custom metric's name,
    or the one metric name a metric-math expression reads."""
    found = []
    for policy in resources(template, "AWS::ApplicationAutoScaling::ScalingPolicy"):
        config = policy.get("TargetTrackingScalingPolicyConfiguration")
        if not config:
            continue
        custom = config.get("CustomizedMetricSpecification") or {}
        names = {q["MetricStat"]["Metric"]["MetricName"] for q in custom.get("Metrics", []) if "MetricStat" in q}
        metric = (
            (config.get("PredefinedMetricSpecification") or {}).get("PredefinedMetricType")
            or custom.get("MetricName")
            or (names.pop() if len(names) == 1 else None)
        )
        found.append(("ALBRequestCountPerTarget" if metric in REQUESTS_PER_TARGET else metric, config["TargetValue"]))
    return found


def test_every_model_and_fleet_printed_is_deployed(printed, synthesized):
    for env, templates in synthesized.templates.items():
        deployed = set(templates) - {"Foundation", "LoadTest"}  # the stacks that serve no model
        dedicated = {r["model"] for r in printed["models"] if r["env"] == env and not r["fleet"]}
        fleets = {f["fleet"] for f in printed["fleets"] if f["env"] == env}
        # a component member keeps its own stack; a neuron-cores member has none
        components = {
            m["model"]
            for f in printed["fleets"]
            if f["env"] == env and f["kind"] == "sagemaker-inference-components"
            for m in f["members"]
        }
        assert deployed == dedicated | fleets | components, env


def test_dedicated_models_deploy_the_printed_capacity(printed, synthesized):
    checked = 0
    for row in printed["models"]:
        if row["fleet"]:
            continue
        template = as_created(synthesized.template(row["env"], row["model"]))
        (target,) = resources(template, "AWS::ApplicationAutoScaling::ScalableTarget")
        assert (target["MinCapacity"], target["MaxCapacity"]) == (row["instances_min"], row["instances_max"])
        expected = (
            "ALBRequestCountPerTarget"
            if row["instance_type"].startswith("inf")
            else "SageMakerVariantInvocationsPerInstance"
        )
        assert (expected, pytest.approx(row["scaling_target_per_instance_per_minute"])) in tracking_targets(template)
        if row["instance_type"].startswith("inf"):
            (launch,) = resources(template, "AWS::EC2::LaunchTemplate")
            assert launch["LaunchTemplateData"]["InstanceType"] == row["instance_type"]
        else:
            (endpoint_config,) = resources(template, "AWS::SageMaker::EndpointConfig")
            assert endpoint_config["ProductionVariants"][0]["InstanceType"] == row["instance_type"]
        checked += 1
    assert checked == 7  # staging and prod: the two Triton models; intent-bert-inf2 in all three


def test_neuron_fleets_deploy_the_printed_core_split_and_targets(printed, synthesized):
    fleets = [f for f in printed["fleets"] if f["kind"] == "neuron-cores"]
    assert {f["env"] for f in fleets} == {"dev", "staging", "prod"}
    for fleet in fleets:
        template = as_created(synthesized.template(fleet["env"], fleet["fleet"]))
        (launch,) = resources(template, "AWS::EC2::LaunchTemplate")
        assert launch["LaunchTemplateData"]["InstanceType"] == fleet["instance_type"]
        (task,) = resources(template, "AWS::ECS::TaskDefinition")
        environment = {e["Name"]: e["Value"] for e in task["ContainerDefinitions"][0]["Environment"]}
        served = {m["name"]: m for m in json.loads(environment["SERVER_MODELS"])}
        for member in fleet["members"]:
            assert (
                served[member["model"]]["port"],
                served[member["model"]]["visible_cores"],
                served[member["model"]]["workers"],
            ) == (member["port"], member["visible_cores"], member["workers"])
            assert ("ALBRequestCountPerTarget", pytest.approx(member["target_per_minute"])) in tracking_targets(
                template
            )
            # each worker reports its own InFlight: the per-task target over the model's workers
            assert (
                "InFlight",
                pytest.approx(member["target_in_flight_per_task"] / member["workers"]),
            ) in tracking_targets(template)
        assert len(served) == len(fleet["members"])
        (target,) = resources(template, "AWS::ApplicationAutoScaling::ScalableTarget")
        assert (target["MinCapacity"], target["MaxCapacity"]) == (fleet["instances_min"], fleet["instances_max"])


def test_component_fleets_deploy_the_printed_instances_and_copies(printed, synthesized):
    fleets = [f for f in printed["fleets"] if f["kind"] == "sagemaker-inference-components"]
    assert [f["env"] for f in fleets] == ["dev"]
    for fleet in fleets:
        template = as_created(synthesized.template(fleet["env"], fleet["fleet"]))
        (endpoint_config,) = resources(template, "AWS::SageMaker::EndpointConfig")
        variant = endpoint_config["ProductionVariants"][0]
        assert variant["InstanceType"] == fleet["instance_type"]
        scaling = variant["ManagedInstanceScaling"]
        assert (scaling["MinInstanceCount"], scaling["MaxInstanceCount"]) == (
            fleet["instances_min"],
            fleet["instances_max"],
        )
        for member in fleet["members"]:
            member_template = as_created(synthesized.template(fleet["env"], member["model"]))
            (component,) = resources(member_template, "AWS::SageMaker::InferenceComponent")
            resources_needed = component["Specification"]["ComputeResourceRequirements"]
            assert (
                resources_needed["NumberOfAcceleratorDevicesRequired"],
                resources_needed["NumberOfCpuCoresRequired"],
                resources_needed["MinMemoryRequiredInMb"],
            ) == (member["accelerators"], member["cpu_cores"], member["memory_mib"])
            (target,) = resources(member_template, "AWS::ApplicationAutoScaling::ScalableTarget")
            assert (target["MinCapacity"], target["MaxCapacity"]) == (member["copies_min"], member["copies_max"])
            assert (
                "SageMakerInferenceComponentInvocationsPerCopy",
                pytest.approx(member["target_per_minute"]),
            ) in tracking_targets(member_template)
