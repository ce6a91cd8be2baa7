"""serve.py over real HTTP: v2 and SageMaker routes, tritonclient, batching, input validation."""

from __future__ import annotations

import json
import re
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as triton
from tokenizers import Tokenizer

from tests.support.neuron_server import LABELS, SEQUENCE_LENGTH, ServerProcess, reference_logits

MODEL = "tiny-bert"
MAX_BATCH = 16
MAX_TEXT = 1000
MAX_BODY = 64 * 1024


@pytest.fixture(scope="module")
def server(artifact: Path):
    proc = ServerProcess(
        artifact,
        env={
            "MODEL_NAME": MODEL,
            "SERVER_MAX_BATCH_SIZE": str(MAX_BATCH),
            "SERVER_MAX_QUEUE_DELAY_MS": "20",
            "SERVER_MAX_TEXT_CHARS": str(MAX_TEXT),
            "SERVER_MAX_BODY_BYTES": str(MAX_BODY),
        },
    )
    proc.wait_ready()
    yield proc
    assert proc.stop() == 0


def text_body(texts, shape=None, **extra) -> dict:
    return {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": shape or [len(texts)], "data": texts}], **extra}


def test_health_and_metadata_routes(server):
    assert requests.get(server.url + "/v2/health/live").json() == {"live": True}
    assert requests.get(server.url + "/v2/health/ready").status_code == 200
    assert requests.get(server.url + "/ping").status_code == 200
    assert requests.get(f"{server.url}/v2/models/{MODEL}/ready").status_code == 200
    assert requests.get(f"{server.url}/v2/models/{MODEL}/versions/1/ready").status_code == 200
    meta = requests.get(f"{server.url}/v2/models/{MODEL}").json()
    assert meta["name"] == MODEL and meta["versions"] == ["1"]
    assert {i["name"]: (i["datatype"], i["shape"]) for i in meta["inputs"]} == {
        "TEXT": ("BYTES", [-1]),
        "input_ids": ("INT64", [-1, SEQUENCE_LENGTH]),
        "attention_mask": ("INT64", [-1, SEQUENCE_LENGTH]),
    }
    assert {o["name"]: (o["datatype"], o["shape"]) for o in meta["outputs"]} == {
        "logits": ("FP32", [-1, len(LABELS)]),
        "label": ("BYTES", [-1]),
    }
    index = requests.post(server.url + "/v2/repository/index", json={})
    assert index.json() == [{"name": MODEL, "version": "1", "state": "READY"}]


def test_unknown_model_and_route_are_json_404(server):
    for response in (
        requests.get(server.url + "/v2/models/other"),
        requests.post(server.url + "/v2/models/other/infer", json=text_body(["x"])),
        requests.get(f"{server.url}/v2/models/{MODEL}/versions/7"),
        requests.get(server.url + "/nope"),
    ):
        assert response.status_code == 404
        assert "error" in response.json()


def test_v2_and_sagemaker_routes_agree_with_the_model(server, artifact):
    texts = ["a wonderful little film", "dull", "the plot makes no sense at all"]
    v2 = requests.post(f"{server.url}/v2/models/{MODEL}/infer", json=text_body(texts, id="req-7"))
    sm = requests.post(server.url + "/invocations", json=text_body(texts, shape=[3, 1]))
    assert v2.status_code == 200 and sm.status_code == 200
    reply = v2.json()
    assert reply["model_name"] == MODEL and reply["id"] == "req-7"
    outputs = {o["name"]: o for o in reply["outputs"]}
    logits = np.array(outputs["logits"]["data"], dtype=np.float32).reshape(outputs["logits"]["shape"])
    want = reference_logits(artifact, texts)
    np.testing.assert_allclose(logits, want, atol=1e-5)
    assert outputs["label"]["data"] == [LABELS[i] for i in want.argmax(axis=1)]
    assert sm.json()["outputs"] == reply["outputs"]


def test_the_common_request_read_in_c_gets_the_reply_the_python_path_gives(server):
    # The worker reads a body of TEXT alone in C (text_scan.c) once its words are cached; the same request with
    # an empty "parameters" is the Python path's (protocol.py) alone. The replies must be the same bytes.
    ready = [e for e in server.logs() if e.get("msg") == "model ready"]
    assert ready and all(e["text_scan"] is True for e in ready)
    url = f"{server.url}/v2/models/{MODEL}/infer"
    texts = ["Plain words, and punctuation!", "a second text of the batch"]
    headers = {"content-type": "application/json"}
    replies = [
        requests.post(url, data=json.dumps(text_body(texts, **extra)), headers=headers)
        for extra in ({}, {}, {"parameters": {}})  # the first caches the words; the second is read in C
    ]
    assert [r.status_code for r in replies] == [200, 200, 200]
    assert replies[1].content == replies[2].content == replies[0].content


def test_pretokenized_inputs_match_text(server, artifact):
    tokenizer = Tokenizer.from_file(str(artifact / "tokenizer.json"))
    tokenizer.no_padding()  # the saved tokenizer.json remembers compile-time padding
    ids = tokenizer.encode("some words here").ids
    assert 3 < len(ids) < SEQUENCE_LENGTH
    body = {
        "inputs": [
            {"name": "input_ids", "datatype": "INT64", "shape": [1, len(ids)], "data": [ids]},
            {"name": "attention_mask", "datatype": "INT64", "shape": [1, len(ids)], "data": [1] * len(ids)},
        ],
        "outputs": [{"name": "logits"}],
    }
    by_ids = requests.post(f"{server.url}/v2/models/{MODEL}/infer", json=body).json()
    by_text = requests.post(f"{server.url}/v2/models/{MODEL}/infer", json=text_body(["some words here"])).json()
    assert [o["name"] for o in by_ids["outputs"]] == ["logits"]
    np.testing.assert_allclose(by_ids["outputs"][0]["data"], by_text["outputs"][0]["data"], atol=1e-6)


def test_tritonclient_http(server, artifact):
    client = triton.InferenceServerClient(server.url.removeprefix("http://"))
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready(MODEL)
    meta = client.get_model_metadata(MODEL)
    assert [i["name"] for i in meta["inputs"]] == ["TEXT", "input_ids", "attention_mask"]
    texts = ["hello there", "goodbye"]
    # JSON tensors both ways.
    text = triton.InferInput("TEXT", [2], "BYTES")
    text.set_data_from_numpy(np.array(texts, dtype=object), binary_data=False)
    result = client.infer(
        MODEL,
        [text],
        outputs=[
            triton.InferRequestedOutput("logits", binary_data=False),
            triton.InferRequestedOutput("label", binary_data=False),
        ],
    )
    want = reference_logits(artifact, texts)
    np.testing.assert_allclose(result.as_numpy("logits"), want, atol=1e-5)
    assert result.as_numpy("label").tolist() == [LABELS[i] for i in want.argmax(axis=1)]
    # tritonclient's defaults: binary tensors.
    text = triton.InferInput("TEXT", [2, 1], "BYTES")
    text.set_data_from_numpy(np.array([[t] for t in texts], dtype=object))
    binary = client.infer(MODEL, [text])
    np.testing.assert_allclose(binary.as_numpy("logits"), want, atol=1e-5)
    assert [b.decode() for b in binary.as_numpy("label")] == [LABELS[i] for i in want.argmax(axis=1)]


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} missing from /metrics"
    return float(match.group(1))


def test_concurrent_requests_are_batched(server):
    before = requests.get(server.url + "/metrics").text
    count0, sum0 = metric(before, "inference_batch_size_count"), metric(before, "inference_batch_size_sum")

    def one(i: int) -> int:
        return requests.post(
            f"{server.url}/v2/models/{MODEL}/infer", json=text_body([f"request number {i}"])
        ).status_code

    with ThreadPoolExecutor(32) as pool:
        statuses = list(pool.map(one, range(128)))
    assert statuses == [200] * 128
    after = requests.get(server.url + "/metrics").text
    batches = metric(after, "inference_batch_size_count") - count0
    rows = metric(after, "inference_batch_size_sum") - sum0
    assert rows == 128
    assert batches < rows, f"{rows} rows ran in {batches} batches: no batching happened"
    assert 'inference_requests_total{route="infer",status="200"}' in after
    assert "inference_request_duration_seconds_bucket" in after and "inference_queue_depth" in after


def binary_text_request(texts: list[str], declared: int | None = None) -> tuple[bytes, dict]:
    raw = b"".join(struct.pack("<I", len(t.encode())) + t.encode() for t in texts)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "TEXT",
                    "datatype": "BYTES",
                    "shape": [len(texts)],
                    "parameters": {"binary_data_size": declared or len(raw)},
                }
            ]
        }
    ).encode()
    return header + raw, {"Inference-Header-Content-Length": str(len(header))}


def binary_bytes_request(elements: list[bytes]) -> tuple[bytes, dict]:
    raw = b"".join(struct.pack("<I", len(e)) + e for e in elements)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "TEXT",
                    "datatype": "BYTES",
                    "shape": [len(elements)],
                    "parameters": {"binary_data_size": len(raw)},
                }
            ]
        }
    ).encode()
    return header + raw, {"Inference-Header-Content-Length": str(len(header))}


def ids_input(shape, data, name="input_ids"):
    return {"name": name, "datatype": "INT64", "shape": shape, "data": data}


MALFORMED = [
    ("malformed JSON", b'{"inputs": [', {}, 400, "body"),
    ("not an object", b"[1, 2]", {}, 400, "body"),
    ("no inputs", json.dumps({"outputs": []}).encode(), {}, 400, "inputs"),
    (
        "unknown input",
        json.dumps({"inputs": [{"name": "IMAGE", "datatype": "BYTES", "shape": [1], "data": ["x"]}]}).encode(),
        {},
        400,
        "inputs[0].name",
    ),
    (
        "wrong datatype",
        json.dumps({"inputs": [{"name": "TEXT", "datatype": "FP32", "shape": [1], "data": [1.0]}]}).encode(),
        {},
        400,
        "inputs[0].datatype",
    ),
    (
        "wrong TEXT shape",
        json.dumps(text_body(["a", "b", "c", "d"], shape=[2, 2])).encode(),
        {},
        400,
        "inputs[0].shape",
    ),
    ("negative shape", json.dumps(text_body(["a"], shape=[-1])).encode(), {}, 400, "inputs[0].shape"),
    ("count mismatch", json.dumps(text_body(["a", "b"], shape=[3])).encode(), {}, 400, "inputs[0].data"),
    ("non-string text", json.dumps(text_body([1, 2])).encode(), {}, 400, "inputs[0].data[0]"),
    (
        "missing data",
        json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1]}]}).encode(),
        {},
        400,
        "inputs[0].data",
    ),
    ("too many items", json.dumps(text_body(["x"] * (MAX_BATCH + 1))).encode(), {}, 413, "inputs[0].shape"),
    (
        "text too long",
        json.dumps(text_body(["a" * (MAX_TEXT + 1)])).encode(),
        {},
        400,
        f"inputs[0].data[0]: text of {MAX_TEXT + 1} characters exceeds the limit of {MAX_TEXT}",
    ),
    ("empty text", json.dumps(text_body(["fine", ""])).encode(), {}, 400, "inputs[0].data[1]: empty text"),
    ("blank text", json.dumps(text_body([" \t\n"])).encode(), {}, 400, "inputs[0].data[0]: empty text"),
    # Valid JSON padded past the body limit, so only the size rule can reject it.
    ("body too large", json.dumps(text_body(["x"])).encode() + b" " * (MAX_BODY + 1), {}, 413, "body"),
    (
        "token id outside vocab",
        json.dumps({"inputs": [ids_input([1, 2], [2, 99999])]}).encode(),
        {},
        400,
        "inputs[0].data",
    ),
    ("float token ids", json.dumps({"inputs": [ids_input([1, 2], [2.5, 3])]}).encode(), {}, 400, "inputs[0].data"),
    (
        "sequence too long",
        json.dumps({"inputs": [ids_input([1, SEQUENCE_LENGTH + 1], [5] * (SEQUENCE_LENGTH + 1))]}).encode(),
        {},
        413,
        "inputs[0].shape",
    ),
    (
        "mask shape mismatch",
        json.dumps({"inputs": [ids_input([1, 2], [5, 6]), ids_input([1, 3], [1, 1, 1], "attention_mask")]}).encode(),
        {},
        400,
        "attention_mask",
    ),
    (
        "mask not binary",
        json.dumps({"inputs": [ids_input([1, 2], [5, 6]), ids_input([1, 2], [1, 7], "attention_mask")]}).encode(),
        {},
        400,
        "inputs[1].data",
    ),
    (
        "text and ids",
        json.dumps({"inputs": [text_body(["a"])["inputs"][0], ids_input([1, 1], [5])]}).encode(),
        {},
        400,
        "inputs",
    ),
    (
        "duplicate input",
        json.dumps({"inputs": [text_body(["a"])["inputs"][0]] * 2}).encode(),
        {},
        400,
        "inputs[1].name",
    ),
    (
        "unknown output",
        json.dumps(text_body(["a"], outputs=[{"name": "probabilities"}])).encode(),
        {},
        400,
        "outputs[0].name",
    ),
    (
        "bad binary header",
        b'{"inputs": []}',
        {"Inference-Header-Content-Length": "999"},
        400,
        "Inference-Header-Content-Length",
    ),
    ("binary size overrun", *binary_text_request(["abc"], declared=50), 400, "binary_data_size"),
    # Found by tests/container/neuron/test_fuzz_http.py (500s before): JSON nested past the parser's recursion
    # limit, a lone surrogate (the "\ud800" escape) that the tokenizer refuses, binary BYTES not UTF-8.
    ("nested too deeply", b"[" * 50_000, {}, 400, "body: malformed JSON: nested too deeply"),
    (
        "lone surrogate",
        json.dumps(text_body(["ok", "a\ud800b"])).encode(),
        {},
        400,
        "inputs[0].data[1]: not valid Unicode (surrogates not allowed at character 1)",
    ),
    (
        "binary BYTES not UTF-8",
        *binary_bytes_request([b"ok", b"\xff\xfe"]),
        400,
        "inputs[0].data[1]: not UTF-8 (invalid start byte at byte 0)",
    ),
]


@pytest.mark.parametrize("case, body, headers, status, field", MALFORMED, ids=[m[0] for m in MALFORMED])
@pytest.mark.parametrize("route", ["v2", "invocations"])
def test_malformed_input_gets_a_json_4xx_naming_the_field(server, case, body, headers, status, field, route):
    url = f"{server.url}/v2/models/{MODEL}/infer" if route == "v2" else server.url + "/invocations"
    response = requests.post(url, data=body, headers={"Content-Type": "application/json", **headers})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error.startswith(field) or field in error, error


def test_repository_index_rejects_json_nested_too_deeply(server):
    # Found by tests/container/neuron/test_fuzz_http.py: the RecursionError was a 500.
    response = requests.post(server.url + "/v2/repository/index", data=b"[" * 50_000)
    assert response.status_code == 400
    assert response.json() == {"error": "body: malformed JSON: nested too deeply"}


def test_worker_survives_bad_input(server):
    pids = {e["pid"] for e in server.logs() if e.get("msg") == "model ready"}
    requests.post(f"{server.url}/v2/models/{MODEL}/infer", data=b"\xff\xfe garbage")
    requests.post(f"{server.url}/v2/models/{MODEL}/infer", json={"inputs": [ids_input([1, 1], [2**70])]})
    ok = requests.post(f"{server.url}/v2/models/{MODEL}/infer", json=text_body(["still alive"]))
    assert ok.status_code == 200
    assert server.proc.poll() is None
    assert {e["pid"] for e in server.logs() if e.get("msg") == "model ready"} == pids


def test_logs_are_json_lines(server):
    entries = server.logs()
    assert any(e.get("msg") == "model ready" and e["backend"] == "cpu" for e in entries)
    rejected = [e for e in entries if e.get("msg") == "rejected request"]
    assert rejected and all({"ts", "level", "status", "error"} <= set(e) for e in rejected)
