"""Several models packed into one container: compile.py --models-json (the MODELS build arg) and one
serve.py supervisor with SERVER_MODELS, over real HTTP with real torch on the CPU backend.

Two tiny BERTs with different labels are compiled in one step; the server runs alpha with two
workers on cores 0-1 and beta with one on cores 2-3, each on its own loopback port. One server is
shared by the module; the last test stops it. Every SERVER_MODELS and MODELS rejection is one
line on stderr and exit 2, with nothing started or written.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests

from tests.support.emf_schema import assert_valid_emf
from tests.support.neuron_server import (
    COMPILE,
    HEALTHCHECK,
    LABELS,
    SEQUENCE_LENGTH,
    SERVE,
    ServerProcess,
    neuron_monitor_standin,
    reference_logits,
    run_script,
)
from tests.support.packed_models import BETA_LABELS, free_ports, server_models

PACK_SERVICE = "test-pack"


def text_body(texts: list[str]) -> dict:
    return {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts)], "data": texts}]}


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def worker_started(server: ServerProcess, model: str, timeout: float = 30) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        started = [e for e in server.logs() if e.get("msg") == "worker started" and e.get("model") == model]
        if started:
            return started
        time.sleep(0.002)
    raise AssertionError(f"no worker of {model} started:\n" + "\n".join(server.lines))


def wait_status(url: str, status: int, server: ServerProcess, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.proc.poll() is None, "server exited:\n" + "\n".join(server.lines)
        try:
            if requests.get(url, timeout=2).status_code == status:
                return
        except (requests.ConnectionError, requests.Timeout):
            pass
        time.sleep(0.05)
    raise AssertionError(f"{url} never answered {status}:\n" + "\n".join(server.lines))


@pytest.fixture(scope="module")
def server(packed_artifact, tmp_path_factory):
    """The packed server, started with beta's only worker held back (SIGSTOP) until alpha is ready,
    so the readiness a port reports while another model is still loading is observed, not raced.
    Its metrics: every second, and neuron-monitor's stand-in (the real one needs Inferentia)."""
    alpha_port, beta_port = free_ports(2)
    env = {
        "SERVER_MODELS": json.dumps(server_models(alpha_port, beta_port)),
        "SERVER_WARMUP_ITERATIONS": "1",
        "SERVER_METRICS_SERVICE": PACK_SERVICE,
        "SERVER_METRICS_INTERVAL_S": "1",
        "SERVER_NEURON_MONITOR": str(neuron_monitor_standin(tmp_path_factory.mktemp("neuron-monitor"))),
    }
    proc = ServerProcess(packed_artifact, env=env, port=None)
    proc.ports = {"alpha": alpha_port, "beta": beta_port}
    proc.urls = {name: f"http://127.0.0.1:{port}" for name, port in proc.ports.items()}
    proc.env = env
    try:
        (beta_worker,) = worker_started(proc, "beta")
        os.kill(beta_worker["worker_pid"], signal.SIGSTOP)
        alpha = proc.urls["alpha"]
        try:
            wait_status(alpha + "/v2/models/alpha/ready", 200, proc)
            proc.while_beta_loads = {
                "alpha_ready": requests.get(alpha + "/v2/models/alpha/ready").status_code,
                "ping": requests.get(alpha + "/ping").status_code,
                "ping_error": requests.get(alpha + "/ping").json()["error"],
                "health_ready": requests.get(alpha + "/v2/health/ready").status_code,
                "index": requests.post(alpha + "/v2/repository/index", json={}).json(),
                "index_ready": requests.post(alpha + "/v2/repository/index", json={"ready": True}).json(),
                "infer": requests.post(alpha + "/v2/models/alpha/infer", json=text_body(["early"])).status_code,
            }
        finally:
            os.kill(beta_worker["worker_pid"], signal.SIGCONT)
        for url in proc.urls.values():
            wait_status(url + "/ping", 200, proc)
    except BaseException:
        proc.kill()
        raise
    yield proc
    if proc.proc.poll() is None:
        assert proc.stop() == 0, "\n".join(proc.lines)


def test_compile_writes_one_artifact_per_model(packed_artifact, packed_models):
    assert sorted(p.name for p in packed_artifact.iterdir()) == ["alpha", "beta", "gamma"]
    for entry in packed_models:
        metadata = json.loads((packed_artifact / entry["name"] / "metadata.json").read_text())
        assert metadata["model_source"] == entry["model"] and metadata["sequence_length"] == SEQUENCE_LENGTH
        assert metadata["batch_size"] == entry.get("batch_size", 1)
        assert metadata["neuron_cores_per_model"] == entry.get("neuron_cores", 1)
    assert json.loads((packed_artifact / "beta" / "metadata.json").read_text())["labels"] == list(BETA_LABELS)
    stdout = (packed_artifact.parent / "stdout.txt").read_text().splitlines()
    assert [line.rsplit(" -> ", 1)[1] for line in stdout] == [
        str(packed_artifact / n) for n in ("alpha", "beta", "gamma")
    ]


def test_ping_is_503_on_every_port_until_every_model_is_ready(server):
    seen = server.while_beta_loads
    # alpha alone is ready and serves, but the container is not: beta is still loading.
    assert seen["alpha_ready"] == 200 and seen["infer"] == 200
    assert (seen["ping"], seen["health_ready"]) == (503, 503)
    assert seen["ping_error"] == "waiting for every worker of 'beta'"
    assert seen["index"] == [
        {"name": "alpha", "version": "1", "state": "READY"},
        {"name": "beta", "version": "1", "state": "UNAVAILABLE", "reason": "0 of 1 workers ready"},
    ]
    assert seen["index_ready"] == [{"name": "alpha", "version": "1", "state": "READY"}]
    for name, url in server.urls.items():
        assert requests.get(url + "/ping").json() == {"status": "healthy"}
        assert requests.get(url + "/v2/health/ready").status_code == 200
        assert requests.get(f"{url}/v2/models/{name}/ready").json() == {"name": name, "ready": True}
        assert requests.post(url + "/v2/repository/index", json={}).json() == [
            {"name": "alpha", "version": "1", "state": "READY"},
            {"name": "beta", "version": "1", "state": "READY"},
        ]


def test_each_port_serves_its_own_model(server, packed_artifact):
    texts = ["a wonderful little film", "dull", "the plot makes no sense at all"]
    for name, labels in (("alpha", LABELS), ("beta", BETA_LABELS)):
        url = server.urls[name]
        meta = requests.get(f"{url}/v2/models/{name}").json()
        assert meta["name"] == name
        assert {o["name"]: o["shape"] for o in meta["outputs"]} == {"logits": [-1, len(labels)], "label": [-1]}
        v2 = requests.post(f"{url}/v2/models/{name}/infer", json=text_body(texts))
        sagemaker = requests.post(url + "/invocations", json=text_body(texts))
        assert v2.status_code == 200 and sagemaker.status_code == 200, v2.text
        reply = v2.json()
        assert reply["model_name"] == name and sagemaker.json()["outputs"] == reply["outputs"]
        outputs = {o["name"]: o for o in reply["outputs"]}
        want = reference_logits(packed_artifact / name, texts)
        np.testing.assert_allclose(
            np.array(outputs["logits"]["data"]).reshape(outputs["logits"]["shape"]), want, atol=1e-5
        )
        assert outputs["label"]["data"] == [labels[i] for i in want.argmax(axis=1)]


def test_a_model_asked_on_the_wrong_port_is_404_naming_its_port(server):
    alpha, beta = server.urls["alpha"], server.urls["beta"]
    for response, asked, served in (
        (requests.post(alpha + "/v2/models/beta/infer", json=text_body(["x"])), "beta", "alpha"),
        (requests.get(alpha + "/v2/models/beta/ready"), "beta", "alpha"),
        (requests.get(beta + "/v2/models/alpha"), "alpha", "beta"),
        (requests.post(beta + "/v2/models/alpha/versions/1/infer", json=text_body(["x"])), "alpha", "beta"),
    ):
        assert response.status_code == 404
        port = server.ports[asked]
        assert response.json() == {"error": f"model '{asked}' is served on port {port}; this port serves '{served}'"}
    unknown = requests.post(alpha + "/v2/models/gamma/infer", json=text_body(["x"]))
    assert unknown.status_code == 404 and unknown.json() == {
        "error": "model 'gamma' not found; this server serves 'alpha'"
    }


def test_each_model_batches_on_its_own(server):
    alpha, beta = server.urls["alpha"], server.urls["beta"]
    before = {name: requests.get(url + "/metrics").text for name, url in server.urls.items()}

    def one(i: int) -> int:
        return requests.post(alpha + "/v2/models/alpha/infer", json=text_body([f"request number {i}"])).status_code

    with ThreadPoolExecutor(16) as pool:
        statuses = list(pool.map(one, range(64)))
    assert statuses == [200] * 64
    after = {name: requests.get(url + "/metrics").text for name, url in server.urls.items()}
    # alpha's two workers share one metrics directory, so either worker's /metrics counts both.
    batches = metric(after["alpha"], "inference_batch_size_count") - metric(
        before["alpha"], "inference_batch_size_count"
    )
    rows = metric(after["alpha"], "inference_batch_size_sum") - metric(before["alpha"], "inference_batch_size_sum")
    assert rows == 64 and batches < rows, f"{rows} rows ran in {batches} batches: no batching happened"
    assert metric(after["beta"], "inference_batch_size_count") == metric(before["beta"], "inference_batch_size_count")
    assert requests.get(beta + "/metrics").status_code == 200


def test_each_worker_loaded_its_own_slice_of_its_models_cores(server):
    ready = [e for e in server.logs() if e.get("msg") == "model ready"]
    assert sorted((e["model"], e["visible_cores"]) for e in ready) == [("alpha", "0"), ("alpha", "1"), ("beta", "2-3")]
    assert len({e["pid"] for e in ready}) == 3
    started = {(e["model"], e["port"]) for e in server.logs() if e.get("msg") == "worker started"}
    assert started == {("alpha", server.ports["alpha"]), ("beta", server.ports["beta"])}


def test_the_image_healthcheck_probes_the_first_models_port(server):
    ok = run_script(HEALTHCHECK, "/ping", env={"SERVER_MODELS": server.env["SERVER_MODELS"]}, timeout=30)
    assert ok.returncode == 0, ok.stderr
    (closed,) = free_ports(1)
    refused = run_script(HEALTHCHECK, "/ping", env={"SERVER_MODELS": "", "PORT": str(closed)}, timeout=30)
    assert refused.returncode == 1 and refused.stderr.startswith("healthcheck: ")


def test_sigterm_drains_every_model_and_exits_0(server):
    """Last in the module: it stops the shared server."""
    worker_pids = [e["worker_pid"] for e in server.logs() if e.get("msg") == "worker started"]
    cmdline = Path(f"/proc/{worker_pids[0]}/cmdline").read_bytes().split(b"\0")
    ready_dir = Path(cmdline[cmdline.index(b"--ready-dir") + 1].decode())
    assert sorted(p.name for p in ready_dir.iterdir()) == ["alpha.0", "alpha.1", "beta.0"]
    assert server.stop() == 0, "\n".join(server.lines)
    stopped = [e for e in server.logs() if e.get("msg") == "worker stopped"]
    assert sorted(e["pid"] for e in stopped) == sorted(worker_pids)
    assert not ready_dir.exists()
    for url in server.urls.values():
        with pytest.raises(requests.ConnectionError):
            requests.get(url + "/v2/health/live", timeout=2)


def test_each_packed_model_reports_its_own_metrics(server):
    """After the drain (the test above stops the server; stopped here if this test runs without it)."""
    if server.proc.poll() is None:
        assert server.stop() == 0, "\n".join(server.lines)
    server.finish_reading()
    records = [json.loads(line) for line in server.lines if '"_aws"' in line]
    for record in records:
        assert_valid_emf(record)
        assert record["Service"] == PACK_SERVICE
    serving = [r for r in records if "Worker" in r]
    assert {(r["Model"], r["Worker"]) for r in serving} == {("alpha", "0"), ("alpha", "1"), ("beta", "0")}
    assert sum(r["Requests"] for r in serving if r["Model"] == "alpha") >= 1  # the fixture's early request
    # neuron-monitor per model, from each worker's runtime tag "<model>/<index>", and per task.
    utilization = {r.get("Model"): sorted(r["NeuronCoreUtilization"]) for r in records if "NeuronCoreUtilization" in r}
    assert utilization == {"alpha": [50.0, 51.0], "beta": [52.0, 53.0], None: [50.0, 51.0, 52.0, 53.0]}


# ---------------------------------------------------------------- SERVER_MODELS rejections


def serve_rejects(model_dir: Path, tmp_path: Path, env: dict, *args: str) -> str:
    """serve.py exits 2 with one line before starting anything: no worker, no temporary directory."""
    scratch = tmp_path / "tmpdir"
    scratch.mkdir(exist_ok=True)
    result = run_script(
        SERVE,
        "--model-dir",
        str(model_dir),
        "--host",
        "127.0.0.1",
        *args,
        env={"TMPDIR": str(scratch), **env},
        timeout=60,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("serve.py: error: "), result.stderr
    assert "Traceback" not in result.stderr and "worker started" not in result.stdout + result.stderr
    assert list(scratch.iterdir()) == []
    return lines[0].removeprefix("serve.py: error: ")


ALPHA = {"name": "alpha", "port": 18001, "visible_cores": "0-1"}
BETA = {"name": "beta", "port": 18002, "visible_cores": "2-3"}


@pytest.mark.parametrize(
    "models, expected",
    [
        ("[{", "--models (SERVER_MODELS): not valid JSON"),
        ("[]", "--models (SERVER_MODELS): expected a non-empty JSON array of model objects"),
        ({"name": "alpha"}, "--models (SERVER_MODELS): expected a non-empty JSON array"),
        (["alpha"], "SERVER_MODELS[0]: expected an object with name, port, visible_cores"),
        ([{**ALPHA, "gpu": 1}], "SERVER_MODELS[0].gpu: unknown key (known: name, port, visible_cores, workers,"),
        ([ALPHA, {"name": "beta", "visible_cores": "2"}], "SERVER_MODELS[1].port: required"),
        ([{**ALPHA, "name": "Alpha"}], "SERVER_MODELS[0].name: expected a name like intent-bert"),
        ([{**ALPHA, "port": "18001"}], 'SERVER_MODELS[0].port: expected an integer, got "18001"'),
        ([{**ALPHA, "port": 70000}], "SERVER_MODELS[0].port: must be between 1 and 65535"),
        ([{**ALPHA, "visible_cores": "0,1"}], "SERVER_MODELS[0].visible_cores: expected a core index or a range"),
        ([{**ALPHA, "visible_cores": ["0-1"]}], "SERVER_MODELS[0].visible_cores: expected one range"),
        ([{**ALPHA, "workers": 0}], "SERVER_MODELS[0].workers: must be between 1 and 64"),
        ([{**ALPHA, "workers": 3}], "SERVER_MODELS[0].workers: 2 cores in '0-1' do not split evenly over 3 workers"),
        ([{**ALPHA, "max_batch_size": True}], "SERVER_MODELS[0].max_batch_size: expected an integer, got true"),
        ([{**ALPHA, "max_queue_delay_ms": "1"}], 'SERVER_MODELS[0].max_queue_delay_ms: expected a number, got "1"'),
        ([ALPHA, {**BETA, "name": "alpha"}], "SERVER_MODELS[1].name: 'alpha' is also SERVER_MODELS[0].name"),
        ([ALPHA, {**BETA, "port": 18001}], "SERVER_MODELS[1].port: 18001 is also SERVER_MODELS[0].port (alpha)"),
        (
            [ALPHA, {**BETA, "visible_cores": "1-2"}],
            "SERVER_MODELS[1].visible_cores: 1-2 overlaps SERVER_MODELS[0].visible_cores (alpha: 0-1)",
        ),
    ],
)
def test_bad_server_models_exit_2_in_one_line(packed_artifact, tmp_path, models, expected):
    raw = models if isinstance(models, str) else json.dumps(models)
    assert serve_rejects(packed_artifact, tmp_path, {"SERVER_MODELS": raw}).startswith(expected)


@pytest.mark.parametrize(
    "env, args, expected",
    [
        ({"MODEL_NAME": "alpha"}, (), "--model-name (MODEL_NAME): not allowed with --models (SERVER_MODELS)"),
        ({"PORT": "8080"}, (), "--port (PORT): not allowed with --models (SERVER_MODELS)"),
        ({}, ("--port", "8080"), "--port (PORT): not allowed with --models (SERVER_MODELS)"),
    ],
)
def test_model_name_and_port_cannot_be_set_with_server_models(packed_artifact, tmp_path, env, args, expected):
    env = {"SERVER_MODELS": json.dumps([ALPHA, BETA]), **env}
    assert serve_rejects(packed_artifact, tmp_path, env, *args).startswith(expected)


def test_every_packed_model_needs_its_artifact(packed_artifact, tmp_path):
    message = serve_rejects(
        packed_artifact, tmp_path, {"SERVER_MODELS": json.dumps([ALPHA, {**BETA, "name": "delta"}])}
    )
    assert message == f"SERVER_MODELS[1].name: no artifact 'delta' in {packed_artifact} (compiled: alpha, beta, gamma)"
    broken = tmp_path / "broken"
    (broken / "alpha").mkdir(parents=True)
    message = serve_rejects(broken, tmp_path, {"SERVER_MODELS": json.dumps([ALPHA])})
    assert message == f"SERVER_MODELS[0].name: {broken / 'alpha'} has no metadata.json (not a compiled artifact)"


def test_the_artifacts_cores_per_copy_must_divide_each_workers_share(packed_artifact, tmp_path):
    # gamma was compiled for pipelines of 2 cores: 2 workers on 0-1 would get 1 core each.
    gamma = {"name": "gamma", "port": 18003, "visible_cores": "0-1", "workers": 2}
    message = serve_rejects(packed_artifact, tmp_path, {"SERVER_MODELS": json.dumps([gamma])})
    assert message == "SERVER_MODELS[0].workers: 1 cores per worker is not a multiple of the model's 2 cores"


def test_core_ranges_must_lie_in_the_containers_cores(packed_artifact, tmp_path):
    env = {"SERVER_MODELS": json.dumps([ALPHA, BETA]), "NEURON_RT_VISIBLE_CORES": "0-1"}
    message = serve_rejects(packed_artifact, tmp_path, env)
    assert message == "SERVER_MODELS[1].visible_cores: 2-3 is outside the container's NEURON_RT_VISIBLE_CORES 0-1"


def test_a_taken_port_fails_before_any_worker_starts(packed_artifact, tmp_path):
    alpha_port, beta_port = free_ports(2)
    with socket.create_server(("127.0.0.1", beta_port)):
        models = [{**ALPHA, "port": alpha_port}, {**BETA, "port": beta_port}]
        message = serve_rejects(packed_artifact, tmp_path, {"SERVER_MODELS": json.dumps(models)})
    assert message == f"SERVER_MODELS[1].port: cannot listen on 127.0.0.1:{beta_port}: Address already in use"
    # alpha's sockets, bound first, were closed again.
    socket.create_server(("127.0.0.1", alpha_port)).close()


# ---------------------------------------------------------------- MODELS rejections


def compile_rejects(tmp_path: Path, models: str | list, *args: str, compiled_first: bool = False) -> str:
    """compile.py exits 2 with one line, and neither the output nor anything beside it exists.
    compiled_first: an earlier model compiled before the failure, so the libraries' own warnings
    from its trace precede the error line in the build log."""
    out = tmp_path / "out" / "art"
    out.parent.mkdir(exist_ok=True)
    raw = models if isinstance(models, str) else json.dumps(models)
    result = run_script(COMPILE, "--backend", "cpu", "--models-json", raw, *args, "--out", str(out))
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    ours = [line for line in lines if line.startswith("compile.py:")]
    assert "Traceback" not in result.stderr and ours == lines[-1:], result.stderr
    assert compiled_first or len(lines) == 1, result.stderr
    assert list(out.parent.iterdir()) == []
    return lines[-1].removeprefix("compile.py: error: ")


@pytest.mark.parametrize(
    "models, expected",
    [
        ("{", "--models-json (MODELS): not valid JSON"),
        ("[]", "--models-json (MODELS): expected a non-empty JSON array of model objects"),
        ([["a"]], "MODELS[0]: expected an object with name and model"),
        (
            [{"name": "a", "model": "{tiny}", "gpus": 1}],
            "MODELS[0].gpus: unknown key (known: name, model, revision, task,",
        ),
        ([{"name": "a"}], "MODELS[0].model: required"),
        ([{"name": "A b", "model": "{tiny}"}], "MODELS[0].name: expected a name like intent-bert"),
        (
            [{"name": "a", "model": "{tiny}"}, {"name": "a", "model": "{tiny}"}],
            "MODELS[1].name: 'a' is also MODELS[0].name",
        ),
        ([{"name": "a", "model": "{tiny}", "batch_size": "2"}], 'MODELS[0].batch_size: expected an integer, got "2"'),
        (
            [{"name": "a", "model": "{tiny}", "batch_size": 0}],
            "MODELS[0].batch_size: must be between 1 and 1024, got 0",
        ),
        (
            [{"name": "a", "model": "{tiny}", "sequence_length": 4}],
            "MODELS[0].sequence_length: must be between 8 and 8192",
        ),
        (
            [{"name": "a", "model": "{tiny}", "labels": "x,y,z"}],
            'MODELS[0].labels: expected a list of non-empty strings, got "x,y,z"',
        ),
        ([{"name": "a", "model": "{tiny}", "labels": ["x,y", "z"]}], "MODELS[0].labels: 'x,y' contains ','"),
        (
            [{"name": "a", "model": "{tiny}", "task": "translation"}],
            "MODELS[0].task: must be one of text-classification",
        ),
        (
            [{"name": "a", "model": "{tiny}", "parallelism": "tensor"}],
            "MODELS[0].parallelism: must be one of data-parallel",
        ),
        (
            [{"name": "a", "model": "{tiny}", "neuron_cores": 4}],
            "MODELS[0].neuron_cores: data-parallel models use 1 core",
        ),
        (
            [{"name": "a", "model": "{tiny}", "compiler_args": ["fp32"]}],
            "MODELS[0].compiler_args: expected flags such as",
        ),
        (
            [{"name": "a", "model": "{tiny}"}, {"name": "b", "model": "./nowhere"}],
            "MODELS[1].model: model directory not found: ./nowhere",
        ),
    ],
)
def test_bad_models_exit_2_in_one_line_naming_the_entry_and_key(tmp_path, tiny_bert, models, expected):
    raw = models if isinstance(models, str) else json.dumps(models).replace("{tiny}", str(tiny_bert))
    assert compile_rejects(tmp_path, raw).startswith(expected)


def test_models_and_model_source_are_exclusive(tmp_path, tiny_bert):
    message = compile_rejects(tmp_path, [{"name": "a", "model": str(tiny_bert)}], "--model", str(tiny_bert))
    assert message == "--model (MODEL_SOURCE): must be empty when --models-json (MODELS) is set"


def test_an_existing_output_is_not_overwritten_by_models(tmp_path, tiny_bert):
    out = tmp_path / "art"
    (out / "alpha").mkdir(parents=True)
    models = json.dumps([{"name": "a", "model": str(tiny_bert)}])
    result = run_script(COMPILE, "--backend", "cpu", "--models-json", models, "--out", str(out))
    assert result.returncode == 2 and result.stderr.startswith("compile.py: error: --out:"), result.stderr
    assert [p.name for p in out.iterdir()] == ["alpha"]


def test_a_later_model_failing_leaves_nothing_of_the_earlier_ones(tmp_path, tiny_bert):
    # The first model compiles; the second's labels disagree with its model once loaded.
    models = [{"name": "a", "model": str(tiny_bert)}, {"name": "b", "model": str(tiny_bert), "labels": ["yes", "no"]}]
    message = compile_rejects(tmp_path, models, compiled_first=True)
    assert message == "MODELS[1].labels: 2 labels given but the model has 3 outputs"
