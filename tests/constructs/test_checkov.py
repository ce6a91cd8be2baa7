"""checkov (its CloudFormation checks) on every synthesized template of every environment and the pipeline:
no failure that is not skipped on its resource with a reason (inferstack/constructs/checkov.py). checkov
runs from its own environment, .venv-checkov (`make setup`), pinned by requirements-checkov.txt."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_s3 as s3

from inferstack import config
from inferstack.constructs import checkov
from tests.support.neuron_service import CERT, FLEET
from tests.support.paths import CONFIG_DIR, ROOT
from tests.support.synth import synth
from tests.support.templates import only

CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"


def _checkov(paths: list[Path]) -> dict:
    """checkov's CloudFormation report on `paths`: {"passed_checks", "failed_checks", "skipped_checks", ...}."""
    if not CHECKOV.exists():
        pytest.fail(f"{CHECKOV.relative_to(ROOT)} is missing: run `make setup` (target .make/checkov)")
    # --skip-download: offline, no Prisma Cloud guidelines or severities.
    command = [
        str(CHECKOV),
        "--framework",
        "cloudformation",
        "--output",
        "json",
        "--compact",
        "--skip-download",
        *[arg for path in paths for arg in ("--file", str(path))],
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode in (0, 1), result.stderr[-3000:]  # 1: some check failed
    report = json.loads(result.stdout)
    (report,) = report if isinstance(report, list) else [report]
    assert report["check_type"] == "cloudformation"
    assert report["summary"]["parsing_errors"] == 0, report["results"].get("parsing_errors")
    return report["results"]


def _findings(results: dict, kind: str) -> list[str]:
    return sorted(
        f"{f['check_id']} {f['resource']} ({Path(f['file_path']).name}): {f['check_name']}" for f in results[kind]
    )


def _every_template(synthesized) -> list[Path]:
    paths = sorted(synthesized.outdir.glob("*.template.json")) + sorted(
        synthesized.outdir.glob("assembly-*/*.template.json")
    )
    assert len(paths) == sum(len(stacks) for stacks in synthesized.templates.values()) + len(synthesized.root_templates)
    return paths


def test_checkov_has_no_unacknowledged_failures(synthesized):
    paths = _every_template(synthesized)
    results = _checkov(paths)
    assert _findings(results, "failed_checks") == []
    scanned = {
        Path(f["file_abs_path"]).resolve() for kind in ("passed_checks", "skipped_checks") for f in results[kind]
    }
    assert scanned == {path.resolve() for path in paths}  # every environment's stacks, the pipeline and its support
    assert len(results["passed_checks"]) > 700
    # Every skip came through checkov.skip: a reason, not checkov's "No comment provided".
    comments = {
        f"{f['check_id']} {f['resource']} ({Path(f['file_path']).name})": f["check_result"]["suppress_comment"]
        for f in results["skipped_checks"]
    }
    assert {check: comment for check, comment in comments.items() if len(comment.strip()) < checkov.MIN_REASON} == {}


def test_checkov_fails_what_the_skips_acknowledge(synthesized, tmp_path):
    """The gate is real: dev's templates with every checkov skip removed fail exactly the skipped checks."""
    stripped = []
    for stack, template in synthesized.templates["dev"].items():
        template = json.loads(json.dumps(template))
        for resource in template["Resources"].values():
            resource.get("Metadata", {}).pop("checkov", None)
        path = tmp_path / f"{stack}.template.json"
        path.write_text(json.dumps(template))
        stripped.append(path)
    failed = _checkov(stripped)["failed_checks"]
    expected = sorted(
        (skip["id"], f"{resource['Type']}.{logical_id}")
        for template in synthesized.templates["dev"].values()
        for logical_id, resource in template["Resources"].items()
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", [])
    )
    assert sorted((f["check_id"], f["resource"]) for f in failed) == expected
    assert ("CKV_AWS_2", "AWS::ElasticLoadBalancingV2::Listener.NeuronLoadBalancerListenerE28B7336") in expected


# ----------------------------------------------------------------------------- internal TLS


@pytest.fixture(scope="module")
def internal_tls(tmp_path_factory):
    """dev with a certificate and its load balancers internal, as environments.yaml would set it."""
    config_dir = tmp_path_factory.mktemp("internal-tls") / "model_configs"
    shutil.copytree(CONFIG_DIR, config_dir)
    envs_path = config_dir / "environments.yaml"
    envs = yaml.safe_load(envs_path.read_text())
    envs["environments"]["dev"]["defaults"]["certificate_arn"] = CERT
    envs_path.write_text(yaml.safe_dump(envs, sort_keys=False))
    return synth(config.load(config_dir), ["dev"], tmp_path_factory.mktemp("internal-tls-cdk.out"), pipeline=False)


def test_internal_load_balancer_serves_tls_when_a_certificate_is_configured(internal_tls):
    template = internal_tls.template("dev", FLEET)  # a fleet's listener: rules per model, a 404 by default
    tpl = cdk.assertions.Template.from_json(template)
    _, lb = only(tpl, "AWS::ElasticLoadBalancingV2::LoadBalancer")
    assert lb["Properties"]["Scheme"] == "internal"
    _, listener = only(tpl, "AWS::ElasticLoadBalancingV2::Listener")
    assert {k: listener["Properties"][k] for k in ("Protocol", "Port", "Certificates", "SslPolicy")} == {
        "Protocol": "HTTPS",
        "Port": 443,
        "Certificates": [{"CertificateArn": CERT}],
        "SslPolicy": "ELBSecurityPolicy-TLS13-1-2-2021-06",
    }
    assert "checkov" not in listener.get("Metadata", {})  # nothing to acknowledge
    lb_sg = lb["Properties"]["SecurityGroups"][0]["Fn::GetAtt"][0]
    assert template["Resources"][lb_sg]["Properties"]["SecurityGroupIngress"] == [
        {
            "CidrIp": "10.10.0.0/16",
            "Description": "HTTPS from the VPC",
            "FromPort": 443,
            "IpProtocol": "tcp",
            "ToPort": 443,
        }
    ]
    assert template["Outputs"]["Url"]["Value"]["Fn::Join"][1][0] == "https://"
    results = _checkov(sorted(internal_tls.outdir.glob("assembly-dev/*.template.json")))
    assert _findings(results, "failed_checks") == []
    assert {(f["check_id"], f["resource"]) for f in results["passed_checks"]} >= {
        ("CKV_AWS_2", "AWS::ElasticLoadBalancingV2::Listener.NeuronLoadBalancerListenerE28B7336"),
        ("CKV_AWS_103", "AWS::ElasticLoadBalancingV2::Listener.NeuronLoadBalancerListenerE28B7336"),
    }


# ----------------------------------------------------------------------------- the helper


def _bucket() -> s3.CfnBucket:
    return s3.CfnBucket(cdk.Stack(cdk.App(), "Stack"), "Bucket")


def test_skip_writes_checkov_metadata_and_keeps_other_metadata():
    bucket = _bucket()
    bucket.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3005"]}})
    checkov.skip(bucket, "CKV_AWS_18", "  the bucket receives another bucket's access logs  ")
    checkov.skip(bucket, "CKV_AWS_21", "objects are written once under unique keys")
    resource = cdk.assertions.Template.from_stack(cdk.Stack.of(bucket)).to_json()["Resources"]["Bucket"]
    assert resource["Metadata"] == {
        "cfn-lint": {"config": {"ignore_checks": ["W3005"]}},
        "checkov": {
            "skip": [
                {"id": "CKV_AWS_18", "comment": "the bucket receives another bucket's access logs"},
                {"id": "CKV_AWS_21", "comment": "objects are written once under unique keys"},
            ]
        },
    }


def test_skip_goes_on_the_l2_constructs_own_resource():
    stack = cdk.Stack(cdk.App(), "Stack")
    bucket = s3.Bucket(stack, "Bucket")
    checkov.skip(bucket, "CKV_AWS_21", "objects are written once under unique keys")
    assert bucket.node.default_child.get_metadata("checkov") == {
        "skip": [{"id": "CKV_AWS_21", "comment": "objects are written once under unique keys"}]
    }
    with pytest.raises(TypeError, match="no CloudFormation resource"):
        checkov.skip(stack, "CKV_AWS_21", "objects are written once under unique keys")


@pytest.mark.parametrize(
    "check_id, reason, message",
    [
        ("CKV_AWS_18", "", "needs a real reason"),
        ("CKV_AWS_18", "log bucket", "needs a real reason"),
        ("CKV_AWS_18", "                         ", "needs a real reason"),
        ("AWS-S3-1", "the bucket receives access logs", "one checkov check id"),
        ("CKV_AWS_18,CKV_AWS_21", "the bucket receives access logs", "one checkov check id"),
    ],
)
def test_skip_refuses_a_missing_reason_or_a_bad_id(check_id, reason, message):
    with pytest.raises(ValueError, match=message):
        checkov.skip(_bucket(), check_id, reason)


def test_skip_refuses_the_same_check_twice():
    bucket = _bucket()
    checkov.skip(bucket, "CKV_AWS_18", "the bucket receives access logs")
    with pytest.raises(ValueError, match="already skipped"):
        checkov.skip(bucket, "CKV_AWS_18", "the bucket receives access logs, again")
