"""benchmarks/loadtest_worker.py refuses a bad argument in one line, exit 2, before it starts anything; its
distributed run against the serving app (--serve-workers) runs end to end."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.paths import ROOT


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rate", "0"], "--rate: must be a number > 0, got 0"),
        (["--seconds", "nan"], "--seconds: must be a number > 0, got nan"),
        (["--slo-ms", "-5"], "--slo-ms: must be a number > 0, got -5"),
        (["--serve-workers", "2"], "--serve-workers: a positive number of workers, with --peak"),
        (["--peak", "100", "--serve-workers", "-1"], "--serve-workers: a positive number of workers, with --peak"),
        (["--peak", "100", "--serve-workers", "2", "--batch-ms", "0"], "--batch-ms: must be a number > 0, got 0"),
        (["--peak", "100", "--client", "native"], "--client native: only against the serving app (--serve-workers)"),
        (["--peak", "100", "--connection-order", "random"], "--connection-order: lifo or fifo, got 'random'"),
        (["--peak", "100", "--connection-order", "fifo"], "--connection-order: only with --client native"),
    ],
)
def test_bad_arguments(args, message):
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "loadtest_worker.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().endswith(message) and len(result.stderr.splitlines()) == 1, result.stderr


def peak_against_the_app(artifact, *extra: str) -> str:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "loadtest_worker.py"),
            "--serve-workers",
            "2",
            "--seconds",
            "3",
            "--slo-ms",
            "10",
            "--model-dir",
            str(artifact),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result.stdout


def test_a_distributed_run_against_the_serving_app_is_answered(artifact):
    """The project's load test (a Locust master and a worker) against serve.py with two workers on the emulated
    accelerator at intent-bert's 10 ms SLO, far below capacity: most requests answered 200. Before admission
    started from a measured batch time, every request was refused (503) for good. The server's own side is
    printed too: its CPU per request and how full its batches were."""
    out = peak_against_the_app(artifact, "--peak", "200", "--workers", "1")
    progress = re.search(r"answered (\d+), goodput [\d.]+/s, rejected (\d+)", out)
    assert progress, out
    answered, rejected = int(progress.group(1)), int(progress.group(2))
    assert answered > 300 and rejected < answered / 2, out
    server = re.search(
        r"^server: ([\d,]+) µs of CPU per request .* ([\d.]+) rows per batch over ([\d,]+) batches", out, re.M
    )
    assert server, out
    assert int(server.group(1).replace(",", "")) > 0 and 1 <= float(server.group(2)) <= 16, server.group(0)


def test_the_native_client_runs_the_same_open_system_and_judges_it_by_the_same_rule(artifact):
    """--client native: benchmarks/floor/load_client.c offers the rate instead of Locust, for cores too few for
    Locust to send it on time; the answer, the refusals, the p99 from the due time and the verdict are printed."""
    out = peak_against_the_app(artifact, "--peak", "300", "--client", "native", "--connection-order", "fifo")
    line = re.search(
        r"^native client .*, each request on the one idle longest \(fifo\), .*: answered ([\d,]+) req/s, "
        r"refused (\d+) \(([\d.]+) %\)"
        r".* p99 ([\d.]+) ms; verdict (pass|fail)",
        out,
        re.M,
    )
    assert line, out
    rate, refused, p99 = int(line.group(1).replace(",", "")), int(line.group(2)), float(line.group(4))
    # An open system at 300 req/s for 3 s, not a closed loop: what it sent, answered or refused. How much of it the
    # server admits is the server's (with a 10 ms SLO over a 7 ms batching floor, the full suite's load next to it
    # once made it refuse 23 %).
    assert 0.9 * 900 <= rate * 3 + refused <= 1.03 * 900, line.group(0)
    passed = p99 <= 10 and float(line.group(3)) <= 0.1
    assert line.group(5) == ("pass" if passed else "fail"), line.group(0)
    assert re.search(r"^server: [\d,]+ µs of CPU per request", out, re.M), out
