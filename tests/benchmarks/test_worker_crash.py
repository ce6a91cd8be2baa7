"""benchmarks/worker_crash.py end to end on the tiny artifact: a worker killed under open load, with restarts and
with the baseline (SERVER_MAX_RESTARTS=0). Asserted: what the behaviour decides (who failed and how many, whether
the server survived), never a timing."""

from __future__ import annotations

import re

import pytest

from tests.support.neuron_server import run_script
from tests.support.paths import ROOT

WORKER_CRASH = ROOT / "benchmarks" / "worker_crash.py"
ROW = re.compile(r"^ *(restart|exit) \| +(\d+) +(\d+) +(\d+) \| +(\d+) \|.*\| (.+)$", re.M)


def test_worker_crash_reports_restart_beside_the_exiting_baseline(artifact):
    result = run_script(
        WORKER_CRASH,
        "--model-dir",
        str(artifact),
        "--load",
        "0.1",
        "--connections",
        "8",
        "--before",
        "1",
        "--after",
        "0.5",
        "--give-up",
        "30",
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    rows = {m.group(1): m for m in ROW.finditer(out)}
    assert sorted(rows) == ["exit", "restart"], out
    restart, baseline = rows["restart"], rows["exit"]
    due, ok, failed, on_victim = (int(restart.group(i)) for i in (2, 3, 4, 5))
    # Restarted in place: only requests in flight on the killed worker's connections failed, the server lived.
    assert ok + failed == due and failed <= on_victim <= 8 + 1, out
    assert re.search(r"\d+\.\d+ s / \d+\.\d+ s \(warm-up", restart.group(6)), out
    assert re.search(r"on connections the kill did not close: 0$", out, re.M), out
    # The baseline stops the task: everything after the kill fails.
    assert baseline.group(6).startswith("never (server exit code 1)"), out
    assert int(baseline.group(4)) > failed, out
    assert re.search(r"^targets with restart: .*met", out, re.M), out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--workers", "1"], "--workers: at least 2 (one dies, another serves)"),
        (["--load", "0"], "--load: must be greater than 0, got 0.0"),
        (["--before", "nan"], "--before: must be greater than 0, got nan"),
        (["--connections", "0"], "--connections: at least 1; --max-queue-delay-ms: not negative"),
        (["--modes", "restart,crash"], "--modes: a comma-separated list of restart, exit, got 'restart,crash'"),
    ],
)
def test_worker_crash_refuses_a_bad_argument_in_one_line(args, message):
    result = run_script(WORKER_CRASH, *args, timeout=60)
    assert result.returncode == 2 and result.stdout == "", result.stdout
    assert result.stderr.strip().endswith(message) and len(result.stderr.strip().splitlines()) == 1, result.stderr
