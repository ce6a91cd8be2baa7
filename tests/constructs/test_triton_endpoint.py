"""TritonEndpoint in the synthesized app: fine-grained template assertions for every Triton model and
environment where it has its own endpoint, and what a model change may and may not touch. Where a fleet's
shared endpoint carries it instead (dev: triton-shared), tests/constructs/test_inference_components.py; dev's
dedicated endpoints are checked here on a copy of the config without fleets."""

from __future__ import annotations

import json
import shutil

import boto3
import pytest
import yaml
from aws_cdk.assertions import Template

from inferstack import config
from inferstack.constructs import scaling_handover_handler
from inferstack.triton import image as triton_image
from tests.support.paths import CONFIG_DIR, ROOT
from tests.support.synth import synth
from tests.support.templates import only, raw_yaml, resources

ENVS = ["dev", "staging", "prod"]
TRITON_MODELS = ["bert-large-classifier", "t5-spelling"]
PROJECT = config.load(CONFIG_DIR)
CASES = [(env, model) for env in ENVS for model in TRITON_MODELS if PROJECT.fleet_of(model, env) is None]


@pytest.fixture(params=CASES, ids=[f"{e}-{m}" for e, m in CASES])
def case(request, synthesized):
    env, model = request.param
    return env, model, synthesized.template(env, model)


def without_fleets(config_dir) -> None:
    path = config_dir / "environments.yaml"
    data = yaml.safe_load(path.read_text())
    data.pop("fleets", None)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.fixture(scope="module")
def dedicated_dev(tmp_path_factory) -> dict[str, dict]:
    """dev's templates with every Triton model on its own endpoint (the shipped config without fleets)."""
    config_dir = tmp_path_factory.mktemp("dedicated") / "model_configs"
    shutil.copytree(CONFIG_DIR, config_dir)
    without_fleets(config_dir)
    return synth(config.load(config_dir), ["dev"], tmp_path_factory.mktemp("cdk.out")).templates["dev"]


def test_dev_runs_the_triton_models_on_a_fleet_and_staging_and_prod_on_their_own_endpoints():
    assert [(e, m) for e in ENVS for m in TRITON_MODELS if (e, m) not in CASES] == [
        ("dev", "bert-large-classifier"),
        ("dev", "t5-spelling"),
    ]


# ---------------------------------------------------------------- model and image


def test_model_runs_the_image_asset_with_network_isolation_in_the_vpc(case, project):
    env, name, template = case
    _, model = only(template, "AWS::SageMaker::Model")
    props = model["Properties"]
    assert "ModelName" not in props  # CloudFormation names it: a replacement never collides
    assert props["EnableNetworkIsolation"] is True
    container = props["PrimaryContainer"]
    assert "ModelDataUrl" not in container  # the repository is baked into the image
    assert "cdk-hnb659fds-container-assets" in json.dumps(container["Image"])
    assert container["Environment"]["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"] == f"{name}-text"  # the text ensemble
    assert len(props["VpcConfig"]["Subnets"]) == len(project.environments[env].availability_zones)
    (sg_ref,) = props["VpcConfig"]["SecurityGroupIds"]
    sg = template["Resources"][sg_ref["Fn::GetAtt"][0]]
    assert "SecurityGroupIngress" not in sg["Properties"]
    assert [(r["IpProtocol"], r["FromPort"], r["ToPort"]) for r in sg["Properties"]["SecurityGroupEgress"]] == [
        ("tcp", 443, 443)
    ]
    ingress = [
        r
        for r in resources(template, "AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == sg_ref
    ]
    assert ingress == []


def test_model_waits_for_its_role_policy(case):
    _, _, template = case
    _, model = only(template, "AWS::SageMaker::Model")
    policy_id, policy = only(template, "AWS::IAM::Policy")
    role_id = model["Properties"]["ExecutionRoleArn"]["Fn::GetAtt"][0]
    assert policy["Properties"]["Roles"] == [{"Ref": role_id}]
    assert policy_id in model["DependsOn"]


def test_execution_role_is_least_privilege(case):
    env, name, template = case
    _, policy = only(template, "AWS::IAM::Policy")
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert statements["EcrLogin"]["Action"] == "ecr:GetAuthorizationToken"
    assert "cdk-hnb659fds-container-assets" in json.dumps(statements["PullServingImage"]["Resource"])
    assert statements["InstanceMetrics"]["Condition"] == {"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}}
    assert "ec2:Vpc" in statements["VpcInterfaces"]["Condition"]["ArnEquals"]
    assert f"/aws/sagemaker/Endpoints/{env}-{name}" in json.dumps(statements["EndpointLogs"]["Resource"])
    for statement in statements.values():
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        assert not any(a.endswith("*") or a == "*" for a in actions), statement
        assert statement["Effect"] == "Allow"
    role_id = policy["Properties"]["Roles"][0]["Ref"]
    role = template["Resources"][role_id]
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "sagemaker.amazonaws.com"
    }
    assert "ManagedPolicyArns" not in role["Properties"] and "Policies" not in role["Properties"]
    # the other role is the scaling handover's function's (test_scaling_handover_role_is_least_privilege)
    assert [r for r in resources(template, "AWS::IAM::Role") if r != role_id] == [
        only(template, "AWS::Lambda::Function")[1]["Properties"]["Role"]["Fn::GetAtt"][0]
    ]


def test_eni_condition_names_the_vpc_by_its_owners_arn(case, project):
    """The ec2:Vpc condition must match the VPC's ARN, which carries the owning account: prod's VPC is
    shared from the network account, dev's and staging's are their own."""
    env, _, template = case
    _, policy = only(template, "AWS::IAM::Policy")
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    arn = statements["VpcInterfaces"]["Condition"]["ArnEquals"]["ec2:Vpc"]
    environment = project.environments[env]
    owner = {"prod": "555555555555"}.get(env, environment.account)
    assert owner == environment.network.vpc_owner(environment.account)
    if env == "prod":  # an imported VPC: the ARN is a literal
        assert arn == "arn:aws:ec2:us-west-2:555555555555:vpc/vpc-0a1b2c3d4e5f60718"
    else:  # the foundation's VPC, imported by reference
        parts = arn["Fn::Join"][1]
        assert f":{environment.region}:{owner}:vpc/" in "".join(p for p in parts if isinstance(p, str))


def test_execution_role_may_describe_exactly_the_rollback_alarms(case):
    """Deployment guardrails: "Ensure that your IAM execution role has permission to perform the
    cloudwatch:DescribeAlarms action on the auto-rollback alarms you specify"
    (https://docs.aws.amazon.com/sagemaker/latest/dg/deployment-guardrails-configuration.html)."""
    _, _, template = case
    _, policy = only(template, "AWS::IAM::Policy")
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    describe = statements["RollbackAlarms"]
    assert describe["Action"] == "cloudwatch:DescribeAlarms"
    _, endpoint = only(template, "AWS::SageMaker::Endpoint")
    rollback = [
        a["AlarmName"]["Ref"] for a in endpoint["Properties"]["DeploymentConfig"]["AutoRollbackConfiguration"]["Alarms"]
    ]
    assert sorted(r["Fn::GetAtt"][0] for r in describe["Resource"]) == sorted(rollback)
    assert all(r["Fn::GetAtt"][1] == "Arn" for r in describe["Resource"])


def test_image_asset_builds_from_container_triton_with_the_sdk_resolved_base(synthesized, project):
    assets_files = list((synthesized.outdir / "assembly-prod").glob("prod*t5spelling*.assets.json"))
    (assets_file,) = assets_files
    images = json.loads(assets_file.read_text())["dockerImages"]
    (image,) = images.values()
    source = image["source"]
    assert source["dockerFile"] == "container/triton/Dockerfile"
    assert source["platform"] == "linux/amd64"
    expected_base = triton_image.base_image_uri(region="us-west-2", version="24.09", instance_type="ml.g4dn.xlarge")
    assert source["dockerBuildArgs"]["TRITON_BASE_IMAGE"] == expected_base
    assert expected_base.endswith(".dkr.ecr.us-west-2.amazonaws.com/sagemaker-tritonserver:24.09-py3")
    spec = json.loads(source["dockerBuildArgs"]["TRITON_REPOSITORY_SPEC"])
    assert spec["name"] == "t5-spelling" and set(spec) == {"name", "source", "export", "serving", "queue_policy"}
    # Of the SLO and the profile only the derived queue policy is baked into the image (see queue_policy).
    assert spec["queue_policy"] == {"timeout_microseconds": 10_000, "max_queue_size": 32}
    staged = (assets_file.parent / source["directory"]).resolve()
    staged_files = sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file())
    assert "container/triton/Dockerfile" in staged_files and "inferstack/triton/config.py" in staged_files
    assert not any(
        f.startswith(("tests/", "model_configs/", "node_modules/", "stacks/", "inferstack/constructs/"))
        for f in staged_files
    )


def test_build_context_matches_the_dockerfile_ignore_file():
    lines = (ROOT / "container/triton/Dockerfile.dockerignore").read_text().splitlines()
    assert tuple(line for line in lines if line and not line.startswith("#")) == triton_image.BUILD_CONTEXT


# ---------------------------------------------------------------- endpoint config


def test_endpoint_config_variant_from_config(case, project):
    env, name, template = case
    model = project.model(name)
    _, cfg = only(template, "AWS::SageMaker::EndpointConfig")
    props = cfg["Properties"]
    assert "EndpointConfigName" not in props
    # g4dn has NVMe instance storage: SageMaker rejects KmsKeyId there
    assert "KmsKeyId" not in props
    (variant,) = props["ProductionVariants"]
    assert variant["VariantName"] == "AllTraffic"
    assert variant["InstanceType"] == model.capacity_for(env).instance_type
    assert variant["InitialInstanceCount"] == model.capacity_for(env).min
    raw = raw_yaml(name)["serving"]
    assert variant["InferenceAmiVersion"] == raw["inference_ami_version"]
    # From the model's size, its TensorRT engines and instance count (inferstack/triton/startup.py)
    assert (
        variant["ContainerStartupHealthCheckTimeoutInSeconds"]
        == {"bert-large-classifier": 900, "t5-spelling": 540}[name]
    )
    assert variant["ModelDataDownloadTimeoutInSeconds"] == model.serving.model_data_download_timeout_seconds
    assert "VolumeSizeInGB" not in variant


def test_data_capture_to_an_encrypted_logged_bucket(synthesized):
    template = synthesized.template("prod", "bert-large-classifier")
    _, cfg = only(template, "AWS::SageMaker::EndpointConfig")
    capture = cfg["Properties"]["DataCaptureConfig"]
    assert (
        capture["InitialSamplingPercentage"] == raw_yaml("bert-large-classifier")["data_capture"]["sampling_percentage"]
    )
    assert capture["EnableCapture"] is True and "KmsKeyId" in capture
    bucket_id = capture["DestinationS3Uri"]["Fn::Join"][1][1]["Ref"]
    bucket = template["Resources"][bucket_id]["Properties"]
    sse = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert sse["SSEAlgorithm"] == "aws:kms"
    assert bucket["VersioningConfiguration"]["Status"] == "Enabled"
    assert "LoggingConfiguration" in bucket
    policies = [
        p
        for p in resources(template, "AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": bucket_id}
    ]
    assert "aws:SecureTransport" in json.dumps(policies)
    Template.from_json(synthesized.template("prod", "t5-spelling")).resource_count_is("AWS::S3::Bucket", 0)


# ---------------------------------------------------------------- endpoint and deployment guardrails


def test_endpoint_keeps_the_fleet_and_rolls_back_on_alarms(case, project):
    env, name, template = case
    endpoint_id, endpoint = only(template, "AWS::SageMaker::Endpoint")
    assert endpoint_id.startswith("TritonEndpoint")
    props = endpoint["Properties"]
    assert props["RetainAllVariantProperties"] is True
    assert props["ExcludeRetainedVariantProperties"] == [{"VariantPropertyType": "DataCaptureConfig"}]
    config_id, _ = only(template, "AWS::SageMaker::EndpointConfig")
    assert props["EndpointConfigName"] == {"Fn::GetAtt": [config_id, "EndpointConfigName"]}
    deployment = props["DeploymentConfig"]
    alarms = [a["AlarmName"]["Ref"] for a in deployment["AutoRollbackConfiguration"]["Alarms"]]
    metrics = sorted(template["Resources"][a]["Properties"]["MetricName"] for a in alarms)
    assert metrics == ["Invocation5XXErrors", "ModelLatency"]
    raw = raw_yaml(name)["deployment"]
    policy = deployment["BlueGreenUpdatePolicy"]
    routing = policy["TrafficRoutingConfiguration"]
    assert routing["WaitIntervalInSeconds"] == raw["wait_interval_seconds"]
    assert policy["TerminationWaitInSeconds"] == raw["termination_wait_seconds"]
    if project.model(name).capacity_for(env).min < 2:
        # A canary or linear step of a one-instance fleet is the whole fleet: blue/green all at once.
        assert routing == {"Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": raw["wait_interval_seconds"]}
    else:
        assert routing["Type"] == raw["strategy"].upper()
        size_key = "CanarySize" if raw["strategy"] == "canary" else "LinearStepSize"
        assert routing[size_key] == {"Type": "CAPACITY_PERCENT", "Value": raw["size_percent"]}


def test_guardrails_per_environment_follow_the_smallest_fleet(synthesized, dedicated_dev):
    """CanarySize at most 50% and LinearStepSize 10-50% of the variant's instance count
    (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_TrafficRoutingConfig.html): dev and
    staging run one instance at their minimum and deploy blue/green all at once; prod (two or more)
    keeps the configured canary and linear shifts."""

    def routing(template: dict) -> str:
        return only(template, "AWS::SageMaker::Endpoint")[1]["Properties"]["DeploymentConfig"]["BlueGreenUpdatePolicy"][
            "TrafficRoutingConfiguration"
        ]["Type"]

    found = {(env, name): routing(synthesized.template(env, name)) for env, name in CASES}
    found |= {("dev", name): routing(dedicated_dev[name]) for name in TRITON_MODELS}
    assert found == {
        ("dev", "bert-large-classifier"): "ALL_AT_ONCE",
        ("dev", "t5-spelling"): "ALL_AT_ONCE",
        ("staging", "bert-large-classifier"): "ALL_AT_ONCE",
        ("staging", "t5-spelling"): "ALL_AT_ONCE",
        ("prod", "bert-large-classifier"): "CANARY",
        ("prod", "t5-spelling"): "LINEAR",
    }
    assert synthesized.stages["prod"].serving["t5-spelling"].triton.deployment.strategy == "linear"


def test_endpoint_logical_ids_are_pinned(synthesized, dedicated_dev):
    # Renaming these constructs would replace the endpoint (and reset its fleet): keep the ids.
    templates = [synthesized.template(env, name) for env, name in CASES] + [dedicated_dev[n] for n in TRITON_MODELS]
    for template in templates:
        assert only(template, "AWS::SageMaker::Endpoint")[0] == "TritonEndpoint7C20F783"
        assert only(template, "AWS::ApplicationAutoScaling::ScalableTarget")[0] == "TritonScalableTarget64ECA635"


def test_endpoint_name_is_output(case):
    env, name, template = case
    _, endpoint = only(template, "AWS::SageMaker::Endpoint")
    assert template["Outputs"]["EndpointName"]["Value"] == endpoint["Properties"]["EndpointName"] == f"{env}-{name}"


# ---------------------------------------------------------------- autoscaling


def test_scaling_target_is_measured_throughput_times_safety_times_60(case, project):
    env, name, template = case
    raw = raw_yaml(name)
    instance_type = (
        raw.get("environments", {})
        .get(env, {})
        .get("capacity", {})
        .get("instance_type", raw["capacity"]["instance_type"])
    )
    throughput = raw["throughput_profile"][instance_type]["throughput_per_second"]
    envs = yaml.safe_load((CONFIG_DIR / "environments.yaml").read_text())
    safety = envs["environments"][env]["defaults"]["safety_factor"]
    _, scaling = only(template, "AWS::ApplicationAutoScaling::ScalingPolicy")
    tracking = scaling["Properties"]["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["PredefinedMetricSpecification"]["PredefinedMetricType"] == "SageMakerVariantInvocationsPerInstance"
    assert tracking["TargetValue"] == pytest.approx(throughput * safety * 60)
    assert tracking["ScaleOutCooldown"] == project.model(name).scaling.scale_out_cooldown_seconds
    assert tracking["ScaleInCooldown"] == project.model(name).scaling.scale_in_cooldown_seconds


def test_scalable_target_depends_on_the_endpoint_with_planned_capacity(case, project):
    env, name, template = case
    endpoint_id, endpoint = only(template, "AWS::SageMaker::Endpoint")
    _, target = only(template, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert endpoint_id in target["DependsOn"]
    props = target["Properties"]
    assert props["ResourceId"] == f"endpoint/{endpoint['Properties']['EndpointName']}/variant/AllTraffic"
    assert props["ScalableDimension"] == "sagemaker:variant:DesiredInstanceCount"
    capacity = project.model(name).capacity_for(env)
    assert (props["MinCapacity"], props["MaxCapacity"]) == (capacity.min, capacity.max)
    # the service-linked role: never deleted with the stack, so teardown can always deregister
    assert props["RoleARN"].endswith(
        ":role/aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
        "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
    )


def test_off_hours_schedules_only_where_configured(synthesized, dedicated_dev):
    raw = raw_yaml("bert-large-classifier")["environments"]["dev"]["off_hours"][0]
    _, target = only(dedicated_dev["bert-large-classifier"], "AWS::ApplicationAutoScaling::ScalableTarget")
    start, end = target["Properties"]["ScheduledActions"]
    assert start["Schedule"] == raw["start"] and start["Timezone"] == raw["time_zone"]
    assert start["ScalableTargetAction"] == {"MinCapacity": raw["min"], "MaxCapacity": raw["max"]}
    assert end["Schedule"] == raw["end"]
    assert end["ScalableTargetAction"] == {"MinCapacity": 1, "MaxCapacity": 2}  # dev's planned capacity
    _, prod_target = only(
        synthesized.template("prod", "bert-large-classifier"), "AWS::ApplicationAutoScaling::ScalableTarget"
    )
    assert "ScheduledActions" not in prod_target["Properties"]


# ---------------------------------------------------------------- alarms and dashboard


def test_alarms_from_the_slo_notify_the_environment_topic(case, project):
    env, name, template = case
    slo_ms = project.model(name).slo_for(env).p99_latency_ms
    alarms = {
        a["Properties"].get("MetricName") or "4xx-rate": a["Properties"]
        for a in resources(template, "AWS::CloudWatch::Alarm").values()
    }
    assert set(alarms) == {
        "ModelLatency",
        "OverheadLatency",
        "Invocation5XXErrors",
        "4xx-rate",
        "GPUUtilization",
        "GPUMemoryUtilization",
    }
    latency = alarms["ModelLatency"]
    assert latency["ExtendedStatistic"] == "p99" and latency["Threshold"] == slo_ms * 1000  # microseconds
    assert latency["Namespace"] == "AWS/SageMaker"
    assert {d["Name"]: d["Value"] for d in latency["Dimensions"]} == {
        "EndpointName": f"{env}-{name}",
        "VariantName": "AllTraffic",
    }
    assert alarms["OverheadLatency"]["Threshold"] == pytest.approx(slo_ms * 1000 * 0.2)
    assert alarms["Invocation5XXErrors"]["Threshold"] == 1
    for gpu in ("GPUUtilization", "GPUMemoryUtilization"):
        assert alarms[gpu]["Namespace"] == "/aws/sagemaker/Endpoints"
    for props in alarms.values():
        assert len(props["AlarmActions"]) == 1 and props["AlarmActions"] == props["OKActions"]
        assert props["TreatMissingData"] == "notBreaching"
    if env == "prod":  # the imported on-call topic
        assert alarms["ModelLatency"]["AlarmActions"] == ["arn:aws:sns:us-west-2:333333333333:ml-platform-oncall"]
    else:  # the foundation stack's topic, through its export
        assert "AlarmsTopic" in alarms["ModelLatency"]["AlarmActions"][0]["Fn::ImportValue"]


def test_dashboard_without_a_fixed_name(case):
    _, _, template = case
    _, dashboard = only(template, "AWS::CloudWatch::Dashboard")
    assert "DashboardName" not in dashboard["Properties"]
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for metric in ("ModelLatency", "OverheadLatency", "Invocation5XXErrors", "GPUUtilization", "GPUMemoryUtilization"):
        assert metric in body


# ---------------------------------------------------------------- what a model change touches


@pytest.fixture(scope="module")
def changed(tmp_path_factory):
    """staging synthesized after two edits: t5-spelling's model and serving settings, bert-large's staging max."""
    config_dir = tmp_path_factory.mktemp("changed") / "model_configs"
    shutil.copytree(CONFIG_DIR, config_dir)
    path = config_dir / "t5-spelling.yaml"
    data = yaml.safe_load(path.read_text())
    data["source"]["huggingface_id"] = "t5-base"
    data["export"]["hidden_size"] = 768
    data["serving"]["max_batch_size"] = 16
    data["serving"]["container_startup_health_check_timeout_seconds"] = 900
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    path = config_dir / "bert-large-classifier.yaml"
    data = yaml.safe_load(path.read_text())
    data["environments"]["staging"]["capacity"]["max"] = 5
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return synth(config.load(config_dir), ["staging"], tmp_path_factory.mktemp("cdk.out")).templates["staging"]


def test_changing_the_model_replaces_model_and_config_but_keeps_the_endpoint(synthesized, changed):
    before, after = synthesized.template("staging", "t5-spelling"), changed["t5-spelling"]
    for kind in ("AWS::SageMaker::Model", "AWS::SageMaker::EndpointConfig"):
        assert only(before, kind)[1] != only(after, kind)[1], f"{kind} did not change"

    # a new image tag replaces the Model (under a fresh CloudFormation name); the config names the Model
    # by GetAtt, so it is replaced with it
    def image(template):
        return only(template, "AWS::SageMaker::Model")[1]["Properties"]["PrimaryContainer"]["Image"]

    assert image(before) != image(after)
    model_id = only(after, "AWS::SageMaker::Model")[0]
    (variant,) = only(after, "AWS::SageMaker::EndpointConfig")[1]["Properties"]["ProductionVariants"]
    assert variant["ModelName"] == {"Fn::GetAtt": [model_id, "ModelName"]}
    old_endpoint_id, old_endpoint = only(before, "AWS::SageMaker::Endpoint")
    new_endpoint_id, new_endpoint = only(after, "AWS::SageMaker::Endpoint")
    assert new_endpoint_id == old_endpoint_id
    assert new_endpoint["Properties"]["EndpointName"] == old_endpoint["Properties"]["EndpointName"]
    assert only(after, "AWS::ApplicationAutoScaling::ScalableTarget") == only(
        before, "AWS::ApplicationAutoScaling::ScalableTarget"
    )


def test_capacity_change_does_not_touch_the_image(synthesized, changed):
    before, after = synthesized.template("staging", "bert-large-classifier"), changed["bert-large-classifier"]
    assert only(after, "AWS::SageMaker::Model") == only(before, "AWS::SageMaker::Model")
    assert only(after, "AWS::SageMaker::Endpoint") == only(before, "AWS::SageMaker::Endpoint")
    assert only(after, "AWS::ApplicationAutoScaling::ScalableTarget")[1]["Properties"]["MaxCapacity"] == 5


# ---------------------------------------------------------------- the scaling handover (instance-type changes)

HANDOVER = "Custom::ScalingHandover"


def handover(template: dict) -> tuple[tuple[str, dict], tuple[str, dict]]:
    """((release id, release), (restore id, restore))."""
    found = resources(template, HANDOVER)
    (release,) = [(k, v) for k, v in found.items() if "Release" in k]
    (restore,) = [(k, v) for k, v in found.items() if "Restore" in k]
    return release, restore


def test_scaling_handover_wraps_the_endpoint_update(case, project):
    """CloudFormation runs the release before UpdateEndpoint and the restore after it, then the ScalableTarget and
    its policy; the restore knows whether the release deregistered the target."""
    env, name, template = case
    (release_id, release), (restore_id, restore) = handover(template)
    endpoint_id, _ = only(template, "AWS::SageMaker::Endpoint")
    target_id, target = only(template, "AWS::ApplicationAutoScaling::ScalableTarget")
    _, policy = only(template, "AWS::ApplicationAutoScaling::ScalingPolicy")
    assert only(template, "AWS::SageMaker::Endpoint")[1]["DependsOn"] == [release_id]
    assert endpoint_id in restore["DependsOn"] and release_id not in restore.get("DependsOn", [])
    assert restore_id in target["DependsOn"] and restore_id in policy["DependsOn"]
    assert restore["Properties"]["Released"] == {"Fn::GetAtt": [release_id, "Released"]}
    assert restore["Properties"]["ReleasedRange"] == [
        {"Fn::GetAtt": [release_id, "MinCapacity"]},
        {"Fn::GetAtt": [release_id, "MaxCapacity"]},
    ]
    for props in (release["Properties"], restore["Properties"]):
        assert props["EndpointName"] == f"{env}-{name}" and props["VariantName"] == "AllTraffic"
        assert props["InstanceType"] == project.model(name).capacity_for(env).instance_type
        assert props["ServiceToken"] == {"Fn::GetAtt": [only(template, "AWS::Lambda::Function")[0], "Arn"]}
        assert (
            props["Target"]["ResourceId"]
            == target["Properties"]["ResourceId"]
            == f"endpoint/{env}-{name}/variant/AllTraffic"
        )


def test_scaling_handover_carries_the_target_and_policies_as_the_template_has_them(synthesized, dedicated_dev):
    """What the restore registers again is what the ScalableTarget and its policy are in the template: their
    properties (a window's range read live where off-hours windows exist: dev's bert-large-classifier), the
    policy's without its Ref to the target."""
    templates = [synthesized.template(env, name) for env, name in CASES] + [dedicated_dev[n] for n in TRITON_MODELS]
    windowed = 0
    for template in templates:
        _, target = only(template, "AWS::ApplicationAutoScaling::ScalableTarget")
        _, policy = only(template, "AWS::ApplicationAutoScaling::ScalingPolicy")
        expected_policy = {k: v for k, v in policy["Properties"].items() if k != "ScalingTargetId"}
        for _, resource in handover(template):
            assert resource["Properties"]["Target"] == target["Properties"]
            assert resource["Properties"]["Policies"] == [expected_policy]
        windowed += (
            "Fn::GetAtt" in target["Properties"]["MinCapacity"]
            if isinstance(target["Properties"]["MinCapacity"], dict)
            else 0
        )
    assert windowed == 2  # dev's two models, with their off-hours windows


def test_scaling_handover_role_is_least_privilege(case):
    env, name, template = case
    function_id, function = only(template, "AWS::Lambda::Function")
    role = template["Resources"][function["Properties"]["Role"]["Fn::GetAtt"][0]]
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "lambda.amazonaws.com"
    }
    (document,) = [p["PolicyDocument"] for p in role["Properties"]["Policies"]]
    statements = {s["Sid"]: s for s in document["Statement"]}
    account, region = {"staging": ("222222222222", "us-east-1"), "prod": ("333333333333", "us-west-2")}[env]
    assert statements["ThisEndpoint"]["Resource"] == f"arn:aws:sagemaker:{region}:{account}:endpoint/{env}-{name}"
    assert statements["EndpointConfigs"] == {
        "Sid": "EndpointConfigs",
        "Effect": "Allow",
        "Action": "sagemaker:DescribeEndpointConfig",
        "Resource": f"arn:aws:sagemaker:{region}:{account}:endpoint-config/*",
    }
    assert statements["TargetTrackingAlarms"]["Resource"] == (
        f"arn:aws:cloudwatch:{region}:{account}:alarm:TargetTracking-endpoint/{env}-{name}/variant/AllTraffic-*"
    )
    assert statements["ScalableTarget"]["Resource"] == "*"
    assert not any(
        a.endswith("*")
        for s in statements.values()
        for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    )
    assert "Handler" in function["Properties"] and "ZipFile" in function["Properties"]["Code"]


# -- the handler, on emulated AWS (the Lambda's own source: inferstack.constructs.scaling_handover_handler)

REGION = "us-east-1"
HAND_OVER = scaling_handover_handler.load()
KEY = {
    "ServiceNamespace": "sagemaker",
    "ResourceId": "endpoint/staging-t5/variant/AllTraffic",
    "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
}


def boto(service: str):
    return boto3.client(service, region_name=REGION)


def request(instance_type: str = "ml.g4dn.xlarge", **extra) -> dict:
    """A handover's properties as CloudFormation passes them to the Lambda: numbers as strings."""
    return {
        "EndpointName": "staging-t5",
        "VariantName": "AllTraffic",
        "InstanceType": instance_type,
        "Target": {
            **KEY,
            "MinCapacity": "1",
            "MaxCapacity": "3",
            "RoleARN": "arn:aws:iam::123456789012:role/x",
            "ScheduledActions": [
                {
                    "ScheduledActionName": "Night",
                    "Schedule": "cron(0 20 * * ? *)",
                    "Timezone": "Europe/Berlin",
                    "ScalableTargetAction": {"MinCapacity": "1", "MaxCapacity": "1"},
                }
            ],
            "Tags": [{"Key": "inferstack:model", "Value": "t5"}],
        },
        "Policies": [
            {
                "PolicyName": "Invocations",
                "PolicyType": "TargetTrackingScaling",
                "TargetTrackingScalingPolicyConfiguration": {
                    "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
                    "TargetValue": "3600",
                    "ScaleInCooldown": "600",
                    "ScaleOutCooldown": "120",
                },
            }
        ],
        **extra,
    }


def endpoint_on(instance_type: str) -> None:
    """The endpoint (re)created on a config of `instance_type` (moto has no UpdateEndpoint)."""
    sagemaker = boto("sagemaker")
    if not sagemaker.list_models()["Models"]:
        sagemaker.create_model(
            ModelName="t5",
            ExecutionRoleArn="arn:aws:iam::123456789012:role/r",
            PrimaryContainer={"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/t5@sha256:" + "0" * 64},
        )
    config = instance_type.replace(".", "-")
    if not any(c["EndpointConfigName"] == config for c in sagemaker.list_endpoint_configs()["EndpointConfigs"]):
        sagemaker.create_endpoint_config(
            EndpointConfigName=config,
            ProductionVariants=[
                {
                    "VariantName": "AllTraffic",
                    "ModelName": "t5",
                    "InstanceType": instance_type,
                    "InitialInstanceCount": 1,
                }
            ],
        )
    if sagemaker.list_endpoints()["Endpoints"]:
        sagemaker.delete_endpoint(EndpointName="staging-t5")
    sagemaker.create_endpoint(EndpointName="staging-t5", EndpointConfigName=config)


def registered() -> dict | None:
    scaling = boto("application-autoscaling")
    (target,) = scaling.describe_scalable_targets(ServiceNamespace="sagemaker", ResourceIds=[KEY["ResourceId"]])[
        "ScalableTargets"
    ] or [None]
    if target is None:
        return None
    policies = scaling.describe_scaling_policies(ServiceNamespace="sagemaker", ResourceId=KEY["ResourceId"])[
        "ScalingPolicies"
    ]
    actions = scaling.describe_scheduled_actions(ServiceNamespace="sagemaker", ResourceId=KEY["ResourceId"])[
        "ScheduledActions"
    ]
    return {
        "range": (target["MinCapacity"], target["MaxCapacity"]),
        "policies": [
            (
                p["PolicyName"],
                p["TargetTrackingScalingPolicyConfiguration"]["TargetValue"],
                p["TargetTrackingScalingPolicyConfiguration"]["ScaleInCooldown"],
            )
            for p in policies
        ],
        "actions": [(a["ScheduledActionName"], a["ScalableTargetAction"]) for a in actions],
    }


def register_as_cloudformation_did() -> None:
    scaling = boto("application-autoscaling")
    scaling.register_scalable_target(**KEY, MinCapacity=1, MaxCapacity=3)
    scaling.put_scaling_policy(
        **KEY,
        PolicyName="Invocations",
        PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration={
            "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
            "TargetValue": 3600.0,
            "ScaleInCooldown": 600,
            "ScaleOutCooldown": 120,
        },
    )


def test_handover_releases_before_an_instance_type_change_and_restores_after(aws):
    # a new stack: nothing to do (the answer carries the template's range for the restore to read)
    assert HAND_OVER(request(), boto, "Create") == {
        "Action": "no endpoint",
        "Released": "false",
        "MinCapacity": "1",
        "MaxCapacity": "3",
    }
    endpoint_on("ml.g4dn.xlarge")
    register_as_cloudformation_did()
    boto("application-autoscaling").register_scalable_target(**KEY, MinCapacity=2, MaxCapacity=5)  # set by hand
    kept = registered()
    # no instance-type change: both find the target and leave it to CloudFormation
    assert HAND_OVER(request(), boto)["Action"] == "kept"
    assert registered() == kept
    # before UpdateEndpoint moves it to g4dn.2xlarge: deregistered (on AWS, with its policy and schedule), and the
    # range it had answered
    assert HAND_OVER(request("ml.g4dn.2xlarge"), boto) == {
        "Action": "released",
        "Released": "true",
        "MinCapacity": "2",
        "MaxCapacity": "5",
    }
    assert registered() is None
    endpoint_on("ml.g4dn.2xlarge")  # what UpdateEndpoint does, now that no target is registered
    # after it: registered again with that range, the template's policy and schedule, the strings CloudFormation
    # passed typed again
    restored = HAND_OVER(request("ml.g4dn.2xlarge", Released="true", ReleasedRange=["2", "5"]), boto)
    assert restored == {"Action": "restored", "Released": "false", "MinCapacity": "2", "MaxCapacity": "5"}
    assert registered() == {
        "range": (2, 5),
        "policies": [("Invocations", 3600.0, 600)],
        "actions": [("Night", {"MinCapacity": 1, "MaxCapacity": 1})],
    }


def test_handover_leaves_a_new_stacks_target_to_cloudformation(aws):
    """On a stack's create the restore runs before CloudFormation's own ScalableTarget registers the target: it
    must not register it first. Unless the release before the Endpoint just deregistered it (the first deploy of
    the handover itself changes the instance type)."""
    endpoint_on("ml.g4dn.xlarge")
    assert HAND_OVER(request(), boto, "Create")["Action"] == "kept"
    assert registered() is None
    assert HAND_OVER(request(Released="true", ReleasedRange=["1", "3"]), boto, "Create")["Action"] == "restored"
    assert registered()["range"] == (1, 3)


def test_handover_holds_in_a_rollback_whichever_resource_runs_first(aws):
    """A failed update rolls back to the old instance type: whichever handover runs while the endpoint still runs
    the new type releases the target, and whichever runs once it is back restores it."""
    endpoint_on("ml.g4dn.2xlarge")  # the update had succeeded and the restore had registered the target again
    register_as_cloudformation_did()
    assert HAND_OVER(request("ml.g4dn.xlarge"), boto)["Action"] == "released"  # before the Endpoint rolls back
    endpoint_on("ml.g4dn.xlarge")
    assert HAND_OVER(request("ml.g4dn.xlarge"), boto)["Action"] == "restored"  # after it
    assert registered()["range"] == (1, 3)
    # the Endpoint's own update failed (it never left the old type): the release, rolled back, restores
    boto("application-autoscaling").deregister_scalable_target(**KEY)
    assert HAND_OVER(request("ml.g4dn.xlarge"), boto)["Action"] == "restored"
