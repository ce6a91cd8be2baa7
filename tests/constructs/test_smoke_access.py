"""The smoke test's access to each environment, asserted on the synthesized foundations: the role the
pipeline assumes (its name, trust and least-privilege policy), the probe Lambda function in the private
subnets, and the internal load balancers admitting it. Expectations come from the YAML, not the loader."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest
import yaml

from inferstack import config
from inferstack.aws import stack_outputs
from inferstack.config import NeuronEcsModel
from inferstack.constructs.smoke_access import ENI_ACTIONS, PROBE_HANDLER
from inferstack.schema.environments import PIPELINE_STACK_NAME
from stacks.stage import smoke_role_for
from tests.support.paths import CONFIG_DIR

RAW = yaml.safe_load((CONFIG_DIR / "environments.yaml").read_text())
ENVIRONMENTS = RAW["environments"]
PIPELINE = RAW["pipeline"]
ENVS = list(ENVIRONMENTS)


def resources(template: dict, resource_type: str) -> dict[str, dict]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == resource_type}


def only(template: dict, resource_type: str, where=lambda key, resource: True) -> tuple[str, dict]:
    found = [(k, r) for k, r in resources(template, resource_type).items() if where(k, r)]
    assert len(found) == 1, f"{resource_type}: {[k for k, _ in found]}"
    return found[0]


def smoke_role(template: dict) -> dict:
    return only(
        template, "AWS::IAM::Role", lambda k, r: r["Properties"].get("RoleName") == PIPELINE["smoke_role_name"]
    )[1]


def probe(template: dict) -> tuple[str, dict]:
    return only(template, "AWS::Lambda::Function", lambda k, r: k.startswith("SmokeProbe"))


def vpc_cidr(env: str) -> str:
    network = ENVIRONMENTS[env]["network"]
    return network["create"]["cidr"] if "create" in network else network["import"]["vpc_cidr"]


# ----------------------------------------------------------------------------- the smoke role


@pytest.mark.parametrize("env", ENVS)
def test_smoke_role_is_named_for_the_pipeline_and_trusts_only_the_pipeline_stacks_roles(synthesized, env):
    role = smoke_role(synthesized.template(env, "Foundation"))
    tooling = PIPELINE["account"]
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"] == [
        {
            "Action": "sts:AssumeRole",
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{tooling}:root"},
            "Condition": {"ArnLike": {"aws:PrincipalArn": f"arn:aws:iam::{tooling}:role/{PIPELINE_STACK_NAME}-*"}},
        }
    ]
    assert "ManagedPolicyArns" not in role["Properties"]


def test_the_smoke_steps_run_as_roles_the_trust_condition_admits(synthesized):
    """CloudFormation names a role without RoleName `<stack name>-<logical id>-<suffix>`: the smoke steps'
    CodeBuild roles live in the pipeline stack and set no name, so their names match the condition."""
    pipeline = synthesized.root_templates["Pipeline"]
    projects = [
        r
        for r in pipeline["Resources"].values()
        if r["Type"] == "AWS::CodeBuild::Project" and "smoke" in json.dumps(r["Properties"].get("Source", {}))
    ]
    assert len(projects) == len(ENVS)
    for project in projects:
        role_id = project["Properties"]["ServiceRole"]["Fn::GetAtt"][0]
        role = pipeline["Resources"][role_id]
        assert role["Type"] == "AWS::IAM::Role" and "RoleName" not in role["Properties"]


@pytest.mark.parametrize("env", ENVS)
def test_smoke_role_may_do_exactly_what_smoke_does_in_this_environment(synthesized, env):
    template = synthesized.template(env, "Foundation")
    (policy,) = smoke_role(template)["Properties"]["Policies"]
    statements = {s["Sid"]: s for s in policy["PolicyDocument"]["Statement"]}
    account, region = ENVIRONMENTS[env]["account"], ENVIRONMENTS[env]["region"]
    probe_id, _ = probe(template)
    assert statements == {
        "ReadThisEnvironmentsStacks": {
            "Action": "cloudformation:DescribeStacks",
            "Effect": "Allow",
            "Sid": "ReadThisEnvironmentsStacks",
            "Resource": f"arn:aws:cloudformation:{region}:{account}:stack/{env}-*/*",
        },
        "InvokeTheProbe": {
            "Action": "lambda:InvokeFunction",
            "Effect": "Allow",
            "Sid": "InvokeTheProbe",
            "Resource": {"Fn::GetAtt": [probe_id, "Arn"]},
        },
        "InvokeThisEnvironmentsEndpoints": {
            "Action": "sagemaker:InvokeEndpoint",
            "Effect": "Allow",
            "Sid": "InvokeThisEnvironmentsEndpoints",
            "Resource": [
                f"arn:aws:sagemaker:{region}:{account}:endpoint/{env}-*",
                f"arn:aws:sagemaker:{region}:{account}:inference-component/{env}-*",
            ],
        },
    }


@pytest.mark.parametrize("env", ENVS)
def test_the_role_scopes_cover_every_stack_and_endpoint_the_environment_deploys(synthesized, env):
    """The wildcards are name prefixes: every stack of the stage and every endpoint must match them."""
    stage = synthesized.stages[env]
    for stack in [stage.foundation, *stage.serving.values()]:
        assert stack.stack_name.startswith(f"{env}-")
    endpoints = [
        r["Properties"]["EndpointName"]
        for stack in synthesized.templates[env].values()
        for r in resources(stack, "AWS::SageMaker::Endpoint").values()
    ]
    assert endpoints, "the shipped config has Triton models"
    assert all(name.lower().startswith(f"{env}-") for name in endpoints), endpoints


@pytest.mark.parametrize("env", ENVS)
def test_probe_and_role_are_stack_outputs_smoke_reads(synthesized, env):
    template = synthesized.template(env, "Foundation")
    probe_id, _ = probe(template)
    outputs = template["Outputs"]
    assert outputs[stack_outputs.PROBE_FUNCTION_NAME]["Value"] == {"Ref": probe_id}
    assert outputs["SmokeProbeFunctionArn"]["Value"] == {"Fn::GetAtt": [probe_id, "Arn"]}
    assert outputs["SmokeRoleArn"]["Value"]["Fn::GetAtt"][1] == "Arn"
    assert synthesized.stages[env].foundation.stack_name == stack_outputs.stack_name(env, stack_outputs.FOUNDATION)


def test_without_a_pipeline_the_role_trusts_the_environments_own_account(config_copy):
    path = config_copy / "environments.yaml"
    data = yaml.safe_load(path.read_text())
    shipped = config.load(config_copy)
    assert {env: smoke_role_for(shipped, env).trusted_account for env in ENVS} == {e: PIPELINE["account"] for e in ENVS}
    data["pipeline"].update(stages=["dev", "staging"], approval_before=[])  # prod: not deployed by the pipeline
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    partial = config.load(config_copy)
    assert smoke_role_for(partial, "prod").trusted_account == ENVIRONMENTS["prod"]["account"]
    assert smoke_role_for(partial, "dev").trusted_account == PIPELINE["account"]
    del data["pipeline"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    none = config.load(config_copy)
    assert {
        env: (r.name, r.trusted_account, r.trusted_role_prefix) for env in ENVS for r in [smoke_role_for(none, env)]
    } == {env: ("inferstack-smoke", ENVIRONMENTS[env]["account"], None) for env in ENVS}
    assert smoke_role_for(partial, "prod").trusted_role_prefix is None


# ----------------------------------------------------------------------------- the probe


def test_probe_runs_in_the_private_subnets_of_a_created_vpc(synthesized):
    template = synthesized.template("dev", "Foundation")
    _, function = probe(template)
    subnet_ids = {ref["Ref"] for ref in function["Properties"]["VpcConfig"]["SubnetIds"]}
    subnets = resources(template, "AWS::EC2::Subnet")
    private = {
        k for k, s in subnets.items() if {"Key": "aws-cdk:subnet-type", "Value": "Private"} in s["Properties"]["Tags"]
    }
    assert subnet_ids == private and len(private) == len(ENVIRONMENTS["dev"]["availability_zones"])
    # inside the VPC range the internal load balancers admit
    for key in private:
        assert ipaddress.ip_network(subnets[key]["Properties"]["CidrBlock"]).subnet_of(
            ipaddress.ip_network(vpc_cidr("dev"))
        )


def test_probe_runs_in_the_imported_private_subnets(synthesized):
    _, function = probe(synthesized.template("prod", "Foundation"))
    assert (
        function["Properties"]["VpcConfig"]["SubnetIds"]
        == ENVIRONMENTS["prod"]["network"]["import"]["private_subnet_ids"]
    )


@pytest.mark.parametrize("env", ENVS)
def test_probe_may_only_call_into_its_vpc(synthesized, env):
    template = synthesized.template(env, "Foundation")
    _, function = probe(template)
    sg_id = function["Properties"]["VpcConfig"]["SecurityGroupIds"][0]["Fn::GetAtt"][0]
    sg = template["Resources"][sg_id]["Properties"]
    assert "SecurityGroupIngress" not in sg
    assert sorted((r["CidrIp"], r["FromPort"], r["ToPort"], r["IpProtocol"]) for r in sg["SecurityGroupEgress"]) == [
        (vpc_cidr(env), 80, 80, "tcp"),
        (vpc_cidr(env), 443, 443, "tcp"),
    ]
    variables = function["Properties"]["Environment"]["Variables"]
    assert variables["PROBE_ALLOWED_NETWORKS"] == vpc_cidr(env)
    region = ENVIRONMENTS[env]["region"]
    assert variables["PROBE_ALLOWED_HOST_SUFFIXES"] == {
        "Fn::Join": ["", [f".{region}.elb.", {"Ref": "AWS::URLSuffix"}]]
    }


@pytest.mark.parametrize("env", ENVS)
def test_probe_role_is_inline_least_privilege(synthesized, env):
    template = synthesized.template(env, "Foundation")
    _, function = probe(template)
    role = template["Resources"][function["Properties"]["Role"]["Fn::GetAtt"][0]]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "lambda.amazonaws.com"}
    assert "ManagedPolicyArns" not in role  # no AWSLambdaBasicExecutionRole / AWSLambdaVPCAccessExecutionRole
    (policy,) = role["Policies"]
    statements = {s["Sid"]: s for s in policy["PolicyDocument"]["Statement"]}
    log_group_id = function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
    assert statements["WriteOwnLogs"]["Resource"] == {"Fn::GetAtt": [log_group_id, "Arn"]}
    assert sorted(statements["VpcNetworkInterfaces"]["Action"]) == sorted(ENI_ACTIONS)
    assert set(statements) == {"WriteOwnLogs", "VpcNetworkInterfaces"}
    # nothing else grants the probe anything
    assert not [
        p
        for p in resources(template, "AWS::IAM::Policy").values()
        if {"Ref": function["Properties"]["Role"]["Fn::GetAtt"][0]} in p["Properties"]["Roles"]
    ]
    log_group = template["Resources"][log_group_id]["Properties"]
    assert "KmsKeyId" in log_group


def test_probe_code_is_the_packaged_handler_and_nothing_else(synthesized):
    template = synthesized.template("dev", "Foundation")
    _, function = probe(template)
    assert function["Properties"]["Handler"] == PROBE_HANDLER
    key = function["Properties"]["Code"]["S3Key"]
    manifest_path = (
        synthesized.outdir / "assembly-dev" / f"{synthesized.stages['dev'].foundation.artifact_id}.assets.json"
    )
    (asset,) = [a for h, a in json.loads(manifest_path.read_text())["files"].items() if key.startswith(h)]
    directory = manifest_path.parent / asset["source"]["path"]
    files = sorted(str(p.relative_to(directory)) for p in Path(directory).rglob("*") if p.is_file())
    assert files == ["__init__.py", "handler.py"]
    module, _, attribute = PROBE_HANDLER.partition(".")
    assert f"def {attribute}(" in (directory / f"{module}.py").read_text()


# ----------------------------------------------------------------------------- load balancers admit the probe


@pytest.mark.parametrize("env", ENVS)
def test_internal_load_balancers_admit_the_probe_by_the_vpc_range(synthesized, project, env):
    """NeuronEcsService's internal load balancer admits the VPC's range on its listener port, which holds the
    probe's private subnets: no rule naming the probe's security group is needed (nor cross-stack)."""
    environment = project.environments[env]
    neuron = [u for u in project.image_units(env) if all(isinstance(m, NeuronEcsModel) for m in u.models)]
    assert neuron, "the shipped config has a Neuron model"
    _, function = probe(synthesized.template(env, "Foundation"))
    for unit in neuron:  # a dedicated model's stack, or a neuron-cores fleet's
        assert not any(m.public_load_balancer(environment) for m in unit.models)
        template = synthesized.template(env, unit.name)
        _, lb = only(template, "AWS::ElasticLoadBalancingV2::LoadBalancer")
        assert lb["Properties"]["Scheme"] == "internal"
        _, listener = only(template, "AWS::ElasticLoadBalancingV2::Listener")
        port = listener["Properties"]["Port"]
        sg = template["Resources"][lb["Properties"]["SecurityGroups"][0]["Fn::GetAtt"][0]]["Properties"]
        admitted = [
            ipaddress.ip_network(r["CidrIp"])
            for r in sg["SecurityGroupIngress"]
            if r["FromPort"] <= port <= r["ToPort"]
        ]
        allowed = ipaddress.ip_network(function["Properties"]["Environment"]["Variables"]["PROBE_ALLOWED_NETWORKS"])
        assert any(allowed.subnet_of(net) for net in admitted), (admitted, allowed)
