"""benchmarks/worker_crash.py end to end on the tiny artifact: a worker killed under open load, with restarts and
with the baseline (SERVER_MAX_RESTARTS=0). Asserted: what the behaviour decides (who failed and how many, whether
the server survived), never a timing."""

from __future__ import annotations

import re

from tests.support.neuron_server import run_script
from tests.support.paths import ROOT

WORKER_CRASH = ROOT / "benchmarks" / "worker_crash.py"
ROW = re.compile(r"^ *(restart|exit) \| +(\d+) +(\d+) +(\d+) \| +(\d+) \|.*\| (.+)$", re.M)


def test_worker_crash_reports_restart_beside_the_exiting_baseline(artifact):
    result = run_script(WORKER_CRASH, "--model-dir", str(artifact), "--load", "0.1", "--connections", "8",
                        "--before", "1", "--after", "0.5", "--give-up", "30", timeout=240)
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
