"""NeuronEcsService serving one model, asserted on the synthesized templates: capacity, task, traffic, deploys,
scaling and observability, per environment of the shipped config with intent-bert on instances of its own (the
shipped config packs it into a neuron-cores fleet: tests/stacks/test_neuron_fleet.py); a public inf2.48xlarge
variant of the config (synth, cdk-nag and cfn-lint as the CLI runs them); and the construct used directly,
with off-hours windows."""

from __future__ import annotations

import json

import pytest
import yaml
from aws_cdk.assertions import Match, Template

from inferstack import config
from inferstack.capacity import packing
from inferstack.constructs.neuron_service import AMI_PARAMETER
from inferstack.schema.off_hours import OffHours
from tests.support.config_edits import without_fleets
from tests.support.neuron_service import CERT, PINNED_IDS, build_direct
from tests.support.paths import CONFIG_DIR
from tests.support.synth import synth
from tests.support.templates import cfn_lint, image_asset, only

MODEL = "intent-bert"
ENVS = ["dev", "staging", "prod"]
PROD_TOPIC = "arn:aws:sns:us-west-2:333333333333:ml-platform-oncall"


# ----------------------------------------------------------------------------- helpers


def template(dedicated, env: str) -> Template:
    return Template.from_json(dedicated.template(env, MODEL))


def container(tpl: Template) -> dict:
    _, task = only(tpl, "AWS::ECS::TaskDefinition")
    (definition,) = task["Properties"]["ContainerDefinitions"]
    return definition


def environment_of(tpl: Template) -> dict[str, str]:
    return {e["Name"]: e["Value"] for e in container(tpl)["Environment"]}


def yaml_model() -> dict:
    """The raw YAML, read independently of the config loader and planning."""
    return yaml.safe_load((CONFIG_DIR / f"{MODEL}.yaml").read_text())


def expected_capacity(env: str) -> tuple[str, int, int, float]:
    """(instance type, min, max, requests per task per minute) computed from the YAML numbers."""
    raw = yaml_model()
    envs = yaml.safe_load((CONFIG_DIR / "environments.yaml").read_text())["environments"]
    capacity = {**raw["capacity"], **raw.get("environments", {}).get(env, {}).get("capacity", {})}
    safety = capacity.get("safety_factor", envs[env]["defaults"]["safety_factor"])
    throughput = raw["throughput_profile"][capacity["instance_type"]]["throughput_per_second"]
    return capacity["instance_type"], capacity["min"], capacity["max"], throughput * safety * 60


@pytest.fixture(scope="module")
def dedicated(tmp_path_factory):
    """Every environment with intent-bert alone on its instances (no fleets, no other model), as the CLI
    synthesizes it (cdk-nag included)."""
    import shutil

    config_dir = tmp_path_factory.mktemp("dedicated") / "model_configs"
    shutil.copytree(CONFIG_DIR, config_dir)
    project = config.load(without_fleets(config_dir, keep_models=(MODEL,)))
    return synth(project, list(project.environments), tmp_path_factory.mktemp("dedicated-cdk.out"), pipeline=False)


# ----------------------------------------------------------------------------- the public inf2 variant


@pytest.fixture(scope="module")
def variant(tmp_path_factory):
    """dev with a public load balancer (and a certificate), intent-bert compiled for and run on inf2.48xlarge:
    loaded through the config checks, dedicated with cdk-nag exactly as the CLI does."""
    config_dir = tmp_path_factory.mktemp("variant") / "model_configs"
    import shutil

    shutil.copytree(CONFIG_DIR, config_dir)
    without_fleets(config_dir, keep_models=(MODEL,))
    envs_path = config_dir / "environments.yaml"
    envs = yaml.safe_load(envs_path.read_text())
    envs["environments"]["dev"]["defaults"].update(public_load_balancer=True, certificate_arn=CERT)
    envs_path.write_text(yaml.safe_dump(envs, sort_keys=False))
    model_path = config_dir / f"{MODEL}.yaml"
    raw = yaml.safe_load(model_path.read_text())
    raw["compile"]["neuron_generation"] = "inf2"
    raw["throughput_profile"] = {
        "inf2.48xlarge": {"throughput_per_second": 20000, "p99_latency_ms": 6, "source": "test figure"}
    }
    raw["capacity"]["instance_type"] = "inf2.48xlarge"
    raw["environments"]["dev"]["capacity"] = {"min": 1, "max": 3}
    model_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    project = config.load(config_dir)
    return synth(project, ["dev"], tmp_path_factory.mktemp("variant-cdk.out"))


# ----------------------------------------------------------------------------- capacity


@pytest.mark.parametrize("env", ENVS)
def test_logical_ids_are_pinned(dedicated, env):
    tpl = template(dedicated, env)
    for resource_type, logical_id in PINNED_IDS.items():
        assert list(tpl.find_resources(resource_type)) == [logical_id]


def test_ami_is_the_al2023_neuron_ami_from_ssm(dedicated):
    assert AMI_PARAMETER == "/aws/service/ecs/optimized-ami/amazon-linux-2023/neuron/recommended/image_id"
    raw = dedicated.template("dev", MODEL)
    (param_id,) = [
        k for k, p in raw["Parameters"].items() if p["Type"] == "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"
    ]
    assert raw["Parameters"][param_id]["Default"] == AMI_PARAMETER
    _, lt = only(template(dedicated, "dev"), "AWS::EC2::LaunchTemplate")
    assert lt["Properties"]["LaunchTemplateData"]["ImageId"] == {"Ref": param_id}


@pytest.mark.parametrize("env", ENVS)
def test_launch_template_instance_imdsv2_and_encrypted_root(dedicated, env):
    instance_type = expected_capacity(env)[0]
    _, lt = only(template(dedicated, env), "AWS::EC2::LaunchTemplate")
    data = lt["Properties"]["LaunchTemplateData"]
    assert data["InstanceType"] == instance_type
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    (root,) = data["BlockDeviceMappings"]
    assert root["DeviceName"] == "/dev/xvda"
    assert root["Ebs"]["Encrypted"] is True and root["Ebs"]["VolumeSize"] == 100
    # the AMI manages the Neuron driver itself; user data only joins the cluster and fences IMDS from tasks
    user_data = json.dumps(data["UserData"])
    assert "ECS_CLUSTER=" in user_data and "ECS_AWSVPC_BLOCK_IMDS=true" in user_data
    assert not any(tool in user_data for tool in ("yum ", "dnf ", "pip ", "aws-neuron"))


@pytest.mark.parametrize("env", ENVS)
def test_capacity_provider_managed_scaling_and_termination_protection(dedicated, env):
    tpl = template(dedicated, env)
    provider_id, provider = only(tpl, "AWS::ECS::CapacityProvider")
    asg_provider = provider["Properties"]["AutoScalingGroupProvider"]
    assert asg_provider["ManagedScaling"]["Status"] == "ENABLED"
    assert asg_provider["ManagedTerminationProtection"] == "ENABLED"
    assert asg_provider["AutoScalingGroupArn"] == {"Ref": PINNED_IDS["AWS::AutoScaling::AutoScalingGroup"]}
    _, asg = only(tpl, "AWS::AutoScaling::AutoScalingGroup")
    assert asg["Properties"]["NewInstancesProtectedFromScaleIn"] is True
    assoc_id, assoc = only(tpl, "AWS::ECS::ClusterCapacityProviderAssociations")
    assert assoc["Properties"]["CapacityProviders"] == [{"Ref": provider_id}]
    _, service = only(tpl, "AWS::ECS::Service")
    assert service["Properties"]["CapacityProviderStrategy"] == [
        {"CapacityProvider": {"Ref": provider_id}, "Weight": 1}
    ]
    assert assoc_id in service["DependsOn"]  # the provider is associated before the service names it
    assert "LaunchType" not in service["Properties"]


def test_cluster_has_container_insights(dedicated):
    _, cluster = only(template(dedicated, "dev"), "AWS::ECS::Cluster")
    assert {"Name": "containerInsights", "Value": "enabled"} in cluster["Properties"]["ClusterSettings"]


@pytest.mark.parametrize("env", ENVS)
def test_group_size_follows_task_range_with_deploy_headroom(dedicated, env):
    _, task_min, task_max, _ = expected_capacity(env)
    tpl = template(dedicated, env)
    _, asg = only(tpl, "AWS::AutoScaling::AutoScalingGroup")
    assert (asg["Properties"]["MinSize"], asg["Properties"]["MaxSize"]) == (str(task_min), str(task_max * 2))
    assert "DesiredCapacity" not in asg["Properties"]  # the capacity provider owns it


# ----------------------------------------------------------------------------- task


@pytest.mark.parametrize("env, devices", [("dev", 1), ("staging", 4), ("prod", 4), ("variant", 12)])
def test_every_neuron_device_is_mapped_read_write(dedicated, variant, env, devices):
    tpl = Template.from_json(variant.template("dev", MODEL)) if env == "variant" else template(dedicated, env)
    linux = container(tpl)["LinuxParameters"]
    assert linux["Devices"] == [
        {"HostPath": f"/dev/neuron{i}", "ContainerPath": f"/dev/neuron{i}", "Permissions": ["read", "write"]}
        for i in range(devices)
    ]
    assert linux["Capabilities"] == {"Add": ["IPC_LOCK"]}


@pytest.mark.parametrize("env", ENVS)
def test_no_elastic_inference_and_ec2_awsvpc_only(dedicated, env):
    raw = json.dumps(dedicated.template(env, MODEL))
    assert "InferenceAccelerator" not in raw
    _, task = only(template(dedicated, env), "AWS::ECS::TaskDefinition")
    assert task["Properties"]["RequiresCompatibilities"] == ["EC2"]
    assert task["Properties"]["NetworkMode"] == "awsvpc"


@pytest.mark.parametrize(
    "env, cpu, memory", [("dev", 4 * 1024 - 256, 8 * 1024 - 1024), ("prod", 24 * 1024 - 1536, 48 * 1024 - 3932)]
)
def test_task_is_sized_below_the_instance(dedicated, env, cpu, memory):
    definition = container(template(dedicated, env))
    assert (definition["Cpu"], definition["Memory"]) == (cpu, memory)


@pytest.mark.parametrize("env, cores", [("dev", "0-3"), ("staging", "0-15"), ("prod", "0-15"), ("variant", "0-23")])
def test_runtime_environment(dedicated, variant, env, cores):
    tpl = Template.from_json(variant.template("dev", MODEL)) if env == "variant" else template(dedicated, env)
    serving = yaml_model()["serving"]
    expected = {
        "NEURON_RT_VISIBLE_CORES": cores,
        "MODEL_NAME": MODEL,
        "PORT": "8080",
        "SERVER_WORKERS": str(serving["workers"]),
        "SERVER_MAX_BATCH_SIZE": str(serving["max_batch_size"]),
        "SERVER_MAX_QUEUE_DELAY_MS": f"{serving['max_queue_delay_ms']:g}",
        # the metrics' Service dimension: the stack's name, a literal the alarms and policies name too
        "SERVER_METRICS_SERVICE": f"{'dev' if env == 'variant' else env}-{MODEL}",
        "SERVER_METRICS_INTERVAL_S": "60",
    }
    assert expected.items() <= environment_of(tpl).items()
    assert container(tpl)["PortMappings"][0]["ContainerPort"] == 8080


def test_image_build_args_come_from_the_model(dedicated, variant):
    raw = yaml_model()
    stack = dedicated.stages["dev"].serving[MODEL]
    source = image_asset(dedicated.outdir, stack.artifact_id, "dev")
    assert source["dockerFile"] == "Dockerfile.inf1"
    assert source["dockerBuildArgs"] == {
        "MODEL_SOURCE": raw["source"]["huggingface_id"],
        "TASK": raw["source"]["task"],
        "LABELS": ",".join(raw["source"]["labels"]),
        "BATCH_SIZE": str(raw["compile"]["batch_size"]),
        "SEQUENCE_LENGTH": str(raw["compile"]["sequence_length"]),
        "NEURON_CORES_PER_MODEL": str(raw["compile"]["neuron_cores_per_model"]),
        "PARALLELISM": raw["compile"]["parallelism"],
        "COMPILER_ARGS": "--fp32-cast=all",
        "NEURON_TARGET": "inf1",
    }
    assert source["platform"] == "linux/amd64"
    inf2 = image_asset(variant.outdir, variant.stages["dev"].serving[MODEL].artifact_id, "dev")
    assert inf2["dockerFile"] == "Dockerfile.inf2"
    assert (inf2["dockerBuildArgs"]["NEURON_TARGET"], inf2["dockerBuildArgs"]["COMPILER_ARGS"]) == (
        "inf2",
        "--auto-cast all --auto-cast-type bf16",
    )


def test_logs_go_to_the_stacks_encrypted_log_group(dedicated):
    tpl = template(dedicated, "dev")
    log_group_id, log_group = only(tpl, "AWS::Logs::LogGroup")
    assert "KmsKeyId" in log_group["Properties"] and log_group["Properties"]["RetentionInDays"] == 14
    log = container(tpl)["LogConfiguration"]
    assert log["LogDriver"] == "awslogs" and log["Options"]["awslogs-group"] == {"Ref": log_group_id}


def test_roles_are_least_privilege(dedicated):
    tpl = template(dedicated, "dev")
    managed = tpl.find_resources("AWS::IAM::Role", {"Properties": {"ManagedPolicyArns": Match.any_value()}})
    # only CDK's bucket-emptying helper (dev destroys its buckets) uses a managed policy
    assert set(managed) == {"CustomS3AutoDeleteObjectsCustomResourceProviderRole3B1BD092"}
    policies = {k: v["Properties"] for k, v in tpl.find_resources("AWS::IAM::Policy").items()}
    actions = {
        k: sorted(
            a
            for s in p["PolicyDocument"]["Statement"]
            for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
        )
        for k, p in policies.items()
    }
    instance = next(k for k in policies if k.startswith("NeuronInstanceRole"))
    assert actions[instance] == sorted(
        [
            "ecs:RegisterContainerInstance",
            "ecs:DeregisterContainerInstance",
            "ecs:SubmitContainerStateChange",
            "ecs:SubmitTaskStateChange",
            "ecs:SubmitAttachmentStateChanges",
            "ecs:Poll",
            "ecs:StartTelemetrySession",
            "ecs:DiscoverPollEndpoint",
        ]
    )
    execution = next(k for k in policies if k.startswith("NeuronTaskExecutionRole"))
    assert actions[execution] == sorted(
        [
            "ecr:BatchCheckLayerAvailability",
            "ecr:BatchGetImage",
            "ecr:GetDownloadUrlForLayer",
            "ecr:GetAuthorizationToken",
            "logs:CreateLogStream",
            "logs:PutLogEvents",
        ]
    )
    # the serving app calls no AWS API: its task role carries no policy at all
    _, task = only(tpl, "AWS::ECS::TaskDefinition")
    task_role = task["Properties"]["TaskRoleArn"]["Fn::GetAtt"][0]
    assert not any({"Ref": task_role} in p["Roles"] for p in policies.values())


# ----------------------------------------------------------------------------- service and deploys


@pytest.mark.parametrize("env", ENVS)
def test_one_task_per_instance_of_the_configured_type(dedicated, env):
    _, service = only(template(dedicated, env), "AWS::ECS::Service")
    assert service["Properties"]["PlacementConstraints"] == [
        {"Type": "distinctInstance"},
        {"Type": "memberOf", "Expression": f"attribute:ecs.instance-type == {expected_capacity(env)[0]}"},
    ]


@pytest.mark.parametrize("env", ENVS)
def test_a_model_without_deployment_rolls_and_rolls_back_on_its_slo_alarms(dedicated, env):
    """intent-bert has no `deployment:`: a rolling update starting the whole new fleet first, stopped by the
    circuit breaker and by the p99 and 5xx alarms, on one target group."""
    assert "deployment" not in yaml_model()
    tpl = template(dedicated, env)
    _, service = only(tpl, "AWS::ECS::Service")
    props = service["Properties"]
    alarms = tpl.to_json()["Resources"]
    latency, errors = (
        next(k for k, a in alarms.items() if a["Type"] == "AWS::CloudWatch::Alarm" and k.startswith(f"Neuron{prefix}"))
        for prefix in ("LatencyAlarm", "ErrorRateAlarm")
    )
    assert props["DeploymentConfiguration"] == {
        "Strategy": "ROLLING",
        "DeploymentCircuitBreaker": {"Enable": True, "Rollback": True},
        "MaximumPercent": 200,
        "MinimumHealthyPercent": 100,
        "Alarms": {"AlarmNames": [{"Ref": latency}, {"Ref": errors}], "Enable": True, "Rollback": True},
    }
    assert "AdvancedConfiguration" not in props["LoadBalancers"][0]
    assert len(tpl.find_resources("AWS::ElasticLoadBalancingV2::TargetGroup")) == 1
    assert tpl.find_resources("AWS::ElasticLoadBalancingV2::ListenerRule") == {}


def test_deployments_keep_full_capacity_and_wait_for_warm_up(dedicated):
    _, service = only(template(dedicated, "prod"), "AWS::ECS::Service")
    props = service["Properties"]
    assert props["HealthCheckGracePeriodSeconds"] == yaml_model()["serving"]["health_check_grace_seconds"] == 300
    assert "DesiredCount" not in props  # a deploy must not reset what autoscaling chose


# ----------------------------------------------------------------------------- traffic


@pytest.mark.parametrize("env, cidr", [("dev", "10.10.0.0/16"), ("prod", "10.30.0.0/16")])
def test_internal_load_balancer_by_default(dedicated, env, cidr):
    tpl = template(dedicated, env)
    _, lb = only(tpl, "AWS::ElasticLoadBalancingV2::LoadBalancer")
    assert lb["Properties"]["Scheme"] == "internal"
    _, listener = only(tpl, "AWS::ElasticLoadBalancingV2::Listener")
    assert (listener["Properties"]["Protocol"], listener["Properties"]["Port"]) == ("HTTP", 80)
    lb_sg = lb["Properties"]["SecurityGroups"][0]["Fn::GetAtt"][0]
    ingress = tpl.to_json()["Resources"][lb_sg]["Properties"]["SecurityGroupIngress"]
    assert ingress == [
        {"CidrIp": cidr, "Description": "HTTP from the VPC", "FromPort": 80, "IpProtocol": "tcp", "ToPort": 80}
    ]
    assert "0.0.0.0/0" not in json.dumps(
        [r for r in tpl.find_resources("AWS::EC2::SecurityGroup").values() if "SecurityGroupIngress" in r["Properties"]]
    )


def test_public_load_balancer_serves_tls_only(variant):
    tpl = Template.from_json(variant.template("dev", MODEL))
    _, lb = only(tpl, "AWS::ElasticLoadBalancingV2::LoadBalancer")
    assert lb["Properties"]["Scheme"] == "internet-facing"
    _, listener = only(tpl, "AWS::ElasticLoadBalancingV2::Listener")
    assert (listener["Properties"]["Protocol"], listener["Properties"]["Port"]) == ("HTTPS", 443)
    assert listener["Properties"]["Certificates"] == [{"CertificateArn": CERT}]
    assert listener["Properties"]["SslPolicy"] == "ELBSecurityPolicy-TLS13-1-2-2021-06"  # TLS 1.2 and 1.3 only
    lb_sg = lb["Properties"]["SecurityGroups"][0]["Fn::GetAtt"][0]
    ingress = tpl.to_json()["Resources"][lb_sg]["Properties"]["SecurityGroupIngress"]
    assert [(r["CidrIp"], r["FromPort"], r["ToPort"]) for r in ingress] == [("0.0.0.0/0", 443, 443)]
    _, service = only(tpl, "AWS::ECS::Service")
    task_subnets = service["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]["Subnets"]
    assert "publicSubnet" in json.dumps(lb["Properties"]["Subnets"]) and "privateSubnet" in json.dumps(task_subnets)
    assert variant.template("dev", MODEL)["Outputs"]["Url"]["Value"]["Fn::Join"][1][0] == "https://"


def test_public_variant_is_nag_and_lint_clean(variant):
    # synth would have raised on an unacknowledged cdk-nag finding; the report must hold none either
    assert all(not p["violations"] for p in (variant.report or {"pluginReports": []})["pluginReports"])
    findings = cfn_lint(sorted(variant.outdir.glob("assembly-dev/*intentbert*.template.json")))
    assert [f for f in findings if f["Level"] in ("Error", "Warning")] == []


def test_target_group_checks_readiness_and_drains_quickly(dedicated):
    _, tg = only(template(dedicated, "dev"), "AWS::ElasticLoadBalancingV2::TargetGroup")
    props = tg["Properties"]
    assert props["HealthCheckPath"] == "/v2/health/ready"
    assert (props["TargetType"], props["Port"], props["Protocol"]) == ("ip", 8080, "HTTP")
    attributes = {a["Key"]: a["Value"] for a in props["TargetGroupAttributes"]}
    assert 10 <= int(attributes["deregistration_delay.timeout_seconds"]) <= 30


@pytest.mark.parametrize("env", ENVS)
def test_only_the_load_balancer_reaches_the_tasks(dedicated, env):
    tpl = template(dedicated, env)
    resources = tpl.to_json()["Resources"]
    _, lb = only(tpl, "AWS::ElasticLoadBalancingV2::LoadBalancer")
    lb_sg = lb["Properties"]["SecurityGroups"][0]["Fn::GetAtt"][0]
    _, service = only(tpl, "AWS::ECS::Service")
    (task_sg,) = [
        g["Fn::GetAtt"][0]
        for g in service["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]["SecurityGroups"]
    ]
    _, lt = only(tpl, "AWS::EC2::LaunchTemplate")
    (instance_sg,) = [g["Fn::GetAtt"][0] for g in lt["Properties"]["LaunchTemplateData"]["SecurityGroupIds"]]
    (rule,) = tpl.find_resources("AWS::EC2::SecurityGroupIngress").values()
    assert rule["Properties"]["GroupId"] == {"Fn::GetAtt": [task_sg, "GroupId"]}
    assert rule["Properties"]["SourceSecurityGroupId"] == {"Fn::GetAtt": [lb_sg, "GroupId"]}
    assert (rule["Properties"]["FromPort"], rule["Properties"]["ToPort"]) == (8080, 8080)
    for sg in (task_sg, instance_sg):
        assert "SecurityGroupIngress" not in resources[sg]["Properties"]


def test_access_logs_go_to_an_sse_s3_bucket(dedicated):
    tpl = template(dedicated, "prod")
    bucket_id, bucket = only(tpl, "AWS::S3::Bucket")
    encryption = bucket["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert encryption == [{"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
    assert bucket["Properties"]["PublicAccessBlockConfiguration"]["RestrictPublicBuckets"] is True
    assert bucket["Properties"]["LifecycleConfiguration"]["Rules"][0]["ExpirationInDays"] == 365
    _, lb = only(tpl, "AWS::ElasticLoadBalancingV2::LoadBalancer")
    attributes = {a["Key"]: a["Value"] for a in lb["Properties"]["LoadBalancerAttributes"]}
    assert attributes["access_logs.s3.enabled"] == "true"
    assert attributes["access_logs.s3.bucket"] == {"Ref": bucket_id}


# ----------------------------------------------------------------------------- scaling


@pytest.mark.parametrize("env", ENVS)
def test_scaling_target_and_range_come_from_planning(dedicated, env):
    _, task_min, task_max, per_minute = expected_capacity(env)
    tpl = template(dedicated, env)
    _, target = only(tpl, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert (target["Properties"]["MinCapacity"], target["Properties"]["MaxCapacity"]) == (task_min, task_max)
    assert target["Properties"]["ScalableDimension"] == "ecs:service:DesiredCount"
    _, policy = only(
        tpl,
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        {"TargetTrackingScalingPolicyConfiguration": {"PredefinedMetricSpecification": Match.any_value()}},
    )
    tracking = policy["Properties"]["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["PredefinedMetricSpecification"]["PredefinedMetricType"] == "ALBRequestCountPerTarget"
    assert tracking["TargetValue"] == pytest.approx(per_minute)
    assert (tracking["ScaleOutCooldown"], tracking["ScaleInCooldown"]) == (60, 300)


@pytest.mark.parametrize("env", ENVS)
def test_scaling_on_requests_in_the_server_per_task(dedicated, env):
    """InFlight, averaged over the workers (each writes its own), against the planner's per-task concurrency
    target divided by the task's workers: Little's law from the YAML numbers (throughput x safety x p99)."""
    raw = yaml_model()
    instance_type, *_ = expected_capacity(env)
    envs = yaml.safe_load((CONFIG_DIR / "environments.yaml").read_text())["environments"]
    point = raw["throughput_profile"][instance_type]
    per_task = point["throughput_per_second"] * envs[env]["defaults"]["safety_factor"] * point["p99_latency_ms"] / 1000
    tpl = template(dedicated, env)
    _, policy = only(
        tpl,
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        {"TargetTrackingScalingPolicyConfiguration": {"CustomizedMetricSpecification": Match.any_value()}},
    )
    tracking = policy["Properties"]["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["CustomizedMetricSpecification"] == {
        "Namespace": "inferstack/Serving",
        "MetricName": "InFlight",
        "Statistic": "Average",
        "Dimensions": [{"Name": "Model", "Value": MODEL}, {"Name": "Service", "Value": f"{env}-{MODEL}"}],
    }
    assert tracking["TargetValue"] == pytest.approx(per_task / raw["serving"]["workers"])
    assert (tracking["ScaleOutCooldown"], tracking["ScaleInCooldown"]) == (60, 300)


def test_known_profile_targets():
    # intent-bert: inf1.xlarge 1000/s in dev, inf1.6xlarge 4000/s elsewhere, safety factor 0.5
    assert expected_capacity("dev")[3] == 1000 * 0.5 * 60 == 30000
    assert expected_capacity("prod")[3] == 4000 * 0.5 * 60 == 120000


# ----------------------------------------------------------------------------- observability


def alarms_by_metric(tpl: Template) -> dict[str, dict]:
    out = {}
    for alarm in tpl.find_resources("AWS::CloudWatch::Alarm").values():
        props = alarm["Properties"]
        name = props.get("MetricName") or "+".join(
            m["MetricStat"]["Metric"]["MetricName"] for m in props["Metrics"] if "MetricStat" in m
        )
        out[name] = props
    return out


@pytest.mark.parametrize("env", ENVS)
def test_alarms_thresholds(dedicated, env):
    alarms = alarms_by_metric(template(dedicated, env))
    assert set(alarms) == {
        "TargetResponseTime",
        "RequestCount+HTTPCode_Target_5XX_Count+Rejected",
        "UnHealthyHostCount",
        "CPUUtilization",
        "MemoryUtilization",
        "CapacityProviderReservation",
        "NeuronExecutionErrors",
        "Requests+Rejected",
    }
    latency = alarms["TargetResponseTime"]
    assert latency["Threshold"] == yaml_model()["slo"]["p99_latency_ms"] / 1000 == 0.01
    assert latency["ExtendedStatistic"] == "p99" and latency["Namespace"] == "AWS/ApplicationELB"
    # 5xx less the app's admission rejections (503 shed), clamped at 0 (tests/constructs/test_neuron_shedding.py)
    errors = alarms["RequestCount+HTTPCode_Target_5XX_Count+Rejected"]
    (expression,) = [m["Expression"] for m in errors["Metrics"] if "Expression" in m]
    assert expression == (
        "IF(FILL(requests, 0) > 0, 100 * IF(FILL(errors, 0) - FILL(rejected, 0) > 0, "
        "FILL(errors, 0) - FILL(rejected, 0), 0) / FILL(requests, 1), 0)"
    )
    assert errors["Threshold"] == 1
    shedding = alarms["Requests+Rejected"]
    assert (shedding["Threshold"], shedding["EvaluationPeriods"]) == (1, 15)
    assert (alarms["CPUUtilization"]["Namespace"], alarms["CPUUtilization"]["Threshold"]) == ("AWS/ECS", 90)
    assert (alarms["MemoryUtilization"]["Namespace"], alarms["MemoryUtilization"]["Threshold"]) == ("AWS/ECS", 90)
    unhealthy = alarms["UnHealthyHostCount"]
    assert unhealthy["Threshold"] == 0 and unhealthy["EvaluationPeriods"] == 300 // 60 + 3  # past the warm-up
    assert alarms["CapacityProviderReservation"]["Threshold"] == 100
    neuron = alarms["NeuronExecutionErrors"]
    assert (neuron["Namespace"], neuron["Statistic"], neuron["Threshold"]) == ("inferstack/Serving", "Sum", 0)
    assert neuron["Dimensions"] == [{"Name": "Model", "Value": MODEL}, {"Name": "Service", "Value": f"{env}-{MODEL}"}]


def test_alarms_notify_the_environment_topic(dedicated):
    for props in alarms_by_metric(template(dedicated, "prod")).values():
        assert props["AlarmActions"] == [PROD_TOPIC] and props["OKActions"] == [PROD_TOPIC]
    foundation_topic = {"Fn::ImportValue": Match.string_like_regexp(r"^dev-Foundation:ExportsOutputRefAlarmsTopic")}
    template(dedicated, "dev").all_resources_properties(
        "AWS::CloudWatch::Alarm", {"AlarmActions": [foundation_topic], "OKActions": [foundation_topic]}
    )


def test_dashboard_per_service(dedicated):
    _, dashboard = only(template(dedicated, "dev"), "AWS::CloudWatch::Dashboard")
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for metric in (
        "TargetResponseTime",
        "RequestCountPerTarget",
        "HTTPCode_Target_5XX_Count",
        "RunningTaskCount",
        "CPUUtilization",
        "MemoryUtilization",
        "InFlight",
        "QueueDepth",
        "BatchSize",
        "InferenceLatency",
        "NeuronCoreUtilization",
        "NeuronDeviceMemoryUsed",
    ):
        assert metric in body
    assert "DashboardName" not in dashboard["Properties"]


def test_stack_outputs_for_the_smoke_tool(dedicated):
    outputs = dedicated.template("dev", MODEL)["Outputs"]
    assert outputs["LoadBalancerDnsName"]["Value"] == {
        "Fn::GetAtt": [PINNED_IDS["AWS::ElasticLoadBalancingV2::LoadBalancer"], "DNSName"]
    }
    assert outputs["ServiceName"]["Value"] == {"Fn::GetAtt": [PINNED_IDS["AWS::ECS::Service"], "Name"]}
    assert "Ref" in outputs["ClusterName"]["Value"]
    assert outputs["Url"]["Value"]["Fn::Join"][1][0] == "http://"


def test_triton_models_get_no_neuron_service(synthesized):
    for model in ("t5-spelling", "bert-large-classifier"):
        assert not Template.from_json(synthesized.template("dev", model)).find_resources("AWS::ECS::Service")


# ----------------------------------------------------------------------------- the construct on its own


@pytest.fixture(scope="module")
def intent():
    return config.load(CONFIG_DIR).model(MODEL)


def test_construct_alone_on_an_unshipped_type(intent):
    inf2 = intent.model_copy(update={"compile": intent.compile.model_copy(update={"neuron_generation": "inf2"})})
    tpl = build_direct(inf2, "inf2.xlarge")
    definition = container(tpl)
    assert [d["HostPath"] for d in definition["LinuxParameters"]["Devices"]] == ["/dev/neuron0"]
    assert environment_of(tpl)["NEURON_RT_VISIBLE_CORES"] == "0-1"
    tpl.has_resource_properties(
        "AWS::ECS::Service",
        {
            "PlacementConstraints": Match.array_with(
                [{"Type": "memberOf", "Expression": "attribute:ecs.instance-type == inf2.xlarge"}]
            )
        },
    )
    tpl.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        {"TargetTrackingScalingPolicyConfiguration": Match.object_like({"TargetValue": 500 * 0.5 * 60})},
    )
    tpl.resource_count_is("AWS::S3::Bucket", 1)
    tpl.resource_count_is("Custom::S3AutoDeleteObjects", 0)  # retained bucket: nothing empties it


def test_construct_refuses_public_without_certificate_and_wrong_generation(intent):
    with pytest.raises(ValueError, match="public load balancer needs a certificate_arn"):
        build_direct(intent, "inf1.xlarge", public=True)
    with pytest.raises(ValueError, match="compiled for inf1, inf2.xlarge runs inf2"):
        build_direct(intent, "inf2.xlarge")


def test_construct_refuses_a_plan_for_another_model_and_fleet_windows_given_twice(intent):
    with pytest.raises(ValueError, match="capacity plan is for intent-bert, not intent-bert, intent-bert"):
        build_direct(intent, "inf1.xlarge", models=[intent, intent])
    project = config.load(CONFIG_DIR)
    plan = packing.plan_fleet(
        "intent-pack",
        project.fleets["intent-pack"],
        project.fleet_members("intent-pack"),
        "dev",
        project.environments["dev"],
    )
    with pytest.raises(ValueError, match="its off-hours windows come with its plan"):
        build_direct(
            intent, "inf1.xlarge", models=project.fleet_members("intent-pack"), capacity=plan, off_hours=plan.windows
        )


# ----------------------------------------------------------------------------- off hours of a dedicated model

NIGHTS = OffHours(start="cron(0 20 ? * MON-FRI *)", end="cron(30 6 ? * 2-6 *)", min=0, max=0, time_zone="Europe/Berlin")
WEEKENDS = OffHours(start="cron(0 0 ? * SAT *)", end="cron(0 0 ? * MON *)", min=1, max=1)


def test_dedicated_model_scales_to_zero_off_hours_with_its_instances(intent):
    tpl = build_direct(intent, "inf1.xlarge", off_hours=[NIGHTS, WEEKENDS])
    _, target = only(tpl, "AWS::ApplicationAutoScaling::ScalableTarget")
    # back to the planned 1..3 at each window's end, in the window's zone
    assert target["Properties"]["ScheduledActions"] == [
        {
            "ScalableTargetAction": {"MinCapacity": 0, "MaxCapacity": 0},
            "Schedule": NIGHTS.start,
            "ScheduledActionName": "OffHours1Start",
            "Timezone": "Europe/Berlin",
        },
        {
            "ScalableTargetAction": {"MinCapacity": 1, "MaxCapacity": 3},
            "Schedule": NIGHTS.end,
            "ScheduledActionName": "OffHours1End",
            "Timezone": "Europe/Berlin",
        },
        {
            "ScalableTargetAction": {"MinCapacity": 1, "MaxCapacity": 1},
            "Schedule": WEEKENDS.start,
            "ScheduledActionName": "OffHours2Start",
            "Timezone": "UTC",
        },
        {
            "ScalableTargetAction": {"MinCapacity": 1, "MaxCapacity": 3},
            "Schedule": WEEKENDS.end,
            "ScheduledActionName": "OffHours2End",
            "Timezone": "UTC",
        },
    ]
    group_id, group = only(tpl, "AWS::AutoScaling::AutoScalingGroup")
    release_id, _ = only(tpl, "Custom::ScaleInProtectionRelease")
    actions = {k: a for k, a in tpl.find_resources("AWS::AutoScaling::ScheduledAction").items()}
    # Unix cron for the group (days of the week from 0 = Sunday), fired at the same moments
    assert sorted(
        (a["Properties"]["Recurrence"], a["Properties"]["MinSize"], a["Properties"]["TimeZone"])
        for a in actions.values()
    ) == [
        ("0 0 * * MON", 1, "UTC"),
        ("0 0 * * SAT", 1, "UTC"),
        ("0 20 * * MON-FRI", 0, "Europe/Berlin"),
        ("30 6 * * 1-5", 1, "Europe/Berlin"),
    ]
    for action in actions.values():
        assert action["Properties"]["AutoScalingGroupName"] == {"Ref": group_id}
        assert "MaxSize" not in action["Properties"] and "DesiredCapacity" not in action["Properties"]
        assert release_id in action["DependsOn"]
    assert group["Properties"]["MinSize"] == "1" and group["Properties"]["MaxSize"] == "6"


def test_no_windows_leave_the_template_as_it_was(intent):
    tpl = build_direct(intent, "inf1.xlarge")
    _, target = only(tpl, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert "ScheduledActions" not in target["Properties"]
    assert tpl.find_resources("AWS::AutoScaling::ScheduledAction") == {}
