"""Property-based fuzzing of the Neuron serving app over real HTTP: whatever the body and headers, every
route answers 2xx or 4xx (never 5xx), the worker stays up, and /ping still answers afterwards.

One real server (serve.py with the tiny CPU artifact) serves every property. Bodies are random bytes,
random JSON, and near-valid KServe v2 requests with wrong types, shapes, datatypes, huge or negative
dimensions, binary tails and header lengths that lie. Derandomized (tests/conftest.py)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.fuzz import fuzz_examples
from tests.support.neuron_server import SEQUENCE_LENGTH, ServerProcess

pytestmark = pytest.mark.fuzz

MODEL = "tiny-bert"
MAX_BATCH = 4
MAX_TEXT = 200
MAX_BODY = 16 * 1024
INFER_ROUTES = [f"/v2/models/{MODEL}/infer", f"/v2/models/{MODEL}/versions/1/infer", "/invocations"]
OTHER_POST_ROUTES = [
    "/v2/repository/index",
    "/v2/models/other/infer",
    f"/v2/models/{MODEL}/versions/2/infer",
    "/ping",
    "/v2/health/ready",
    "/nowhere",
    "/v2/models/%ff%fe/infer",
]
GET_ROUTES = [
    "/ping",
    "/v2/health/live",
    "/v2/health/ready",
    "/v2",
    f"/v2/models/{MODEL}",
    "/v2/models/x/ready",
    f"/v2/models/{MODEL}/versions/1/ready",
    "/metrics",
    "/v2/models/%00",
    "/invocations",
]


@pytest.fixture(scope="module")
def server(artifact: Path):
    proc = ServerProcess(
        artifact,
        env={
            "MODEL_NAME": MODEL,
            "SERVER_MAX_BATCH_SIZE": str(MAX_BATCH),
            "SERVER_MAX_QUEUE_DELAY_MS": "1",
            "SERVER_MAX_TEXT_CHARS": str(MAX_TEXT),
            "SERVER_MAX_BODY_BYTES": str(MAX_BODY),
            "SERVER_WARMUP_ITERATIONS": "1",
        },
    )
    proc.wait_ready()
    yield proc
    errors = [e for e in proc.logs() if e.get("level") in ("error", "critical")]
    assert proc.stop() == 0
    assert not errors, errors


@pytest.fixture(scope="module")
def http():
    with requests.Session() as session:
        yield session


def send(server, http, method: str, route: str, body: bytes = b"", headers: dict | None = None) -> requests.Response:
    response = http.request(method, server.url + route, data=body, headers=headers or {}, timeout=60)
    assert response.status_code < 500, (method, route, body[:300], headers, response.status_code, response.text[:300])
    assert server.proc.poll() is None, "server exited:\n" + "\n".join(server.lines[-30:])
    assert_still_up(server, http)
    return response


def assert_still_up(server, http) -> None:
    assert http.get(server.url + "/ping", timeout=30).status_code == 200


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=20),
    st.sampled_from([0, 1, -1, 2**63, 2**64, 10**300, 1e308, "TEXT", "INT64", "BYTES"]),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=25,
)

dimension = st.one_of(
    st.integers(0, 5),
    st.integers(-3, 40),
    st.sampled_from([2**31, 2**63, 2**64, 10**30]),
    st.floats(0, 4),
    st.booleans(),
    st.text(max_size=3),
    st.none(),
)
shape = st.one_of(st.lists(dimension, max_size=4), json_values)
token = st.one_of(
    st.integers(-2, 40),
    st.sampled_from([2**63, -(2**63) - 1, 2**64, 0, 1]),
    st.floats(),
    st.text(max_size=3),
    st.none(),
)
text_item = st.one_of(
    st.text(max_size=30), st.sampled_from(["\ud800", "x\udfff", "a" * (MAX_TEXT + 1), ""]), st.integers(), st.none()
)
# Any code point: Hypothesis leaves out surrogates unless asked, and JSON's "\ud800" escape decodes to one.
any_char = st.one_of(st.characters(), st.characters(categories=["Cs"]), st.characters(categories=["Cc", "Zl", "Zp"]))
HOSTILE_TEXTS = ["\ud800", "a\udfffb", "\x00", "x\u2028y", "\ufeff", "e\u0301", "\U0001f600", "\x1b[31m", " "]
any_text = st.one_of(st.sampled_from(HOSTILE_TEXTS), st.text(max_size=30), st.text(any_char, min_size=1, max_size=30))


def nested_data(item) -> st.SearchStrategy:
    flat = st.lists(item, max_size=2 * SEQUENCE_LENGTH)
    rows = st.lists(st.lists(item, max_size=SEQUENCE_LENGTH), max_size=5)
    deep = st.integers(1, 30).flatmap(lambda depth: item.map(lambda v: _wrap(v, depth)))
    return st.one_of(flat, rows, deep, json_values)


def _wrap(value, depth: int):
    for _ in range(depth):
        value = [value]
    return value


@st.composite
def tensor(draw) -> dict:
    name = draw(st.sampled_from(["TEXT", "input_ids", "attention_mask", "TEXT", "input_ids", "IMAGE", "", None, 7]))
    datatype = draw(st.sampled_from(["BYTES", "INT64", "FP32", "INT32", "", None, ["BYTES"]]))
    if draw(st.integers(0, 3)):  # mostly the datatype that goes with the name
        datatype = {"TEXT": "BYTES", "input_ids": "INT64", "attention_mask": "INT64"}.get(name, datatype)
    item = text_item if name == "TEXT" else token
    result: dict = {"name": name, "datatype": datatype, "shape": draw(shape), "data": draw(nested_data(item))}
    if draw(st.integers(0, 2)) == 0:  # a plausible shape for the data
        data = result["data"]
        if isinstance(data, list) and data and all(isinstance(row, list) for row in data):
            result["shape"] = [len(data), len(data[0])]
        elif isinstance(data, list):
            result["shape"] = [len(data)]
    if draw(st.integers(0, 5)) == 0:
        del result["data"]
    if draw(st.integers(0, 4)) == 0:
        result["parameters"] = draw(
            st.one_of(
                st.fixed_dictionaries(
                    {
                        "binary_data_size": st.one_of(
                            st.integers(-5, 300), st.booleans(), st.floats(), st.sampled_from([2**64, 10**30])
                        )
                    }
                ),
                json_values,
            )
        )
    for key in draw(st.lists(st.sampled_from(["name", "datatype", "shape"]), max_size=1)):
        result.pop(key, None)
    return result


@st.composite
def well_formed_tensor(draw) -> dict:
    """Right name, datatype and shape for its data, so the request reaches the model: only the values
    (any code point, token ids) and now and then the row count are hostile."""
    # Hypothesis favours small draws (0 above all), so the rare branches test for a value in the middle.
    rows = MAX_BATCH + 1 if draw(st.integers(0, 7)) == 5 else draw(st.integers(1, MAX_BATCH))
    if draw(st.booleans()):
        texts = draw(st.lists(any_text, min_size=rows, max_size=rows))
        if draw(st.integers(0, 5)) == 3:
            texts[draw(st.integers(0, rows - 1))] = draw(text_item)
        return {"name": "TEXT", "datatype": "BYTES", "shape": draw(st.sampled_from([[rows], [rows, 1]])), "data": texts}
    width = SEQUENCE_LENGTH + 1 if draw(st.integers(0, 7)) == 5 else draw(st.integers(1, SEQUENCE_LENGTH))
    values = token if draw(st.integers(0, 3)) == 2 else st.integers(0, 40)
    data = draw(st.lists(st.lists(values, min_size=width, max_size=width), min_size=rows, max_size=rows))
    return {"name": "input_ids", "datatype": "INT64", "shape": [rows, width], "data": data}


@st.composite
def kserve_request(draw) -> tuple[bytes, dict]:
    """A near-valid KServe v2 request: (body, headers), sometimes with a binary tail."""
    if draw(st.integers(0, 2)) < 2:  # one well-formed tensor: the request gets as far as the model
        body: dict = {"inputs": [draw(well_formed_tensor())]}
    else:
        body = {"inputs": draw(st.lists(st.one_of(tensor(), well_formed_tensor()), min_size=1, max_size=3))}
    if draw(st.integers(0, 2)) == 1:
        body["outputs"] = draw(
            st.one_of(
                st.lists(
                    st.fixed_dictionaries(
                        {"name": st.sampled_from(["logits", "label", "probabilities", None])},
                        optional={
                            "parameters": st.one_of(st.fixed_dictionaries({"binary_data": st.booleans()}), json_values)
                        },
                    ),
                    max_size=3,
                ),
                json_values,
            )
        )
    if draw(st.integers(0, 3)) == 1:
        body["id"] = draw(st.one_of(any_text, json_values))
    if draw(st.integers(0, 3)) == 1:
        body["parameters"] = draw(st.one_of(st.fixed_dictionaries({"binary_data_output": st.booleans()}), json_values))
    if draw(st.integers(0, 7)) == 5:
        body = draw(st.sampled_from([body["inputs"], {"inputs": body}, {"input": body["inputs"]}]))
    header = json.dumps(body, allow_nan=True).encode()
    headers = {"Content-Type": draw(st.sampled_from(["application/json", "application/octet-stream", "text/plain"]))}
    if draw(st.integers(0, 5)) == 3:
        tail = draw(
            st.one_of(
                st.binary(max_size=64),
                st.lists(st.binary(max_size=8), max_size=4).map(
                    lambda parts: b"".join(struct.pack("<I", len(p)) + p for p in parts)
                ),
                st.lists(st.integers(-(2**63), 2**63 - 1), max_size=8).map(
                    lambda ints: b"".join(struct.pack("<q", i) for i in ints)
                ),
            )
        )
        length = draw(
            st.one_of(
                st.just(len(header)),
                st.integers(-2, len(header) + len(tail) + 2),
                st.sampled_from(["", "x", "1e3", "+12", "0x10", "1_0", str(2**70)]),
            )
        )
        headers["Inference-Header-Content-Length"] = str(length)
        return header + tail, headers
    return header, headers


@st.composite
def model_request(draw) -> dict:
    """A request of valid structure with hostile contents: any code point in the texts (lone surrogates
    too), token ids and masks anywhere in INT64, optional outputs. Most of these reach the model."""
    rows = draw(st.integers(1, MAX_BATCH))
    if draw(st.booleans()):
        inputs = [
            {
                "name": "TEXT",
                "datatype": "BYTES",
                "shape": [rows],
                "data": draw(st.lists(any_text, min_size=rows, max_size=rows)),
            }
        ]
    else:
        width = draw(st.integers(1, SEQUENCE_LENGTH))
        ids = st.lists(st.lists(st.integers(0, 60), min_size=width, max_size=width), min_size=rows, max_size=rows)
        inputs = [{"name": "input_ids", "datatype": "INT64", "shape": [rows, width], "data": draw(ids)}]
        if draw(st.booleans()):
            mask = st.lists(st.lists(st.integers(0, 1), min_size=width, max_size=width), min_size=rows, max_size=rows)
            inputs.append({"name": "attention_mask", "datatype": "INT64", "shape": [rows, width], "data": draw(mask)})
    body: dict = {"inputs": inputs}
    if draw(st.booleans()):
        body["outputs"] = [
            {"name": name, "parameters": {"binary_data": draw(st.booleans())}}
            for name in draw(st.lists(st.sampled_from(["logits", "label"]), min_size=1, max_size=2))
        ]
    if draw(st.booleans()):
        body["id"] = draw(any_text)
    return body


@settings(max_examples=fuzz_examples(100), deadline=None)
@given(model_request(), st.sampled_from(INFER_ROUTES))
def requests_that_reach_the_model(server, http, body, route):
    response = send(server, http, "POST", route, json.dumps(body).encode(), {"Content-Type": "application/json"})
    assert response.status_code in (200, 400), response.text


@settings(max_examples=fuzz_examples(300), deadline=None)
@given(kserve_request(), st.sampled_from(INFER_ROUTES))
def near_valid_kserve_requests(server, http, request_and_headers, route):
    body, headers = request_and_headers
    response = send(server, http, "POST", route, body, headers)
    if response.status_code != 200:
        assert set(response.json()) == {"error"}


@settings(max_examples=fuzz_examples(150), deadline=None)
@given(json_values, st.sampled_from(INFER_ROUTES + OTHER_POST_ROUTES))
def random_json(server, http, value, route):
    send(server, http, "POST", route, json.dumps(value).encode(), {"Content-Type": "application/json"})


@settings(max_examples=fuzz_examples(150), deadline=None)
@given(
    st.one_of(
        st.binary(max_size=300),
        st.sampled_from(
            [
                b"[" * 5000,
                b'{"inputs":' * 1500,
                b"\xff\xfe",
                b"\x00" * 100,
                b'{"inputs": [{"name": "TEXT"' + b" " * (MAX_BODY + 1),
            ]
        ),
    ),
    st.sampled_from(INFER_ROUTES + OTHER_POST_ROUTES),
)
def random_bytes(server, http, body, route):
    send(server, http, "POST", route, body, {"Content-Type": "application/octet-stream"})


@settings(max_examples=fuzz_examples(60), deadline=None)
@given(
    st.sampled_from(GET_ROUTES + INFER_ROUTES),
    st.sampled_from(["GET", "PUT", "DELETE", "PATCH", "OPTIONS"]),
    st.binary(max_size=50),
)
def other_methods(server, http, route, method, body):
    send(server, http, method, route, body)


PROPERTIES = [requests_that_reach_the_model, near_valid_kserve_requests, random_json, random_bytes, other_methods]


def test_every_route_answers_2xx_or_4xx_and_the_server_stays_up(server, http):
    # The properties run in one test so that one server serves them all, however pytest-xdist splits the
    # suite. A failure names its property and its (shrunk) falsifying example.
    for prop in PROPERTIES:
        prop(server, http)
    assert_still_up(server, http)
    ok = http.post(
        server.url + INFER_ROUTES[0],
        timeout=60,
        json={"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["still serving"]}]},
    )
    assert ok.status_code == 200, ok.text
