"""serve.py's process lifecycle: readiness after warm-up, graceful SIGTERM drain, core slices,
and command-line errors."""

from __future__ import annotations

import json
import re
import signal
import threading
import time

import pytest
import requests

# serving/ and build/'s flat modules, on the path from conftest.py (ruff would count them third-party).
# isort: split
from artifact import read_metadata

from tests.support.neuron_server import SERVE, idle_connections, run_script

TEXT = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["in flight"]}]}


def test_the_workers_of_a_port_take_turns_so_connections_split_evenly(artifact, start_server):
    # The emulated accelerator (a stand-in: no torch) keeps start-up short; balance does not depend on the model.
    server = start_server(artifact, env={"SERVER_WORKERS": "2"}, args=("--standin-accelerator-ms", "1"))
    server.wait_ready()
    with idle_connections(server, 32) as counts:  # counted on a 33rd connection
        # With one SO_REUSEPORT socket per worker the kernel's hash spread them unevenly (6-10 of 16 each).
        assert len(counts) == 2 and sorted(counts.values()) == [16, 17], counts


def test_warm_up_runs_every_batch_shape_the_batcher_can_form(artifact):
    from runner import ModelRunner

    runner = ModelRunner(artifact, read_metadata(artifact), torch_threads=1)
    model, shapes = runner.forward, []
    runner.forward = lambda ids, mask: (shapes.append(tuple(ids.shape)), model(ids, mask))[1]
    runner.warm_up(iterations=1, max_batch_size=5)
    # The artifact's compiled batch is 2, so 1..5 rows execute as 2, 4 or 6.
    assert {rows for rows, _ in shapes} == {2, 4, 6}
    assert len(shapes) >= 2 * 3


def test_not_ready_until_warm_up_finishes(artifact, start_server):
    # Many warm-up passes keep the worker busy long enough to observe the loading state.
    server = start_server(artifact, env={"SERVER_WARMUP_ITERATIONS": "600", "SERVER_MAX_BATCH_SIZE": "32"})
    seen_loading = False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            live = requests.get(server.url + "/v2/health/live", timeout=2)
        except requests.ConnectionError:
            time.sleep(0.02)
            continue
        if requests.get(server.url + "/v2/health/ready", timeout=2).status_code == 200:
            break
        probes = {
            "live": live.status_code,
            "ping": requests.get(server.url + "/ping").status_code,
            "model_ready": requests.get(server.url + "/v2/models/model/ready").status_code,
            "infer": requests.post(server.url + "/v2/models/model/infer", json=TEXT).status_code,
            "index": requests.post(server.url + "/v2/repository/index", json={}).json()[0]["state"],
        }
        # Readiness only ever turns on, so if it is still off now it was off for every probe.
        if requests.get(server.url + "/v2/health/ready", timeout=2).status_code == 503:
            assert probes == {"live": 200, "ping": 503, "model_ready": 503, "infer": 503, "index": "UNAVAILABLE"}
            seen_loading = True
        time.sleep(0.05)
    else:
        pytest.fail("server never became ready")
    assert seen_loading, "readiness was already true at the first probe"
    # The worker logs "model ready" just after readiness turns on, and a thread here reads its output: the
    # line may arrive a moment after the first 200.
    deadline = time.monotonic() + 10
    while not (warm := [e for e in server.logs() if e.get("msg") == "model ready"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert warm and warm[0]["warmup_s"] > 0
    assert requests.post(server.url + "/v2/models/model/infer", json=TEXT).status_code == 200


def queue_depth(url: str) -> float:
    text = requests.get(url + "/metrics", timeout=2).text
    match = re.search(r"^inference_queue_depth (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def test_sigterm_drains_in_flight_requests_then_exits_0(artifact, start_server):
    # A long queue delay parks requests in the batcher, so they are surely in flight at SIGTERM.
    server = start_server(
        artifact,
        env={
            "SERVER_MAX_QUEUE_DELAY_MS": "1000",
            "SERVER_MAX_BATCH_SIZE": "64",
            "NEURON_RT_VISIBLE_CORES": "0-3",
            "SERVER_WORKERS": "2",
        },
    )
    server.wait_ready()
    # Both workers must be up before traffic, or a request could land on one still loading.
    deadline = time.monotonic() + 60
    while len([e for e in server.logs() if e.get("msg") == "model ready"]) < 2:
        assert time.monotonic() < deadline, "second worker never became ready"
        time.sleep(0.05)
    results: list = []

    def send() -> None:
        try:
            results.append(requests.post(server.url + "/v2/models/model/infer", json=TEXT, timeout=30).status_code)
        except requests.RequestException as exc:
            results.append(repr(exc))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while queue_depth(server.url) < 8:
        assert time.monotonic() < deadline, "requests never queued"
        time.sleep(0.01)
    server.proc.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(30)
    assert server.proc.wait(30) == 0, "\n".join(server.lines)
    assert results == [200] * 8
    with pytest.raises(requests.ConnectionError):
        requests.get(server.url + "/v2/health/live", timeout=2)
    # Each worker loaded the model with its own disjoint slice of the container's cores.
    ready = [e for e in server.logs() if e.get("msg") == "model ready"]
    assert sorted(e["visible_cores"] for e in ready) == ["0-1", "2-3"]
    assert len({e["pid"] for e in ready}) == 2


@pytest.mark.parametrize(
    "args, env, needle",
    [
        (["--port", "http"], {}, "--port"),
        (["--workers", "0"], {}, "--workers"),
        ([], {"SERVER_MAX_QUEUE_DELAY_MS": "soon"}, "SERVER_MAX_QUEUE_DELAY_MS"),
        ([], {"NEURON_RT_VISIBLE_CORES": "0-2", "SERVER_WORKERS": "2"}, "SERVER_WORKERS"),
        (["--log-level", "loud"], {}, "--log-level"),
        (["--bogus"], {}, "--bogus"),
    ],
)
def test_bad_serve_flags_exit_2_in_one_line(artifact, args, env, needle):
    result = run_script(SERVE, "--model-dir", str(artifact), *args, env=env, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr


def test_not_an_artifact(tmp_path):
    for model_dir in (tmp_path / "missing", tmp_path):
        result = run_script(SERVE, "--model-dir", str(model_dir), timeout=60)
        assert result.returncode == 2 and "--model-dir" in result.stderr and "Traceback" not in result.stderr
    (tmp_path / "metadata.json").write_text(json.dumps({"format_version": 99}))
    result = run_script(SERVE, "--model-dir", str(tmp_path), timeout=60)
    assert result.returncode == 2 and "format_version" in result.stderr


def test_a_model_that_fails_to_load_stops_the_server_with_exit_1(artifact, tmp_path, start_server):
    broken = tmp_path / "broken"
    broken.mkdir()
    for item in artifact.iterdir():
        (broken / item.name).write_bytes(item.read_bytes())
    (broken / "model.pt").write_bytes(b"not a torchscript archive")
    server = start_server(broken)
    assert server.proc.wait(60) == 1
    failures = [e for e in server.logs() if e.get("msg") == "model failed to load"]
    assert failures and failures[0]["level"] == "error" and "exc" in failures[0]
    assert any(e.get("msg") == "worker exited unexpectedly; stopping the others" for e in server.logs())
