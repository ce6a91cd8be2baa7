"""inferstack/loadtest/fargate.py: how many workers a rate needs, and what a run refuses before it starts
anything. The runs themselves, against moto's server with the Fargate stand-in: test_fargate_run.py."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from inferstack import config
from inferstack.loadtest import fargate
from inferstack.loadtest.spec import ExpectedOutput, LoadTestSpec, Step, Target
from tests.support.paths import CONFIG_DIR

SPEC = LoadTestSpec(
    model="m",
    target=Target(kind="http", url="http://127.0.0.1:1/v2/models/m/infer"),
    bodies=({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["hi"]}]},),
    outputs=(ExpectedOutput("logits", "FP32", (1, 2)),),
    steps=(Step(rate=10, seconds=5),),
    p99_slo_ms=100,
)


@pytest.mark.parametrize(
    "rate, per_worker, expected",
    [
        (1, 300, 2),  # a trickle still runs distributed, on two workers
        (600, 300, 2),  # exactly two workers' worth
        (601, 300, 3),  # a request per second more needs a third
        (6000, 300, 20),  # the most staging allows
        (0.5, 0.2, 3),  # fractional rates round up
    ],
)
def test_workers_for_a_rate(rate, per_worker, expected):
    assert fargate.workers_for(rate, per_worker, 20) == expected


def test_a_rate_beyond_max_workers_is_refused_in_one_line():
    with pytest.raises(fargate.FargateRunError) as caught:
        fargate.workers_for(6001, 300, 20)
    assert str(caught.value) == (
        "6001 req/s needs 21 workers at 300 req/s each, more than load_test.max_workers "
        "(20); raise it or test a lower rate"
    )


@pytest.mark.parametrize("rate, per_worker", [(0, 300), (-1, 300), (float("nan"), 300), (10, 0), (10, float("inf"))])
def test_rates_that_are_not_positive_numbers_are_refused(rate, per_worker):
    with pytest.raises(fargate.FargateRunError, match="must be > 0"):
        fargate.workers_for(rate, per_worker, 20)


def test_results_location_follows_the_results_key_layout():
    from inferstack.loadtest import results

    location = fargate.results_location("bucket", "r7", "intent-bert", "run-1")
    assert location == "s3://bucket/r7/intent-bert/run-1/"
    assert location + results.RESULT_FILE == "s3://bucket/" + results.results_key("r7", "intent-bert", "run-1")


@pytest.fixture
def project():
    return config.load(CONFIG_DIR)


@pytest.fixture
def aws(monkeypatch):
    for key in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.Session(region_name="us-east-1")


def test_an_environment_without_load_test_is_refused(project, aws):
    with pytest.raises(fargate.FargateRunError, match=r"^prod has no load_test: in environments.yaml"):
        fargate.run_in_environment(
            aws, "prod", project.environments["prod"], SPEC, workers=2, release="r", run_id="x", timeout=60
        )


@pytest.mark.parametrize("workers", [1, 21])
def test_workers_outside_the_configured_range_are_refused(project, aws, workers):
    with pytest.raises(fargate.FargateRunError, match=rf"^workers: {workers} is outside 2\.\.20"):
        fargate.run_in_environment(
            aws, "staging", project.environments["staging"], SPEC, workers=workers, release="r", run_id="x", timeout=60
        )


def test_a_missing_load_test_stack_is_a_clear_error_and_starts_nothing(project, aws):
    with pytest.raises(fargate.FargateRunError) as caught:
        fargate.run_in_environment(
            aws, "staging", project.environments["staging"], SPEC, workers=2, release="r", run_id="x", timeout=60
        )
    assert str(caught.value) == "LoadTest: stack staging-LoadTest not found (is staging deployed?)"
    assert aws.client("ecs").list_clusters()["clusterArns"] == []


def test_a_runs_bound_covers_the_start_the_workers_wait_the_run_and_the_upload():
    from inferstack.loadtest import runner, task

    long = LoadTestSpec(**{**SPEC.__dict__, "steps": (Step(rate=10, seconds=600), Step(rate=20, seconds=600))})
    assert fargate.run_timeout(long, 4) - fargate.run_timeout(SPEC, 4) == long.seconds - SPEC.seconds
    assert fargate.run_timeout(SPEC, 2) > task.DEFAULT_WORKER_WAIT_S + runner.default_timeout(SPEC, 2)


def test_max_workers_cannot_exceed_what_a_master_takes():
    """Two constants on purpose: the schema (the bottom layer) cannot import the runner, and the runner, which the
    load-test image carries, should not pull the config schema and pydantic into it."""
    from inferstack.loadtest import runner
    from inferstack.schema.environments import MAX_LOAD_TEST_WORKERS

    assert MAX_LOAD_TEST_WORKERS <= runner.MAX_WORKERS
