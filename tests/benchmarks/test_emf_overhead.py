"""benchmarks/emf_overhead.py end to end on the tiny artifact: every recorder figure and both servers'
rows are printed, and the EMF server counted exactly the requests it answered. Figures are never asserted."""

from __future__ import annotations

import re

from tests.support.neuron_server import run_script
from tests.support.paths import ROOT

EMF_OVERHEAD = ROOT / "benchmarks" / "emf_overhead.py"


def test_emf_overhead_reports_the_recorder_and_both_servers(artifact):
    result = run_script(
        EMF_OVERHEAD,
        "--iterations",
        "2000",
        "--repeats",
        "1",
        "--model-dir",
        str(artifact),
        "--workers",
        "1",
        "--concurrency",
        "4",
        "--duration",
        "0.3",
        "--warmup",
        "0.1",
        "--rounds",
        "1",
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    for name in (
        "request(latency) per request",
        "batch(rows, latency) per batch",
        "observe(name, value)",
        "count(name)",
        "2 threads: request(latency), one recorder",
    ):
        assert re.search(rf"^  {re.escape(name)} +[\d,]+ ns/iteration, cost +-?[\d,]+ ns$", out, re.M), out
    assert re.search(r"^  flush of one full interval \(drain, encode, write [\d,]+ bytes\): [\d,]+ us", out, re.M), out
    assert {m.group(1) for m in re.finditer(r"^  (emf|off)  \| [\d,]+ ", out, re.M)} == {"emf", "off"}, out
    counted = re.search(r"^  EMF server: (\d+) lines; Requests counted ([\d,]+), answered ([\d,]+)$", out, re.M)
    assert counted and int(counted.group(1)) > 0 and counted.group(2) == counted.group(3), out


def test_emf_overhead_rejects_bad_arguments():
    result = run_script(EMF_OVERHEAD, "--iterations", "0", "--no-server", timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith("--iterations: must be greater than 0, got 0"), result.stderr
