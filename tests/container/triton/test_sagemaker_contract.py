"""The real tritonserver 2.51, started as SageMaker's r24.09 serve script starts it with each shipped
Triton model's synthesized Model Environment, on the repository export.py writes: what users depend on.

Only the SageMaker front end is up (--allow-http=false, no gRPC, no metrics), so everything goes
through /ping and /invocations. Readiness: in the serve script's default ping mode ("ready") /ping is
200 only when the server is ready, and Triton's strict readiness means every loaded model is READY;
which models those are comes from the model table Triton logs after loading its startup models.

Stand-ins (see rehearsal/triton_server.py): a CPU copy of the repository with KIND_GPU
rewritten to KIND_CPU, and the `onnxruntime` backend replaced by a Python-based backend running the
same model.onnx with the onnxruntime package (which also records the batch sizes it receives).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from inferstack.delivery import smoke
from inferstack.triton import client as triton_client
from inferstack.triton import config as triton_config
from rehearsal import triton_server
from tests.support.real_triton import ENV, PROJECT, TRITON_MODELS, exported, model_params, shipped
from tests.support.threaded_server import serving
from tests.support.tiny_models import greedy_reference

pytestmark = pytest.mark.real_triton

TEXTS = [
    "hello world",
    "speling mistaks here",
    "x",
    "the quick brown fox jumps",
    "abc def ghi jkl mno",
    "zz",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z " * 4,
]


def _config(path: Path) -> pb.ModelConfig:
    return text_format.Parse(path.read_text(), pb.ModelConfig())


def _invoke(served, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
    """The token-id model, called by name on Triton's HTTP front end (/invocations is the text ensemble's:
    test_text_ensemble.py)."""
    status, body = served.server.infer(served.name, triton_client.request_body(inputs, outputs=outputs))
    assert status == 200, body[:500]
    return triton_client.parse_response(body)


def _onnx_session(repository: Path, folder: str) -> ort.InferenceSession:
    return ort.InferenceSession(
        str(repository / folder / triton_config.VERSION / "model.onnx"), providers=["CPUExecutionProvider"]
    )


def _expected_greedy(served, tensors: dict[str, np.ndarray]) -> np.ndarray:
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(served.exported.checkpoint).eval()
    return greedy_reference(model, tensors, served.exported.spec.export.max_output_length)


def _reference(served, tensors: dict[str, np.ndarray]) -> tuple[str, np.ndarray]:
    """(output name, what the model must answer) computed outside Triton."""
    if served.exported.spec.source.task == "text2text-generation":
        return "output_ids", _expected_greedy(served, tensors)
    (logits,) = _onnx_session(served.exported.repository, served.name).run(["logits"], tensors)
    return "logits", logits


# ---------------------------------------------------------------- the contract as synthesized


def test_every_triton_model_is_covered():
    assert TRITON_MODELS == ["bert-large-classifier", "t5-spelling"]


@pytest.mark.parametrize("name", model_params())
def test_serve_command_from_the_synthesized_environment(name, contract, tmp_path_factory):
    """The exact tritonserver command line SageMaker's serve script builds for this Model Environment."""
    environment = contract[name]["environment"]
    assert environment["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"] == f"{name}-text"
    export = exported(tmp_path_factory, contract, name)
    command = triton_server.serve_command(environment, export.repository)
    repo = f"{export.repository}/"
    extra = environment.get("SAGEMAKER_TRITON_ADDITIONAL_ARGS", "").split()
    assert list(command.args) == [
        "--allow-sagemaker=true",
        "--allow-http=false",
        "--model-control-mode=explicit",
        f"--model-repository={repo}",
        "--model-namespacing=true",
        "--allow-grpc=false",
        "--allow-metrics=false",
        f"--log-verbose={environment['SAGEMAKER_TRITON_LOG_VERBOSE']}",
        "--backend-config=python,shm-default-byte-size="
        + environment.get("SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE", "16777216"),
        "--backend-config=python,shm-growth-byte-size=1048576",
        *extra,
        f"--load-model={name}-text",
    ]
    assert command.exported == {}
    # Every folder the repository holds is loaded: the default model by the script, the rest by the
    # Environment's additional args (the script loads nothing else in explicit mode).
    loaded = {a.removeprefix("--load-model=") for a in command.args if a.startswith("--load-model=")}
    assert loaded == {p.name for p in export.repository.iterdir() if p.is_dir()}


# ---------------------------------------------------------------- start-up and readiness


@pytest.mark.parametrize("name", model_params())
def test_every_model_is_ready_and_ping_answers_200(name, serve):
    served = serve(name)
    assert served.server.ping() == 200
    folders = {p.name for p in served.repository.iterdir() if p.is_dir()}
    assert served.server.model_states() == {folder: "READY" for folder in folders}
    # Loopback only: the front end asked for 0.0.0.0, the shim bound 127.0.0.1.
    port = f"{served.server.port:04X}"
    listening = [
        line.split()[1]
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]
        if line.split()[1].endswith(f":{port}") and line.split()[3] == "0A"
    ]
    assert listening == [f"0100007F:{port}"]


@pytest.mark.parametrize("name", model_params())
def test_only_the_documented_stand_ins_differ_from_the_export(name, serve):
    """The served copy differs from export.py's repository in instance_group kind and the default model's
    queue policy (conftest.without_queue_policy) only; the TensorRT
    accelerator stays in and the stand-in ignores it on CPU, as the real onnxruntime backend does."""
    served = serve(name)
    onnx_folders = []
    for original in sorted(served.exported.repository.glob("*/config.pbtxt")):
        want, got = _config(original), _config(served.repository / original.parent.name / "config.pbtxt")
        for group in want.instance_group:
            group.kind = pb.ModelInstanceGroup.KIND_CPU
        shed = want.dynamic_batching.HasField("default_queue_policy")
        if shed:  # ClearField on an unset dynamic_batching would set it (the scheduling oneof)
            want.dynamic_batching.ClearField("default_queue_policy")
        assert got == want, original.parent.name
        assert shed == (original.parent.name == name), original.parent.name  # the token-id model
        if got.backend == "onnxruntime":
            onnx_folders.append(got.name)
            (accelerator,) = got.optimization.execution_accelerators.gpu_execution_accelerator
            assert accelerator.name == "tensorrt"
    assert served.rewrites == [f"{f}: instance_group[0]" for f in sorted(onnx_folders)] + [
        f"{name}: dynamic_batching.default_queue_policy"
    ]
    log = served.server.log()
    for folder in onnx_folders:
        assert f"{folder} runs on CPU; gpu_execution_accelerator ['tensorrt'] ignored" in log


# ---------------------------------------------------------------- /invocations


@pytest.mark.parametrize("name", model_params("text-classification"))
def test_classifier_answers_what_onnxruntime_computes_on_the_exported_graph(name, serve):
    served = serve(name)
    codec = triton_client.TextCodec.from_repository(served.repository / name)
    for texts in (TEXTS[:1], TEXTS):
        tensors = codec.encode(texts)
        got = _invoke(served, tensors, ["logits"])["logits"]
        _, want = _reference(served, tensors)
        assert got.shape == (len(texts), len(shipped(name).source.labels))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(got[0], got[1])


@pytest.mark.parametrize("name", model_params("text2text-generation"))
def test_t5_greedy_ids_equal_transformers_generate(name, serve):
    served = serve(name)
    codec = triton_client.TextCodec.from_repository(served.repository / name)
    eos = json.loads((served.repository / name / triton_config.VERSION / "generation.json").read_text())["eos_token_id"]
    for texts in (TEXTS[:1], TEXTS):
        tensors = codec.encode(texts)
        got = _invoke(served, tensors, ["output_ids"])["output_ids"]
        _, want = _reference(served, tensors)
        assert got.shape == (len(texts), served.exported.spec.export.max_output_length)
        np.testing.assert_array_equal(got, want)
    # The comparison covered rows that stop early (then pad) and rows that run to the full length.
    assert (got == eos).any(axis=1).any() and not (got == eos).any(axis=1).all()
    assert len(codec.decode(got)) == len(TEXTS)


@pytest.mark.parametrize("name", model_params())
def test_concurrent_single_requests_are_batched_dynamically(name, serve):
    """Single-text requests sent at once come back right, and reach the ONNX models in batches."""
    served = serve(name)
    codec = triton_client.TextCodec.from_repository(served.repository / name)
    texts = [TEXTS[i % len(TEXTS)] for i in range(32)]
    output, want = _reference(served, codec.encode(texts))
    already = len(served.batches())
    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(lambda text: _invoke(served, codec.encode([text]), [output])[output], texts))
    for row, got in enumerate(answers):
        assert got.shape[0] == 1
        if output == "logits":
            np.testing.assert_allclose(got[0], want[row], rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(got[0], want[row])
    records = served.batches()[already:]
    # The classifier's ONNX model sees the client requests themselves; T5's encoder sees one BLS
    # request per batch of client requests the Python model got (each client request is one row).
    first_onnx = name if output == "logits" else f"{name}-encoder"
    seen = [r for r in records if r["model"] == first_onnx]
    assert sum(r["rows"] for r in seen) == len(texts)
    assert max(r["rows"] for r in seen) > 1, f"no batch larger than 1 in {seen}"


@pytest.mark.parametrize("name", model_params())
def test_malformed_requests_get_an_error_status_and_the_server_keeps_serving(name, serve):
    """What Triton's SageMaker front end answers a bad body with. Not all 4xx: Triton (2.51, and r24.09's
    identical front end) reports bodies it cannot parse (not JSON, no "inputs", data that does not fill
    the shape) as internal errors, HTTP 500; requests it parses but the model refuses (unknown input,
    wrong datatype) get 400. Either way a JSON {"error": ...} body, and the server stays ready."""
    served = serve(name)
    seq = served.exported.spec.export.sequence_length
    good = {"name": "input_ids", "datatype": "INT64", "shape": [1, seq], "data": [0] * seq}
    bodies = {
        "not json": (b"{this is not json", 500),
        "no inputs": ({"outputs": []}, 500),
        "data does not fill the shape": ({"inputs": [{**good, "shape": [1, seq + 1]}]}, 500),
        "unknown input": ({"inputs": [{**good, "name": "nope"}]}, 400),
        "wrong datatype": ({"inputs": [{**good, "datatype": "FP32"}]}, 400),
    }
    answers = {what: served.server.infer(name, body) for what, (body, _) in bodies.items()}
    assert {what: status for what, (status, _) in answers.items()} == {
        what: status for what, (_, status) in bodies.items()
    }, answers
    for what, (_, reply) in answers.items():
        assert isinstance(json.loads(reply).get("error"), str), what
    assert served.server.ping() == 200


# ---------------------------------------------------------------- inferstack.delivery.smoke against the server


class _SageMakerRuntimeFront:
    """The only part of SageMaker in front of the container: InvokeEndpoint's
    POST /endpoints/<name>/invocations handed to the container's /invocations (body and content type)."""

    def __init__(self, server: triton_server.TritonServer) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.paths.append(self.path)
                outer.components.append(self.headers.get("X-Amzn-SageMaker-Inference-Component"))
                status, reply = server.invoke(body, content_type=self.headers.get("Content-Type", ""))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.paths: list[str] = []
        self.components: list[str | None] = []  # the inference component each request named, if any
        self._serving = serving(Handler)
        self.url = ""

    def __enter__(self):
        self.url = f"http://127.0.0.1:{self._serving.__enter__()}"
        return self

    def __exit__(self, *exc):
        return self._serving.__exit__(*exc)


@pytest.mark.parametrize("name", model_params())
def test_smoke_probe_passes_over_http_and_through_boto3_invoke_endpoint(name, serve, monkeypatch):
    """inferstack.delivery.smoke's request for the shipped model (probe_for) and its reply check (check_reply),
    sent with its own senders: http_sender to /invocations, and sagemaker_sender (boto3
    InvokeEndpoint) through a local stand-in for SageMaker's runtime front door, naming the endpoint (and
    the inference component, on a fleet's shared endpoint) as dev's stack outputs do. Not run: the stack
    output lookup and the latency SLO (CPU latencies say nothing about a g4dn)."""
    import boto3

    fleet = PROJECT.fleet_of(name, ENV)
    endpoint = f"{ENV}-{fleet or name}"  # stack names: inferstack.aws.stack_outputs.stack_name
    component = f"{ENV}-{name}" if fleet else None

    served = serve(name)
    probe = smoke.probe_for(shipped(name))
    body = json.dumps(probe.body).encode()
    reply, _ = smoke.http_sender(served.server.url + "/invocations", 30)(body)
    smoke.check_reply(reply, probe.outputs)

    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    with _SageMakerRuntimeFront(served.server) as front:
        monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", front.url)
        send = smoke.sagemaker_sender(boto3.Session(region_name="us-east-1"), endpoint, 30, component)
        latencies = []
        for _ in range(3):
            reply, latency = send(body)
            smoke.check_reply(reply, probe.outputs)
            latencies.append(latency)
        assert front.paths == [f"/endpoints/{endpoint}/invocations"] * 3
        assert front.components == [component] * 3
        assert smoke.percentile(latencies, 99) > 0
        # A broken request surfaces as smoke's one-line failure, not a traceback.
        with pytest.raises(smoke.SmokeFailure, match=f"endpoint {endpoint}"):
            send(b"{broken")


# ---------------------------------------------------------------- what the stand-ins and the contract guard


@pytest.mark.parametrize("name", model_params("text2text-generation"))
def test_without_the_environments_load_args_t5_cannot_answer(name, serve, tmp_path_factory, triton_install):
    """The serve script loads only the default model: without SAGEMAKER_TRITON_ADDITIONAL_ARGS Triton still
    loads the ensemble's steps (it loads an ensemble's composing models itself), and /ping is 200, but the
    Python model's BLS calls find no encoder."""
    served = serve(name)
    environment = {k: v for k, v in served.environment.items() if k != "SAGEMAKER_TRITON_ADDITIONAL_ARGS"}
    with triton_server.TritonServer(
        served.repository, environment, work_dir=tmp_path_factory.mktemp("no-bls"), install=triton_install
    ) as server:
        assert server.ping() == 200
        assert server.model_states() == {
            f"{name}{part}": "READY" for part in ("-text", "-tokenize", "", "-postprocess")
        }
        status, reply = server.invoke({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["hi"]}]})
        assert status >= 400 and f"{name}-encoder" in json.loads(reply)["error"]


@pytest.mark.parametrize("name", model_params("text-classification"))
def test_the_unmodified_repository_needs_a_gpu(name, contract, tmp_path_factory, triton_install):
    """Why stand-in (a) exists: export.py's repository as is (KIND_GPU) does not start here."""
    export = exported(tmp_path_factory, contract, name)
    server = triton_server.TritonServer(
        export.repository,
        contract[name]["environment"],
        work_dir=tmp_path_factory.mktemp("gpu-repo"),
        install=triton_install,
        startup_timeout=60,
    )
    with pytest.raises(triton_server.TritonStartError) as failure:
        server.start()
    server.stop()
    message = str(failure.value)
    assert "\n" not in message and "exited with code" in message
    assert "GPU" in message, message
