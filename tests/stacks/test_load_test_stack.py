"""The load-test stack (`<env>-LoadTest`), asserted on the synthesized environments: only where environments.yaml
sets `load_test:`; Fargate task definitions sized from it that run nothing until a test starts them; the master
reachable by its workers on Locust's port and by nothing else; roles that can do one thing each; an encrypted,
private, expiring results bucket; and the outputs the orchestrator and promotion's gate read. Expectations
come from the YAML, not the loader."""

from __future__ import annotations

import ipaddress
import json
import re

import pytest
import yaml

from inferstack.aws import stack_outputs
from inferstack.constructs.load_test import LOCUST_PORT, MASTER_COMMAND, WORKER_COMMAND
from stacks.load_test_stack import LOAD_TEST_BUILD_CONTEXT, LOAD_TEST_DOCKERFILE
from tests.support.paths import CONFIG_DIR, ROOT

ENVIRONMENTS = yaml.safe_load((CONFIG_DIR / "environments.yaml").read_text())["environments"]
WITH_LOAD_TEST = sorted(name for name, env in ENVIRONMENTS.items() if env.get("load_test"))
WITHOUT_LOAD_TEST = sorted(name for name, env in ENVIRONMENTS.items() if not env.get("load_test"))
STACK = stack_outputs.LOAD_TEST
# Stateful: a new logical id would replace the bucket, and with it every stored result the gate reads.
RESULTS_BUCKET_ID = "GeneratorsResultsC934D163"


def test_the_shipped_config_has_environments_with_and_without_load_tests():
    assert WITH_LOAD_TEST == ["staging"] and WITHOUT_LOAD_TEST == ["dev", "prod"]


def resources(template: dict, resource_type: str) -> dict[str, dict]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == resource_type}


def only(template: dict, resource_type: str, where=lambda key, resource: True) -> tuple[str, dict]:
    found = [(k, r) for k, r in resources(template, resource_type).items() if where(k, r)]
    assert len(found) == 1, f"{resource_type}: {[k for k, _ in found]}"
    return found[0]


def task_definition(template: dict, container: str) -> dict:
    return only(
        template,
        "AWS::ECS::TaskDefinition",
        lambda k, r: r["Properties"]["ContainerDefinitions"][0]["Name"] == container,
    )[1]["Properties"]


def output_ref(template: dict, name: str) -> str:
    value = template["Outputs"][name]["Value"]
    return value["Ref"] if "Ref" in value else value["Fn::GetAtt"][0]


def group_id(template: dict, output: str) -> str:
    return output_ref(template, output)


@pytest.fixture(scope="module", params=WITH_LOAD_TEST)
def env(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def template(synthesized, env) -> dict:
    return synthesized.template(env, STACK)


# ----------------------------------------------------------------------------- where it exists


def test_only_environments_with_load_test_have_the_stack(synthesized):
    assert {env for env, stacks in synthesized.templates.items() if STACK in stacks} == set(WITH_LOAD_TEST)
    for env in WITHOUT_LOAD_TEST:
        assert synthesized.stages[env].load_test is None
        assert not [
            key
            for template in synthesized.templates[env].values()
            for key, r in template["Resources"].items()
            if "FARGATE" in r.get("Properties", {}).get("RequiresCompatibilities", [])
        ]


def test_the_stack_is_named_after_its_environment(synthesized, env):
    stage = synthesized.stages[env]
    assert stage.load_test is not None and stage.load_test.stack_name == stack_outputs.stack_name(env, STACK)


def test_the_image_asset_is_built_from_the_dockerfile_with_its_ignore_file(synthesized, env):
    stage = synthesized.stages[env]
    manifest = json.loads(
        next((synthesized.outdir / f"assembly-{env}").glob(f"{stage.load_test.artifact_id}.assets.json")).read_text()
    )
    (image,) = manifest["dockerImages"].values()
    assert image["source"]["dockerFile"] == LOAD_TEST_DOCKERFILE and image["source"]["platform"] == "linux/amd64"
    lines = (ROOT / f"{LOAD_TEST_DOCKERFILE}.dockerignore").read_text().splitlines()
    assert tuple(line for line in lines if line and not line.startswith("#")) == LOAD_TEST_BUILD_CONTEXT


# ----------------------------------------------------------------------------- nothing runs between tests


def test_nothing_runs_until_a_test_starts_tasks(template):
    kinds = {r["Type"] for r in template["Resources"].values()}
    assert not kinds & {
        "AWS::ECS::Service",
        "AWS::ECS::CapacityProvider",
        "AWS::AutoScaling::AutoScalingGroup",
        "AWS::EC2::Instance",
        "AWS::Lambda::Function",
    }
    _, cluster = only(template, "AWS::ECS::Cluster")
    assert cluster["Properties"]["ClusterSettings"] == [{"Name": "containerInsights", "Value": "enabled"}]


@pytest.mark.parametrize(
    "container, command, port", [("Master", MASTER_COMMAND, LOCUST_PORT), ("Worker", WORKER_COMMAND, None)]
)
def test_task_definitions_are_fargate_sized_from_the_config(template, env, container, command, port):
    settings = ENVIRONMENTS[env]["load_test"]
    definition = task_definition(template, container)
    assert definition["RequiresCompatibilities"] == ["FARGATE"] and definition["NetworkMode"] == "awsvpc"
    assert definition["Cpu"] == str(settings["worker_cpu"])
    assert definition["Memory"] == str(settings["worker_memory_mib"])
    assert definition["RuntimePlatform"] == {"CpuArchitecture": "X86_64", "OperatingSystemFamily": "LINUX"}
    (spec,) = definition["ContainerDefinitions"]
    assert spec["Command"] == list(command) and spec["Essential"] is True
    assert spec["ReadonlyRootFilesystem"] is True and spec["MountPoints"][0]["ContainerPath"] == "/tmp"
    # Run settings (spec, results location, master address) are RunTask overrides, never baked in.
    assert "Environment" not in spec and "Secrets" not in spec
    assert spec.get("PortMappings", []) == ([{"ContainerPort": port, "Protocol": "tcp"}] if port else [])
    account, region = ENVIRONMENTS[env]["account"], ENVIRONMENTS[env]["region"]
    # The image asset, tagged with the hash of its context: never a moving tag.
    assert re.fullmatch(
        rf"{account}\.dkr\.ecr\.{region}\.\$\{{AWS::URLSuffix\}}/cdk-hnb659fds-container-assets-"
        rf"{account}-{region}:[0-9a-f]{{64}}",
        spec["Image"]["Fn::Sub"],
    ), spec["Image"]
    logs_id, _ = only(template, "AWS::Logs::LogGroup")
    assert spec["LogConfiguration"]["LogDriver"] == "awslogs"
    assert spec["LogConfiguration"]["Options"]["awslogs-group"] == {"Ref": logs_id}


def test_master_and_workers_run_the_same_image_as_different_roles(template):
    master, worker = task_definition(template, "Master"), task_definition(template, "Worker")
    assert master["ContainerDefinitions"][0]["Image"] == worker["ContainerDefinitions"][0]["Image"]
    assert master["TaskRoleArn"] != worker["TaskRoleArn"]
    assert master["ExecutionRoleArn"] == worker["ExecutionRoleArn"] != master["TaskRoleArn"]


def test_log_group_is_encrypted_and_kept_as_the_environment_says(template, env):
    _, group = only(template, "AWS::Logs::LogGroup")
    assert group["Properties"]["RetentionInDays"] == ENVIRONMENTS[env]["defaults"]["log_retention_days"]
    assert "Fn::ImportValue" in group["Properties"]["KmsKeyId"]  # the foundation's platform key


# ----------------------------------------------------------------------------- network


def test_the_master_admits_its_workers_on_locusts_port_and_nothing_else(template):
    master_sg, worker_sg = group_id(template, "MasterSecurityGroup"), group_id(template, "WorkerSecurityGroup")
    ingress = [r["Properties"] for r in resources(template, "AWS::EC2::SecurityGroupIngress").values()]
    assert ingress == [
        {
            "Description": "Locust workers connect to their master",
            "FromPort": LOCUST_PORT,
            "ToPort": LOCUST_PORT,
            "IpProtocol": "tcp",
            "GroupId": {"Fn::GetAtt": [master_sg, "GroupId"]},
            "SourceSecurityGroupId": {"Fn::GetAtt": [worker_sg, "GroupId"]},
        }
    ]
    for group in resources(template, "AWS::EC2::SecurityGroup").values():
        assert "SecurityGroupIngress" not in group["Properties"]


def test_egress_is_what_each_side_calls(template, env):
    master_sg, worker_sg = group_id(template, "MasterSecurityGroup"), group_id(template, "WorkerSecurityGroup")
    groups = resources(template, "AWS::EC2::SecurityGroup")

    def rules(group: str) -> set[tuple]:
        return {
            (r.get("CidrIp"), r["IpProtocol"], r["FromPort"], r["ToPort"])
            for r in groups[group]["Properties"]["SecurityGroupEgress"]
        }

    assert rules(master_sg) == {("0.0.0.0/0", "tcp", 443, 443)}  # S3, ECR, logs: never the model
    cidr = ENVIRONMENTS[env]["network"]["create"]["cidr"]
    assert rules(worker_sg) == {("0.0.0.0/0", "tcp", 443, 443), (cidr, "tcp", 80, 80)}
    (egress,) = [r["Properties"] for r in resources(template, "AWS::EC2::SecurityGroupEgress").values()]
    assert egress["GroupId"] == {"Fn::GetAtt": [worker_sg, "GroupId"]}
    assert egress["DestinationSecurityGroupId"] == {"Fn::GetAtt": [master_sg, "GroupId"]}
    assert (egress["FromPort"], egress["ToPort"]) == (LOCUST_PORT, LOCUST_PORT)


def test_the_runs_subnets_are_the_foundations_private_ones(synthesized, env):
    """The orchestrator places tasks in the foundation's PrivateSubnets output (with assignPublicIp DISABLED):
    exactly the private subnets, which map no public IP."""
    foundation = synthesized.template(env, "Foundation")
    refs = [part["Ref"] for part in foundation["Outputs"][stack_outputs.PRIVATE_SUBNETS]["Value"]["Fn::Join"][1]]
    subnets = resources(foundation, "AWS::EC2::Subnet")
    private = sorted(
        k for k, s in subnets.items() if {"Key": "aws-cdk:subnet-type", "Value": "Private"} in s["Properties"]["Tags"]
    )
    assert sorted(refs) == private and len(private) == len(ENVIRONMENTS[env]["availability_zones"])
    assert all(subnets[k]["Properties"]["MapPublicIpOnLaunch"] is False for k in refs)


def test_the_serving_load_balancers_already_admit_the_generators(synthesized, env):
    """No rule is added for the generators: every internal load balancer of the environment admits the VPC's
    range on its listener, and the private subnets the generators run in lie inside it."""
    foundation = synthesized.template(env, "Foundation")
    private = [
        ipaddress.ip_network(s["Properties"]["CidrBlock"])
        for s in resources(foundation, "AWS::EC2::Subnet").values()
        if {"Key": "aws-cdk:subnet-type", "Value": "Private"} in s["Properties"]["Tags"]
    ]
    balancers = 0
    for stack, serving in synthesized.templates[env].items():
        for group in resources(serving, "AWS::EC2::SecurityGroup").values():
            if not group["Properties"]["GroupDescription"].endswith("to the model load balancer"):
                continue
            balancers += 1
            admitted = [ipaddress.ip_network(r["CidrIp"]) for r in group["Properties"].get("SecurityGroupIngress", [])]
            assert all(any(subnet.subnet_of(network) for network in admitted) for subnet in private), (stack, admitted)
    assert balancers >= 1


# ----------------------------------------------------------------------------- IAM


def _trust(role: dict, account: str, region: str) -> None:
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"] == [
        {
            "Action": "sts:AssumeRole",
            "Effect": "Allow",
            "Principal": {"Service": "ecs-tasks.amazonaws.com"},
            "Condition": {
                "StringEquals": {"aws:SourceAccount": account},
                "ArnLike": {"aws:SourceArn": f"arn:aws:ecs:{region}:{account}:*"},
            },
        }
    ]
    assert "ManagedPolicyArns" not in role["Properties"]


def test_the_master_may_only_write_results(template, env):
    account, region = ENVIRONMENTS[env]["account"], ENVIRONMENTS[env]["region"]
    role_id = task_definition(template, "Master")["TaskRoleArn"]["Fn::GetAtt"][0]
    role = template["Resources"][role_id]
    _trust(role, account, region)
    (policy,) = role["Properties"]["Policies"]
    statements = {s["Sid"]: s for s in policy["PolicyDocument"]["Statement"]}
    assert statements["WriteResults"]["Action"] == "s3:PutObject"
    assert statements["WriteResults"]["Resource"] == {
        "Fn::Join": ["", [{"Fn::GetAtt": [RESULTS_BUCKET_ID, "Arn"]}, "/*"]]
    }
    assert sorted(statements["EncryptResults"]["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert statements["EncryptResults"]["Condition"] == {
        "StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"}
    }
    assert "Fn::ImportValue" in statements["EncryptResults"]["Resource"]
    assert set(statements) == {"WriteResults", "EncryptResults"}
    assert not [
        p for p in resources(template, "AWS::IAM::Policy").values() if {"Ref": role_id} in p["Properties"]["Roles"]
    ]


def test_workers_may_only_invoke_this_environments_endpoints(template, env):
    account, region = ENVIRONMENTS[env]["account"], ENVIRONMENTS[env]["region"]
    role_id = task_definition(template, "Worker")["TaskRoleArn"]["Fn::GetAtt"][0]
    role = template["Resources"][role_id]
    _trust(role, account, region)
    (policy,) = role["Properties"]["Policies"]
    assert policy["PolicyDocument"]["Statement"] == [
        {
            "Action": "sagemaker:InvokeEndpoint",
            "Effect": "Allow",
            "Sid": "InvokeThisEnvironmentsEndpoints",
            "Resource": [
                f"arn:aws:sagemaker:{region}:{account}:endpoint/{env}-*",
                f"arn:aws:sagemaker:{region}:{account}:inference-component/{env}-*",
            ],
        }
    ]


def test_the_execution_role_pulls_the_image_and_writes_the_logs_only(template, env):
    account, region = ENVIRONMENTS[env]["account"], ENVIRONMENTS[env]["region"]
    role_id = task_definition(template, "Master")["ExecutionRoleArn"]["Fn::GetAtt"][0]
    _trust(template["Resources"][role_id], account, region)
    (policy,) = [
        p for p in resources(template, "AWS::IAM::Policy").values() if {"Ref": role_id} in p["Properties"]["Roles"]
    ]
    logs_id, _ = only(template, "AWS::Logs::LogGroup")
    by_resource = {
        json.dumps(s["Resource"], sort_keys=True): sorted(
            s["Action"] if isinstance(s["Action"], list) else [s["Action"]]
        )
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    }
    assert by_resource == {
        json.dumps(f"arn:aws:ecr:{region}:{account}:repository/cdk-hnb659fds-container-assets-{account}-{region}"): [
            "ecr:BatchCheckLayerAvailability",
            "ecr:BatchGetImage",
            "ecr:GetDownloadUrlForLayer",
        ],
        json.dumps("*"): ["ecr:GetAuthorizationToken"],
        json.dumps({"Fn::GetAtt": [logs_id, "Arn"]}, sort_keys=True): ["logs:CreateLogStream", "logs:PutLogEvents"],
    }


# ----------------------------------------------------------------------------- results


def test_results_bucket_is_encrypted_private_tls_only_versioned_and_expires(template, env):
    bucket = template["Resources"][RESULTS_BUCKET_ID]
    assert bucket["Type"] == "AWS::S3::Bucket"
    properties = bucket["Properties"]
    (encryption,) = properties["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert encryption["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    assert "Fn::ImportValue" in encryption["ServerSideEncryptionByDefault"]["KMSMasterKeyID"]
    assert properties["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert properties["VersioningConfiguration"] == {"Status": "Enabled"}
    (rule,) = properties["LifecycleConfiguration"]["Rules"]
    assert rule["ExpirationInDays"] == ENVIRONMENTS[env]["load_test"]["results_retention_days"]
    assert rule["Status"] == "Enabled" and rule["NoncurrentVersionExpiration"]["NoncurrentDays"] >= 1
    logs_bucket = properties["LoggingConfiguration"]["DestinationBucketName"]["Ref"]
    assert template["Resources"][logs_bucket]["Type"] == "AWS::S3::Bucket"
    (policy,) = [
        p["Properties"]["PolicyDocument"]
        for p in resources(template, "AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": RESULTS_BUCKET_ID}
    ]
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in policy["Statement"]
    )
    removal = "Retain" if ENVIRONMENTS[env]["defaults"]["retain_stateful_resources"] else "Delete"
    assert bucket["DeletionPolicy"] == removal


# ----------------------------------------------------------------------------- outputs


def test_outputs_name_what_a_run_starts_from(template):
    assert set(template["Outputs"]) == set(stack_outputs.LOAD_TEST_OUTPUTS)
    assert output_ref(template, stack_outputs.RESULTS_BUCKET) == RESULTS_BUCKET_ID
    for output, container in (
        (stack_outputs.MASTER_TASK_DEFINITION, "Master"),
        (stack_outputs.WORKER_TASK_DEFINITION, "Worker"),
    ):
        definition = template["Resources"][output_ref(template, output)]
        assert definition["Properties"]["ContainerDefinitions"][0]["Name"] == container
    assert template["Outputs"][stack_outputs.MASTER_CONTAINER]["Value"] == "Master"
    assert template["Outputs"][stack_outputs.WORKER_CONTAINER]["Value"] == "Worker"
    assert template["Resources"][output_ref(template, stack_outputs.CLUSTER)]["Type"] == "AWS::ECS::Cluster"
    for output in (stack_outputs.MASTER_SECURITY_GROUP, stack_outputs.WORKER_SECURITY_GROUP):
        assert template["Resources"][group_id(template, output)]["Type"] == "AWS::EC2::SecurityGroup"
    assert not any("Export" in o for o in template["Outputs"].values())  # read by name, never imported


# ----------------------------------------------------------------------------- the role a run from outside assumes


def _runner_role(template: dict) -> dict:
    (role,) = [
        r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Role" and r["Properties"].get("RoleName") == "inferstack-loadtest"
    ]
    return role


def _statements(role: dict) -> dict[str, dict]:
    (policy,) = role["Properties"]["Policies"]
    return {s["Sid"]: s for s in policy["PolicyDocument"]["Statement"]}


def test_the_runner_role_trusts_only_the_pipelines_roles_and_starts_only_this_stacks_tasks(synthesized):
    """`inferstack loadtest --env staging --role-arn` (the pipeline's LoadTest step) assumes it: the pipeline's
    CodeBuild roles may, nothing else; it runs this stack's two task definitions in its cluster, passes their
    roles to ECS only, reads results, and cannot write them or invoke a model itself."""
    template = synthesized.template("staging", "LoadTest")
    role = _runner_role(template)
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"AWS": "arn:aws:iam::444444444444:root"}
    assert trust["Condition"] == {
        "ArnLike": {"aws:PrincipalArn": "arn:aws:iam::444444444444:role/inferstack-pipeline-*"}
    }
    statements = _statements(role)
    definitions = [r for r in template["Resources"].values() if r["Type"] == "AWS::ECS::TaskDefinition"]
    families = sorted(d["Properties"]["Family"] for d in definitions)
    assert len(families) == 2
    run = statements["StartLoadTestTasks"]
    assert run["Action"] == "ecs:RunTask"
    assert run["Resource"] == [f"arn:aws:ecs:us-east-1:222222222222:task-definition/{f}:*" for f in families]
    (cluster_id,) = [k for k, r in template["Resources"].items() if r["Type"] == "AWS::ECS::Cluster"]
    assert run["Condition"] == {"ArnEquals": {"ecs:cluster": {"Fn::GetAtt": [cluster_id, "Arn"]}}}
    passed = statements["PassTheTasksRoles"]
    assert passed["Condition"] == {"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}}
    task_roles = {
        ref
        for d in definitions
        for ref in (
            d["Properties"]["TaskRoleArn"]["Fn::GetAtt"][0],
            d["Properties"]["ExecutionRoleArn"]["Fn::GetAtt"][0],
        )
    }
    assert {r["Fn::GetAtt"][0] for r in passed["Resource"]} == task_roles
    actions = {a for s in statements.values() for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert not any(
        a.startswith(("s3:Put", "s3:Delete", "sagemaker:Invoke", "ecs:Register", "iam:Create")) for a in actions
    )
    assert statements["FindTheImagesUnderTest"]["Resource"] == "*"
    assert all(a.split(":")[1].startswith("Describe") for a in statements["FindTheImagesUnderTest"]["Action"])
