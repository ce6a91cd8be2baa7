"""run_local's failures: Locust exiting non-zero is one error with its last words; a run past its time is
stopped with every process it started; neither leaves a result, a half-written file or a process behind."""

from __future__ import annotations

import psutil
import pytest

from inferstack.loadtest import runner
from inferstack.loadtest.spec import ExpectedOutput, LoadTestSpec, Step, Target

pytestmark = pytest.mark.loadtest


def spec(seconds: float) -> LoadTestSpec:
    return LoadTestSpec(
        model="m",
        target=Target(kind="http", url="http://127.0.0.1:9/v2/models/m/infer"),
        bodies=({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["hi"]}]},),
        outputs=(ExpectedOutput("logits", "FP32", (1, 2)),),
        steps=(Step(rate=5, seconds=seconds),),
        p99_slo_ms=100.0,
    )


def locust_children() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "locust" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def test_locust_exiting_non_zero_is_one_error_with_its_last_words(tmp_path, monkeypatch):
    broken = tmp_path / "locustfile.py"
    broken.write_text("raise RuntimeError('the locustfile cannot start')\n")
    monkeypatch.setattr(runner, "LOCUSTFILE", broken)
    out = tmp_path / "out"
    with pytest.raises(
        runner.LoadTestError, match=r"^Locust local exited 1: .*RuntimeError: the locustfile cannot start"
    ):
        runner.run_local(spec(5), out, workers=0)
    assert list(out.iterdir()) == [] and locust_children() == []


def test_a_run_past_its_time_is_stopped_with_every_process(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(runner.LoadTestError, match="no result in the time allowed; every Locust process was stopped"):
        runner.run_local(spec(60), out, workers=2, timeout=4)
    assert list(out.iterdir()) == [] and locust_children() == []
