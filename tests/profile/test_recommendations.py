"""Profile entries from a finished Inference Recommender job: per instance type the recommendation with the most
invocations per instance within the latency threshold, its latency recorded at the percentile the job judged it
at (P95 for the Advanced job `--recommender` builds: no p99); bad files are one line naming the file and key
path."""

from __future__ import annotations

import datetime
import json

import pytest
import yaml

from inferstack import cli, config
from inferstack.commands import plan_report
from inferstack.profile import recommendations
from inferstack.profile.recommendations import RecommendationsError
from tests.support import recommendations_sample
from tests.support.config_edits import delete_at, set_at
from tests.support.recommendations_sample import JOB

URL = "https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ModelLatencyThreshold.html"


def sample(percentile: str = "P95", job_type: str = "Advanced") -> dict:
    """The support sample (as `--recommender` builds the job: Advanced, judged at P95), or a variation of it."""
    data = recommendations_sample.sample()
    data["JobType"] = job_type
    data["StoppingConditions"]["ModelLatencyThresholds"][0]["Percentile"] = percentile
    return data


def write(path, data=None):
    return recommendations_sample.write(path, sample() if data is None else data)


def read(path, slo=300.0, only=None):
    return recommendations.read(path, env_name="staging", slo_p99_ms=slo, only=only)


def test_the_best_recommendation_within_the_threshold_per_instance_type(tmp_path):
    path = write(tmp_path / "job.json")
    found = read(path)
    assert found.job == JOB and found.notes == ()
    entries = {e.instance_type: e.point for e in found.entries}
    g4dn, g5 = entries["ml.g4dn.xlarge"], entries["ml.g5.xlarge"]
    # 3,192 a minute at 212 ms (3,600 at 340 ms is past the threshold): the published trt-db-ig figure
    assert g4dn.throughput_per_second == 53.2 and g4dn.measured.p95_latency_ms == 212
    # 9,000 a minute over 2 instances beats 4,200 on one
    assert g5.throughput_per_second == 75.0 and g5.measured.p95_latency_ms == 180 and g5.measured.instances == 2
    assert g4dn.measured.method == f"inference-recommender job {JOB}"
    assert g4dn.measured.date == datetime.date(2025, 3, 4) and g4dn.measured.environment == "staging"
    assert g4dn.measured.results == str(path)
    assert "p95 model latency 212 ms (as the API reports it: in the container, not end to end)" in g4dn.source


def test_an_advanced_jobs_figures_are_a_p95_and_its_p99_is_assumed_not_measured(tmp_path):
    found = read(write(tmp_path / "job.json"))
    entries = {e.instance_type: e for e in found.entries}
    g4dn = entries["ml.g4dn.xlarge"].point
    assert (g4dn.measured.latency_percentile, g4dn.measured.p95_latency_ms, g4dn.measured.p99_latency_ms) == (
        "p95",
        212,
        None,
    )
    # the plan needs a p99: the limit the p95 was judged within, called assumed where the entry says where it
    # comes from
    assert g4dn.p99_latency_ms == 300
    assert g4dn.source.endswith("within 300 ms; p99 not measured, 300 ms assumed until a load test measures it")
    data = entries["ml.g4dn.xlarge"].data()
    assert list(data["measured"]) == ["date", "method", "environment", "instances", "p95_latency_ms", "results"]
    assert "p99" not in " ".join(data["measured"])


def test_a_default_jobs_p99_threshold_gives_a_p99(tmp_path):
    """P99 is a percentile a Default job takes (the API reference): its figure is recorded as the job's p99."""
    found = read(write(tmp_path / "job.json", sample("P99", "Default")))
    g4dn = {e.instance_type: e.point for e in found.entries}["ml.g4dn.xlarge"]
    assert (g4dn.measured.latency_percentile, g4dn.measured.p99_latency_ms, g4dn.p99_latency_ms) == ("p99", 212, 212)
    assert "p99 model latency 212 ms" in g4dn.source and "assumed" not in g4dn.source


def test_a_default_job_at_p95_gives_a_p95(tmp_path):
    found = read(write(tmp_path / "job.json", sample("P95", "Default")))
    g5 = {e.instance_type: e.point for e in found.entries}["ml.g5.xlarge"]
    assert (g5.measured.latency_percentile, g5.measured.p95_latency_ms, g5.p99_latency_ms) == ("p95", 180, 300)


def test_an_advanced_job_at_p99_is_refused(tmp_path):
    """A custom load test takes P95 only: a job that says P99 (as `--recommender` built it before) measured no
    p99 that its file can show, so nothing is written."""
    path = write(tmp_path / "job.json", sample("P99", "Advanced"))
    with pytest.raises(RecommendationsError) as caught:
        read(path)
    assert str(caught.value) == (
        f"{path}: StoppingConditions.ModelLatencyThresholds[0].Percentile: 'P99' on an "
        f"Advanced job: a custom load test takes P95 only ({URL})"
    )


def test_a_stricter_slo_than_the_jobs_threshold_wins(tmp_path):
    found = read(write(tmp_path / "job.json"), slo=150)
    entries = {e.instance_type: e.point for e in found.entries}
    assert set(entries) == {"ml.g5.xlarge"} and entries["ml.g5.xlarge"].throughput_per_second == 70.0  # 4,200/min
    assert entries["ml.g5.xlarge"].measured.date == datetime.date(2025, 3, 4)
    assert entries["ml.g5.xlarge"].p99_latency_ms == 150  # assumed: the stricter limit
    assert found.notes == ("ml.g4dn.xlarge: no recommendation with p95 model latency within 150 ms: nothing to write",)


def test_only_the_instance_types_asked_for(tmp_path):
    found = read(write(tmp_path / "job.json"), only={"ml.g5.xlarge", "ml.g5.2xlarge"})
    assert [e.instance_type for e in found.entries] == ["ml.g5.xlarge"]
    assert found.notes == ("ml.g5.2xlarge: the job measured no such instance type",)


def test_types_outside_the_catalog_and_serverless_ones_are_left_out_with_a_note(tmp_path):
    data = sample()
    data["InferenceRecommendations"][0]["EndpointConfiguration"]["InstanceType"] = "ml.c5.xlarge"
    del data["InferenceRecommendations"][3]["EndpointConfiguration"]["InstanceType"]
    data["InferenceRecommendations"][3]["EndpointConfiguration"]["ServerlessConfig"] = {
        "MemorySizeInMB": 2048,
        "MaxConcurrency": 5,
    }
    found = read(write(tmp_path / "job.json", data))
    assert [e.instance_type for e in found.entries] == ["ml.g5.xlarge"]
    assert any(n.startswith("ml.c5.xlarge: not in inferstack's instance catalog") for n in found.notes)
    assert any(n.startswith("InferenceRecommendations[3]: serverless") for n in found.notes)


@pytest.mark.parametrize(
    "change,expected",
    [
        (
            set_at("Status", value="IN_PROGRESS"),
            "Status: 'IN_PROGRESS': a job's recommendations are final once it is COMPLETED",
        ),
        (delete_at("JobName"), "JobName: missing"),
        (set_at("JobName", value="not a job name!"), "JobName: 'not a job name!' is not a recommendation job name"),
        (set_at("InferenceRecommendations", value={}), "InferenceRecommendations: expected a list, got {}"),
        (set_at("InferenceRecommendations", value=[]), "InferenceRecommendations: empty: the job recommended nothing"),
        (
            set_at("InferenceRecommendations", 2, "Metrics", "MaxInvocations", value="9000"),
            "InferenceRecommendations[2].Metrics.MaxInvocations: expected an integer, got '9000'",
        ),
        (
            set_at("InferenceRecommendations", 2, "Metrics", "MaxInvocations", value=True),
            "InferenceRecommendations[2].Metrics.MaxInvocations: expected an integer, got true",
        ),
        (
            set_at("InferenceRecommendations", 1, "Metrics", "ModelLatency", value=-3),
            "InferenceRecommendations[1].Metrics.ModelLatency: -3 is out of range (0 to 3.6e+06)",
        ),
        (
            delete_at("InferenceRecommendations", 0, "EndpointConfiguration"),
            "InferenceRecommendations[0].EndpointConfiguration: missing",
        ),
        (
            set_at("InferenceRecommendations", 0, "EndpointConfiguration", "InitialInstanceCount", value=0),
            "InferenceRecommendations[0].EndpointConfiguration.InitialInstanceCount: 0 is out of range (1 to 10000)",
        ),
        (
            set_at("StoppingConditions", "ModelLatencyThresholds", 0, "ValueInMilliseconds", value=12.5),
            "StoppingConditions.ModelLatencyThresholds[0].ValueInMilliseconds: expected an integer, got 12.5",
        ),
        (
            set_at("StoppingConditions", "ModelLatencyThresholds", 0, "Percentile", value=95),
            "StoppingConditions.ModelLatencyThresholds[0].Percentile: expected a string, got 95",
        ),
        (
            delete_at("StoppingConditions", "ModelLatencyThresholds", 0, "Percentile"),
            "StoppingConditions.ModelLatencyThresholds[0].Percentile: missing",
        ),
        (
            set_at("CompletionTime", value="yesterday"),
            "CompletionTime: expected a timestamp (ISO 8601 or epoch seconds), got 'yesterday'",
        ),
        (delete_at("CompletionTime"), "CompletionTime: missing, and so is InvocationEndTime"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_key_path(tmp_path, change, expected):
    data = sample()
    change(data)
    path = write(tmp_path / "job.json", data)
    with pytest.raises(RecommendationsError) as caught:
        read(path)
    assert str(caught.value).startswith(f"{path}: {expected}")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "change,expected",
    [
        (
            set_at("StoppingConditions", "ModelLatencyThresholds", 0, "Percentile", value="P90"),
            "StoppingConditions.ModelLatencyThresholds[0].Percentile: 'P90' is not a percentile the API takes "
            f"for JobType Advanced (P95: {URL})",
        ),
        (
            set_at("StoppingConditions", "ModelLatencyThresholds", 0, "Percentile", value="p95"),
            "StoppingConditions.ModelLatencyThresholds[0].Percentile: 'p95' is not a percentile the API takes",
        ),
        (
            set_at("StoppingConditions", "ModelLatencyThresholds", value=[]),
            "StoppingConditions.ModelLatencyThresholds: none: the job names no percentile to read its ModelLatency at",
        ),
        (
            delete_at("StoppingConditions"),
            "StoppingConditions.ModelLatencyThresholds: none: the job names no percentile to read its ModelLatency at",
        ),
        (delete_at("JobType"), "JobType: missing"),
        (set_at("JobType", value="Deluxe"), "JobType: 'Deluxe' is not one of the API's job types (Advanced, Default)"),
        (
            lambda data: (
                data.update(JobType="Default"),
                data["StoppingConditions"]["ModelLatencyThresholds"].append(
                    {"Percentile": "P99", "ValueInMilliseconds": 400}
                ),
            ),
            "StoppingConditions.ModelLatencyThresholds: at P95 and P99: which one a recommendation's ModelLatency is "
            "cannot be told",
        ),
    ],
)
def test_a_percentile_the_job_cannot_have_is_one_line_naming_the_key_path(tmp_path, change, expected):
    """Before, a threshold at any other percentile than P99 was skipped and the figures written as a p99."""
    data = sample()
    change(data)
    path = write(tmp_path / "job.json", data)
    with pytest.raises(RecommendationsError) as caught:
        read(path)
    assert str(caught.value).startswith(f"{path}: {expected}"), str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "content,expected",
    [
        (b"", "not JSON: Expecting value: line 1 column 1 (char 0)"),
        (b"[1, 2]", "expected a JSON object (describe-inference-recommendations-job's answer), got a list"),
        (b'{"Status": NaN}', "not JSON: NaN is not a number JSON allows"),
        (b"\xff\xfe", "not UTF-8 text"),
        (b"[" * 100_000, "nested too deeply"),
    ],
)
def test_a_file_that_is_not_a_job_is_one_line(tmp_path, content, expected):
    path = tmp_path / "job.json"
    path.write_bytes(content)
    with pytest.raises(RecommendationsError) as caught:
        read(path)
    assert str(caught.value).startswith(f"{path}: ") and expected in str(caught.value)


def test_cli_writes_every_instance_type_the_job_measured(config_copy, tmp_path, capsys):
    path = write(tmp_path / "job.json")
    model_file = config_copy / "bert-large-classifier.yaml"
    old = yaml.safe_load(model_file.read_text())
    assert (
        cli.main(
            [
                "profile",
                "bert-large-classifier",
                "--env",
                "staging",
                "--from-recommendations",
                str(path),
                "--config-dir",
                str(config_copy),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        f"wrote throughput_profile.ml.g4dn.xlarge in {model_file}: 53.2/s per instance at p95 212 ms, not a p99 "
        f"measurement (the plan assumes p99 300 ms until a load test measures it)"
    ) in out
    assert "      p95_latency_ms: 212" in out and "at p99 212" not in out
    profile = config.load(config_copy).model("bert-large-classifier").throughput_profile
    assert profile["ml.g4dn.xlarge"].measured.method == f"inference-recommender job {JOB}"
    assert profile["ml.g4dn.xlarge"].measured.p95_latency_ms == 212
    assert profile["ml.g5.xlarge"].throughput_per_second == 75.0
    new = yaml.safe_load(model_file.read_text())
    del new["throughput_profile"], old["throughput_profile"]
    assert new == old


def test_cli_bad_file_exits_2_with_one_line(config_copy, tmp_path, capsys):
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"JobName": JOB, "Status": "FAILED"}))
    before = (config_copy / "bert-large-classifier.yaml").read_bytes()
    assert (
        cli.main(
            [
                "profile",
                "bert-large-classifier",
                "--env",
                "staging",
                "--from-recommendations",
                str(path),
                "--config-dir",
                str(config_copy),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err == (
        f"profile: error: --from-recommendations {path}: Status: 'FAILED': a job's recommendations are "
        f"final once it is COMPLETED\n"
    )
    assert (config_copy / "bert-large-classifier.yaml").read_bytes() == before


def test_a_written_p95_entry_is_planned_with_its_caveat_and_production_still_warns(config_copy, tmp_path, capsys):
    """What the job measured is a p95: plan says so and does not rank it, and validate still asks for a load test
    where production is sized from it."""
    path = write(tmp_path / "job.json")
    assert (
        cli.main(
            [
                "profile",
                "bert-large-classifier",
                "--env",
                "staging",
                "--from-recommendations",
                str(path),
                "--config-dir",
                str(config_copy),
            ]
        )
        == 0
    )
    project = config.load(config_copy)
    (warning,) = [
        w for w in project.warnings if w.file.endswith("bert-large-classifier.yaml") and "sized from" in w.message
    ]
    assert (
        "production environment prod sized from an entry with no measured p99 (bert-large-classifier's "
        "throughput_profile.ml.g4dn.xlarge has a p95 from Inference Recommender, not a p99 measurement)"
    ) in warning.message
    rows = plan_report.build(project, ["prod"], compare=True, today=datetime.date(2025, 3, 16))
    bert = next(r for r in rows if r.model == "bert-large-classifier")
    assert (bert.profile, bert.measured_percentile) == ("measured", "p95")
    assert bert.compare and not any(o.ranked or o.cheapest for o in bert.compare)
    table = plan_report.to_table(rows)
    (line,) = [line for line in table.splitlines() if line.startswith("bert-large-classifier")]
    assert "measured 2025-03-04 (12d ago), p95 from Inference Recommender, not a p99 measurement" in line
    assert "p95: the entry's latency is an Inference Recommender job's p95" in table
    # dev carries the model on a fleet: its member row says the same
    (fleet,) = [
        f
        for f in plan_report.build_fleets(project, ["dev"], today=datetime.date(2025, 3, 16))
        if f.fleet == "triton-shared"
    ]
    assert (
        "profile ml.g4dn.xlarge measured 2025-03-04 (12d ago), p95 from Inference Recommender, not a p99 measurement"
    ) in plan_report.fleets_to_text([fleet])
