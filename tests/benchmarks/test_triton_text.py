"""benchmarks/triton_text.py end to end on the real tritonserver, briefly (the classifier only: T5's ensemble
answers are checked in tests/container/triton/test_text_ensemble.py): a row per load and path (ensemble,
client-side) and their difference, every request answered 200, and both paths giving the same answers. Figures
are printed, never asserted."""

from __future__ import annotations

import re

import pytest

from tests.support.neuron_server import run_script
from tests.support.paths import ROOT

pytestmark = pytest.mark.real_triton

TRITON_TEXT = ROOT / "benchmarks" / "triton_text.py"
ROW = re.compile(
    r"^ *(closed c=\d+|paced [\d.]+/s) \| (ensemble|client-side|difference) +\| +(\d*) +(\d*) +(\d*) \|", re.MULTILINE
)


def test_triton_text_prints_both_paths_at_every_load_and_every_request_is_answered(tmp_path):
    result = run_script(
        TRITON_TEXT,
        "--models",
        "bert-large-classifier",
        "--concurrency",
        "1,3",
        "--seconds",
        "0.5",
        "--texts",
        "2",
        "--work",
        str(tmp_path),
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "load generator: one Python process (threads) on this machine" in out, out
    sections = re.split(r"^\n(?=\S)", out, flags=re.MULTILINE)[1:]
    assert [s.split(" ", 1)[0] for s in sections] == ["bert-large-classifier"], out
    for section in sections:
        assert "both paths give the same answers for 10 requests: yes" in section, section
        rows = ROW.findall(section)
        loads = list(dict.fromkeys(load for load, *_ in rows))
        assert loads[:2] == ["closed c=1", "closed c=3"] and len(loads) == 3 and loads[2].startswith("paced "), section
        assert [(load, path) for load, path, *_ in rows] == [
            (load, path) for load in loads for path in ("ensemble", "client-side", "difference")
        ], section
        for load, path, requests, answered, other in rows:
            if path != "difference":
                assert int(requests) > 0 and answered == requests and other == "0", (load, path, section)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--concurrency", "1,0"], "--concurrency: a comma-separated list of positive integers, got '1,0'"),
        (["--seconds", "nan"], "--seconds: must be a float > 0, got nan"),
        (
            ["--models", "bert"],
            "--models: not a shipped Triton model: 'bert' (models: bert-large-classifier, t5-spelling)",
        ),
        (
            ["--texts", "17", "--models", "bert-large-classifier"],
            "--texts: at most 16 (the max_batch_size of bert-large-classifier), got 17",
        ),
        (["--paced-fraction", "1.5"], "--paced-fraction: must be within (0, 1], got 1.5"),
    ],
)
def test_triton_text_rejects_bad_arguments_in_one_line(args, message):
    result = run_script(TRITON_TEXT, *args, timeout=120)
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    assert result.stderr.strip().endswith(message) and len(result.stderr.splitlines()) == 1, result.stderr
