"""Steps above the full rate, through the real Locust (one local generator) and the CLI: a server with eight
service slots of 20 ms each (400 req/s) offered 60, 120 and then 480 req/s (4 x a 120 req/s full rate, which
leaves the slots room for a loaded machine's scheduling up to the full rate).
One that sheds what it cannot start at once (503 with Retry-After) keeps its goodput and its admitted requests'
p99: pass, with the rejections counted. One that queues the excess instead drowns: every request waits longer
than the last, its goodput collapses, and the overload step fails it. The first run also sends a payload file's
three requests in turn, and the server sees each of them in equal shares."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from inferstack.loadtest.results import FAIL, PASS, RunResult
from tests.support.neuron_server import LABELS
from tests.support.paths import ROOT
from tests.support.pausing_server import REPLY
from tests.support.threaded_server import JsonHandler, serving

pytestmark = pytest.mark.loadtest
MODEL = "intent-bert"
SLOTS, SERVICE_S = 8, 0.020  # 400 req/s at most
FULL_RATE = 120
OVERLOAD = 4  # x the full rate: 480 req/s
SLO_MS = 100.0
TEXTS = ("book a flight to Lisbon", "cancel my order", "what is my balance")


def server_handler(shed: bool, seen: Counter):
    slots = threading.BoundedSemaphore(SLOTS)

    class Handler(JsonHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            seen[body["inputs"][0]["data"][0]] += 1
            if not slots.acquire(blocking=not shed):
                self.reply(503, b'{"error": "overloaded"}', {"Retry-After": "1"})
                return
            try:
                time.sleep(SERVICE_S)
            finally:
                slots.release()
            self.reply(200, REPLY)

    return Handler


def run(config_dir: Path, shed: bool, out: Path, payload: Path | None = None) -> tuple[RunResult, Counter, str]:
    seen: Counter = Counter()
    with serving(server_handler(shed, seen)) as port:
        completed = subprocess.run(
            [
                sys.executable,
                "-m",
                "inferstack",
                "loadtest",
                "--model",
                MODEL,
                "--env",
                "dev",
                "--config-dir",
                str(config_dir),
                "--target",
                f"http://127.0.0.1:{port}",
                "--rate",
                str(FULL_RATE),
                "--steps",
                f"0.5,1,{OVERLOAD}",
                "--hold",
                "4",
                "--timeout",
                "5",
                "--out",
                str(out),
                *(["--payload", str(payload)] if payload else []),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert (out / "result.json").exists(), completed.stdout + completed.stderr
    return RunResult.from_json((out / "result.json").read_text()), seen, completed.stdout


@pytest.fixture(scope="module")
def config_dir(tmp_path_factory) -> Path:
    import shutil

    directory = tmp_path_factory.mktemp("overload") / "model_configs"
    shutil.copytree(ROOT / "model_configs", directory)
    path = directory / f"{MODEL}.yaml"
    data = yaml.safe_load(path.read_text())
    data["source"]["labels"] = list(LABELS)
    data["environments"]["dev"]["slo"] = {**data["environments"]["dev"].get("slo", {}), "p99_latency_ms": SLO_MS}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return directory


def test_a_server_that_sheds_the_excess_holds_its_goodput_and_passes(config_dir, tmp_path):
    payload = tmp_path / "mix.jsonl"
    payload.write_text(
        "".join(
            json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [text]}]}) + "\n"
            for text in TEXTS
        )
    )
    result, seen, stdout = run(config_dir, shed=True, out=tmp_path / "out", payload=payload)
    assert result.verdict == PASS, stdout
    below, full, over = result.steps
    assert below.rejected == full.rejected == 0
    assert over.offered_rps == OVERLOAD * FULL_RATE and over.rejected > 0.05 * over.offered
    assert over.p99_ms <= SLO_MS and over.goodput_rps >= 0.95 * FULL_RATE
    assert over.errors == {"HTTP 503": over.rejected} and over.failures == over.rejected
    assert "overload held" in stdout
    # The payload's requests in turn: each a third of what the server saw, within a request or two.
    total = sum(seen.values())
    assert set(seen) == set(TEXTS) and all(abs(count - total / 3) <= 2 for count in seen.values()), seen


def test_a_server_that_queues_the_excess_loses_its_goodput_and_fails(config_dir, tmp_path):
    result, _, stdout = run(config_dir, shed=False, out=tmp_path / "out")
    assert result.verdict == FAIL, stdout
    below, full, over = result.steps
    assert result.step_held(below) and result.step_held(full)
    assert over.rejected == 0 and over.p99_ms > SLO_MS and over.goodput_rps < 0.95 * FULL_RATE
    assert result.reasons[-1] == (
        f"step 3 (480 req/s, 400 %): goodput {over.goodput_rps:.1f} req/s within the "
        f"SLO, below the full rate's {FULL_RATE}"
    )
    assert "overload not held" in stdout
