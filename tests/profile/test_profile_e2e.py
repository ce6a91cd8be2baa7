"""End to end: `inferstack profile --target` runs the real Locust (one local process) against the real Neuron
serving app (container/neuron/serving/serve.py, CPU backend, a tiny BERT) over real sockets, finds the highest step
whose p99 held the SLO, writes it into the model's throughput_profile with its provenance, and `plan` then sizes the
model from it. A second run on the same machine lands within TOLERANCE of the first (both figures printed).

The SLO is generous (2 s) and the rates modest: the steps hold on a loaded 2-core machine, so what is measured is
the rate offered and achieved, never a race against the machine. The figure is therefore bounded by the highest
step offered; the test proves the path (Locust -> result -> entry -> file -> plan), not the server's ceiling."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from inferstack import config
from inferstack.commands import plan_report
from tests.support.neuron_server import LABELS, ServerProcess
from tests.support.paths import ROOT

pytestmark = pytest.mark.loadtest
MODEL = "intent-bert"
RATE = 40  # req/s at the top step, for the one instance the server is
TOLERANCE = 0.35  # a second run's figure within 35 % of the first: the machine is shared by other test processes


@pytest.fixture(scope="module")
def server(artifact):
    started = ServerProcess(artifact, args=("--model-name", MODEL))
    try:
        started.wait_ready()
        yield started
    finally:
        try:
            started.stop(timeout=20)
        except subprocess.TimeoutExpired:
            started.kill()


def fit_the_tiny_model(config_dir: Path) -> None:
    """intent-bert as the tiny artifact answers it (3 labels), with dev's SLO generous and its peak within what a
    CPU measurement can carry on dev's few instances."""
    path = config_dir / f"{MODEL}.yaml"
    data = yaml.safe_load(path.read_text())
    data["source"]["labels"] = list(LABELS)
    data["environments"]["dev"]["slo"] = {"p99_latency_ms": 2000, "peak_tps": 10}
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def profile(config_dir: Path, server: ServerProcess, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "inferstack",
            "profile",
            MODEL,
            "--env",
            "dev",
            "--config-dir",
            str(config_dir),
            "--target",
            server.url,
            "--instances",
            "1",
            "--rate",
            str(RATE),
            "--steps",
            "0.25,0.5,0.75,1",
            "--hold",
            "3",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_profile_measures_the_server_writes_the_entry_and_plan_sizes_from_it(server, config_copy, tmp_path):
    fit_the_tiny_model(config_copy)
    model_file = config_copy / f"{MODEL}.yaml"
    first = profile(config_copy, server, tmp_path / "run-1")
    assert first.returncode == 0, first.stdout + first.stderr
    point = config.load(config_copy).model(MODEL).throughput_profile["inf1.xlarge"]  # dev's instance type
    measured_1 = point.throughput_per_second
    assert 0 < measured_1 <= RATE and 0 < point.p99_latency_ms <= 2000
    assert point.measured.method == "inferstack profile" and point.measured.environment is None  # a local server
    assert point.measured.results == str(tmp_path / "run-1" / "result.json") and point.measured.instances == 1
    text = model_file.read_text()
    assert text.count("measured:") == 1 and "inf1.6xlarge:\n    throughput_per_second: 4000" in text  # untouched

    project = config.load(config_copy)
    (row,) = [r for r in plan_report.build(project, ["dev"]) if r.model == MODEL]
    assert (row.instance_type, row.throughput_per_instance, row.profile) == ("inf1.xlarge", measured_1, "measured")
    assert row.instances_at_peak == max(1, math.ceil(10 / (measured_1 * 0.5)))  # dev: peak 10, safety 0.5

    second = profile(config_copy, server, tmp_path / "run-2")
    assert second.returncode == 0, second.stdout + second.stderr
    again = config.load(config_copy).model(MODEL).throughput_profile["inf1.xlarge"]
    measured_2 = again.throughput_per_second
    print(
        f"\nprofile of {MODEL} on this machine: run 1 {measured_1:g}/s at p99 {point.p99_latency_ms:g} ms, run 2 "
        f"{measured_2:g}/s at p99 {again.p99_latency_ms:g} ms per instance (tolerance {TOLERANCE:.0%})"
    )
    assert abs(measured_1 - measured_2) <= TOLERANCE * max(measured_1, measured_2)
