"""`inferstack profile` from a stored load test result: the entry written (or, --dry-run, printed), refusals
as one line with exit 1 and the model file untouched, bad arguments as one line with exit 2."""

from __future__ import annotations

import pytest
import yaml

from inferstack import cli, config
from tests.support.run_results import run, step


def result_file(tmp_path, result):
    path = tmp_path / "result.json"
    path.write_text(result.to_json())
    return path


def profile(config_dir, *args):
    return cli.main(["profile", "intent-bert", "--env", "staging", "--config-dir", str(config_dir), *args])


def test_a_stored_run_becomes_the_instance_types_entry(config_copy, tmp_path, capsys):
    # staging runs intent-bert on inf1.6xlarge (SLO p99 10 ms): 2 instances held 7,000 req/s
    path = result_file(
        tmp_path,
        run(
            step(3500, 4.0),
            step(7000, 8.5),
            step(9000, 13.0),
            instances=2,
            location="s3://inferstack-loadtest-staging/r-42/intent-bert/run-7/result.json",
        ),
    )
    assert profile(config_copy, "--from-result", str(path)) == 0
    out = capsys.readouterr().out
    assert (
        f"wrote throughput_profile.inf1.6xlarge in {config_copy / 'intent-bert.yaml'}: 3500/s per instance at "
        f"p99 8.5 ms" in out
    )
    point = config.load(config_copy).model("intent-bert").throughput_profile["inf1.6xlarge"]
    assert point.throughput_per_second == 3500 and point.p99_latency_ms == 8.5
    assert point.measured.environment == "staging" and point.measured.instances == 2
    assert point.measured.results == "s3://inferstack-loadtest-staging/r-42/intent-bert/run-7/result.json"


def test_the_result_file_is_the_location_when_the_run_was_not_stored(config_copy, tmp_path):
    path = result_file(tmp_path, run(step(3500, 4.0), instances=1))
    assert profile(config_copy, "--from-result", str(path), "--instance-type", "inf1.xlarge") == 0
    point = config.load(config_copy).model("intent-bert").throughput_profile["inf1.xlarge"]
    assert point.measured.results == str(path) and point.throughput_per_second == 3500


def test_dry_run_prints_the_entry_and_writes_nothing(config_copy, tmp_path, capsys):
    before = (config_copy / "intent-bert.yaml").read_bytes()
    path = result_file(tmp_path, run(step(3500, 4.0), step(7000, 8.5), instances=2))
    assert profile(config_copy, "--from-result", str(path), "--dry-run") == 0
    out = capsys.readouterr().out
    printed = yaml.safe_load(out.split("would write")[0])
    assert printed["inf1.6xlarge"]["throughput_per_second"] == 3500
    assert printed["inf1.6xlarge"]["measured"]["method"] == "inferstack profile"
    assert "(dry run: nothing written)" in out
    assert (config_copy / "intent-bert.yaml").read_bytes() == before


@pytest.mark.parametrize(
    "result,expected",
    [
        (run(step(3500, 12.0), step(7000, 30.0)), "profile: error: no step held p99 <= 10 ms"),
        (
            run(step(3500, 4.0), cpu=95.0),
            "profile: error: the run is invalid, nothing written: generator local saturated",
        ),
    ],
)
def test_a_run_that_cannot_be_profiled_exits_1_and_writes_nothing(config_copy, tmp_path, capsys, result, expected):
    before = (config_copy / "intent-bert.yaml").read_bytes()
    assert profile(config_copy, "--from-result", str(result_file(tmp_path, result))) == 1
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("\n") == 1
    assert (config_copy / "intent-bert.yaml").read_bytes() == before


def test_an_entry_the_config_would_refuse_exits_1_and_keeps_the_file(config_copy, tmp_path, capsys):
    # 100 req/s per inf1.6xlarge cannot carry staging's 4,000 TPS within its max of 4
    before = (config_copy / "intent-bert.yaml").read_bytes()
    assert profile(config_copy, "--from-result", str(result_file(tmp_path, run(step(200, 4.0), instances=2)))) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"profile: error: {config_copy / 'intent-bert.yaml'}: not written: with the new entry the "
        f"config would not load: "
    )
    assert "capacity.max" in err and err.count("\n") == 1
    assert (config_copy / "intent-bert.yaml").read_bytes() == before


@pytest.mark.parametrize(
    "args,expected",
    [
        (
            ["--target", "http://127.0.0.1:9/v2/models/intent-bert/infer"],
            "profile: error: --instances: with --target, say how many instances serve it (>= 1)",
        ),
        (["--from-result", "missing.json"], "profile: error: --from-result missing.json: cannot read: No such file"),
        (
            ["--instance-type", "inf9.huge", "--from-result", "x.json"],
            "profile: error: unknown instance type 'inf9.huge'",
        ),
    ],
)
def test_bad_arguments_exit_2_with_one_line(config_copy, capsys, args, expected):
    assert profile(config_copy, *args) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("\n") == 1


def test_a_result_file_that_is_not_one_is_one_line(config_copy, tmp_path, capsys):
    path = tmp_path / "result.json"
    path.write_text('{"schema_version": 2, "steps": "many"}')
    assert profile(config_copy, "--from-result", str(path)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"profile: error: {path}: not a load test result: ") and err.count("\n") == 1


def test_a_run_of_another_model_is_a_usage_error(config_copy, tmp_path, capsys):
    path = result_file(tmp_path, run(step(100, 4.0), model="duplicate-bert"))
    assert profile(config_copy, "--from-result", str(path)) == 2
    assert (
        capsys.readouterr().err == f"profile: error: --from-result {path}: a run of duplicate-bert, not intent-bert\n"
    )


def test_unknown_model_and_environment_are_usage_errors(config_copy, capsys):
    assert cli.main(["profile", "nope", "--env", "staging", "--config-dir", str(config_copy)]) == 2
    assert "no model named 'nope'" in capsys.readouterr().err
    assert cli.main(["profile", "intent-bert", "--env", "qa", "--config-dir", str(config_copy)]) == 2
    assert "--env: unknown environment 'qa'" in capsys.readouterr().err
