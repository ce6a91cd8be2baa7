"""benchmarks/event_loop_path.py: the worker's own objects in one process, every SERVER_TEXT_SCAN mode. Asserted: what
the behaviour decides (every request answered 200, checked inside the script; the HTTP front taking every request
in `on` and none otherwise; the figures printed), never a timing."""

from __future__ import annotations

import re

import pytest

from tests.support.neuron_server import run_script
from tests.support.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "event_loop_path.py"
LINE = re.compile(
    r"^SERVER_TEXT_SCAN=(\w+): event loop ([\d.]+) µs per request \(reading up to the batcher ([\d.]+), the replies "
    r"([\d.]+)\); per batch of 16: stacking (\d+) µs, the model call (\d+) µs, its metrics (\d+) µs; taken by the "
    r"HTTP front: (\d+) of (\d+)$",
    re.M,
)


def test_each_mode_is_measured_and_only_on_takes_requests_in_the_front(artifact):
    result = run_script(SCRIPT, "--model-dir", str(artifact), "--cycles", "20", "--warmup", "5", "--rounds", "1")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = {m.group(1): m for m in LINE.finditer(result.stdout)}
    assert sorted(lines) == ["body", "off", "on"], result.stdout
    for mode, line in lines.items():
        total, read, reply = (float(line.group(i)) for i in (2, 3, 4))
        assert read > 0 and reply > 0 and abs(total - (read + reply)) <= 0.02, line.group(0)
        taken, requests = int(line.group(8)), int(line.group(9))
        assert requests == 20 * 16 and taken == (requests if mode == "on" else 0), line.group(0)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--modes", "on,sometimes"], "--modes: a comma-separated list of off, body, on, got 'on,sometimes'"),
        (["--cycles", "0"], "--cycles, --warmup and --rounds must be at least 1"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, message):
    result = run_script(SCRIPT, *args)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].endswith(message), result.stderr
