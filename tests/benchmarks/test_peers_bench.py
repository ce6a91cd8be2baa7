"""benchmarks/peers.py end to end on the tiny artifact with the emulated accelerator (a stand-in for a
NeuronCore): serve.py runs, and a peer whose side environment is missing is skipped with a line saying why
and how to install it. Figures are printed, never asserted."""

from __future__ import annotations

import re

from tests.support.neuron_server import run_script
from tests.support.paths import ROOT

PEERS = ROOT / "benchmarks" / "peers.py"


def test_peers_runs_serve_py_and_skips_a_peer_without_its_environment(artifact, tmp_path):
    result = run_script(
        PEERS,
        "--model-dir",
        str(artifact),
        "--phases",
        "emulated",
        "--concurrency",
        "2",
        "--rounds",
        "1",
        "--duration",
        "0.3",
        "--warmup",
        "0.1",
        "--paced",
        "0.5",
        "--peers-venv",
        str(tmp_path / "none"),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    missing = f"skipped: no side environment at {tmp_path / 'none'} (make .make/peers)"
    assert f"[emulated] torchserve: {missing}" in out and f"[emulated] triton: {missing}" in out, out
    row = re.search(r"^serve\.py\s+2 \|\s+[\d,]+\s+\d+% \|.*\|\s+0 \| [\d,]+$", out, re.M)
    assert row, out
    assert re.search(r"^  (met   |MISSED) >= 70% of the limit at 2 connections: \d+%$", out, re.M), out
    assert "(TorchServe skipped: no ratio)" in out
