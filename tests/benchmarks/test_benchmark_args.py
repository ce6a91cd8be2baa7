"""benchmarks/loadtest_worker.py refuses a bad argument in one line, exit 2, before it starts anything; its
distributed run against the serving app (--serve-workers) runs end to end."""

from __future__ import annotations

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


def test_a_distributed_run_against_the_serving_app_is_answered(artifact):
    """The project's load test (a Locust master and a worker) against serve.py with two workers on the emulated
    accelerator at intent-bert's 10 ms SLO, far below capacity: most requests answered 200. Before admission
    started from a measured batch time, every request was refused (503) for good."""
    import re

    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "loadtest_worker.py"),
            "--peak",
            "200",
            "--workers",
            "1",
            "--serve-workers",
            "2",
            "--seconds",
            "3",
            "--slo-ms",
            "10",
            "--model-dir",
            str(artifact),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    progress = re.search(r"answered (\d+), goodput [\d.]+/s, rejected (\d+)", result.stdout)
    assert progress, result.stdout
    answered, rejected = int(progress.group(1)), int(progress.group(2))
    assert answered > 300 and rejected < answered / 2, result.stdout
