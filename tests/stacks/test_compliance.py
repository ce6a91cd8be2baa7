"""Whole-app checks on every environment: cdk-nag (AwsSolutions) and cfn-lint, both asserted."""

from __future__ import annotations

import json

import pytest
from aws_cdk import aws_sns as sns

from tests.support.synth import ValidationFailed, synth, violations
from tests.support.templates import cfn_lint


def test_cdk_nag_has_no_unacknowledged_findings(synthesized):
    # cdk-nag v3 runs as a policy-validation plugin: any finding would have failed synth above, and the
    # report (written whenever a plugin says anything) must carry no AwsSolutions violation.
    assert violations(synthesized.report, "AwsSolutions") == []
    assert all(v.get("severity") != "error" for v in violations(synthesized.report))


def test_cdk_nag_catches_a_non_compliant_resource(project, tmp_path):
    def add_plain_topic(stages):
        sns.Topic(stages["dev"].fleets["intent-pack"], "PlainTopic")  # no TLS-only policy: AwsSolutions-SNS3

    with pytest.raises(ValidationFailed, match=r"AwsSolutions-SNS3 .*dev/intent-pack/PlainTopic"):
        synth(project, ["dev"], tmp_path, extend=add_plain_topic)


def test_cfn_lint_every_template_is_clean(synthesized):
    # Stage stacks live in assembly-<env>/; the pipeline and its cross-region support stacks at the root.
    paths = sorted(synthesized.outdir.glob("*.template.json")) + sorted(
        synthesized.outdir.glob("assembly-*/*.template.json")
    )
    assert len(paths) == sum(len(stacks) for stacks in synthesized.templates.values()) + len(synthesized.root_templates)
    assert "Pipeline" in synthesized.root_templates
    findings = cfn_lint(paths)
    assert [
        f"{f['Rule']['Id']} {f['Filename']}: {f['Message']}" for f in findings if f["Level"] in ("Error", "Warning")
    ] == []


def test_cfn_lint_reports_a_broken_template(synthesized, tmp_path):
    template = json.loads(json.dumps(synthesized.template("dev", "Foundation")))
    key = next(k for k, r in template["Resources"].items() if r["Type"] == "AWS::KMS::Key")
    template["Resources"][key]["Properties"]["EnableKeyRotation"] = "sometimes"
    broken = tmp_path / "broken.template.json"
    broken.write_text(json.dumps(template))
    assert any(f["Level"] == "Error" for f in cfn_lint([broken]))
