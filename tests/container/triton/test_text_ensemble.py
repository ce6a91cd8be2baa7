"""The text contract on the real tritonserver 2.51, started as SageMaker's serve script starts it: /invocations
reaches the text ensemble `<name>-text` (tokenizer step -> token-id model -> postprocessing step). What it
answers must equal tokenizing on the client with TextCodec and calling the token-id model by name (Triton's HTTP
front end, which the test servers also open on loopback). Errors: the exact status and JSON Triton returns.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import numpy as np
import pytest

from inferstack.triton import client as triton_client
from tests.support.real_triton import model_params, shipped

pytestmark = pytest.mark.real_triton

# Mixed lengths: one character, short, and over the sequence length (truncated).
TEXTS = [
    "hello world",
    "x",
    "speling mistaks here",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z " * 30,
    "the quick brown fox",
    "zz top",
]


def text_body(texts, shape=None, outputs=()):
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": shape or [len(texts)], "data": list(texts)}]}
    if outputs:
        body["outputs"] = [{"name": name} for name in outputs]
    return body


def answer(served, body) -> dict[str, np.ndarray]:
    status, reply = served.server.invoke(body)
    assert status == 200, reply[:500]
    parsed = json.loads(reply)
    assert parsed["model_name"] == f"{served.name}-text"
    return {t["name"]: (t["shape"], t["data"]) for t in parsed["outputs"]}


def by_name(served, texts, output):
    """TextCodec on the client, then the token-id model by name."""
    codec = triton_client.TextCodec.from_repository(served.repository / served.name)
    status, reply = served.server.infer(served.name, triton_client.request_body(codec.encode(texts), outputs=[output]))
    assert status == 200, reply[:500]
    return codec, triton_client.parse_response(reply)[output]


@pytest.mark.parametrize("name", model_params("text-classification"))
def test_classifier_text_in_label_out_equals_client_tokenization(name, serve):
    served = serve(name)
    labels = list(shipped(name).source.labels)
    for texts in (TEXTS[:1], TEXTS):
        got = answer(served, text_body(texts))
        _, want = by_name(served, texts, "logits")
        shape, data = got["logits"]
        assert shape == [len(texts), len(labels)]
        # The same ids reach the same graph: equal, not merely close.
        np.testing.assert_array_equal(np.array(data, dtype=np.float32).reshape(shape), want)
        assert got["label"] == ([len(texts)], [labels[i] for i in want.argmax(axis=1)])
    assert not np.allclose(want[0], want[1])


@pytest.mark.parametrize("name", model_params("text-classification"))
def test_classifier_answers_only_the_outputs_asked_for(name, serve):
    served = serve(name)
    assert set(answer(served, text_body(TEXTS[:2], outputs=["label"]))) == {"label"}
    assert set(answer(served, text_body(TEXTS[:2], outputs=["logits"]))) == {"logits"}


@pytest.mark.parametrize("name", model_params("text2text-generation"))
def test_t5_text_in_text_out_equals_client_tokenization_and_decoding(name, serve):
    served = serve(name)
    for texts in (TEXTS[:1], TEXTS):
        got = answer(served, text_body(texts))
        codec, ids = by_name(served, texts, "output_ids")
        assert set(got) == {"text"}
        assert got["text"] == ([len(texts)], codec.decode(ids))
    assert len(set(got["text"][1])) > 1


@pytest.mark.parametrize("name", model_params())
def test_text_errors_get_400_and_name_the_field(name, serve):
    """Raised by the tokenizer step (INVALID_ARG); Triton prefixes the ensemble's name."""
    served = serve(name)
    prefix = f"in ensemble '{name}-text', "
    limit = shipped(name).serving.max_batch_size
    cases = {
        "empty": (["fine", ""], "inputs[0].data[1]: empty text"),
        "blank": ([" \t\n"], "inputs[0].data[0]: empty text"),
        "too long": (["a" * 8193], "inputs[0].data[0]: text of 8193 characters exceeds the limit of 8192"),
        "too many": (
            ["a"] * (limit + 1),
            f"inputs[0].shape: {limit + 1} items exceed the maximum of {limit} per request",
        ),
        "none": ([], "inputs[0].shape: batch dimension must be at least 1"),
    }
    for what, (texts, message) in cases.items():
        status, reply = served.server.invoke(text_body(texts))
        assert (status, json.loads(reply)) == (400, {"error": prefix + message}), what
    # At the limit both pass.
    answer(served, text_body(["a" * 8192] + ["b"] * (limit - 1)))
    assert served.server.ping() == 200


@pytest.mark.parametrize("name", model_params())
def test_what_tritons_front_end_answers_for_bad_requests(name, serve):
    """Decided by Triton before any step runs: the exact status and message of 2.51."""
    served = serve(name)
    model = f"{name}-text"
    text = text_body(["a", "b"])["inputs"][0]
    cases = {
        "[n, 1]": (
            {"inputs": [{**text, "shape": [2, 1]}]},
            400,
            f"[request id: <id_unknown>] unexpected shape for input 'TEXT' for model '{model}'. "
            "Expected [-1], got [2,1]. ",
        ),
        "data does not fill the shape": (
            {"inputs": [{**text, "shape": [3]}]},
            400,
            "[request id: <id_unknown>] expected 3 string elements for inference input 'TEXT' "
            f"for model '{model}', got 2",
        ),
        "unknown input": (
            {"inputs": [{**text, "name": "nope"}]},
            400,
            f"unexpected inference input 'nope' for model '{model}'",
        ),
        "wrong datatype": (
            {"inputs": [{**text, "datatype": "INT64", "data": [1, 2]}]},
            400,
            "[request id: <id_unknown>] inference input 'TEXT' data-type is 'INT64', "
            f"but model '{model}' expects 'BYTES'",
        ),
        "unknown output": (
            {"inputs": [text], "outputs": [{"name": "nope"}]},
            400,
            f"unexpected inference output 'nope' for model '{model}'",
        ),
        "a number in data": (
            {"inputs": [{**text, "data": ["a", 5]}]},
            500,
            "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
        ),
        "not JSON": (
            b"{this is not json",
            500,
            "failed to parse the request JSON buffer: Missing a name for object member. at 1",
        ),
        "no inputs": (
            {"outputs": []},
            500,
            "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'",
        ),
    }
    for what, (body, status, message) in cases.items():
        got_status, reply = served.server.invoke(body)
        assert (got_status, json.loads(reply)) == (status, {"error": message}), what
    assert served.server.ping() == 200


@pytest.mark.parametrize("name", model_params())
def test_sagemakers_front_end_reaches_only_the_ensemble(name, serve):
    """/invocations is the default model's; the multi-model route answers 404 on a single-model endpoint."""
    served = serve(name)
    request = urllib.request.Request(
        f"{served.server.url}/models/{name}/invoke",
        method="POST",
        data=json.dumps(text_body(["a"])).encode(),
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 404


@pytest.mark.parametrize("name", model_params())
def test_concurrent_text_requests_reach_the_token_id_model_in_batches(name, serve):
    from concurrent.futures import ThreadPoolExecutor

    served = serve(name)
    texts = [TEXTS[i % len(TEXTS)] for i in range(24)]
    already = len(served.batches())
    with ThreadPoolExecutor(max_workers=12) as pool:
        answers = list(pool.map(lambda t: answer(served, text_body([t])), texts))
    alone = {t: answer(served, text_body([t])) for t in set(texts)}
    assert answers == [alone[t] for t in texts]
    first_onnx = name if shipped(name).source.task == "text-classification" else f"{name}-encoder"
    seen = [r for r in served.batches()[already:] if r["model"] == first_onnx]
    assert max(r["rows"] for r in seen) > 1, seen
