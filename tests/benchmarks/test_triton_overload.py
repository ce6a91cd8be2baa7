"""benchmarks/triton_overload.py end to end on the real tritonserver, briefly: a row for the policy, the earlier
bound and the baseline, and the burst lines. Figures are printed, never asserted."""

from __future__ import annotations

import re

import pytest

from tests.support.neuron_server import run_script
from tests.support.paths import ROOT

pytestmark = pytest.mark.real_triton

TRITON_OVERLOAD = ROOT / "benchmarks" / "triton_overload.py"


def test_triton_overload_prints_every_row():
    result = run_script(TRITON_OVERLOAD, "--seconds", "0.5", "--burst", "2", timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    rows = re.findall(r"^ +(policy|bound|baseline) \| .* \| +(\d+) +(\d+) +(\d+) +(\d+) +(\d+) \|", out, re.M)
    assert [r[0] for r in rows] == ["policy", "bound", "baseline"], out
    for _, offered, served, _, refused, other in rows:
        assert int(served) + int(refused) == int(offered) and other == "0", out
    assert rows[2][4] == "0", out  # without a policy nothing is refused
    assert len(re.findall(r"^burst of 2 at once", out, re.M)) == 2, out


def test_triton_overload_rejects_bad_arguments():
    result = run_script(TRITON_OVERLOAD, "--slo-ms", "100", "--profile-p99-ms", "200", timeout=60)
    assert result.returncode == 2 and "--profile-p99-ms must be below --slo-ms" in result.stderr, result.stderr
