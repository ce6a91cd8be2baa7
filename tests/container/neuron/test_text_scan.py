"""text_scan.c (the _text_scan extension) against the Python path it shortcuts: for any body, either it
declines (None) or the Python path (protocol.py's parse, then ascii_wordpiece.py's encode) accepts the
same body as a plain TEXT request with exactly the same ids. It must also not decline the common request,
or it would save nothing. Bodies are random near-misses of the common shape, mutated bytes and raw bytes.
Derandomized (tests/conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import requests
from hypothesis import assume, given, settings
from hypothesis import strategies as st

# serving/ and build/'s flat modules, on the path from conftest.py (ruff would count them third-party).
# isort: split
import _text_scan
import ascii_wordpiece
import build_text_scan
from protocol import PLAIN_TEXT_REPLY, InferRequest, ModelInterface, ProtocolError
from runner import TextRows

from tests.support.fuzz import fuzz_examples, mutate
from tests.support.wordpiece import MAX_LENGTH, TOKENIZERS, printable, wordy

MAX_ROWS, MAX_CHARS = 8, 200
INTERFACE = ModelInterface(
    name="m",
    metadata={"backend": "cpu", "sequence_length": MAX_LENGTH, "labels": ["a", "b"], "vocab_size": 1000},
    max_rows=MAX_ROWS,
    max_text_chars=MAX_CHARS,
)


def fast_path(name: str):
    """A fresh AsciiWordPiece (empty word cache) and its scanner, as a worker builds them."""
    fast = ascii_wordpiece.from_tokenizer(TOKENIZERS[name], MAX_LENGTH)
    scanner = fast.scanner(max_rows=MAX_ROWS, max_text_chars=MAX_CHARS)
    assert scanner is not None
    return fast, scanner.scan


SCANNERS = {name: fast_path(name) for name in TOKENIZERS}


def python_path(fast, body: bytes):
    """What the server does without the scanner: the parsed request and each text's fast-path ids, or why not."""
    try:
        parsed = INTERFACE.parse(body, None)
    except ProtocolError as exc:
        return f"refused: {exc}"
    if not isinstance(parsed.payload, TextRows):
        return "token ids"
    ids = [fast.encode(text) for text in parsed.payload.texts]  # fills the cache, as a worker's prepare does
    if any(row is None for row in ids):
        return "left to the library"
    return parsed, ids


def agree(name: str, body: bytes) -> list[list[int]] | None:
    """Scan ``body`` with a warm cache and hold any answer to the Python path's."""
    fast, scan = SCANNERS[name]
    expected = python_path(fast, body)  # first, as the server falls back on a cache miss and caches the words
    got = scan(body)
    if got is not None:
        assert not isinstance(expected, str), (body, expected)
        parsed, ids = expected
        assert got == ids, body
        assert (parsed.id, parsed.outputs, parsed.binary_outputs) == (
            PLAIN_TEXT_REPLY.id,
            PLAIN_TEXT_REPLY.outputs,
            PLAIN_TEXT_REPLY.binary_outputs,
        )
    return got


def body(texts: list[str], shape: list | None = None, *, nested: bool = False, **extra) -> bytes:
    data = [[text] for text in texts] if nested else texts
    tensor = {"name": "TEXT", "datatype": "BYTES", "shape": shape or [len(texts)], "data": data}
    return json.dumps({"inputs": [tensor], **extra}).encode()


COMMON = [
    body(["a plain query"]),
    body(["a plain query"], [1, 1]),
    body(["one", "Two, with punctuation!", "three's e-mail: x@y.z"], nested=True),
    body(["x" * MAX_CHARS]),  # at the limit
    b' {\n\t"inputs" : [ { "data":["reordered keys"], "shape":[1,1], "datatype":"BYTES", "name":"TEXT" } ] }\r\n',
    json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2], "data": [["a", "b"]]}]}).encode(),
    body([" ".join(["word"] * 40)]),  # truncated to the sequence length
]


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
@pytest.mark.parametrize("request_body", COMMON, ids=range(len(COMMON)))
def test_the_common_request_is_read_in_c_with_the_python_path_s_ids(name, request_body):
    assert agree(name, request_body) is not None


DECLINED = {
    "an id": body(["q"], id="r-1"),
    "parameters": body(["q"], parameters={"binary_data_output": True}),
    "outputs": body(["q"], outputs=[{"name": "label"}]),
    "tensor parameters": json.dumps(
        {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["q"], "parameters": {}}]}
    ).encode(),
    "two tensors": json.dumps(
        {"inputs": [json.loads(body(["q"]))["inputs"][0], json.loads(body(["r"]))["inputs"][0]]}
    ).encode(),
    "a repeated key": body(["q"]).replace(b'"name": "TEXT"', b'"name": "TEXT", "name": "TEXT"'),
    "a repeated top-level key": body(["q"])[:-1] + b', "inputs": []}',
    "an escape": body(['say "hi"']),
    "a unicode escape": body(["caf\u00e9"]),
    "an escaped backslash": body(["back\\slash"]),
    "an escaped letter": body(["Q"]).replace(b'"Q"', b'"\\u0051"'),
    "an escaped solidus": body(["a/b"]).replace(b"a/b", b"a\\/b"),
    "raw UTF-8": body(["caf\u00e9"]).replace(b"\\u00e9", "\u00e9".encode()),
    "a tab in the text": body(["a\tb"]),
    "an empty text": body([""]),
    "a blank text": body(["   "]),
    "a text over the limit": body(["x" * (MAX_CHARS + 1)]),
    "more rows than a request may have": body(["q"] * (MAX_ROWS + 1)),
    "a shape the data does not fill": body(["q"], [2]),
    "a zero batch": body(["q"], [0]),
    "a float in the shape": b'{"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1.0], "data": ["q"]}]}',
    "an exponent in the shape": body(["q"]).replace(b"[1]", b"[1e0]"),
    "a leading zero": b'{"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [01], "data": ["q"]}]}',
    "a second dimension of 2": body(["q", "r"], [1, 2]),
    "a second dimension of 2 over as many texts": body(["q", "r"], [2, 2]),
    "three dimensions": body(["q"], [1, 1, 1]),
    "nested deeper": b'{"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [[["q"]]]}]}',
    "mixed nesting": b'{"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2], "data": ["q", ["r"]]}]}',
    "no data": b'{"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1]}]}',
    "token ids": b'{"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [1, 1], "data": [5]}]}',
    "another datatype": body(["q"]).replace(b"BYTES", b"STRING"),
    "trailing data": body(["q"]) + b" {}",
    "a byte-order mark": b"\xef\xbb\xbf" + body(["q"]),
    "an added token": body(["a [MASK] b"]),
    "an added token in upper case": body(["a [cls] b".upper()]),
    "not JSON": b"inputs=TEXT",
    "empty": b"",
}


@pytest.mark.parametrize("case", sorted(DECLINED))
def test_anything_else_is_left_to_the_python_path(case):
    fast, scan = SCANNERS["bert"]
    # Every word of these bodies cached first, so that a decline is the scanner's rule, not a cache miss.
    python_path(fast, body(["q r a b mask cls [ ] say hi x caf e words STRING back \\ slash u0051 u00e9 /"]))
    fast.encode("x" * (MAX_CHARS + 1))  # a word the Python path refuses to reach, cached all the same
    python_path(fast, DECLINED[case])
    assert scan(DECLINED[case]) is None


def test_a_word_not_cached_yet_is_left_to_the_python_path_which_caches_it():
    fast, scan = fast_path("bert")
    request = body(["words nobody has asked about"])
    assert scan(request) is None
    python_path(fast, request)
    assert scan(request) is not None


def test_the_scanner_checks_what_it_is_given():
    with pytest.raises(TypeError):
        _text_scan.Scanner(
            cache={}, lowercase=True, prefix=(2,), suffix=(3,), budget=8, added=("[cls]",), max_rows=1, max_chars=1
        )
    with pytest.raises(ValueError):
        _text_scan.Scanner(
            cache={}, lowercase=True, prefix=(2,), suffix=(3,), budget=0, added=(), max_rows=1, max_chars=1
        )
    with pytest.raises(TypeError):
        SCANNERS["bert"][1]("not bytes")
    odd_cache = _text_scan.Scanner(
        cache={"q": (5,)}, lowercase=True, prefix=(2,), suffix=(3,), budget=8, added=(), max_rows=1, max_chars=9
    )
    with pytest.raises(TypeError, match="non-list"):
        odd_cache.scan(body(["q"]))


# Half the bodies common in shape and half of those without extras, so a quarter are the scanner's to read.
shapes = st.one_of(st.sampled_from([None, "n1"]), st.sampled_from(["n2", [1], [2], [0], [1, 2], ["1"], [True]]))
extras = st.one_of(st.just({}), st.sampled_from([{"id": "x"}, {"parameters": {}}, {"outputs": [{"name": "logits"}]}]))
escapes = st.lists(st.sampled_from(["a", " ", "\\", '"', "/", "\x7f", "Z"]), max_size=8).map("".join)


@st.composite
def near_common(draw) -> bytes:
    texts = draw(st.lists(st.one_of(printable, wordy, escapes), min_size=1, max_size=4))
    shape = draw(shapes)
    shape = {"n1": [len(texts), 1], "n2": [len(texts), 2]}.get(shape, shape) if isinstance(shape, str) else shape
    tensor = {"name": "TEXT", "datatype": "BYTES", "shape": shape or [len(texts)], "data": texts}
    if draw(st.booleans()):
        tensor["data"] = [[text] for text in texts]
    order = draw(st.permutations(sorted(tensor)))
    document = {"inputs": [{key: tensor[key] for key in order}], **draw(extras)}
    separators = draw(st.sampled_from([(", ", ": "), (",", ":"), (" ,\n", " :\t")]))
    return json.dumps(document, separators=separators, ensure_ascii=draw(st.booleans())).encode()


@settings(max_examples=fuzz_examples(400), deadline=None)
@given(near_common(), st.sampled_from(sorted(TOKENIZERS)))
@pytest.mark.fuzz
def test_near_misses_of_the_common_request_are_read_as_the_python_path_reads_them(request_body, name):
    got = agree(name, request_body)
    document = json.loads(request_body)
    tensor = document["inputs"][0]
    texts = [t for item in tensor["data"] for t in (item if isinstance(item, list) else [item])]
    common = (
        set(document) == {"inputs"}
        and all(type(d) is int for d in tensor["shape"])  # json reads true as a bool, which equals 1
        and tensor["shape"] in ([len(texts)], [len(texts), 1])
        and len(texts) <= MAX_ROWS
        and all(0 < len(t) <= MAX_CHARS and t.strip(" ") and t.isascii() and t.isprintable() for t in texts)
        and not any(set(t) & {'"', "\\", "["} for t in texts)  # escaped in JSON; "[" starts the added tokens
    )
    if common:  # the bodies it exists for are read in C (the cache is warm after the Python path)
        assert got is not None, request_body


@settings(max_examples=fuzz_examples(400), deadline=None)
@given(st.sampled_from(COMMON), st.data())
@pytest.mark.fuzz
def test_a_mutated_body_is_declined_or_read_as_the_python_path_reads_it(request_body, data):
    agree("bert", mutate(request_body, data, b'{}[]",: \\\t0123456789aZ\x00\xff', 4))


@settings(max_examples=fuzz_examples(300), deadline=None)
@given(st.binary(max_size=300))
@pytest.mark.fuzz
def test_any_bytes_are_declined_or_read_as_the_python_path_reads_them(raw):
    assume(raw.strip())
    agree("bert", raw)


def test_the_build_writes_the_module_whole_and_reports_a_failed_compile():
    built = build_text_scan.target()
    assert built.is_file()  # make setup built it: the suite reads the C path, not only the Python one
    before = built.stat().st_mtime_ns
    result = subprocess.run(
        [sys.executable, build_text_scan.__file__],
        capture_output=True,
        text=True,
        env={"CC": "false", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 1 and "the compiler failed" in result.stderr
    assert built.stat().st_mtime_ns == before and not built.with_name(built.name + ".partial").exists()


def test_server_text_scan_is_on_by_default_and_body_or_off_on_request(tmp_path):
    import argparse

    from server_settings import SettingsError, add_arguments, from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--model-dir", str(tmp_path)])
    modes = lambda settings: (settings.text_scan, settings.text_scan_head)  # noqa: E731
    assert modes(from_args(args, {})) == (True, True)  # the body in C, and the HTTP head with it (test_http_front.py)
    assert modes(from_args(args, {"SERVER_TEXT_SCAN": "body"})) == (True, False)
    assert modes(from_args(args, {"SERVER_TEXT_SCAN": "off"})) == (False, False)
    flagged = parser.parse_args(["--model-dir", str(tmp_path), "--text-scan", "OFF"])
    assert modes(from_args(flagged, {})) == (False, False)
    with pytest.raises(SettingsError, match=r"SERVER_TEXT_SCAN\): must be on, body or off, got 'sometimes'"):
        from_args(args, {"SERVER_TEXT_SCAN": "sometimes"})


def test_without_the_extension_there_is_no_scanner_and_the_python_path_serves(monkeypatch):
    fast, _ = fast_path("bert")
    monkeypatch.setitem(sys.modules, "_text_scan", None)  # as if the image had not built it: import fails
    assert fast.scanner(max_rows=MAX_ROWS, max_text_chars=MAX_CHARS) is None


def test_a_worker_with_server_text_scan_off_reads_every_request_in_python(artifact, start_server):
    # The emulated accelerator (a stand-in: no torch) keeps start-up short; this is about the switch only.
    server = start_server(artifact, env={"SERVER_TEXT_SCAN": "off"}, args=("--standin-accelerator-ms", "1"))
    server.wait_ready()
    reply = requests.post(f"{server.url}/v2/models/model/infer", data=body(["a plain query"]), timeout=30)
    assert reply.status_code == 200 and reply.json()["outputs"][1]["name"] == "label"
    ready = [e for e in server.logs() if e.get("msg") == "model ready"]
    assert ready and all(e["text_scan"] is False for e in ready)


# -- the reply: Replier.json against protocol.py's own writer --------------------------------------------------

LABELS = ["book_flight", "cancel_order", 'what\'s "this"', "café", "back\\slash"]
REPLY_METADATA = {"backend": "cpu", "sequence_length": MAX_LENGTH, "labels": LABELS, "vocab_size": 1000}
NATIVE = ModelInterface(
    name="intent-bert", metadata=REPLY_METADATA, max_rows=16, max_text_chars=MAX_CHARS, native_replies=True
)
PYTHON = ModelInterface(name="intent-bert", metadata=REPLY_METADATA, max_rows=16, max_text_chars=MAX_CHARS)

WIDTH = len(LABELS)
logit_arrays = st.integers(1, 16).flatmap(
    lambda rows: st.lists(st.floats(width=32), min_size=rows * WIDTH, max_size=rows * WIDTH).map(
        lambda values: np.array(values, dtype=np.float32).reshape(rows, WIDTH)
    )
)


@settings(max_examples=fuzz_examples(400), deadline=None)
@given(logit_arrays)
@pytest.mark.fuzz
def test_the_reply_written_in_c_is_the_python_writers_bytes(logits):
    assert NATIVE.native_reply is not None and PYTHON.native_reply is None
    native = NATIVE.native_reply(logits)
    if np.isfinite(logits).all():
        assert native is not None  # what it exists for: finite float32 logits
    else:
        assert native is None  # json's NaN and Infinity: left to the Python writer
    assert NATIVE.response(PLAIN_TEXT_REPLY, logits) == PYTHON.response(PLAIN_TEXT_REPLY, logits)


def test_ties_negative_zero_and_extremes_reply_as_numpy_and_float_repr_do():
    logits = np.array(
        [[1.0, 1.0, 0.5, 0.5, 0.0], [-0.0, 0.0, -1e-45, 3.4028235e38, -3.4028235e38], [0.1, 0.2, 0.3, 0.3, 0.3]],
        dtype=np.float32,
    )
    native = NATIVE.native_reply(logits)
    assert native is not None and native == PYTHON._json_response(PLAIN_TEXT_REPLY, logits)
    assert json.loads(native)["outputs"][1]["data"] == [LABELS[0], LABELS[3], LABELS[2]]


@pytest.mark.parametrize(
    "case, logits",
    [
        ("float64", np.zeros((2, WIDTH), dtype=np.float64)),
        ("big-endian", np.zeros((2, WIDTH), dtype=">f4")),
        ("not contiguous", np.zeros((2, 2 * WIDTH), dtype=np.float32)[:, ::2]),
        ("a width other than the labels'", np.zeros((2, WIDTH + 1), dtype=np.float32)),
        ("one dimension", np.zeros(WIDTH, dtype=np.float32)),
        ("no rows", np.zeros((0, WIDTH), dtype=np.float32)),
        ("a NaN", np.array([[np.nan] + [0.0] * (WIDTH - 1)], dtype=np.float32)),
        ("not a buffer", [[0.0] * WIDTH]),
    ],
)
def test_logits_the_replier_does_not_take_are_left_to_the_python_writer(case, logits):
    assert NATIVE.native_reply(logits) is None


def test_a_request_with_an_id_or_its_own_outputs_is_replied_by_the_python_writer():
    logits = np.ones((1, WIDTH), dtype=np.float32)
    with_id = InferRequest("r-1", TextRows([]), PLAIN_TEXT_REPLY.outputs, frozenset())
    label_only = InferRequest(None, TextRows([]), ("label",), frozenset())
    assert NATIVE.response(with_id, logits) == PYTHON.response(with_id, logits)
    assert NATIVE.response(with_id, logits)[0].endswith(b',"id":"r-1"}')
    assert NATIVE.response(label_only, logits) == PYTHON.response(label_only, logits)
    assert b'"logits"' not in NATIVE.response(label_only, logits)[0]


def test_the_replier_checks_what_it_is_given():
    with pytest.raises(TypeError):
        _text_scan.Replier(name=b'"m"', labels=("a",))
    with pytest.raises(ValueError):
        _text_scan.Replier(name=b'"m"', labels=())
    with pytest.raises(ValueError):
        _text_scan.Replier(name=b'"m\0"', labels=(b'"a"',))


def padded_reference(requests: list[list[list[int]]], padded: int, width: int, pad: int) -> tuple:
    """runner.ModelRunner.stack's layout in numpy: each row's ids then pad, its mask over its ids; filler rows all
    pad, attending to their first token."""
    ids = np.full((padded, width), pad, dtype=np.int64)
    mask = np.zeros((padded, width), dtype=np.int64)
    rows = [row for request in requests for row in request]
    mask[len(rows) :, 0] = 1
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


token_rows = st.lists(st.integers(0, 2**40), max_size=8)
batches = st.lists(st.lists(token_rows, min_size=1, max_size=4), max_size=6)


@settings(max_examples=fuzz_examples(300), deadline=None)
@given(batches, st.integers(0, 5), st.integers(-(2**63), 2**63 - 1))
@pytest.mark.fuzz
def test_pack_lays_out_a_batch_as_numpy_stacking_does(requests, filler, pad):
    padded = max(1, sum(map(len, requests)) + filler)
    ids, mask = _text_scan.pack(requests, padded, 8, pad)
    want_ids, want_mask = padded_reference(requests, padded, 8, pad)
    assert np.array_equal(np.frombuffer(ids, dtype=np.int64).reshape(padded, 8), want_ids)
    assert np.array_equal(np.frombuffer(mask, dtype=np.int64).reshape(padded, 8), want_mask)


@pytest.mark.parametrize(
    "args, error, message",
    [
        (([[[1, 2, 3]]], 1, 2, 0), ValueError, "a row longer than width"),
        (([[[1], [2]]], 1, 4, 0), ValueError, "more rows than padded"),
        (([[[1]]], 0, 4, 0), ValueError, "at least 1"),
        (([[[1]]], 1, 0, 0), ValueError, "at least 1"),
        (([[[1]]], 2**62, 2**62, 0), ValueError, "at least 1"),  # the buffers' size would overflow
        (([[(1,)]], 1, 4, 0), TypeError, "a list of ids"),
        (([((1,),)], 1, 4, 0), TypeError, "a list of rows"),
        (([[["1"]]], 1, 4, 0), TypeError, "integer"),
        (([[[2**64]]], 1, 4, 0), OverflowError, "too"),
        (([[[1]]], 1, 4), TypeError, "pack(requests"),
        (((([1],),), 1, 4, 0), TypeError, "pack(requests"),
    ],
)
def test_pack_refuses_what_it_cannot_lay_out(args, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(")):
        _text_scan.pack(*args)


def test_the_runner_stacks_pre_tokenized_batches_in_c_as_in_numpy(artifact):
    from artifact import read_metadata
    from runner import EncodedRows, ModelRunner

    metadata = read_metadata(artifact)
    # The emulated accelerator (a stand-in for a NeuronCore): this test is about the model's inputs only.
    numpy_runner = ModelRunner(artifact, metadata, torch_threads=1, standin_batch_ms=0)
    native_runner = ModelRunner(artifact, metadata, torch_threads=1, standin_batch_ms=0, native_stack=True)
    assert numpy_runner._pack is None and native_runner._pack is _text_scan.pack
    encoded = [native_runner.prepare(TextRows([text])) for text in ("a plain query", "Another, with punctuation!")]
    encoded.append(EncodedRows([[101, 102], [101, 7, 102]]))
    mixed = [*encoded, TextRows(["une requête"])]  # a text for the library: the whole batch stacks in numpy
    for batch in (encoded, mixed):
        native, python = native_runner.stack(batch), numpy_runner.stack(batch)
        assert np.array_equal(native.input_ids, python.input_ids) and native.input_ids.dtype == np.int64
        assert np.array_equal(native.attention_mask, python.attention_mask) and native.rows == python.rows
        assert native.input_ids.flags.writeable  # torch.from_numpy warns on a read-only array
    assert native_runner.execute(native_runner.stack(encoded))[2].shape[0] == 2
