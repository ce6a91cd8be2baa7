"""The CLI and `cdk synth` (app.py) fail on bad input with one line per problem, exit 2, no traceback,
and write nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.cli import assert_nothing_written, cdk_env, run
from tests.support.paths import CONFIG_DIR, ROOT


def break_configs(config_dir: Path) -> None:
    intent = config_dir / "intent-bert.yaml"
    data = yaml.safe_load(intent.read_text())
    data["serving"]["workers"] = 3
    intent.write_text(yaml.safe_dump(data))
    (config_dir / "broken.yaml").write_text("name: [unclosed\n")


def test_validate_accepts_the_shipped_configs():
    result = run("-m", "inferstack", "validate")
    assert result.returncode == 0, result.stderr
    assert "3 environments, 5 models, 2 fleets: OK, 7 warning(s)" in result.stdout


def test_validate_warns_about_models_on_inf1_and_says_how_to_move_them():
    """A warning line per Inf1 model, naming file, line and key, citing the support status; exit 0."""
    result = run("-m", "inferstack", "validate")
    assert result.returncode == 0
    lines = [line for line in result.stderr.strip().splitlines() if "neuron_generation" in line]
    assert [line.split(": ")[0] for line in lines] == [
        "model_configs/duplicate-bert.yaml:13",
        "model_configs/intent-bert.yaml:12",
    ]
    for line in lines:
        assert ": compile.neuron_generation: warning: torch-neuron (Inf1) is no longer officially supported" in line
        assert "set compile.neuron_generation: inf2" in line and "plan --compare" in line
    text = (CONFIG_DIR / "intent-bert.yaml").read_text().splitlines()
    assert text[12 - 1].strip() == "neuron_generation: inf1"


def test_validate_has_no_warning_for_inf2_models(config_copy):
    for name in ("intent-bert.yaml", "duplicate-bert.yaml"):
        path = config_copy / name
        path.write_text(path.read_text().replace("neuron_generation: inf1", "neuron_generation: inf2"))
    from inferstack import config as config_module

    with pytest.raises(config_module.ConfigError):  # their inf1 instance types no longer fit: still an error
        config_module.load(config_copy)
    project = config_module.load(CONFIG_DIR)
    assert [w.file for w in project.warnings if "neuron_generation" in w.key] == [
        "model_configs/duplicate-bert.yaml",
        "model_configs/intent-bert.yaml",
    ]
    # its only warning is prod's estimate (tests/config/test_measured_profile.py), none about its generation
    assert [w.key for w in project.warnings if "intent-bert-inf2" in w.file] == ["throughput_profile.inf2.xlarge"]


def test_validate_reports_every_problem_and_exits_2(config_copy):
    break_configs(config_copy)
    result = run("-m", "inferstack", "validate", "--config-dir", str(config_copy))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == "3 problem(s) found"
    assert any(line.startswith(f"{config_copy.name}/broken.yaml:2: malformed YAML") for line in lines)
    assert sum("serving.workers: 3 workers cannot split" in line for line in lines) == 2


def test_unknown_command_and_flag_are_one_line_usage_errors():
    for args in (["bogus"], ["validate", "--no-such-flag"]):
        result = run("-m", "inferstack", *args)
        assert result.returncode == 2
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_schema_command_writes_the_committed_schemas(tmp_path):
    result = run("-m", "inferstack", "schema", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    for path in (ROOT / "model_configs" / "schema").glob("*.json"):
        assert (tmp_path / path.name).read_text() == path.read_text()


def test_synth_with_a_bad_config_fails_cleanly_and_writes_nothing(config_copy, tmp_path):
    break_configs(config_copy)
    outdir = tmp_path / "cdk.out"
    result = run("app.py", env=cdk_env(outdir, **{"inferstack:config-dir": str(config_copy)}))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "serving.workers: 3 workers cannot split" in result.stderr
    assert_nothing_written(outdir)


def test_synth_rejects_an_unknown_environment(tmp_path):
    outdir = tmp_path / "cdk.out"
    result = run("app.py", env=cdk_env(outdir, environments="dev,qa"))
    assert result.returncode == 2
    assert result.stderr.strip() == ("cdk.json/-c environments: unknown environment(s) qa; known: dev, staging, prod")
    assert_nothing_written(outdir)


def test_synth_of_one_environment(tmp_path):
    outdir = tmp_path / "cdk.out"
    result = run("app.py", env=cdk_env(outdir, environments="staging"))
    assert result.returncode == 0, result.stderr
    assert [p.name for p in outdir.glob("assembly-*")] == ["assembly-staging"]
    # the pipeline deploys every stage, so a one-environment synth leaves it out (and stays fast)
    assert list(outdir.glob("*.template.json")) == []


def test_validate_does_not_need_a_valid_aws_profile():
    # validate and synth read local files only (the Triton image from the SageMaker SDK's table, whose import once
    # built a boto3 session and failed on a missing profile): an AWS_PROFILE this machine lacks must not matter.
    result = run("-m", "inferstack", "validate", env={"AWS_PROFILE": "no-such-profile"})
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("ci", [None, "true"], ids=["terminal", "ci"])
def test_cdk_synth_through_the_cli_is_clean(tmp_path, ci):
    # The README's main command, through the real CDK CLI: no warning about cdk.json (the CLI warns about
    # reserved "aws:" context keys there), and no per-construct creation stack traces in the assembly.
    # With CI=true (set by CI runners) the CLI prints its messages on stdout instead of stderr, so both are read,
    # merged in the order printed.
    outdir = tmp_path / "cdk.out"
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    env.update(
        {
            "CDK_DISABLE_CLI_TELEMETRY": "true",
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        }
    )
    if ci:
        env["CI"] = ci
    result = subprocess.run(
        ["cdk", "synth", "--quiet", "-c", "environments=dev", "-o", str(outdir)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        timeout=300,
    )
    output = result.stdout
    assert result.returncode == 0, output[-3000:]
    lines = [line for line in output.splitlines() if line.strip()]
    assert lines and lines[0] == f"Successfully synthesized to {outdir}", output
    assert not [line for line in lines if "warn" in line.lower() or "reserved" in line.lower()], output
    metadata = "".join(p.read_text() for p in outdir.glob("assembly-dev/*.metadata.json"))
    assert '"aws:cdk:logicalId"' in metadata and "aws:cdk:creationStack" not in metadata


def test_validate_warns_that_a_fleet_member_loses_its_data_capture():
    result = run("-m", "inferstack", "validate")
    (line,) = [line for line in result.stderr.splitlines() if "data_capture" in line]
    assert line.startswith("model_configs/bert-large-classifier.yaml:")
    assert line.split(": ", 1)[1].startswith(
        "data_capture: warning: not applied in dev, where an inference-components fleet carries bert-large-classifier"
    )


def test_validate_warns_when_a_rollout_bakes_less_than_its_alarms_need(config_copy):
    path = config_copy / "intent-bert-inf2.yaml"
    path.write_text(
        path.read_text().replace(
            "wait_interval_seconds: 180, termination_wait_seconds: 0",
            "wait_interval_seconds: 60, termination_wait_seconds: 0",
        )
    )
    result = run("-m", "inferstack", "validate", "--config-dir", str(config_copy))
    assert result.returncode == 0
    (line,) = [line for line in result.stderr.splitlines() if "bake" in line]
    assert line.startswith(f"{config_copy.name}/intent-bert-inf2.yaml:") or "intent-bert-inf2.yaml:" in line
    assert ": environments.dev.deployment: warning: a 1-minute bake is shorter than the 3 breaching minutes" in line
