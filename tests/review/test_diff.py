"""`python -m inferstack diff`: real `dev` synths compared with changed copies (config changes, or
template JSON edits where config cannot express the change), plus small hand-written assemblies that pin
the SageMaker and ECS behaviour reviewers care about before those constructs land."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from inferstack.review import assembly, diff, render_markdown
from inferstack.review.diff import _replacing
from tests.support import review_assemblies as ra
from tests.support.cli import run

HASH_A, HASH_B = "a" * 64, "b" * 64


def load_diff(base: Path, head: Path) -> diff.Report:
    return diff.diff(assembly.load(base), assembly.load(head))


def resources(report: diff.Report, env: str = "dev", stack: str | None = None) -> dict[str, diff.ResourceChange]:
    (environment,) = [e for e in report.environments if e.name == env]
    return {r.logical_id: r for r in environment.resources if stack is None or r.stack == stack}


def cli_diff(base: Path, head: Path, *args: str):
    return run("-m", "inferstack", "diff", str(base), str(head), *args)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return ra.base(tmp_path_factory)


@pytest.fixture(scope="module")
def head_config(tmp_path_factory) -> Path:
    return ra.head_config(tmp_path_factory)


@pytest.fixture(scope="module")
def head_iam(base, tmp_path_factory) -> Path:
    # IAM and security-group rules are not in model_configs/, so this head is the base with its Foundation
    # template edited: one more statement on the flow-log role's policy and on the KMS key policy, and
    # one more ingress rule on the endpoint security group.
    def edit(template: dict) -> None:
        res = template["Resources"]
        res[ra.FLOW_LOG_POLICY]["Properties"]["PolicyDocument"]["Statement"].append(
            {"Action": "s3:GetObject", "Effect": "Allow", "Resource": "arn:aws:s3:::models/*"}
        )
        res[ra.PLATFORM_KEY]["Properties"]["KeyPolicy"]["Statement"].append(
            {
                "Action": "kms:Decrypt",
                "Effect": "Allow",
                "Principal": {"AWS": "arn:aws:iam::222222222222:root"},
                "Resource": "*",
            }
        )
        res[ra.ENDPOINT_SG]["Properties"]["SecurityGroupIngress"].append(
            {"CidrIp": "10.99.0.0/16", "FromPort": 443, "ToPort": 443, "IpProtocol": "tcp"}
        )

    return ra.edited_copy(base, tmp_path_factory.mktemp("head-iam") / "cdk.out", edit)


@pytest.fixture(scope="module")
def head_asset(base, tmp_path_factory) -> Path:
    # What a rebuilt asset looks like after synth: the same template with another content hash, here in
    # the S3 key of the VPC custom resource's Lambda bundle, and the asset manifest naming the new hash.
    target = tmp_path_factory.mktemp("head-asset") / "cdk.out"
    ra.edited_copy(
        base, target, lambda t: t["Resources"][ra.SG_HANDLER]["Properties"]["Code"].update(S3Key=HASH_B + ".zip")
    )
    assets_path = target / "assembly-dev" / "devFoundation3D911934.assets.json"
    assets = json.loads(assets_path.read_text())
    # the bundle of that one Lambda (the foundation has others, e.g. the smoke probe's)
    base_template = json.loads((base / "assembly-dev" / "devFoundation3D911934.template.json").read_text())
    old = base_template["Resources"][ra.SG_HANDLER]["Properties"]["Code"]["S3Key"].removesuffix(".zip")
    assert assets["files"][old]["source"]["packaging"] == "zip"
    assets["files"][HASH_B] = assets["files"].pop(old)
    assets_path.write_text(json.dumps(assets))
    return target


# --- real synths ----------------------------------------------------------------------------------


def test_identical_assemblies_have_no_changes(base):
    report = load_diff(base, base)
    assert [(e.name, e.status) for e in report.environments] == [("dev", "unchanged")]
    assert report.resources == []
    markdown = render_markdown.render(report)
    assert "### dev: unchanged" in markdown and "No changes." in markdown


def test_vpc_cidr_change_replaces_the_protected_vpc_and_what_hangs_off_it(base, head_config):
    changes = resources(load_diff(base, head_config), stack="Foundation")
    vpc = changes[ra.VPC]
    assert (vpc.type, vpc.action, vpc.replacement, vpc.protected) == ("AWS::EC2::VPC", "modified", "always", True)
    assert vpc.replacing_paths == ["Properties.CidrBlock"]
    assert [c.to_json() for c in vpc.changes] == [
        {"path": "Properties.CidrBlock", "change": "modified", "base": "10.10.0.0/16", "head": "10.11.0.0/16"}
    ]
    assert not vpc.cascaded
    # Subnet CIDRs are carved from the VPC's, so they change too: replaced in their own right.
    subnet = changes["NetworkVpcprivateSubnet1Subnet9EC58498"]
    assert (subnet.replacement, subnet.replacing_paths, subnet.cascaded) == ("always", ["Properties.CidrBlock"], False)
    # Unchanged in the template, replaced all the same: the endpoint's VpcId is create-only.
    endpoint = changes["NetworkEcrApi143B6701"]
    assert (endpoint.replacement, endpoint.changes, endpoint.cascaded) == ("always", [], True)
    assert {"path": "Properties.VpcId", "logical_id": ra.VPC} in endpoint.caused_by
    assert "Properties.VpcId" in endpoint.replacing_paths
    assert "security-groups" in changes[ra.ENDPOINT_SG].categories
    # The custom resource only carries the VPC's default security group id: updated, not replaced.
    restrict = changes["NetworkVpcRestrictDefaultSecurityGroupCustomResource491E144D"]
    assert (restrict.action, restrict.replacement) == ("modified", None)


def test_added_model_is_an_added_stack(base, head_config):
    report = load_diff(base, head_config)
    (env,) = report.environments
    stacks = {s.name: s for s in env.stacks}
    assert stacks["t5-grammar"].status == "added"
    assert stacks["t5-grammar"].stack_name == "dev-t5-grammar"
    added = stacks["t5-grammar"].resources
    assert all(r.action == "added" and r.replacement is None for r in added)
    assert "AWS::Logs::LogGroup" in {r.type for r in added}
    assert stacks["t5-spelling"].status == "unchanged"  # nothing about it changed


def test_sagemaker_instance_type_change_replaces_endpoint_config_not_endpoint(base, head_config):
    changes = resources(load_diff(base, head_config), stack="triton-shared")  # dev's shared endpoint
    (config,) = [r for r in changes.values() if r.type == "AWS::SageMaker::EndpointConfig"]
    assert (config.replacement, config.protected) == ("always", False)
    assert config.replacing_paths == ["Properties.ProductionVariants[0].InstanceType"]
    assert [(c.base, c.head) for c in config.changes if c.path == "Properties.ProductionVariants[0].InstanceType"] == [
        ("ml.g4dn.xlarge", "ml.g5.xlarge")
    ]
    (endpoint,) = [r for r in changes.values() if r.type == "AWS::SageMaker::Endpoint"]
    assert (endpoint.replacement, endpoint.protected) == (None, True)
    assert {"path": "Properties.EndpointConfigName", "logical_id": config.logical_id} in endpoint.caused_by


def test_neuron_instance_type_change_replaces_task_definition_not_service(base, head_config):
    changes = resources(load_diff(base, head_config), stack="intent-pack")
    (task,) = [r for r in changes.values() if r.type == "AWS::ECS::TaskDefinition"]
    assert task.replacement == "always"
    assert "Properties.ContainerDefinitions[0].Memory" in task.replacing_paths
    (service,) = [r for r in changes.values() if r.type == "AWS::ECS::Service"]
    assert (service.replacement, service.protected) == (None, True)
    assert {"path": "Properties.TaskDefinition", "logical_id": task.logical_id} in service.caused_by
    (template,) = [r for r in changes.values() if r.type == "AWS::EC2::LaunchTemplate"]
    assert [(c.path, c.base, c.head) for c in template.changes] == [
        ("Properties.LaunchTemplateData.InstanceType", "inf1.xlarge", "inf1.6xlarge")
    ]
    assert template.replacement is None


def test_markdown_for_config_changes(base, head_config):
    markdown = render_markdown.render(load_diff(base, head_config))
    lines = markdown.splitlines()
    assert "> [!CAUTION]" in lines
    assert f"> - `dev/Foundation/{ra.VPC}` (AWS::EC2::VPC)" in lines
    assert any(line.startswith("| Foundation | modified | 0 | 0 |") for line in lines)
    assert any(line.startswith("| t5-grammar | added |") for line in lines)
    assert "| t5-spelling | unchanged | 0 | 0 | 0 | 0 | 0 | 0 |" in lines
    assert "#### Protected resources (" in markdown and "#### Replacements (" in markdown
    assert (
        f"- 🛑 **protected** `Foundation/{ra.VPC}` (AWS::EC2::VPC): **replaced**: "
        "`Properties.CidrBlock` is create-only (/properties/CidrBlock)"
    ) in lines
    assert "  - `Properties.CidrBlock`: `10.10.0.0/16` → `10.11.0.0/16`" in lines
    assert "more, because they refer to a replaced resource</summary>" in markdown


def test_cli_fails_on_protected_replacement_only_when_asked(base, head_config, tmp_path):
    out = tmp_path / "report.json"
    result = cli_diff(base, head_config, "--format", "json", "--out", str(out), "--fail-on-replace")
    assert result.returncode == 3, result.stderr
    assert f"dev/Foundation/{ra.VPC} (AWS::EC2::VPC)" in result.stderr
    data = json.loads(out.read_text())
    assert data["schema_version"] == 2  # 2: one-sided environments are not counted; change classes
    assert data["protected_replacements"] == [f"dev/Foundation/{ra.VPC}"]
    (env,) = data["environments"]
    foundation = next(s for s in env["stacks"] if s["name"] == "Foundation")
    vpc = next(r for r in foundation["resources"] if r["logical_id"] == ra.VPC)
    assert vpc["changed_paths"] == ["Properties.CidrBlock"]
    assert vpc["replacement_reasons"] == [
        {"path": "Properties.CidrBlock", "why": "create-only (/properties/CidrBlock)", "refers_to": None}
    ]
    assert cli_diff(base, head_config).returncode == 0


def test_iam_and_security_group_edits_get_their_own_sections(base, head_iam):
    report = load_diff(base, head_iam)
    changes = resources(report)
    assert set(changes) == {ra.FLOW_LOG_POLICY, ra.PLATFORM_KEY, ra.ENDPOINT_SG}
    policy, key, sg = changes[ra.FLOW_LOG_POLICY], changes[ra.PLATFORM_KEY], changes[ra.ENDPOINT_SG]
    assert (policy.categories, policy.changed_paths, policy.replacement) == (
        ["iam"],
        ["Properties.PolicyDocument.Statement[1]"],
        None,
    )
    assert (key.categories, key.protected, key.replacement) == (["iam"], True, None)
    statements = json.loads((base / ra.FOUNDATION_TEMPLATE).read_text())["Resources"][ra.PLATFORM_KEY]["Properties"][
        "KeyPolicy"
    ]["Statement"]
    assert key.changed_paths == [f"Properties.KeyPolicy.Statement[{len(statements)}]"]
    assert (sg.categories, sg.changed_paths, sg.replacement) == (
        ["security-groups"],
        ["Properties.SecurityGroupIngress[1]"],
        None,
    )
    markdown = render_markdown.render(report)
    iam = markdown.split("#### IAM (2)")[1].split("####")[0]
    assert f"`Foundation/{ra.FLOW_LOG_POLICY}` (AWS::IAM::Policy): modified" in iam
    assert f"**protected** `Foundation/{ra.PLATFORM_KEY}` (AWS::KMS::Key): modified" in iam
    assert '`Properties.PolicyDocument.Statement[1]` added: `{"Action": "s3:GetObject"' in iam
    groups = markdown.split("#### Security groups (1)")[1]
    assert f"`Foundation/{ra.ENDPOINT_SG}` (AWS::EC2::SecurityGroup): modified" in groups
    assert "[!CAUTION]" not in markdown and "#### Replacements" not in markdown
    assert cli_diff(base, head_iam, "--fail-on-replace").returncode == 0


def test_asset_hash_only_change_is_an_image_or_model_update(base, head_asset):
    report = load_diff(base, head_asset)
    (change,) = report.resources
    assert (change.logical_id, change.type, change.action) == (ra.SG_HANDLER, "AWS::Lambda::Function", "asset-update")
    assert change.changes == [] and change.replacement is None
    (update,) = change.asset_updates
    assert update.path == "Properties.Code.S3Key"
    assert update.kind == "file asset (zip)"
    assert update.asset == "dev/Foundation/Custom::VpcRestrictDefaultSGCustomResourceProvider Code"
    assert update.head_hash == HASH_B and update.base_hash != HASH_B
    assert diff.counts(report.resources) == {
        "added": 0,
        "removed": 0,
        "modified": 0,
        "replaced": 0,
        "asset_updates": 1,
        "protected": 0,
    }
    markdown = render_markdown.render(report)
    assert "#### Image/model updates (1)" in markdown
    assert (
        f"- `Foundation/{ra.SG_HANDLER}` (AWS::Lambda::Function): new file asset (zip) "
        "(dev/Foundation/Custom::VpcRestrictDefaultSGCustomResourceProvider Code) at `Properties.Code.S3Key`: "
        f"`{update.base_hash[:12]}…` → `{HASH_B[:12]}…`"
    ) in markdown
    assert "Other changes" not in markdown
    assert "| Foundation | modified | 0 | 0 | 0 | 0 | 1 | 0 |" in markdown


# --- bad input ------------------------------------------------------------------------------------


def _assert_one_line_error(result, *needles: str) -> None:
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0]


def test_missing_directory(base, tmp_path):
    _assert_one_line_error(cli_diff(tmp_path / "nope", base), str(tmp_path / "nope"), "no such directory")


def test_directory_that_is_not_a_cloud_assembly(base, tmp_path):
    _assert_one_line_error(cli_diff(base, tmp_path), str(tmp_path), "not a cloud assembly")


def test_unreadable_manifest_and_missing_template(base, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text("{not json")
    out = tmp_path / "report.md"
    result = cli_diff(base, broken, "--out", str(out))
    _assert_one_line_error(result, str(broken / "manifest.json"), "not valid JSON")
    assert not out.exists()  # nothing written on bad input
    missing = tmp_path / "missing-template"
    ra.write_assembly(missing, {"dev": {"Foundation": {"Resources": {}}}})
    (template,) = missing.glob("assembly-dev/*.template.json")
    template.unlink()
    _assert_one_line_error(cli_diff(base, missing), str(template), "file not found")


def test_out_in_a_missing_directory_creates_it(base, tmp_path):
    # The retire runbook's `--out review/retire.md`, pasted into a checkout that has no review/ yet.
    out = tmp_path / "review" / "retire.md"
    result = cli_diff(base, base, "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_text().startswith("#")
    assert (out.parent / "dev.dot").is_file()  # the diagrams go next to it, as before


def test_out_under_a_file_is_a_one_line_error(base, tmp_path):
    (tmp_path / "a-file").write_text("")
    _assert_one_line_error(
        cli_diff(base, base, "--out", str(tmp_path / "a-file" / "sub" / "r.md")),
        f"--out {tmp_path / 'a-file' / 'sub'}: cannot create",
    )


def test_bad_input_creates_no_directory(base, tmp_path):
    result = cli_diff(base, base, "--env", "no-such-env", "--out", str(tmp_path / "review" / "r.md"))
    assert result.returncode == 2 and "no-such-env" in result.stderr
    assert not (tmp_path / "review").exists()


# --- hand-written templates: the serving resources that are not in the app yet ---------------------

ECR_IMAGE = "111111111111.dkr.ecr.us-east-1.${AWS::URLSuffix}/cdk-hnb659fds-container-assets-111111111111-us-east-1:"


def sagemaker(
    *,
    instance: str = "ml.g4dn.xlarge",
    image_hash: str = HASH_A,
    config_name: dict | str | None = None,
    endpoint_name: str | None = None,
) -> dict:
    endpoint = {"EndpointConfigName": config_name or {"Fn::GetAtt": ["Config", "EndpointConfigName"]}}
    if endpoint_name:
        endpoint["EndpointName"] = endpoint_name
    return {
        "Resources": {
            "Role": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {"Statement": []}}},
            "Model": {
                "Type": "AWS::SageMaker::Model",
                "Properties": {
                    "ExecutionRoleArn": {"Fn::GetAtt": ["Role", "Arn"]},
                    "PrimaryContainer": {"Image": {"Fn::Sub": ECR_IMAGE + image_hash}},
                },
            },
            "Config": {
                "Type": "AWS::SageMaker::EndpointConfig",
                "Properties": {
                    "ProductionVariants": [
                        {
                            "ModelName": {"Fn::GetAtt": ["Model", "ModelName"]},
                            "VariantName": "AllTraffic",
                            "InitialInstanceCount": 1,
                            "InitialVariantWeight": 1,
                            "InstanceType": instance,
                        }
                    ]
                },
            },
            "Endpoint": {"Type": "AWS::SageMaker::Endpoint", "Properties": endpoint},
        }
    }


def pair(tmp_path: Path, base_stacks: dict, head_stacks: dict) -> tuple[Path, Path]:
    return (
        ra.write_assembly(tmp_path / "base", {"dev": base_stacks}),
        ra.write_assembly(tmp_path / "head", {"dev": head_stacks}),
    )


def test_endpoint_config_instance_type_is_create_only_endpoint_updates_in_place(tmp_path):
    base, head = pair(tmp_path, {"triton": sagemaker()}, {"triton": sagemaker(instance="ml.g5.xlarge")})
    changes = resources(load_diff(base, head))
    assert set(changes) == {"Config", "Endpoint"}
    config = changes["Config"]
    assert (config.replacement, config.protected) == ("always", False)
    assert config.changed_paths == config.replacing_paths == ["Properties.ProductionVariants[0].InstanceType"]
    endpoint = changes["Endpoint"]
    assert (endpoint.action, endpoint.replacement, endpoint.protected) == ("modified", None, True)
    assert endpoint.caused_by == [{"path": "Properties.EndpointConfigName", "logical_id": "Config"}]
    markdown = render_markdown.render(load_diff(base, head))
    assert "- **protected** `triton/Endpoint` (AWS::SageMaker::Endpoint): updated in place" in markdown
    assert "  - `Properties.EndpointConfigName` refers to replaced `Config`" in markdown
    assert cli_diff(base, head, "--fail-on-replace").returncode == 0


def test_endpoint_config_name_is_not_create_only_but_endpoint_name_is(tmp_path):
    base, head = pair(tmp_path, {"triton": sagemaker(config_name="cfg-1")}, {"triton": sagemaker(config_name="cfg-2")})
    (endpoint,) = resources(load_diff(base, head)).values()
    assert (endpoint.changed_paths, endpoint.replacement) == (["Properties.EndpointConfigName"], None)
    renamed = tmp_path / "renamed"
    head = ra.write_assembly(renamed, {"dev": {"triton": sagemaker(config_name="cfg-1", endpoint_name="bert")}})
    (endpoint,) = resources(load_diff(base, head)).values()
    assert (endpoint.replacement, endpoint.replacing_paths) == ("always", ["Properties.EndpointName"])
    result = cli_diff(base, head, "--fail-on-replace")
    assert result.returncode == 3
    assert "dev/triton/Endpoint (AWS::SageMaker::Endpoint)" in result.stderr


def test_new_triton_image_replaces_model_and_config_not_endpoint(tmp_path):
    base, head = pair(tmp_path, {"triton": sagemaker()}, {"triton": sagemaker(image_hash=HASH_B)})
    changes = resources(load_diff(base, head))
    model = changes["Model"]
    assert (model.action, model.changes, model.replacement) == ("asset-update", [], "always")
    (update,) = model.asset_updates
    assert (update.path, update.kind, update.base_hash, update.head_hash) == (
        "Properties.PrimaryContainer.Image",
        "container image",
        HASH_A,
        HASH_B,
    )
    config = changes["Config"]
    assert (config.replacement, config.cascaded) == ("always", True)
    assert config.replacing_paths == ["Properties.ProductionVariants[0].ModelName"]
    assert changes["Endpoint"].replacement is None
    assert cli_diff(base, head, "--fail-on-replace").returncode == 0


def component(*, image_hash: str = HASH_A, endpoint: str = "dev-triton-shared") -> dict:
    """A fleet member's stack: its Model and its inference component on the shared endpoint (by name)."""
    return {
        "Resources": {
            "Model": {
                "Type": "AWS::SageMaker::Model",
                "Properties": {
                    "ExecutionRoleArn": "arn:aws:iam::111111111111:role/x",
                    "PrimaryContainer": {"Image": {"Fn::Sub": ECR_IMAGE + image_hash}},
                },
            },
            "Component": {
                "Type": "AWS::SageMaker::InferenceComponent",
                "Properties": {
                    "InferenceComponentName": "dev-bert",
                    "EndpointName": endpoint,
                    "VariantName": "AllTraffic",
                    "Specification": {"ModelName": {"Fn::GetAtt": ["Model", "ModelName"]}},
                    "RuntimeConfig": {"CopyCount": 1},
                },
            },
        }
    }


def test_a_new_image_replaces_the_model_and_updates_the_component_in_place(tmp_path):
    """CloudFormation's schema for AWS::SageMaker::InferenceComponent has no create-only property: a
    component is updated in place (its copies roll over to the new Model); still a protected resource."""
    base, head = pair(tmp_path, {"bert": component()}, {"bert": component(image_hash=HASH_B)})
    changes = resources(load_diff(base, head))
    assert changes["Model"].replacement == "always"
    updated = changes["Component"]
    assert (updated.action, updated.replacement, updated.protected) == ("modified", None, True)
    assert {"path": "Properties.Specification.ModelName", "logical_id": "Model"} in updated.caused_by
    assert cli_diff(base, head, "--fail-on-replace").returncode == 0


def ecs(*, image_hash: str = HASH_A, max_capacity: int = 2, ingress_port: int = 8080) -> dict:
    return {
        "Resources": {
            "TaskDef": {
                "Type": "AWS::ECS::TaskDefinition",
                "Properties": {
                    "ContainerDefinitions": [
                        {
                            "Name": "server",
                            "Image": {
                                "Fn::Join": [
                                    "",
                                    [
                                        "111111111111.dkr.ecr.us-east-1.",
                                        {"Ref": "AWS::URLSuffix"},
                                        f"/repo:{image_hash}",
                                    ],
                                ]
                            },
                        }
                    ]
                },
            },
            "Service": {
                "Type": "AWS::ECS::Service",
                "Properties": {"TaskDefinition": {"Ref": "TaskDef"}, "Cluster": "cluster"},
            },
            "Target": {
                "Type": "AWS::ApplicationAutoScaling::ScalableTarget",
                "Properties": {
                    "MaxCapacity": max_capacity,
                    "MinCapacity": 1,
                    "ResourceId": "service/cluster/svc",
                    "ScalableDimension": "ecs:service:DesiredCount",
                    "ServiceNamespace": "ecs",
                },
            },
            "Ingress": {
                "Type": "AWS::EC2::SecurityGroupIngress",
                "Properties": {
                    "GroupId": "sg-1",
                    "IpProtocol": "tcp",
                    "FromPort": ingress_port,
                    "ToPort": ingress_port,
                    "CidrIp": "10.0.0.0/16",
                },
            },
        }
    }


def test_new_neuron_image_is_a_new_task_definition_and_an_in_place_service_update(tmp_path):
    base, head = pair(tmp_path, {"neuron": ecs()}, {"neuron": ecs(image_hash=HASH_B)})
    changes = resources(load_diff(base, head))
    assert set(changes) == {"TaskDef", "Service"}
    task = changes["TaskDef"]
    assert (task.action, task.replacement, task.protected) == ("asset-update", "always", False)
    assert [(a.path, a.kind) for a in task.asset_updates] == [
        ("Properties.ContainerDefinitions[0].Image", "container image")
    ]
    service = changes["Service"]
    assert (service.replacement, service.protected, service.caused_by) == (
        None,
        True,
        [{"path": "Properties.TaskDefinition", "logical_id": "TaskDef"}],
    )
    assert cli_diff(base, head, "--fail-on-replace").returncode == 0


def test_scaling_and_security_group_rule_changes(tmp_path):
    base, head = pair(tmp_path, {"neuron": ecs()}, {"neuron": ecs(max_capacity=8, ingress_port=8443)})
    changes = resources(load_diff(base, head))
    assert (changes["Target"].categories, changes["Target"].changed_paths, changes["Target"].replacement) == (
        ["scaling"],
        ["Properties.MaxCapacity"],
        None,
    )
    ingress = changes["Ingress"]
    assert ingress.categories == ["security-groups"]
    assert ingress.replacement == "always"  # rule ports are create-only on AWS::EC2::SecurityGroupIngress
    assert ingress.replacing_paths == ["Properties.FromPort", "Properties.ToPort"]
    markdown = render_markdown.render(load_diff(base, head))
    assert "#### Scaling (1)" in markdown and "  - `Properties.MaxCapacity`: `2` → `8`" in markdown


def log_group(
    logical_id: str, *, type_name: str = "AWS::Logs::LogGroup", path: str = "dev/model/Logs/Resource"
) -> dict:
    return {logical_id: {"Type": type_name, "Properties": {"RetentionInDays": 14}, "Metadata": {"aws:cdk:path": path}}}


def test_logical_id_change_type_change_and_move_are_replacements(tmp_path):
    base, head = pair(
        tmp_path, {"model": {"Resources": log_group("LogsAAAA")}}, {"model": {"Resources": log_group("LogsBBBB")}}
    )
    (change,) = resources(load_diff(base, head)).values()
    assert (change.logical_id, change.action, change.replacement, change.protected) == (
        "LogsBBBB",
        "added",
        "always",
        True,
    )
    assert change.replaces == {"stack": "model", "logical_id": "LogsAAAA"}
    assert cli_diff(base, head, "--fail-on-replace").returncode == 3

    retyped = ra.write_assembly(
        tmp_path / "retyped", {"dev": {"model": {"Resources": log_group("LogsAAAA", type_name="AWS::Logs::LogStream")}}}
    )
    (change,) = resources(load_diff(base, retyped)).values()
    assert (change.base_type, change.type, change.replacement, change.protected) == (
        "AWS::Logs::LogGroup",
        "AWS::Logs::LogStream",
        "always",
        True,
    )

    moved = ra.write_assembly(
        tmp_path / "moved",
        {
            "dev": {
                "model": {"Resources": {}},
                "shared": {"Resources": log_group("LogsAAAA", path="dev/shared/Logs/Resource")},
            }
        },
    )
    (change,) = load_diff(base, moved).resources
    assert (change.stack, change.replacement, change.replaces) == (
        "shared",
        "always",
        {"stack": "model", "logical_id": "LogsAAAA"},
    )
    assert change.replacement_reasons[0]["why"].startswith("moved from stack model")


def test_export_in_use_whose_value_changes_is_a_warning(tmp_path):
    def foundation(cidr: str) -> dict:
        return {
            "Resources": {"Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": cidr}}},
            "Outputs": {"VpcExport": {"Value": {"Ref": "Vpc"}, "Export": {"Name": "dev-Foundation:Vpc"}}},
        }

    model = {
        "Resources": {
            "Sg": {
                "Type": "AWS::EC2::SecurityGroup",
                "Properties": {"GroupDescription": "x", "VpcId": {"Fn::ImportValue": "dev-Foundation:Vpc"}},
            }
        }
    }
    base, head = pair(
        tmp_path,
        {"Foundation": foundation("10.0.0.0/16"), "model": model},
        {"Foundation": foundation("10.1.0.0/16"), "model": copy.deepcopy(model)},
    )
    (env,) = load_diff(base, head).environments
    assert env.warnings == [
        "Foundation: export dev-Foundation:Vpc changes (Vpc replaced) while model import(s) "
        "it: CloudFormation refuses to update an export in use"
    ]


@pytest.mark.parametrize(
    "pointer,path,base,head,expected",
    [
        ("/properties/A", ("Properties", "A", 0, "B"), {}, {}, True),  # a change below a create-only property
        ("/properties/A/*/B", ("Properties", "A", 1, "B", "C"), {}, {}, True),  # "*" is any list item
        ("/properties/A/*/B", ("Properties", "A", 1, "D"), {}, {}, False),  # a sibling of the nested property
        (
            "/properties/A/B",
            ("Properties", "A"),  # a whole block added above a nested create-only property
            {"Properties": {}},
            {"Properties": {"A": {"B": 1}}},
            True,
        ),
        (
            "/properties/A/B",
            ("Properties", "A"),  # ... and one whose nested create-only value is unchanged
            {"Properties": {"A": {"B": 1, "C": 1}}},
            {"Properties": {"A": {"B": 1, "C": 2}}},
            False,
        ),
    ],
)
def test_create_only_pointer_matching(pointer, path, base, head, expected):
    assert (_replacing(path, (pointer,), base, head) == pointer) is expected


def test_legacy_asset_parameters_renamed_by_a_new_hash_are_asset_updates(tmp_path):
    def stack(digest: str) -> dict:
        bucket = f"AssetParameters{digest}S3Bucket{digest[:8].upper()}"
        return {
            "Parameters": {bucket: {"Type": "String", "Description": f'S3 bucket for asset "{digest}"'}},
            "Resources": {
                "Fn": {
                    "Type": "AWS::Lambda::Function",
                    "Properties": {"Code": {"S3Bucket": {"Ref": bucket}, "S3Key": f"{digest}.zip"}},
                }
            },
        }

    base, head = pair(tmp_path, {"legacy": stack("1" * 64)}, {"legacy": stack("2" * 64)})
    (stack_diff,) = load_diff(base, head).environments[0].stacks
    assert stack_diff.template_changes == []
    by_id = {r.logical_id: r for r in stack_diff.resources}
    assert by_id["Fn"].action == "asset-update"
    assert {a.path for a in by_id["Fn"].asset_updates} == {"Properties.Code.S3Bucket", "Properties.Code.S3Key"}
    assert [(a.path, a.kind, a.base_hash, a.head_hash) for a in by_id["(template)"].asset_updates] == [
        (f"Parameters.AssetParameters{'2' * 64}S3Bucket22222222", "asset parameter", "1" * 64, "2" * 64),
        (f"Parameters.AssetParameters{'2' * 64}S3Bucket22222222.Description", "asset parameter", "1" * 64, "2" * 64),
    ]
