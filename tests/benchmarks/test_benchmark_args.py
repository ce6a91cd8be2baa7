"""benchmarks/loadtest_worker.py refuses a bad argument in one line, exit 2, before it starts anything."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.paths import ROOT


@pytest.mark.parametrize("args, message", [
    (["--rate", "0"], "--rate: must be a number > 0, got 0"),
    (["--seconds", "nan"], "--seconds: must be a number > 0, got nan"),
    (["--slo-ms", "-5"], "--slo-ms: must be a number > 0, got -5"),
])
def test_bad_arguments(args, message):
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "loadtest_worker.py"), *args],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().endswith(message) and len(result.stderr.splitlines()) == 1, result.stderr
