"""The serving container's CloudWatch metrics over real HTTP: EMF lines on stdout from every worker (per
model, per worker) and from neuron-monitor (per model, per task), checked against the EMF specification's
schema and against what the client sent.

One scenario runs once per session (shared between xdist workers) and the tests read what it recorded:
2 workers, a 1 s metrics interval, requests while the model loads (503), a few hundred concurrent
requests, neuron-monitor killed mid-run, more requests, SIGTERM. neuron-monitor needs Inferentia, so its
place is taken by tests/support/neuron_monitor_standin.py, a stand-in that prints the documented report
layout for the processes beside it that carry NEURON_PROCESS_TAG.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

# serving/ and build/'s flat modules, on the path from conftest.py (ruff would count them third-party).
# isort: split
import emf
import neuron_monitor_emf
import server_settings

from tests.support.build_once import build_once
from tests.support.emf_schema import assert_valid_emf
from tests.support.neuron_server import NEURON_MONITOR_STANDIN, SERVE, ServerProcess, neuron_monitor_standin, run_script

MODEL = "intent-bert"
SERVICE = "test-intent-bert"
LOAD_REQUESTS = 300
BAD_REQUESTS = 10
AFTER_KILL_REQUESTS = 40


def text_body(text: str) -> dict:
    return {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [text]}]}


def emf_records(lines: list[str]) -> list[dict]:
    return [json.loads(line) for line in lines if '"_aws"' in line]


def wait_for(condition, what: str, server: ServerProcess, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        assert server.proc.poll() is None, "server exited:\n" + "\n".join(server.lines)
        time.sleep(0.05)
    raise AssertionError(f"never saw {what}:\n" + "\n".join(server.lines))


def logged(server: ServerProcess, message: str) -> list[dict]:
    return [e for e in server.logs() if e.get("msg") == message]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def run_scenario(artifact: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    env = {
        "MODEL_NAME": MODEL,
        "SERVER_WORKERS": "2",
        "NEURON_RT_VISIBLE_CORES": "0-1",
        "SERVER_METRICS_INTERVAL_S": "1",
        "SERVER_METRICS_SERVICE": SERVICE,
        "SERVER_NEURON_MONITOR": str(neuron_monitor_standin(target)),
        "SERVER_MAX_BATCH_SIZE": "16",
        "SERVER_MAX_QUEUE_DELAY_MS": "20",
        "SERVER_WARMUP_ITERATIONS": "1",
    }
    server = ServerProcess(artifact, env=env, separate_stdout=True)
    url = f"{server.url}/v2/models/{MODEL}/infer"
    statuses: Counter = Counter()
    facts: dict = {}
    try:
        # While the model loads, inference is 503: a server error the metrics must count.
        early = 0
        while len(logged(server, "model ready")) < 2:
            statuses[
                requests.post(server.url + "/invocations", json=text_body("too early"), timeout=30).status_code
            ] += 1
            early += 1
            assert server.proc.poll() is None, "\n".join(server.lines)
            time.sleep(0.05)
        facts["early"] = early
        server.wait_ready()

        def one(i: int) -> int:
            if i < BAD_REQUESTS:  # 400: counted as a request, not as a server error
                return requests.post(url, json={"inputs": [{"name": "TEXT"}]}, timeout=60).status_code
            target_url = server.url + "/invocations" if i % 3 == 0 else url
            return requests.post(target_url, json=text_body(f"request {i} about a film"), timeout=60).status_code

        with ThreadPoolExecutor(32) as pool:
            statuses.update(pool.map(one, range(LOAD_REQUESTS)))

        (first,) = logged(server, "neuron-monitor started")
        os.kill(first["monitor_pid"], signal.SIGKILL)
        facts["killed_at_ms"] = int(time.time() * 1000)
        wait_for(lambda: len(logged(server, "neuron-monitor started")) == 2, "neuron-monitor restarted", server)
        with ThreadPoolExecutor(8) as pool:
            after_kill = list(
                pool.map(
                    lambda i: requests.post(url, json=text_body(f"after {i}"), timeout=60).status_code,
                    range(AFTER_KILL_REQUESTS),
                )
            )
        statuses.update(after_kill)
        facts["after_kill"] = after_kill

        def utilization_after_kill() -> bool:
            return any(
                neuron_monitor_emf.NEURONCORE_UTILIZATION in r and r["_aws"]["Timestamp"] > facts["killed_at_ms"]
                for r in emf_records(list(server.stdout_lines))
            )

        wait_for(utilization_after_kill, "neuron-monitor's metrics after its restart", server)
        facts["monitor_pids"] = [e["monitor_pid"] for e in logged(server, "neuron-monitor started")]
    except BaseException:
        server.kill()
        raise
    facts["exit_code"] = server.stop()
    server.finish_reading()
    facts["monitors_alive_after_exit"] = [pid for pid in facts["monitor_pids"] if alive(pid)]
    facts["statuses"] = {str(status): count for status, count in statuses.items()}
    (target / "facts.json").write_text(json.dumps(facts))
    (target / "stdout.txt").write_text("\n".join(server.stdout_lines) + "\n")
    (target / "stderr.txt").write_text("\n".join(server.lines) + "\n")


class Scenario:
    def __init__(self, directory: Path) -> None:
        self.facts = json.loads((directory / "facts.json").read_text())
        self.stdout = (directory / "stdout.txt").read_text().splitlines()
        self.logs = [
            json.loads(line) for line in (directory / "stderr.txt").read_text().splitlines() if line.startswith("{")
        ]
        self.records = emf_records(self.stdout)
        self.statuses = {int(status): count for status, count in self.facts["statuses"].items()}
        self.sent = sum(self.statuses.values())

    def serving(self) -> list[dict]:
        return [r for r in self.records if "Worker" in r]

    def neuron(self) -> list[dict]:
        return [r for r in self.records if neuron_monitor_emf.NEURONCORE_UTILIZATION in r]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory, artifact) -> Scenario:
    return Scenario(build_once(tmp_path_factory, "emf-scenario", lambda target: run_scenario(artifact, target)))


def test_every_stdout_line_is_one_valid_emf_record_within_pipe_buf(scenario):
    assert scenario.facts["exit_code"] == 0
    assert scenario.stdout and len(scenario.records) == len(scenario.stdout), "stdout holds something not EMF"
    for line, record in zip(scenario.stdout, scenario.records, strict=True):
        assert_valid_emf(record)
        assert len(line) + 1 <= emf.MAX_LINE_BYTES
        assert record["_aws"]["CloudWatchMetrics"][0]["Namespace"] == emf.NAMESPACE
    # Logs stay on stderr.
    assert any(e.get("msg") == "model ready" for e in scenario.logs)


def test_every_request_sent_is_counted_once_and_every_5xx_as_a_server_error(scenario):
    serving = scenario.serving()
    assert scenario.sent == scenario.facts["early"] + LOAD_REQUESTS + AFTER_KILL_REQUESTS
    assert scenario.statuses[400] == BAD_REQUESTS and scenario.statuses[503] >= 1, scenario.statuses
    assert set(scenario.statuses) == {200, 400, 503}, scenario.statuses
    assert sum(r[emf.REQUESTS] for r in serving) == scenario.sent
    assert sum(r[emf.ERRORS] for r in serving) == scenario.statuses[503]
    # Every interval of every worker says how many, zero included: idle is not missing data.
    assert all(emf.REQUESTS in r and emf.ERRORS in r for r in serving)
    latencies = [v for r in serving for v in r.get(emf.REQUEST_LATENCY, [])]
    assert 0 < len(latencies) <= scenario.sent and all(v >= 0 for v in latencies)
    assert all(len(r.get(emf.REQUEST_LATENCY, [])) <= emf.MAX_VALUES for r in serving)


def test_per_model_and_per_worker_dimensions(scenario):
    serving = scenario.serving()
    assert {r["Worker"] for r in serving} == {"0", "1"}
    assert {(r["Service"], r["Model"]) for r in serving} == {(SERVICE, MODEL)}
    for record in serving:
        directive = record["_aws"]["CloudWatchMetrics"][0]
        assert directive["Dimensions"] == [list(keys) for keys in emf.DIMENSION_SETS]
        assert {m["Name"]: m["Unit"] for m in directive["Metrics"]} == {
            name: emf.UNITS[name] for name in record if name in emf.UNITS
        }
    # Both workers took requests.
    assert all(sum(r[emf.REQUESTS] for r in serving if r["Worker"] == w) > 0 for w in ("0", "1"))


def test_batches_show_batching_and_the_gauges_are_sampled(scenario):
    serving = scenario.serving()
    sizes = [v for r in serving for v in r.get(emf.BATCH_SIZE, [])]
    assert sizes and max(sizes) > 1, f"no batch of more than one row under concurrency: {sizes}"
    assert all(1 <= v <= 16 for v in sizes)
    assert any(r.get(emf.INFERENCE_LATENCY) for r in serving)
    for gauge in (emf.QUEUE_DEPTH, emf.IN_FLIGHT):
        samples = [v for r in serving for v in r.get(gauge, [])]
        assert samples and all(v >= 0 for v in samples), gauge
    assert sum(1 for r in serving if emf.QUEUE_DEPTH in r) >= 4  # sampled every second, both workers


def test_neuron_monitor_reports_per_model_and_per_task(scenario):
    neuron = scenario.neuron()
    per_model = [r for r in neuron if "Model" in r]
    per_task = [r for r in neuron if "Model" not in r]
    assert per_model and per_task
    for record in neuron:
        assert_valid_emf(record)
        assert record["Service"] == SERVICE
    # The workers tagged their runtimes "<model>/<index>" and each one's cores are its own slice of 0-1.
    assert {r["Model"] for r in per_model} == {MODEL}
    assert all(sorted(r[neuron_monitor_emf.NEURONCORE_UTILIZATION]) == [50.0, 51.0] for r in per_model)
    assert all(r[neuron_monitor_emf.DEVICE_MEMORY_USED] == 2_000_000 for r in neuron)
    assert per_model[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Service", "Model"]]
    assert per_task[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Service"]]


def test_killing_neuron_monitor_does_not_stop_serving(scenario):
    facts = scenario.facts
    assert facts["after_kill"] == [200] * AFTER_KILL_REQUESTS
    (exited,) = [e for e in scenario.logs if e.get("msg") == "neuron-monitor exited; serving goes on, restarting it"]
    assert exited["exit_code"] == -signal.SIGKILL and exited["restart_in_s"] == 1.0
    first, second = facts["monitor_pids"]
    assert exited["monitor_pid"] == first != second
    assert any(r["_aws"]["Timestamp"] > facts["killed_at_ms"] for r in scenario.neuron())
    # SIGTERM stopped it with the workers; the container exited 0.
    assert facts["monitors_alive_after_exit"] == [] and facts["exit_code"] == 0
    assert not [e for e in scenario.logs if e.get("level") == "error"]


def test_metrics_off_writes_nothing_to_stdout_and_starts_no_neuron_monitor(artifact, tmp_path):
    env = {
        "SERVER_METRICS": "off",
        "SERVER_METRICS_INTERVAL_S": "1",
        "SERVER_WARMUP_ITERATIONS": "1",
        "SERVER_NEURON_MONITOR": str(neuron_monitor_standin(tmp_path)),
    }
    server = ServerProcess(artifact, env=env, separate_stdout=True)
    try:
        server.wait_ready()
        for i in range(5):
            assert (
                requests.post(server.url + "/invocations", json=text_body(f"quiet {i}"), timeout=60).status_code == 200
            )
        time.sleep(2.5)  # two intervals
    finally:
        assert server.stop() == 0
    server.finish_reading()
    assert server.stdout_lines == []
    assert not logged(server, "neuron-monitor started") and logged(server, "model ready")


@pytest.mark.parametrize(
    "args, env, expected",
    [
        ((), {"SERVER_METRICS": "prometheus"}, "--metrics (SERVER_METRICS): must be emf or off, got 'prometheus'"),
        (
            (),
            {"SERVER_METRICS_INTERVAL_S": "0"},
            "--metrics-interval-s (SERVER_METRICS_INTERVAL_S): must be between 1 and 3600, got 0",
        ),
        (
            (),
            {"SERVER_METRICS_INTERVAL_S": "1.5"},
            "--metrics-interval-s (SERVER_METRICS_INTERVAL_S): expected an integer, got '1.5'",
        ),
        (
            ("--metrics-interval-s", "3601"),
            {},
            "--metrics-interval-s (SERVER_METRICS_INTERVAL_S): must be between 1 and 3600, got 3601",
        ),
        (
            (),
            {"SERVER_METRICS_SERVICE": "caf\u00e9"},
            "--metrics-service (SERVER_METRICS_SERVICE): a metrics dimension",
        ),
        ((), {"SERVER_METRICS_SERVICE": " padded"}, "--metrics-service (SERVER_METRICS_SERVICE): a metrics dimension"),
        (("--metrics-service", "x" * 1025), {}, "--metrics-service (SERVER_METRICS_SERVICE): a metrics dimension"),
        ((), {"MODEL_NAME": "mod\u00e8le"}, "--model-name (MODEL_NAME): a metrics dimension (--metrics emf) must be"),
        (
            (),
            {"SERVER_NEURON_MONITOR": "/nonexistent/neuron-monitor"},
            "--neuron-monitor (SERVER_NEURON_MONITOR): '/nonexistent/neuron-monitor' is not an executable file",
        ),
        (
            (),
            {"SERVER_NEURON_MONITOR": str(NEURON_MONITOR_STANDIN)},  # a file, but not executable
            "--neuron-monitor (SERVER_NEURON_MONITOR): ",
        ),
    ],
)
def test_bad_metrics_settings_exit_2_in_one_line(artifact, args, env, expected):
    result = run_script(SERVE, "--model-dir", str(artifact), "--host", "127.0.0.1", *args, env=env, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("serve.py: error: " + expected), result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def settings_for(artifact: Path, environ: dict) -> server_settings.ServerSettings:
    args = server_settings.argparse.Namespace(
        **{name: None for name in server_settings.ENVIRONMENT}, model_dir=str(artifact), host="127.0.0.1"
    )
    return server_settings.from_args(args, environ)


def test_neuron_monitor_defaults_to_the_images_and_off_turns_it_off(artifact, tmp_path, monkeypatch):
    installed = neuron_monitor_standin(tmp_path)
    monkeypatch.setattr(server_settings, "DEFAULT_NEURON_MONITOR", installed)
    assert settings_for(artifact, {}).neuron_monitor == installed
    assert settings_for(artifact, {"SERVER_NEURON_MONITOR": "off"}).neuron_monitor is None
    assert settings_for(artifact, {"SERVER_METRICS": "off"}).neuron_monitor is None
    monkeypatch.setattr(server_settings, "DEFAULT_NEURON_MONITOR", tmp_path / "absent")
    assert settings_for(artifact, {}).neuron_monitor is None
    defaults = settings_for(artifact, {"MODEL_NAME": "intent"})
    assert (defaults.metrics, defaults.metrics_service, defaults.metrics_interval_s) == (True, "intent", 60)


def test_a_model_name_need_not_be_a_dimension_value_with_metrics_off(artifact):
    settings = settings_for(artifact, {"SERVER_METRICS": "off", "MODEL_NAME": "mod\u00e8le"})
    assert settings.metrics is False and settings.model_name == "mod\u00e8le"
