"""benchmarks/synth_scale.py and its floor app (benchmarks/synth_floor.py): the benchmark runs end to end
through the CDK CLI, the floor app writes exactly the templates it is given, and bad arguments get a
one-line usage error. Figures are printed, never asserted."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from inferstack.synthesis.shards import available_cpus
from tests.support.paths import ROOT

SYNTH_SCALE = ROOT / "benchmarks" / "synth_scale.py"
SYNTH_FLOOR = ROOT / "benchmarks" / "synth_floor.py"
CPUS = available_cpus()
ROW = re.compile(
    r"^\s+(\d+)\s+(serial|L1 floor|template floor|template: \d+ proc|auto: \d+ proc)\s+(\d+)"
    r"\s+[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+[\d.]+\s+\d+\s+\d+"
    r"\s+(.+)$",
    re.M,
)


def run(script: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_one_model_through_the_cli_and_its_floors():
    # A floor's row is only printed after synth_floor's check found every template identical.
    result = run(SYNTH_SCALE, "--counts", "1", "--workers", "1", "--floor", timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "via cli" in result.stdout
    rows = [m.groups() for m in ROW.finditer(result.stdout)]
    # One model in three environments: a foundation and a serving stack each, plus the load-test stack of every
    # environment with load_test (staging as shipped); the L1 floor, and the template floor in one process and
    # split between one per CPU (no split on a one-CPU machine).
    environments = yaml.safe_load((ROOT / "model_configs" / "environments.yaml").read_text())["environments"]
    stacks = str(2 * len(environments) + sum(1 for e in environments.values() if e.get("load_test")))
    assert stacks == "7"  # the shipped config: dev, staging (with load_test), prod
    floors = [("1", "L1 floor", stacks, "OK"), ("1", "template floor", stacks, "OK")] + (
        [("1", f"template: {CPUS} proc", stacks, "OK")] if CPUS > 1 else []
    )
    assert [(r[0], r[1], r[2], r[4]) for r in rows] == [("1", "serial", stacks, "OK")] + floors
    assert all(0 < int(r[3]) <= 500 for r in rows)


def _assembly(root: Path, templates: dict[str, dict]) -> Path:
    """A cloud assembly with one nested assembly "dev" holding these stacks' templates."""
    nested = root / "assembly-dev"
    nested.mkdir(parents=True)
    (root / "manifest.json").write_text(
        json.dumps(
            {
                "artifacts": {
                    "assembly-dev": {
                        "type": "cdk:cloud-assembly",
                        "properties": {"directoryName": "assembly-dev", "displayName": "dev"},
                    }
                }
            }
        )
    )
    artifacts = {}
    for name, template in templates.items():
        (nested / f"dev{name}.template.json").write_text(json.dumps(template))
        artifacts[f"dev{name}"] = {
            "type": "aws:cloudformation:stack",
            "displayName": f"dev/{name}",
            "properties": {"templateFile": f"dev{name}.template.json"},
        }
    (nested / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
    return root


def test_the_floor_check_names_every_template_it_does_not_reproduce(tmp_path):
    topic = {"Resources": {"T": {"Type": "AWS::SNS::Topic", "Properties": {"TopicName": "t"}}}}
    changed = {"Resources": {"T": {"Type": "AWS::SNS::Topic", "Properties": {"TopicName": "u"}}}}
    source = _assembly(tmp_path / "source", {"a": topic, "b": topic, "c": topic})
    _assembly(tmp_path / "same", {"a": topic, "b": topic, "c": topic})
    _assembly(tmp_path / "other", {"a": topic, "b": changed})  # b differs, c is missing

    same = run(SYNTH_FLOOR, "--check", str(source), str(tmp_path / "same"))
    assert (same.returncode, same.stdout.strip()) == (0, "0 templates differ")
    other = run(SYNTH_FLOOR, "--check", str(source), str(tmp_path / "other"))
    assert (other.returncode, other.stdout.strip()) == (1, "2 templates differ: dev/b, dev/c")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cpus", "0"], "--cpus: expected 1 to "),
        (["--cpus", "100000"], "--cpus: expected 1 to "),
        (["--counts", "0"], "--counts: every N must be at least 1"),
        (["--via", "ssh"], "--via: invalid choice: 'ssh'"),
    ],
)
def test_synth_scale_rejects_bad_arguments_in_one_line(args, message):
    result = run(SYNTH_SCALE, *args)
    assert result.returncode == 2
    assert message in result.stderr.splitlines()[-1]
    assert result.stdout == ""


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["/nonexistent"],
        ["--check", "only-one"],
        ["ASSEMBLY", "2/2"],
        ["ASSEMBLY", "-1/2"],
        ["ASSEMBLY", "x"],
        ["ASSEMBLY", "0/1", "more"],
        ["--templates"],
        ["--templates", "ASSEMBLY", "1/1"],
        ["ASSEMBLY", "--templates"],
    ],
)
def test_synth_floor_rejects_anything_but_an_assembly_and_a_part_in_one_line(args, tmp_path):
    assembly = _assembly(tmp_path / "assembly", {})
    result = run(SYNTH_FLOOR, *[str(assembly) if a == "ASSEMBLY" else a for a in args])
    assert result.returncode == 2
    assert result.stderr.strip().startswith("usage: synth_floor.py [--templates] SOURCE_ASSEMBLY")
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("arn", "text"),
    [
        ("arn:aws:iam::aws:policy/ReadOnlyAccess", "arn:aws:iam::aws:policy/ReadOnlyAccess"),
        ({"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/P"}, "arn:<AWS::Partition>:iam::aws:policy/P"),
        (
            {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::aws:policy/P"]]},
            "arn:<AWS::Partition>:iam::aws:policy/P",
        ),
    ],
)
def test_the_template_floor_names_managed_policies_as_cdk_nag_does(arn, text):
    # How the template floor acknowledges what nag newly finds on the CDK's provider roles once included.
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import synth_floor

    assert synth_floor._nag_text(arn) == text
