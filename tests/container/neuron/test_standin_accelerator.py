"""The emulated accelerator (standin_accelerator.py) is a stand-in for benchmarks and tests: it answers
like the model, holds a batch for its fixed time (asleep, without the GIL), and nothing deployed can reach it (no
environment variable turns it on, and the images' build context leaves the file out)."""

from __future__ import annotations

import numpy as np
import pytest

# serving/ and build/'s flat modules, on the path from conftest.py (ruff would count them third-party).
# isort: split
import server_settings
import standin_accelerator
from standin_accelerator import StandinAccelerator

from rehearsal import image_build
from tests.support.neuron_server import NEURON_DIR, SERVE, run_script


def test_it_answers_shaped_like_the_model_one_answer_per_row():
    ids = np.array([[2, 10, 11, 3], [2, 12, 3, 0], [2, 10, 11, 3]], dtype=np.int64)
    mask = (ids != 0).astype(np.int64)
    logits = StandinAccelerator(0, labels=3)(ids, mask)
    assert logits.shape == (3, 3) and logits.dtype == np.float32
    assert (logits[0] == logits[2]).all() and not (logits[0] == logits[1]).all()


@pytest.mark.parametrize("rows, calls", [(1, 1), (4, 1), (5, 2), (8, 2), (9, 3)])
def test_a_batch_sleeps_its_time_per_started_group_of_rows(monkeypatch, rows, calls):
    # On a frozen clock: what it asks time.sleep for (which releases the GIL, as the Neuron runtime's
    # wait for the device does) is the batch time per started group of rows_per_call rows.
    slept: list[float] = []
    monkeypatch.setattr(standin_accelerator.time, "perf_counter", lambda: 50.0)
    monkeypatch.setattr(standin_accelerator.time, "sleep", slept.append)
    ids = np.ones((rows, 4), dtype=np.int64)
    StandinAccelerator(3, labels=2, rows_per_call=4)(ids, ids)
    assert slept == [pytest.approx(0.003 * calls)]


def test_nothing_deployed_can_turn_it_on():
    # The flag is serve.py's alone: no environment variable (what a task definition sets) maps to it.
    assert not any("STANDIN" in variable for variable, _ in server_settings.ENVIRONMENT.values())
    context = image_build.exclude_paths(
        str(NEURON_DIR), image_build.ignore_patterns(NEURON_DIR / ".dockerignore"), dockerfile="Dockerfile.inf2"
    )
    assert "serving/serve.py" in context and "serving/runner.py" in context
    assert not any(path.endswith("standin_accelerator.py") for path in context)


def test_the_hidden_flag_is_checked(artifact):
    result = run_script(SERVE, "--model-dir", str(artifact), "--standin-accelerator-ms", "soon", timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == "serve.py: error: --standin-accelerator-ms: expected a number, got 'soon'"


@pytest.mark.parametrize("flag", ["--help"])
def test_help_does_not_offer_it(flag):
    result = run_script(SERVE, flag, timeout=60)
    assert result.returncode == 0 and "standin" not in result.stdout
