"""The load test container's entrypoint (inferstack/loadtest/task.py), as its Fargate tasks run it: bad settings
end in one line and exit 2 before Locust starts; a master and a worker task (real Locust processes) measure an
HTTP target that fails a known share of requests, count the failures by kind, and store the report, the
picture and then the result in S3 (moto's server), the result naming its own location."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import boto3
import pytest
from PIL import Image

from inferstack.loadtest import runner, task
from inferstack.loadtest.results import FAIL, RunResult
from inferstack.loadtest.spec import ExpectedOutput, LoadTestSpec, Step, Target
from tests.support.paths import ROOT


def spec(url: str, *steps: Step) -> LoadTestSpec:
    return LoadTestSpec(
        model="m",
        target=Target(kind="http", url=url),
        bodies=({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["hi"]}]},),
        outputs=(ExpectedOutput("logits", "FP32", (1, 3)), ExpectedOutput("label", "BYTES", (1,))),
        steps=steps or (Step(rate=20, seconds=4),),
        p99_slo_ms=500.0,
        timeout_s=5.0,
    )


def run_task(role: str, env: dict[str, str], *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("INFERSTACK_", "LOCUST_"))}
    return subprocess.run(
        [sys.executable, "-m", "inferstack.loadtest.task", role, *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


GOOD = spec("http://127.0.0.1:9/v2/models/m/infer").to_json()


@pytest.mark.parametrize(
    "role, env, message",
    [
        ("master", {}, "loadtest master: INFERSTACK_LOADTEST_SPEC: not set (the load test spec's JSON)"),
        (
            "master",
            {runner.SPEC_ENV: "{"},
            "loadtest master: INFERSTACK_LOADTEST_SPEC: load test spec: JSONDecodeError",
        ),
        ("master", {runner.SPEC_ENV: GOOD}, "loadtest master: INFERSTACK_LOADTEST_WORKERS: not set"),
        (
            "master",
            {runner.SPEC_ENV: GOOD, task.WORKERS_ENV: "two"},
            "loadtest master: INFERSTACK_LOADTEST_WORKERS: 'two' is not a whole number",
        ),
        (
            "master",
            {runner.SPEC_ENV: GOOD, task.WORKERS_ENV: "0"},
            "loadtest master: INFERSTACK_LOADTEST_WORKERS: 0 is not within 1..64",
        ),
        (
            "master",
            {runner.SPEC_ENV: GOOD, task.WORKERS_ENV: "2", task.RESULTS_ENV: "s3://bucket/no-slash"},
            "loadtest master: INFERSTACK_LOADTEST_RESULTS: 's3://bucket/no-slash' is not s3://bucket/prefix/",
        ),
        (
            "master",
            {
                runner.SPEC_ENV: GOOD,
                task.WORKERS_ENV: "2",
                task.RESULTS_ENV: "s3://b/p/",
                task.MASTER_PORT_ENV: "70000",
            },
            "loadtest master: LOCUST_MASTER_PORT: 70000 is not within 1..65535",
        ),
        ("worker", {runner.SPEC_ENV: GOOD}, "loadtest worker: LOCUST_MASTER_HOST: not set (the master task's address)"),
    ],
)
def test_bad_settings_end_in_one_line_and_exit_2(role, env, message):
    result = run_task(role, env)
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1 and result.stderr.startswith(message), (
        result.stderr
    )


@pytest.mark.loadtest
def test_a_master_and_a_worker_task_measure_the_target_and_store_the_result_in_s3(answerer, emulator):
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="loadtest-results")
    prefix = "r42/m/run-1/"
    port = runner.free_port()
    env = {
        runner.SPEC_ENV: spec(answerer.url, Step(rate=40, seconds=4)).to_json(),
        task.WORKERS_ENV: "1",
        task.RESULTS_ENV: f"s3://loadtest-results/{prefix}",
        task.MASTER_PORT_ENV: str(port),
        task.MASTER_HOST_ENV: "127.0.0.1",
    }
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("INFERSTACK_", "LOCUST_"))}
    worker = subprocess.Popen(
        [sys.executable, "-m", "inferstack.loadtest.task", "worker"],
        cwd=ROOT,
        env={**clean, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        master = run_task("master", env, "--bind-host", "127.0.0.1", timeout=120)
        assert master.returncode == 0, master.stderr[-3000:]
        assert worker.wait(timeout=30) == 0, worker.stderr.read()[-2000:]
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, 9)
            worker.wait(10)

    stored = {o["Key"]: o for o in s3.list_objects_v2(Bucket="loadtest-results")["Contents"]}
    assert sorted(stored) == [prefix + name for name in ("latency.png", "report.txt", "result.json")]
    result = RunResult.from_json(s3.get_object(Bucket="loadtest-results", Key=prefix + "result.json")["Body"].read())
    assert result.results_location == f"s3://loadtest-results/{prefix}result.json"
    assert result.workers == 1 and [g.name for g in result.generators] == ["master", "worker-1"]
    # One request in 10 is a 503 and the next one a wrong answer: failures, counted by kind.
    (step,) = result.steps
    assert step.offered >= 0.9 * step.offered_rps * step.seconds
    assert set(step.errors) == {"HTTP 503", "invalid answer: output logits: shape [1, 2], expected [1, 3]"}
    for kind, count in step.errors.items():
        assert abs(count - step.offered / 10) <= 2, (kind, count, step.offered)
    assert step.failures == sum(step.errors.values()) and step.rejected == step.errors["HTTP 503"]
    # Each request stands for an independent caller: the generators keep no cookie the target sets.
    assert answerer.received >= step.offered and answerer.cookies_back == 0
    assert result.verdict == FAIL
    assert any(": errors " in reason and "above the budget's 0.1 %" in reason for reason in result.reasons)
    report = s3.get_object(Bucket="loadtest-results", Key=prefix + "report.txt")["Body"].read().decode()
    assert "verdict: FAIL" in report and report in master.stdout
    png = s3.get_object(Bucket="loadtest-results", Key=prefix + "latency.png")
    assert png["ContentType"] == "image/png"
    with Image.open(io.BytesIO(png["Body"].read())) as image:
        assert image.format == "PNG"
    assert f"stored s3://loadtest-results/{prefix}result.json (verdict fail)" in master.stdout
    assert (
        json.loads(s3.get_object(Bucket="loadtest-results", Key=prefix + "result.json")["Body"].read())["verdict"]
        == FAIL
    )
