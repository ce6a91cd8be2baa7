"""The CDK Pipelines stack, asserted on its synthesized template: stage order from config, the approval
before prod only, a smoke test after every environment with the exact command, the configured source,
cross-account deploy roles, assets published once for every account, and the stages it deploys being the
very templates `cdk deploy '<env>/*'` deploys. Expectations are read from the YAML, not from the loader."""

from __future__ import annotations

import json
import re
from pathlib import Path

import aws_cdk as cdk
import pytest
import yaml

from inferstack import config
from inferstack.schema.environments import PIPELINE_STACK_NAME
from stacks.app_builder import PipelineUnavailable, pipeline_wanted
from tests.support.cli import assert_nothing_written, cdk_env, run
from tests.support.paths import CONFIG_DIR, ROOT
from tests.support.synth import synth

RAW = yaml.safe_load((CONFIG_DIR / "environments.yaml").read_text())
SETTINGS = RAW["pipeline"]
ENVIRONMENTS = RAW["environments"]
FIXED_STAGES = ["Source", "Build", "UpdatePipeline", "Assets"]
BOOTSTRAP = "hnb659fds"


# ----------------------------------------------------------------------------- helpers


def resources(template: dict, resource_type: str) -> dict[str, dict]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == resource_type}


def pipeline_stages(template: dict) -> list[dict]:
    (pipeline,) = resources(template, "AWS::CodePipeline::Pipeline").values()
    return pipeline["Properties"]["Stages"]


def stage(template: dict, name: str) -> dict:
    (found,) = [s for s in pipeline_stages(template) if s["Name"] == name]
    return found


def provider(action: dict) -> str:
    return action["ActionTypeId"]["Provider"]


def deploy_actions(stage_: dict) -> list[dict]:
    return [a for a in stage_["Actions"] if provider(a) == "CloudFormation"]


def build_spec(template: dict, action: dict) -> str:
    """The buildspec text of the CodeBuild project a CodeBuild action runs (tokens flattened)."""
    project = template["Resources"][action["Configuration"]["ProjectName"]["Ref"]]
    spec = project["Properties"]["Source"]["BuildSpec"]
    if isinstance(spec, dict):  # Fn::Join around account-specific parts
        spec = "".join(p if isinstance(p, str) else "<token>" for p in spec["Fn::Join"][1])
    return spec


def role_arn(value) -> str:
    """An action's role ARN as CloudFormation would resolve it in the aws partition."""
    if isinstance(value, dict) and "Fn::Sub" in value:
        return value["Fn::Sub"].replace("${AWS::Partition}", "aws")
    if isinstance(value, dict) and "Fn::Join" in value:
        return "".join("aws" if p == {"Ref": "AWS::Partition"} else p for p in value["Fn::Join"][1])
    return value


@pytest.fixture(scope="module")
def template(synthesized) -> dict:
    return synthesized.root_templates["Pipeline"]


# ----------------------------------------------------------------------------- order, approval, smoke


def test_stages_run_in_the_configured_order(template):
    assert SETTINGS["stages"] == ["dev", "staging", "prod"]
    assert [s["Name"] for s in pipeline_stages(template)] == FIXED_STAGES + SETTINGS["stages"]


def test_manual_approval_before_prod_only(template):
    for name in SETTINGS["stages"]:
        actions = stage(template, name)["Actions"]
        approvals = [a for a in actions if provider(a) == "Manual"]
        if name in SETTINGS["approval_before"]:
            (approval,) = approvals
            assert approval["ActionTypeId"]["Category"] == "Approval"
            assert approval["RunOrder"] < min(a["RunOrder"] for a in deploy_actions(stage(template, name)))
        else:
            assert approvals == [], f"{name} waits for an approval it was not configured with"
    assert SETTINGS["approval_before"] == ["prod"]


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_smoke_test_runs_after_the_environment_is_deployed(template, env):
    actions = stage(template, env)["Actions"]
    (smoke,) = [a for a in actions if a["Name"] == f"Smoke-{env}"]
    assert provider(smoke) == "CodeBuild"
    assert smoke["RunOrder"] > max(a["RunOrder"] for a in deploy_actions(stage(template, env)))
    spec = json.loads(build_spec(template, smoke))
    commands = spec["phases"]["build"]["commands"]
    # as the environment's smoke role, which the command assumes itself (no AWS profile in between)
    assert commands == [". .venv/bin/activate", f'python -m inferstack smoke --env {env} --role-arn "$SMOKE_ROLE_ARN"']
    # installed the way the Makefile installs it: the pinned runtime requirements with constraints.txt
    assert any(
        "pip install" in c and "-r requirements.txt -c constraints.txt" in c
        for c in spec["phases"]["install"]["commands"]
    )
    assert spec["phases"]["install"]["runtime-versions"] == {"python": "3.11"}
    # it runs as the environment's smoke role, which its CodeBuild role may assume (and nothing else)
    smoke_role = f"arn:aws:iam::{ENVIRONMENTS[env]['account']}:role/{SETTINGS['smoke_role_name']}"
    project = template["Resources"][smoke["Configuration"]["ProjectName"]["Ref"]]
    variables = {v["Name"]: v["Value"] for v in project["Properties"]["Environment"]["EnvironmentVariables"]}
    assert variables["SMOKE_ROLE_ARN"] == smoke_role
    assert variables["AWS_REGION"] == ENVIRONMENTS[env]["region"]
    role_id = project["Properties"]["ServiceRole"]["Fn::GetAtt"][0]
    (policy,) = [
        p for p in resources(template, "AWS::IAM::Policy").values() if {"Ref": role_id} in p["Properties"]["Roles"]
    ]
    assume = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Action"] == "sts:AssumeRole"]
    assert assume == [{"Action": "sts:AssumeRole", "Effect": "Allow", "Resource": smoke_role}]


def synthesized_pipeline_stack_name(synthesized) -> str:
    return next(
        s.stack_name
        for s in synthesized.stages["dev"].node.root.node.children
        if isinstance(s, cdk.Stack) and s.node.id == "Pipeline"
    )


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_the_role_each_smoke_step_assumes_is_created_by_that_environment(template, synthesized, env):
    """The smoke step's role ARN names a role the environment's foundation creates, in that account, and
    whose trust admits the step's CodeBuild role: a role of the tooling account that CloudFormation names
    after this stack (no RoleName), which is what the trust's condition matches."""
    (smoke,) = [a for a in stage(template, env)["Actions"] if a["Name"] == f"Smoke-{env}"]
    project = template["Resources"][smoke["Configuration"]["ProjectName"]["Ref"]]
    variables = {v["Name"]: v["Value"] for v in project["Properties"]["Environment"]["EnvironmentVariables"]}
    account, _, name = variables["SMOKE_ROLE_ARN"].split(":", 4)[4].partition(":role/")
    foundation = synthesized.template(env, "Foundation")
    (role,) = [r for r in resources(foundation, "AWS::IAM::Role").values() if r["Properties"].get("RoleName") == name]
    assert account == ENVIRONMENTS[env]["account"]
    trust = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    tooling = SETTINGS["account"]
    assert trust == [
        {
            "Action": "sts:AssumeRole",
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{tooling}:root"},
            "Condition": {"ArnLike": {"aws:PrincipalArn": f"arn:aws:iam::{tooling}:role/{PIPELINE_STACK_NAME}-*"}},
        }
    ]
    codebuild_role = template["Resources"][project["Properties"]["ServiceRole"]["Fn::GetAtt"][0]]
    assert "RoleName" not in codebuild_role["Properties"]
    assert synthesized_pipeline_stack_name(synthesized) == PIPELINE_STACK_NAME
    assert variables["AWS_REGION"] == synthesized.stages[env].foundation.region


def test_source_uses_the_configured_connection_repository_and_branch(template):
    (action,) = stage(template, "Source")["Actions"]
    assert action["ActionTypeId"] == {
        "Category": "Source",
        "Owner": "AWS",
        "Provider": "CodeStarSourceConnection",
        "Version": "1",
    }
    configuration = action["Configuration"]
    assert configuration["ConnectionArn"] == SETTINGS["connection_arn"]
    assert configuration["FullRepositoryId"] == SETTINGS["repository"]
    assert configuration["BranchName"] == SETTINGS["branch"]


def test_synth_is_the_readme_command_and_runs_in_the_tooling_account(template, synthesized):
    (action,) = stage(template, "Build")["Actions"]
    assert json.loads(build_spec(template, action))["phases"]["build"]["commands"] == ["make synth"]
    stack = synthesized.stages["dev"].node.root.node.find_child("Pipeline")
    assert (stack.account, stack.region) == (SETTINGS["account"], SETTINGS["region"])
    (mutate,) = stage(template, "UpdatePipeline")["Actions"]
    package = json.loads((ROOT / "package.json").read_text())
    assert f"aws-cdk@{package['devDependencies']['aws-cdk']}" in build_spec(template, mutate)


# ----------------------------------------------------------------------------- accounts and regions


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_every_stack_is_deployed_with_the_environment_bootstrap_roles(template, env):
    account, region = ENVIRONMENTS[env]["account"], ENVIRONMENTS[env]["region"]
    actions = deploy_actions(stage(template, env))
    assert actions
    for action in actions:
        assert (
            role_arn(action["RoleArn"]) == f"arn:aws:iam::{account}:role/cdk-{BOOTSTRAP}-deploy-role-{account}-{region}"
        )
        if action["Configuration"]["ActionMode"] == "CHANGE_SET_REPLACE":  # the change set runs as cfn-exec
            assert role_arn(action["Configuration"]["RoleArn"]) == (
                f"arn:aws:iam::{account}:role/cdk-{BOOTSTRAP}-cfn-exec-role-{account}-{region}"
            )
        # actions in another region than the pipeline's name it (and get a replication bucket there)
        assert action.get("Region", SETTINGS["region"]) == region


def test_pipeline_role_may_assume_exactly_the_configured_deploy_roles(template):
    (pipeline,) = resources(template, "AWS::CodePipeline::Pipeline").values()
    role_id = pipeline["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    (policy,) = [
        p for p in resources(template, "AWS::IAM::Policy").values() if {"Ref": role_id} in p["Properties"]["Roles"]
    ]
    assumed = [
        role_arn(r)
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if s["Action"] == "sts:AssumeRole"
        for r in s["Resource"]
    ]
    cross_account = sorted(a for a in assumed if isinstance(a, str) and "cdk-" in a)
    assert cross_account == sorted(
        f"arn:aws:iam::{e['account']}:role/cdk-{BOOTSTRAP}-deploy-role-{e['account']}-{e['region']}"
        for name, e in ENVIRONMENTS.items()
        if name in SETTINGS["stages"]
    )


def test_artifact_keys_admit_the_target_accounts(template, synthesized):
    # cross_account_keys: customer-managed keys whose policies let each account's deploy role decrypt the
    # artifacts; the pipeline region's key for actions there, a support stack's key for other regions.
    for env in SETTINGS["stages"]:
        account, region = ENVIRONMENTS[env]["account"], ENVIRONMENTS[env]["region"]
        holder = (
            template
            if region == SETTINGS["region"]
            else synthesized.root_templates[f"cross-region-stack-{SETTINGS['account']}:{region}"]
        )
        (key,) = resources(holder, "AWS::KMS::Key").values()
        assert f"{account}:role/cdk-{BOOTSTRAP}-deploy-role-{account}-{region}" in json.dumps(
            key["Properties"]["KeyPolicy"]
        )
        assert key["Properties"]["EnableKeyRotation"] is True


def test_prod_region_gets_a_replication_bucket_stack(synthesized):
    support = [k for k in synthesized.root_templates if k.startswith("cross-region-stack-")]
    other_regions = sorted(
        {e["region"] for n, e in ENVIRONMENTS.items() if n in SETTINGS["stages"] and e["region"] != SETTINGS["region"]}
    )
    assert support == [f"cross-region-stack-{SETTINGS['account']}:{r}" for r in other_regions]


# ----------------------------------------------------------------------------- what it deploys


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_each_stage_deploys_the_same_templates_as_cdk_deploy(template, synthesized, env):
    stage_ = synthesized.stages[env]
    load_test = [stage_.load_test] if stage_.load_test else []  # the generators, where load_test is set
    expected = {
        f"{env}-{stack.node.id}": f"Synth_Output::assembly-{env}/{stack.template_file}"
        for stack in [stage_.foundation, *stage_.fleets.values(), *stage_.serving.values(), *load_test]
    }
    prepared = {
        a["Configuration"]["StackName"]: a["Configuration"]["TemplatePath"]
        for a in deploy_actions(stage(template, env))
        if a["Configuration"]["ActionMode"] == "CHANGE_SET_REPLACE"
    }
    assert prepared == expected
    # the foundation (exports) is executed before any serving stack (imports) is prepared
    actions = deploy_actions(stage(template, env))
    foundation_done = max(a["RunOrder"] for a in actions if a["Configuration"]["StackName"] == f"{env}-Foundation")
    assert all(
        a["RunOrder"] > foundation_done for a in actions if a["Configuration"]["StackName"] != f"{env}-Foundation"
    )
    # an inference-components fleet's shared endpoint is executed before its members' components are prepared
    for fleet in stage_.fleets.values():
        members = [s.stack_name for s in stage_.serving.values() if fleet in s.dependencies]
        assert bool(members) != fleet.serves_members  # a neuron-cores fleet's stack serves its members itself
        done = max(a["RunOrder"] for a in actions if a["Configuration"]["StackName"] == fleet.stack_name)
        assert all(a["RunOrder"] > done for a in actions if a["Configuration"]["StackName"] in members)


def _asset_ids(outdir: Path, kind: str) -> set[str]:
    """Assets the stages need, less their own templates (deploy actions read those from the cloud assembly)."""
    ids = set()
    for manifest in outdir.glob("assembly-*/*.assets.json"):
        ids |= {
            k
            for k, a in json.loads(manifest.read_text())[kind].items()
            if not a["source"].get("path", "").endswith(".template.json")
        }
    return ids


def test_each_asset_is_published_once_to_every_account_that_uses_it(template, synthesized):
    actions = stage(template, "Assets")["Actions"]
    specs = [build_spec(template, a) for a in actions]
    published = [set(re.findall(r'publish \\"([0-9a-f]{64}):', spec)) for spec in specs]
    assert all(len(ids) == 1 for ids in published), "one publishing action per asset"
    ids = [next(iter(p)) for p in published]
    assert sorted(ids) == sorted(
        _asset_ids(synthesized.outdir, "dockerImages") | _asset_ids(synthesized.outdir, "files")
    )
    # the Neuron image does not depend on the environment: one build pushed to all three accounts
    neuron = synthesized.stages["dev"].fleets["intent-pack"]  # one image for every member
    manifest = json.loads((synthesized.outdir / "assembly-dev" / f"{neuron.artifact_id}.assets.json").read_text())
    (neuron_image,) = manifest["dockerImages"]
    (spec,) = [s for s in specs if neuron_image in s]
    destinations = re.findall(rf'publish \\"{neuron_image}:(\d{{12}})-([a-z0-9-]+?)-[0-9a-f]{{8}}\\"', spec)
    assert sorted(destinations) == sorted(
        (ENVIRONMENTS[e]["account"], ENVIRONMENTS[e]["region"]) for e in SETTINGS["stages"]
    )


def test_docker_builds_are_privileged_and_log_in_to_both_triton_registries(template):
    projects = resources(template, "AWS::CodeBuild::Project")
    privileged = {k for k, p in projects.items() if p["Properties"]["Environment"]["PrivilegedMode"]}
    assert privileged and all("DockerAsset" in k for k in privileged)
    for key in privileged:
        spec = json.dumps(projects[key]["Properties"]["Source"]["BuildSpec"])
        for region in sorted({e["region"] for e in ENVIRONMENTS.values()}):
            assert f"dkr.ecr.{region}." in spec, f"{key} cannot pull the {region} Triton base image"


def test_tools_installed_in_codebuild_are_the_versions_package_json_pins(template):
    pins = json.loads((ROOT / "package.json").read_text())["devDependencies"]
    specs = [
        json.dumps(p["Properties"]["Source"]["BuildSpec"])
        for p in resources(template, "AWS::CodeBuild::Project").values()
    ]
    assets = [spec for spec in specs if "cdk-assets" in spec]
    assert assets and all(f"cdk-assets@{pins['cdk-assets']}" in spec and "@latest" not in spec for spec in assets)
    assert any(f"aws-cdk@{pins['aws-cdk']}" in spec for spec in specs)  # the self-update step


# ----------------------------------------------------------------------------- config drives it


def test_stage_order_and_approvals_come_from_config(config_copy, tmp_path):
    envs_path = config_copy / "environments.yaml"
    data = yaml.safe_load(envs_path.read_text())
    data["pipeline"].update(stages=["staging", "dev"], approval_before=["dev"])
    envs_path.write_text(yaml.safe_dump(data, sort_keys=False))
    project = config.load(config_copy)
    out = synth(project, ["dev", "staging"], tmp_path)
    tpl = out.root_templates["Pipeline"]
    assert [s["Name"] for s in pipeline_stages(tpl)] == FIXED_STAGES + ["staging", "dev"]
    assert [provider(a) for a in stage(tpl, "dev")["Actions"] if provider(a) == "Manual"] == ["Manual"]
    assert not [a for a in stage(tpl, "staging")["Actions"] if provider(a) == "Manual"]
    assert [k for k in out.root_templates if k.startswith("cross-region")] == []  # prod's region is not deployed


def test_when_the_pipeline_is_built(project):
    every = list(project.environments)
    assert pipeline_wanted(project, every, None) is True
    assert pipeline_wanted(project, ["dev"], None) is False  # a dev-only synth stays fast
    assert pipeline_wanted(project, every, "false") is False
    assert pipeline_wanted(project, every, "true") is True
    with pytest.raises(PipelineUnavailable, match="leaves out staging, prod"):
        pipeline_wanted(project, ["dev"], "true")
    with pytest.raises(PipelineUnavailable, match="expected true or false"):
        pipeline_wanted(project, every, "sometimes")


def test_no_pipeline_block_no_pipeline(config_copy):
    envs_path = config_copy / "environments.yaml"
    data = yaml.safe_load(envs_path.read_text())
    del data["pipeline"]
    envs_path.write_text(yaml.safe_dump(data, sort_keys=False))
    project = config.load(config_copy)
    assert project.pipeline is None
    assert pipeline_wanted(project, list(project.environments), None) is False
    with pytest.raises(PipelineUnavailable, match="no pipeline: block"):
        pipeline_wanted(project, list(project.environments), "true")


def test_cdk_synth_refuses_a_pipeline_without_its_stages(tmp_path):
    outdir = tmp_path / "cdk.out"
    result = run("app.py", env=cdk_env(outdir, environments="dev", pipeline="true"))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "-c pipeline=true: the pipeline deploys dev, staging, prod, but -c environments leaves out staging, prod"
    )
    assert_nothing_written(outdir)


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_a_load_test_step_follows_the_smoke_test_where_the_environment_has_load_test(template, synthesized, env):
    """staging (load_test in the shipped config) gets LoadTest-staging after its smoke test, so prod's approval
    is asked for only after it passed; it runs every model's load test as the role staging's LoadTest stack
    creates. dev and prod have no generators and no such step."""
    actions = stage(template, env)["Actions"]
    steps = [a for a in actions if a["Name"] == f"LoadTest-{env}"]
    if "load_test" not in ENVIRONMENTS[env]:
        assert steps == []
        return
    (step,) = steps
    (smoke,) = [a for a in actions if a["Name"] == f"Smoke-{env}"]
    assert provider(step) == "CodeBuild" and step["RunOrder"] > smoke["RunOrder"]
    spec = json.loads(build_spec(template, step))
    assert spec["phases"]["build"]["commands"] == [
        ". .venv/bin/activate",
        f'python -m inferstack loadtest --env {env} --all-models --role-arn "$LOAD_TEST_ROLE_ARN"',
    ]
    project = template["Resources"][step["Configuration"]["ProjectName"]["Ref"]]
    variables = {v["Name"]: v["Value"] for v in project["Properties"]["Environment"]["EnvironmentVariables"]}
    role_arn = f"arn:aws:iam::{ENVIRONMENTS[env]['account']}:role/inferstack-loadtest"
    assert variables["LOAD_TEST_ROLE_ARN"] == role_arn
    role_id = project["Properties"]["ServiceRole"]["Fn::GetAtt"][0]
    (policy,) = [
        p for p in resources(template, "AWS::IAM::Policy").values() if {"Ref": role_id} in p["Properties"]["Roles"]
    ]
    assume = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Action"] == "sts:AssumeRole"]
    assert assume == [{"Action": "sts:AssumeRole", "Effect": "Allow", "Resource": role_arn}]
    # The role exists where the step assumes it: created by the environment's LoadTest stack.
    load_test = synthesized.template(env, "LoadTest")
    assert [
        r
        for r in resources(load_test, "AWS::IAM::Role").values()
        if r["Properties"].get("RoleName") == "inferstack-loadtest"
    ]
    # The next stage begins with its approval.
    later = SETTINGS["stages"][SETTINGS["stages"].index(env) + 1 :]
    assert later and later[0] in SETTINGS["approval_before"]
