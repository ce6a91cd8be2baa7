"""An inference-components fleet in the synthesized app (dev's triton-shared): the shared endpoint in the
fleet's stack, each member's Model and inference component in its own stack, their scaling (target tracking
per copy from the fleet plan, scale-out from zero), rollout and rollback alarms, and IAM scoping. Staging and
prod keep dedicated endpoints (tests/constructs/test_triton_endpoint.py)."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import yaml

from inferstack import config
from inferstack.capacity import packing
from inferstack.constructs import triton_component
from inferstack.triton import startup as triton_startup
from tests.support.live_values import on_create
from tests.support.paths import CONFIG_DIR
from tests.support.synth import synth
from tests.support.templates import only, raw_yaml, resources

ENV = "dev"
FLEET = "triton-shared"
MEMBERS = ["bert-large-classifier", "t5-spelling"]
PROJECT = config.load(CONFIG_DIR)


def fleet_plan(project: config.Project = PROJECT, env: str = ENV) -> packing.ComponentFleetPlan:
    plan = packing.plan_fleet(
        FLEET, project.fleets[FLEET], project.fleet_members(FLEET), env, project.environments[env]
    )
    assert isinstance(plan, packing.ComponentFleetPlan)
    return plan


def statements(policy: dict) -> dict[str, dict]:
    return {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}


def actions(statement: dict) -> list[str]:
    return statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]


def export_of(template: dict, output_value: dict) -> str:
    """The export name the fleet stack gives an output with this value."""
    (name,) = [
        o["Export"]["Name"] for o in template["Outputs"].values() if o.get("Export") and o["Value"] == output_value
    ]
    return name


@pytest.fixture(params=MEMBERS)
def member(request, synthesized):
    return request.param, synthesized.template(ENV, request.param)


@pytest.fixture
def fleet(synthesized) -> dict:
    return synthesized.template(ENV, FLEET)


# ---------------------------------------------------------------- where fleets deploy


def test_the_fleet_has_a_stack_only_where_it_deploys(synthesized):
    assert FLEET in PROJECT.fleets_in(ENV) and PROJECT.fleets[FLEET].deploy_in == ("dev",)
    for env, stacks in synthesized.templates.items():
        assert (FLEET in stacks) == (env == ENV), env
        components = [n for n, t in stacks.items() if resources(t, "AWS::SageMaker::InferenceComponent")]
        assert components == (MEMBERS if env == ENV else []), env
    for env in ("staging", "prod"):  # dedicated endpoints there, as before
        for name in MEMBERS:
            only(synthesized.template(env, name), "AWS::SageMaker::Endpoint")


def test_members_depend_on_the_fleet_stack(synthesized):
    stage = synthesized.stages[ENV]
    for name in MEMBERS:
        assert stage.fleets[FLEET] in stage.serving[name].dependencies


# ---------------------------------------------------------------- the shared endpoint


def test_endpoint_config_holds_instances_under_managed_scaling_and_no_model(fleet):
    plan = fleet_plan()
    config_id, endpoint_config = only(fleet, "AWS::SageMaker::EndpointConfig")
    props = endpoint_config["Properties"]
    assert "EndpointConfigName" not in props  # CloudFormation names it: a replacement never collides
    role_id, _ = only(fleet, "AWS::IAM::Role")
    assert props["ExecutionRoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}  # required without a ModelName
    assert "KmsKeyId" not in props  # g4dn: NVMe instance storage, SageMaker rejects KmsKeyId
    assert props["EnableNetworkIsolation"] is True
    (variant,) = props["ProductionVariants"]
    assert "ModelName" not in variant  # each component names its model
    assert variant["VariantName"] == "AllTraffic"
    assert variant["InstanceType"] == PROJECT.fleets[FLEET].capacity_for(ENV).instance_type == "ml.g4dn.xlarge"
    assert variant["InitialInstanceCount"] == 1  # the API's minimum, even where the fleet may go to 0
    assert variant["ManagedInstanceScaling"] == {"Status": "ENABLED", "MinInstanceCount": 0, "MaxInstanceCount": 4}
    assert (plan.min_capacity, plan.max_capacity) == (0, 4)
    assert variant["RoutingConfig"] == {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}
    assert {raw_yaml(m)["serving"]["inference_ami_version"] for m in MEMBERS} == {variant["InferenceAmiVersion"]}
    assert not {"ContainerStartupHealthCheckTimeoutInSeconds", "ModelDataDownloadTimeoutInSeconds"} & set(variant)
    # in the private subnets, behind a security group with no ingress and HTTPS egress only
    assert len(props["VpcConfig"]["Subnets"]) == len(PROJECT.environments[ENV].availability_zones)
    (sg_ref,) = props["VpcConfig"]["SecurityGroupIds"]
    sg = fleet["Resources"][sg_ref["Fn::GetAtt"][0]]["Properties"]
    assert "SecurityGroupIngress" not in sg
    assert [(r["IpProtocol"], r["FromPort"], r["ToPort"]) for r in sg["SecurityGroupEgress"]] == [("tcp", 443, 443)]
    policy_id, _ = only(fleet, "AWS::IAM::Policy")
    assert policy_id in endpoint_config["DependsOn"]  # instances start with the role's permissions in place
    endpoint_id, endpoint = only(fleet, "AWS::SageMaker::Endpoint")
    assert endpoint["Properties"]["EndpointConfigName"] == {"Fn::GetAtt": [config_id, "EndpointConfigName"]}


def test_endpoint_has_a_pinned_logical_id_and_a_readable_name_as_output(fleet):
    # Renaming the construct would replace the endpoint (and drop its components): keep the id.
    endpoint_id, endpoint = only(fleet, "AWS::SageMaker::Endpoint")
    assert endpoint_id == "Endpoint8024A810"
    assert endpoint["Properties"]["EndpointName"] == fleet["Outputs"]["EndpointName"]["Value"] == f"{ENV}-{FLEET}"
    assert "DashboardName" in fleet["Outputs"]


def test_endpoint_role_holds_only_what_the_endpoint_itself_needs(fleet):
    _, role = only(fleet, "AWS::IAM::Role")
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "sagemaker.amazonaws.com"
    }
    assert "ManagedPolicyArns" not in role["Properties"] and "Policies" not in role["Properties"]
    _, policy = only(fleet, "AWS::IAM::Policy")
    found = statements(policy)
    assert set(found) == {"EndpointLogs", "EcrLogin", "InstanceMetrics", "VpcDescribe", "VpcInterfaces"}
    assert f"/aws/sagemaker/Endpoints/{ENV}-{FLEET}" in json.dumps(found["EndpointLogs"]["Resource"])
    assert "ec2:Vpc" in found["VpcInterfaces"]["Condition"]["ArnEquals"]
    assert found["InstanceMetrics"]["Condition"] == {"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}}
    for statement in found.values():
        assert not any(a.endswith("*") for a in actions(statement)), statement


def test_fleet_alarm_when_the_instances_stay_at_the_maximum(fleet):
    _, alarm = only(fleet, "AWS::CloudWatch::Alarm")
    props = alarm["Properties"]
    assert (props["Namespace"], props["MetricName"], props["Statistic"]) == (
        "/aws/sagemaker/Endpoints",
        "CPUUtilizationNormalized",
        "SampleCount",
    )
    assert {d["Name"]: d["Value"] for d in props["Dimensions"]} == {
        "EndpointName": f"{ENV}-{FLEET}",
        "VariantName": "AllTraffic",
    }
    assert props["Threshold"] == fleet_plan().max_capacity
    assert props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert props["EvaluationPeriods"] == props["DatapointsToAlarm"] == 15
    assert len(props["AlarmActions"]) == 1 and props["AlarmActions"] == props["OKActions"]  # the env's topic
    _, dashboard = only(fleet, "AWS::CloudWatch::Dashboard")
    assert "DashboardName" not in dashboard["Properties"]
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for metric in ("GPUReservation", "GPUUtilizationNormalized", "Invocations"):
        assert metric in body


# ---------------------------------------------------------------- each member's Model and component


def test_member_model_is_the_triton_image_on_the_shared_network(member, fleet):
    name, template = member
    _, model = only(template, "AWS::SageMaker::Model")
    props = model["Properties"]
    assert "ModelName" not in props and props["EnableNetworkIsolation"] is True
    container = props["PrimaryContainer"]
    assert "cdk-hnb659fds-container-assets" in json.dumps(container["Image"])  # the same image asset as before
    assert container["Environment"]["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"] == f"{name}-text"  # the text ensemble
    (sg,) = props["VpcConfig"]["SecurityGroupIds"]
    sg_id = only(fleet, "AWS::EC2::SecurityGroup")[0]
    assert sg == {"Fn::ImportValue": export_of(fleet, {"Fn::GetAtt": [sg_id, "GroupId"]})}
    _, endpoint_config = only(fleet, "AWS::SageMaker::EndpointConfig")
    assert props["VpcConfig"]["Subnets"] == endpoint_config["Properties"]["VpcConfig"]["Subnets"]
    policy_id = next(k for k in resources(template, "AWS::IAM::Policy") if "ExecutionPolicy" in k)
    assert policy_id in model["DependsOn"]


def test_member_component_on_the_shared_endpoint_from_the_plan(member, fleet):
    name, template = member
    share = fleet_plan().share(name)
    component_id, component = only(template, "AWS::SageMaker::InferenceComponent")
    assert component_id == "TritonComponent690FBC78"  # pinned: a new id would replace the component
    props = component["Properties"]
    assert props["InferenceComponentName"] == f"{ENV}-{name}"
    # The endpoint by reference (its stack's export), not by its synth-time name: CloudFormation orders the
    # component after the endpoint because of this reference itself, whatever else the stack imports.
    endpoint_id, _ = only(fleet, "AWS::SageMaker::Endpoint")
    assert props["EndpointName"] == {"Fn::ImportValue": export_of(fleet, {"Fn::GetAtt": [endpoint_id, "EndpointName"]})}
    assert props["VariantName"] == "AllTraffic"
    spec = props["Specification"]
    model_id, _ = only(template, "AWS::SageMaker::Model")
    assert spec["ModelName"] == {"Fn::GetAtt": [model_id, "ModelName"]}
    raw = raw_yaml(name)["inference_component"]
    assert spec["ComputeResourceRequirements"] == {
        "NumberOfAcceleratorDevicesRequired": raw["accelerators"],
        "NumberOfCpuCoresRequired": raw["cpu_cores"],
        "MinMemoryRequiredInMb": raw["memory_mib"],
    }
    model = PROJECT.model(name)
    assert spec["StartupParameters"] == {
        "ContainerStartupHealthCheckTimeoutInSeconds": triton_startup.health_check_timeout_seconds(model),
        "ModelDataDownloadTimeoutInSeconds": model.serving.model_data_download_timeout_seconds,
    }
    assert (
        spec["StartupParameters"]["ContainerStartupHealthCheckTimeoutInSeconds"]
        == {"bert-large-classifier": 900, "t5-spelling": 540}[name]
    )
    # A deploy starts one copy (it proves the model loads); scaled back to zero when idle.
    # CopyCount is read live at deploy time (an update re-sends it): one copy when the component is created.
    reader_id, reader = only(template, "Custom::LiveValue")
    assert props["RuntimeConfig"] == {"CopyCount": {"Fn::GetAtt": [reader_id, "CopyCount"]}}
    assert (share.min_copies, reader["Properties"]["Read"]) == (
        0,
        {"Kind": "copy-count", "InferenceComponentName": f"{ENV}-{name}", "Planned": 1},
    )
    # The fleet scales to zero: a one-copy component cannot be rolled in batches (at most 50% of its copies).
    assert "DeploymentConfig" not in props
    access_id = next(k for k in resources(template, "AWS::IAM::Policy") if "SharedEndpointAccess" in k)
    assert access_id in component["DependsOn"]
    outputs = {k: v["Value"] for k, v in template["Outputs"].items()}
    assert (outputs["EndpointName"], outputs["InferenceComponentName"]) == (f"{ENV}-{FLEET}", f"{ENV}-{name}")
    assert "DashboardName" in outputs


def test_member_grants_the_endpoint_role_its_image_and_log_group_only(member, fleet):
    name, template = member
    access_id, access = next(
        (k, p) for k, p in resources(template, "AWS::IAM::Policy").items() if "SharedEndpointAccess" in k
    )
    role_id, _ = only(fleet, "AWS::IAM::Role")
    assert access["Properties"]["Roles"] == [{"Fn::ImportValue": export_of(fleet, {"Ref": role_id})}]
    # every member's grant on that one role has a name of its own (a second with the same name replaces the first)
    assert access["Properties"]["PolicyName"] == f"{ENV}-{name}-component"
    found = statements(access)
    assert set(found) == {"PullServingImage", "ComponentLogs"}  # no rollout: no rollback alarms to read
    assert actions(found["PullServingImage"]) == [
        "ecr:BatchCheckLayerAvailability",
        "ecr:BatchGetImage",
        "ecr:GetDownloadUrlForLayer",
    ]
    assert "cdk-hnb659fds-container-assets" in json.dumps(found["PullServingImage"]["Resource"])
    assert f"/aws/sagemaker/InferenceComponents/{ENV}-{name}" in json.dumps(found["ComponentLogs"]["Resource"])
    # the Model's own role: the same least privilege as a dedicated endpoint's, for the component's log group
    _, policy = next((k, p) for k, p in resources(template, "AWS::IAM::Policy").items() if "ExecutionPolicy" in k)
    own = statements(policy)
    assert set(own) == {
        "PullServingImage",
        "EcrLogin",
        "ComponentLogs",
        "InstanceMetrics",
        "VpcDescribe",
        "VpcInterfaces",
    }
    assert f"/aws/sagemaker/InferenceComponents/{ENV}-{name}" in json.dumps(own["ComponentLogs"]["Resource"])
    for statement in [*found.values(), *own.values()]:
        assert not any(a.endswith("*") for a in actions(statement)), statement


# ---------------------------------------------------------------- scaling


def test_copies_scale_on_invocations_per_copy_at_the_planners_target(member):
    name, template = member
    plan = fleet_plan()
    share = plan.share(name)
    component_id, _ = only(template, "AWS::SageMaker::InferenceComponent")
    _, target = only(template, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert component_id in target["DependsOn"]  # registered after the component, deregistered before it goes
    props = target["Properties"]
    assert props["ResourceId"] == f"inference-component/{ENV}-{name}"
    assert props["ScalableDimension"] == "sagemaker:inference-component:DesiredCopyCount"
    assert (props["MinCapacity"], props["MaxCapacity"]) == (share.min_copies, share.max_copies) == (0, 4)
    assert props["RoleARN"].endswith(
        ":role/aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
        "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
    )
    assert "ScheduledActions" not in props  # the fleet has no off-hours windows in dev
    policies = resources(template, "AWS::ApplicationAutoScaling::ScalingPolicy")
    (tracking,) = [
        p["Properties"]["TargetTrackingScalingPolicyConfiguration"]
        for p in policies.values()
        if p["Properties"]["PolicyType"] == "TargetTrackingScaling"
    ]
    assert tracking["PredefinedMetricSpecification"] == {
        "PredefinedMetricType": "SageMakerInferenceComponentInvocationsPerCopy"
    }
    assert tracking["TargetValue"] == pytest.approx(plan.target_per_copy_per_minute(name))
    # one copy holds one of the profiled instance's GPUs: its whole throughput, at the safety factor, per minute
    raw = raw_yaml(name)
    assert tracking["TargetValue"] == pytest.approx(
        raw["throughput_profile"]["ml.g4dn.xlarge"]["throughput_per_second"] * 0.5 * 60
    )
    model = PROJECT.model(name)
    assert tracking["ScaleOutCooldown"] == model.scaling.scale_out_cooldown_seconds
    assert tracking["ScaleInCooldown"] == model.scaling.scale_in_cooldown_seconds


def test_a_request_that_finds_no_copy_scales_out_from_zero(member):
    """https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-zero-instances.html: a step
    policy (ChangeInCapacity +1 from lower bound 0, Maximum aggregation, 60 s cooldown) started by an alarm on
    AWS/SageMaker NoCapacityInvocationFailures of the component (Sum over 60 s, one datapoint)."""
    name, template = member
    policies = resources(template, "AWS::ApplicationAutoScaling::ScalingPolicy")
    (step_id,) = [k for k, p in policies.items() if p["Properties"]["PolicyType"] == "StepScaling"]
    assert policies[step_id]["Properties"]["StepScalingPolicyConfiguration"] == {
        "AdjustmentType": "ChangeInCapacity",
        "MetricAggregationType": "Maximum",
        "Cooldown": 60,
        "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}],
    }
    target_id, _ = only(template, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert policies[step_id]["Properties"]["ScalingTargetId"] == {"Ref": target_id}
    (alarm,) = [
        a["Properties"]
        for a in resources(template, "AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == "NoCapacityInvocationFailures"
    ]
    assert (alarm["Namespace"], alarm["Statistic"], alarm["Period"]) == ("AWS/SageMaker", "Sum", 60)
    assert alarm["Dimensions"] == [{"Name": "InferenceComponentName", "Value": f"{ENV}-{name}"}]
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"], alarm["Threshold"]) == (1, 1, 1)
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"  # the first failed request
    assert alarm["AlarmActions"] == [{"Ref": step_id}] and "OKActions" not in alarm


# ---------------------------------------------------------------- alarms and dashboard


def test_member_alarms_follow_its_slo_on_its_component_metrics(member):
    name, template = member
    slo_ms = PROJECT.model(name).slo_for(ENV).p99_latency_ms
    alarms = {
        a["Properties"].get("MetricName") or "4xx-rate": a["Properties"]
        for a in resources(template, "AWS::CloudWatch::Alarm").values()
    }
    assert set(alarms) == {
        "ModelLatency",
        "OverheadLatency",
        "Invocation5XXErrors",
        "4xx-rate",
        "GPUUtilizationNormalized",
        "GPUMemoryUtilizationNormalized",
        "NoCapacityInvocationFailures",
    }
    latency = alarms["ModelLatency"]
    assert latency["ExtendedStatistic"] == "p99" and latency["Threshold"] == slo_ms * 1000  # microseconds
    for metric in ("ModelLatency", "OverheadLatency", "Invocation5XXErrors"):
        assert alarms[metric]["Namespace"] == "AWS/SageMaker"
        assert alarms[metric]["Dimensions"] == [{"Name": "InferenceComponentName", "Value": f"{ENV}-{name}"}]
    for metric in ("GPUUtilizationNormalized", "GPUMemoryUtilizationNormalized"):
        assert alarms[metric]["Namespace"] == "/aws/sagemaker/InferenceComponents"
        assert alarms[metric]["Threshold"] == 90
    for metric, props in alarms.items():
        if metric != "NoCapacityInvocationFailures":
            assert props["AlarmActions"] == props["OKActions"] and "AlarmsTopic" in json.dumps(props["AlarmActions"])
    _, dashboard = only(template, "AWS::CloudWatch::Dashboard")
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for metric in ("InvocationsPerCopy", "ModelLatency", "GPUUtilizationNormalized", "NoCapacityInvocationFailures"):
        assert metric in body


# ---------------------------------------------------------------- a fleet that keeps copies: rolling updates


@pytest.fixture(scope="module")
def kept_copies(tmp_path_factory) -> tuple[dict[str, dict], packing.ComponentFleetPlan]:
    """dev with the fleet at 2 to 4 instances and each model kept at two copies or more (the planner gives
    a fleet that does not scale to zero one copy per model; the construct takes whatever the plan says),
    an off-hours window at one instance."""
    config_dir = tmp_path_factory.mktemp("kept") / "model_configs"
    shutil.copytree(CONFIG_DIR, config_dir)
    path = config_dir / "environments.yaml"
    data = yaml.safe_load(path.read_text())
    data["fleets"][FLEET]["capacity"]["min"] = 2
    data["fleets"][FLEET]["environments"] = {
        "dev": {
            "off_hours": [
                {
                    "start": "cron(0 20 ? * MON-FRI *)",
                    "end": "cron(0 7 ? * MON-FRI *)",
                    "min": 2,
                    "max": 2,
                    "time_zone": "Europe/Berlin",
                }
            ]
        }
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    original = packing.plan_fleet

    def two_copies(*args, **kwargs):
        plan = original(*args, **kwargs)
        if not isinstance(plan, packing.ComponentFleetPlan):  # the neuron-cores fleet, as planned
            return plan
        return dataclasses.replace(plan, shares=tuple(dataclasses.replace(s, min_copies=2) for s in plan.shares))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(packing, "plan_fleet", two_copies)
        project = config.load(config_dir)
        templates = synth(project, [ENV], tmp_path_factory.mktemp("cdk.out")).templates[ENV]
        return templates, two_copies(
            FLEET, project.fleets[FLEET], project.fleet_members(FLEET), ENV, project.environments[ENV]
        )


@pytest.mark.parametrize(
    "name, batch, wait",
    [
        # canary 10%, 600 s bakes, 3600 s timeout: batches of 10% would take 6000 s; 20% (five bakes) fit
        ("bert-large-classifier", 20, 600),
        ("t5-spelling", 25, 300),  # linear 25% every 300 s: the step is the batch
    ],
)
def test_copies_roll_in_batches_rolled_back_on_the_models_own_alarms(kept_copies, name, batch, wait):
    templates, plan = kept_copies
    template = templates[name]
    props = only(template, "AWS::SageMaker::InferenceComponent")[1]["Properties"]
    assert on_create(template, props["RuntimeConfig"]["CopyCount"]) == 2
    deployment = props["DeploymentConfig"]
    assert deployment["RollingUpdatePolicy"] == {
        "MaximumBatchSize": {"Type": "CAPACITY_PERCENT", "Value": batch},
        "WaitIntervalInSeconds": wait,
        "MaximumExecutionTimeoutInSeconds": raw_yaml(name)["deployment"].get("maximum_execution_timeout_seconds", 3600),
    }
    rollback = [a["AlarmName"]["Ref"] for a in deployment["AutoRollbackConfiguration"]["Alarms"]]
    assert sorted(template["Resources"][a]["Properties"]["MetricName"] for a in rollback) == [
        "Invocation5XXErrors",
        "ModelLatency",
    ]
    # the endpoint's role reads exactly those alarms (guardrails read them with the execution role)
    _, access = next((k, p) for k, p in resources(template, "AWS::IAM::Policy").items() if "SharedEndpointAccess" in k)
    describe = statements(access)["RollbackAlarms"]
    assert describe["Action"] == "cloudwatch:DescribeAlarms"
    assert sorted(r["Fn::GetAtt"][0] for r in describe["Resource"]) == sorted(rollback)
    # no scale-to-zero: no step policy, no NoCapacityInvocationFailures alarm
    kinds = [
        p["Properties"]["PolicyType"]
        for p in resources(template, "AWS::ApplicationAutoScaling::ScalingPolicy").values()
    ]
    assert kinds == ["TargetTrackingScaling"]
    assert not [
        a
        for a in resources(template, "AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == "NoCapacityInvocationFailures"
    ]
    # the fleet's window as scheduled copy counts: its minimum as copies, its maximum instances' worth
    share = plan.share(name)
    start, end = only(template, "AWS::ApplicationAutoScaling::ScalableTarget")[1]["Properties"]["ScheduledActions"]
    assert start["Timezone"] == "Europe/Berlin" and start["Schedule"] == "cron(0 20 ? * MON-FRI *)"
    assert start["ScalableTargetAction"] == {"MinCapacity": 2, "MaxCapacity": 2 * share.copies_per_instance}
    assert end["ScalableTargetAction"] == {"MinCapacity": share.min_copies, "MaxCapacity": share.max_copies}
    fleet_variant = only(templates[FLEET], "AWS::SageMaker::EndpointConfig")[1]["Properties"]["ProductionVariants"][0]
    assert fleet_variant["ManagedInstanceScaling"]["MinInstanceCount"] == fleet_variant["InitialInstanceCount"] == 2


def test_rollout_follows_the_deployment_section():
    deployment = PROJECT.model("bert-large-classifier").deployment
    rollout = triton_component.rollout_for
    assert rollout(deployment, 0) is None and rollout(deployment, 1) is None  # a batch would be every copy
    canary = rollout(deployment, 2)
    assert (canary.batch_percent, canary.steps, canary.wait_interval_seconds) == (20, 5, 600)
    assert canary.steps * canary.wait_interval_seconds < canary.maximum_execution_timeout_seconds
    rolling = deployment.model_copy(
        update={"strategy": "rolling", "size_percent": 5, "wait_interval_seconds": 60, "rollback_size_percent": 50}
    )
    assert rollout(rolling, 10) == triton_component.ComponentRollout(5, 50, 60, 3600)
    once = deployment.model_copy(
        update={
            "strategy": "all-at-once",
            "size_percent": None,
            "wait_interval_seconds": 3000,
            "termination_wait_seconds": 0,
        }
    )
    # the largest batch SageMaker allows; two bakes of 3000 s need more than the configured 3600 s
    assert rollout(once, 2) == triton_component.ComponentRollout(50, None, 3000, 6600)
    for strategy, size in (("linear", 10), ("canary", 1), ("rolling", 50)):
        got = rollout(
            deployment.model_copy(update={"strategy": strategy, "size_percent": size, "wait_interval_seconds": 300}), 3
        )
        assert (
            triton_component.ROLLING_BATCH_PERCENT[0] <= got.batch_percent <= triton_component.ROLLING_BATCH_PERCENT[1]
        )
