"""throughput_profile entries with a `measured:` block (provenance) and without (estimates): the block's rules,
and validate's warning (not an error) when a production environment is sized from an estimate."""

from __future__ import annotations

import datetime

import pytest
import yaml

from inferstack import config
from tests.support.cli import run
from tests.support.config_edits import assert_rejected, edit_yaml, mark_measured

# validate's estimate warnings on the shipped configs: prod is the pipeline's last stage.
SHIPPED = {
    ("model_configs/bert-large-classifier.yaml", "throughput_profile.ml.g4dn.xlarge"),
    ("model_configs/intent-bert-inf2.yaml", "throughput_profile.inf2.xlarge"),
    ("model_configs/t5-spelling.yaml", "throughput_profile.ml.g4dn.xlarge"),
    ("model_configs/environments.yaml", "fleets.intent-pack.capacity.instance_type"),
}


def estimate_warnings(project) -> set[tuple[str, str]]:
    return {(w.file, w.key) for w in project.warnings if "sized from" in w.message}


def test_validate_warns_where_prod_is_sized_from_estimates():
    result = run("-m", "inferstack", "validate")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "sized from" in line]
    assert {(line.split(":")[0], line.split(": ")[1]) for line in lines} == SHIPPED
    (fleet,) = [line for line in lines if "environments.yaml" in line]
    assert (
        "warning: production environment prod sized from estimates (intent-bert's throughput_profile.inf1.6xlarge, "
        "duplicate-bert's throughput_profile.inf1.6xlarge have no measured: block)"
    ) in fleet
    (t5,) = [line for line in lines if "t5-spelling" in line]
    assert "`python -m inferstack profile t5-spelling --env ENV`" in t5


def test_a_measured_entry_silences_its_warning(config_copy):
    mark_measured(config_copy, "t5-spelling", "ml.g4dn.xlarge")
    mark_measured(config_copy, "intent-bert", "inf1.6xlarge")
    warned = estimate_warnings(config.load(config_copy))
    assert ("model_configs/t5-spelling.yaml", "throughput_profile.ml.g4dn.xlarge") not in warned
    # the fleet still reads duplicate-bert's estimate: its warning names that entry alone
    (fleet,) = [w for w in config.load(config_copy).warnings if w.key == "fleets.intent-pack.capacity.instance_type"]
    assert "(duplicate-bert's throughput_profile.inf1.6xlarge has no measured: block)" in fleet.message
    mark_measured(config_copy, "duplicate-bert", "inf1.6xlarge")
    assert estimate_warnings(config.load(config_copy)) == SHIPPED - {
        ("model_configs/t5-spelling.yaml", "throughput_profile.ml.g4dn.xlarge"),
        ("model_configs/environments.yaml", "fleets.intent-pack.capacity.instance_type"),
    }


def test_an_environments_production_setting_overrides_the_pipeline(config_copy):
    def production(staging: bool | None, prod: bool | None):
        def change(data):
            for env, value in (("staging", staging), ("prod", prod)):
                if value is not None:
                    data["environments"][env]["production"] = value

        return change

    edit_yaml(config_copy / "environments.yaml", production(True, False))
    project = config.load(config_copy)
    messages = [w.message for w in project.warnings if "sized from" in w.message]
    assert messages and all("production environment staging sized from" in m for m in messages)
    # staging's override of the fleet sets min and max only: the warning points at the fleet-wide instance type
    assert ("model_configs/environments.yaml", "fleets.intent-pack.capacity.instance_type") in estimate_warnings(
        project
    )


def test_no_pipeline_and_no_setting_means_no_production_environment(config_copy):
    edit_yaml(config_copy / "environments.yaml", lambda data: data.pop("pipeline"))
    assert estimate_warnings(config.load(config_copy)) == set()


def test_several_production_environments_share_one_warning_per_entry(config_copy):
    edit_yaml(config_copy / "environments.yaml", lambda data: data["environments"]["staging"].update(production=True))
    (t5,) = [
        w
        for w in config.load(config_copy).warnings
        if w.file.endswith("t5-spelling.yaml") and "sized from" in w.message
    ]
    assert t5.message.startswith("warning: production environments staging, prod sized from an estimate")


def _measured(**changes):
    def change(data):
        point = data["throughput_profile"]["inf1.xlarge"]
        point["measured"] = {
            "date": "2025-03-04",
            "method": "inferstack profile",
            "environment": "staging",
            "instances": 2,
            "p99_latency_ms": point["p99_latency_ms"],
            "results": "s3://bucket/result.json",
            **changes,
        }
        for key, value in changes.items():
            if value is None:
                del point["measured"][key]

    return change


TOMORROW = (datetime.datetime.now(datetime.UTC).date() + datetime.timedelta(days=2)).isoformat()


@pytest.mark.parametrize(
    "change,expected",
    [
        (_measured(environment="qa"), "throughput_profile.inf1.xlarge.measured.environment: unknown environment 'qa'"),
        (_measured(date=TOMORROW), f"throughput_profile.inf1.xlarge.measured.date: {TOMORROW} is in the future"),
        (_measured(date="2025-02-30"), "throughput_profile.inf1.xlarge.measured.date: "),
        (
            _measured(instances=0),
            "throughput_profile.inf1.xlarge.measured.instances: Input should be greater than or equal to 1",
        ),
        (_measured(instances=None), "throughput_profile.inf1.xlarge.measured.instances: required field is missing"),
        (_measured(results="my results.json"), "throughput_profile.inf1.xlarge.measured.results: String should match"),
        (
            _measured(method=""),
            "throughput_profile.inf1.xlarge.measured.method: String should have at least 1 character",
        ),
        (_measured(colour="red"), "throughput_profile.inf1.xlarge.measured.colour: unknown key"),
        (
            _measured(p99_latency_ms=9),
            "throughput_profile.inf1.xlarge: p99_latency_ms 8 is below the measured p99 9 "
            "(measured.p99_latency_ms): plan with what was measured",
        ),
    ],
)
def test_measured_block_rejections(config_copy, change, expected):
    assert_rejected(config_copy, "intent-bert.yaml", change, expected)


def test_a_valid_measured_block_loads_with_an_unquoted_yaml_date(config_copy):
    path = config_copy / "intent-bert.yaml"
    edit_yaml(path, _measured())
    text = path.read_text()
    assert "date: '2025-03-04'" in text  # safe_dump quotes the string the test wrote: make it a YAML date
    path.write_text(text.replace("date: '2025-03-04'", "date: 2025-03-04"))
    assert isinstance(
        yaml.safe_load(path.read_text())["throughput_profile"]["inf1.xlarge"]["measured"]["date"], datetime.date
    )
    point = config.load(config_copy).model("intent-bert").throughput_profile["inf1.xlarge"]
    assert point.measured.date == datetime.date(2025, 3, 4) and point.measured.instances == 2


# ---- a measured p95 (an Inference Recommender job's: its Advanced job is judged at P95), not a p99


def _p95(**changes):
    def change(data):
        point = data["throughput_profile"]["inf1.xlarge"]
        point["measured"] = {
            "date": "2025-03-04",
            "method": "inference-recommender job j-1",
            "environment": "staging",
            "instances": 1,
            "p95_latency_ms": 6,
            "results": "job.json",
            **changes,
        }
        for key, value in changes.items():
            if value is None:
                del point["measured"][key]

    return change


@pytest.mark.parametrize(
    "change,expected",
    [
        (
            _p95(p99_latency_ms=7),
            "throughput_profile.inf1.xlarge.measured.p95_latency_ms: set with p99_latency_ms: a "
            "measurement records its latency at one percentile, p99_latency_ms or p95_latency_ms",
        ),
        (
            _p95(p95_latency_ms=None),
            "throughput_profile.inf1.xlarge.measured: set p99_latency_ms (a load test's p99) or "
            "p95_latency_ms (an Inference Recommender job's P95 model latency)",
        ),
        (
            _p95(p95_latency_ms=0),
            "throughput_profile.inf1.xlarge.measured.p95_latency_ms: Input should be greater than 0",
        ),
        (
            _p95(p95_latency_ms="fast"),
            "throughput_profile.inf1.xlarge.measured.p95_latency_ms: Input should be a valid number",
        ),
        (
            _p95(p95_latency_ms=9),
            "throughput_profile.inf1.xlarge: p99_latency_ms 8 is below the measured p95 9 "
            "(measured.p95_latency_ms): plan with what was measured",
        ),
    ],
)
def test_p95_rejections(config_copy, change, expected):
    assert_rejected(config_copy, "intent-bert.yaml", change, expected)


def test_a_p95_block_loads_as_a_p95(config_copy):
    edit_yaml(config_copy / "intent-bert.yaml", _p95())
    measured = config.load(config_copy).model("intent-bert").throughput_profile["inf1.xlarge"].measured
    assert (measured.latency_percentile, measured.latency_ms, measured.p99_latency_ms) == ("p95", 6, None)


def _mark_p95(config_dir, model: str, itype: str, method: str = "inference-recommender job j-1") -> None:
    def change(data):
        point = data["throughput_profile"][itype]
        point["measured"] = {
            "date": "2025-03-04",
            "method": method,
            "environment": "staging",
            "instances": 1,
            "p95_latency_ms": point["p99_latency_ms"],
            "results": "job.json",
        }

    edit_yaml(config_dir / f"{model}.yaml", change)


def test_a_p95_entry_does_not_silence_its_production_warning(config_copy):
    """A p95 measured the throughput, not the p99 the plan checks: production still asks for a load test."""
    _mark_p95(config_copy, "t5-spelling", "ml.g4dn.xlarge")
    project = config.load(config_copy)
    assert estimate_warnings(project) == SHIPPED
    (t5,) = [w for w in project.warnings if w.file.endswith("t5-spelling.yaml") and "sized from" in w.message]
    assert t5.message.startswith(
        "warning: production environment prod sized from an entry with no measured p99 (t5-spelling's "
        "throughput_profile.ml.g4dn.xlarge has a p95 from Inference Recommender, not a p99 measurement): measure "
        "it with `python -m inferstack profile t5-spelling --env ENV` (a load test, which measures p99)"
    )
    # a fleet reading one p95 and one estimate names both, each with its reason
    _mark_p95(config_copy, "intent-bert", "inf1.6xlarge", method="a p95 tool")
    (fleet,) = [w for w in config.load(config_copy).warnings if w.key == "fleets.intent-pack.capacity.instance_type"]
    assert (
        "sized from entries with no measured p99 (duplicate-bert's throughput_profile.inf1.6xlarge has no "
        "measured: block; intent-bert's throughput_profile.inf1.6xlarge has a p95, not a p99 measurement)"
    ) in fleet.message
