"""Whole-app checks on every environment: cdk-nag (AwsSolutions) and cfn-lint, both asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from aws_cdk import aws_sns as sns

from tests.conftest import ROOT
from tests.infra.synth import ValidationFailed, synth, violations


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


def _cfn_lint(paths: list[Path]) -> list[dict]:
    command = [str(Path(sys.executable).with_name("cfn-lint")), "--config-file", ".cfnlintrc.yaml",
               "--format", "json", *map(str, paths)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode in (0, 2, 4, 6, 8, 10, 12, 14), result.stderr  # bit flags: 2 error, 4 warning, 8 info
    return json.loads(result.stdout or "[]")


def test_cfn_lint_every_template_is_clean(synthesized):
    # Stage stacks live in assembly-<env>/; the pipeline and its cross-region support stacks at the root.
    paths = sorted(synthesized.outdir.glob("*.template.json")) + sorted(synthesized.outdir.glob("assembly-*/*.template.json"))
    assert len(paths) == sum(len(stacks) for stacks in synthesized.templates.values()) + len(synthesized.root_templates)
    assert "Pipeline" in synthesized.root_templates
    findings = _cfn_lint(paths)
    assert [f"{f['Rule']['Id']} {f['Filename']}: {f['Message']}" for f in findings
            if f["Level"] in ("Error", "Warning")] == []


def test_cfn_lint_reports_a_broken_template(synthesized, tmp_path):
    template = json.loads(json.dumps(synthesized.template("dev", "Foundation")))
    key = next(k for k, r in template["Resources"].items() if r["Type"] == "AWS::KMS::Key")
    template["Resources"][key]["Properties"]["EnableKeyRotation"] = "sometimes"
    broken = tmp_path / "broken.template.json"
    broken.write_text(json.dumps(template))
    assert any(f["Level"] == "Error" for f in _cfn_lint([broken]))
