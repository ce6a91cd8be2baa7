"""The real Locust, distributed (a master and 2 worker processes on 127.0.0.1), against the real Neuron serving
app (container/neuron/serving/serve.py, CPU backend, a tiny BERT) over real sockets: at a modest rate with a generous
SLO the model passes, through the CLI (`inferstack loadtest --workers 2`) with the SLO from config; the same
server with a long batching queue delay (a real server setting: every request waits for a batch to fill) fails
on its p99, measured from the delay the server adds. An SLO here is generous or impossible, never a race."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from inferstack import config
from inferstack.loadtest import probes, runner
from inferstack.loadtest.results import FAIL, PASS, RunResult
from inferstack.loadtest.spec import ExpectedOutput, LoadTestSpec, Step, Target
from tests.support.neuron_server import LABELS, ServerProcess
from tests.support.paths import ROOT

pytestmark = pytest.mark.loadtest
MODEL = "intent-bert"
QUEUE_DELAY_MS = 1000  # the server's maximum: a batch waits this long for more requests unless it fills


@pytest.fixture(scope="module")
def servers(artifact):
    """A plain server and a slowed one, started side by side (each costs seconds of imports and warm-up)."""
    started = [
        ServerProcess(artifact, args=("--model-name", MODEL)),
        ServerProcess(artifact, env={"SERVER_MAX_QUEUE_DELAY_MS": str(QUEUE_DELAY_MS)}, args=("--model-name", MODEL)),
    ]
    try:
        for server in started:
            server.wait_ready()
        yield started
    finally:
        for server in started:
            try:
                server.stop(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()


def edit_model(config_dir: Path, change) -> None:
    path = config_dir / f"{MODEL}.yaml"
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_the_model_passes_at_a_modest_rate_with_a_generous_slo(servers, config_copy, tmp_path):
    def generous(data: dict) -> None:
        data["source"]["labels"] = list(LABELS)  # the tiny artifact's
        data["environments"]["dev"]["slo"] = {**data["environments"]["dev"].get("slo", {}), "p99_latency_ms": 2000}
        for point in data["throughput_profile"].values():
            point["p99_latency_ms"] = min(point["p99_latency_ms"], 2000)

    edit_model(config_copy, generous)
    out = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "inferstack",
            "loadtest",
            "--model",
            MODEL,
            "--env",
            "dev",
            "--config-dir",
            str(config_copy),
            "--target",
            servers[0].url,
            "--workers",
            "2",
            "--rate",
            "40",
            "--steps",
            "0.5,1",
            "--hold",
            "3",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    run = RunResult.from_json((out / "result.json").read_text())
    assert run.verdict == PASS and run.workers == 2
    assert [g.name for g in run.generators] == ["master", "worker-1", "worker-2"]
    assert run.target == f"{servers[0].url}/v2/models/{MODEL}/infer"
    for step, rate in zip(run.steps, (20, 40), strict=True):
        assert step.offered_rps == rate and step.failures == 0 and step.errors == {}
        assert step.offered >= 0.9 * rate * step.seconds and step.answered == step.offered
    # A line as each step starts and ends, before the report.
    lines = result.stdout.splitlines()
    assert lines[0].startswith(
        f"load test of {MODEL} at {servers[0].url}/v2/models/{MODEL}/infer: 2 steps through 40 req/s, 2 workers"
    )
    assert lines[1] == "  step 1 of 2: 20 req/s (50 % of the full rate) for 3 s from 2 generators"
    assert lines[2].startswith("  step 1 (20 req/s, 50 %) of 2: sent ")
    assert lines[3] == "  step 2 of 2: 40 req/s (100 % of the full rate) for 3 s from 2 generators"
    assert lines[4].startswith("  step 2 (40 req/s, 100 %) of 2: sent ") and lines[4].endswith(": ok")
    assert lines[5].startswith(f"load test of {MODEL} at ") and "verdict: PASS" in result.stdout
    assert (out / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_server_made_slow_fails_on_its_p99(servers, tmp_path):
    model = config.load(ROOT / "model_configs").model(MODEL)
    spec = LoadTestSpec(
        model=MODEL,
        target=Target(kind="http", url=f"{servers[1].url}/v2/models/{MODEL}/infer"),
        bodies=(probes.probe_for(model).body,),
        outputs=(ExpectedOutput("logits", "FP32", (1, len(LABELS))), ExpectedOutput("label", "BYTES", (1,))),
        steps=(Step(rate=20, seconds=4),),
        p99_slo_ms=300.0,
    )
    run = runner.run_local(spec, tmp_path, workers=2)
    assert run.verdict == FAIL
    (last,) = run.steps
    # The answers are right; they come late: the batch waits for more requests (16 rows at most) for up to
    # QUEUE_DELAY_MS after its first, at these rates most of that time.
    assert last.failures == 0 and last.answered > 0
    assert last.p99_ms > 300.0 and last.p50_ms > 100.0
    assert run.reasons == [f"step 1 (20 req/s, 100 %): p99 {last.p99_ms:.1f} ms above the SLO's 300 ms"]
    assert json.loads((tmp_path / "result.json").read_text())["verdict"] == FAIL
