"""The HTTP front (text_scan.c's Scanner.request): one read that holds exactly one whole common request is taken
in C, its head and body, before httptools sees it (http_server.py, http_app.fast_inference). For any bytes,
either it declines (None) or the worker's own HTTP connection, without the front, reads the same bytes as exactly
one keep-alive HTTP/1.1 POST to the same route with the same body and no Inference-Header-Content-Length, and
the body scanner (test_text_scan.py holds it to the Python path) gives the same rows. It must also take the
common request in its usual spellings, or it would save nothing. Derandomized (tests/conftest.py)."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# serving/'s flat modules, on the path from conftest.py (ruff would count them third-party).
# isort: split
import ascii_wordpiece
import http_server
import metrics
from batcher import Overloaded
from http_app import ServerState, build_app
from protocol import ModelInterface

from tests.support.fuzz import fuzz_examples, mutate
from tests.support.wordpiece import MAX_LENGTH, TOKENIZERS

MAX_ROWS, MAX_CHARS, MAX_BODY = 8, 200, 4096
ROUTES = {"/v2/models/m/infer": "infer", "/v2/models/m/versions/1/infer": "infer", "/invocations": "invocations"}
PATHS = tuple(path.encode() for path in ROUTES)
NAMES = tuple(ROUTES.values())
METADATA = {"backend": "cpu", "sequence_length": MAX_LENGTH, "labels": ["a", "b"], "vocab_size": 1000}
INTERFACE = ModelInterface(name="m", metadata=METADATA, max_rows=MAX_ROWS, max_text_chars=MAX_CHARS)
WORDS = "a plain query with punctuation , and e-mail x@y.z one two three".split()

FAST = ascii_wordpiece.from_tokenizer(TOKENIZERS["bert"], MAX_LENGTH)
SCANNER = FAST.scanner(max_rows=MAX_ROWS, max_text_chars=MAX_CHARS)
for _word in WORDS:
    FAST.encode(_word)  # the words cached, as the Python path leaves them: a decline is the front's own rule


def body(texts: list[str], shape: list | None = None) -> bytes:
    tensor = {"name": "TEXT", "datatype": "BYTES", "shape": shape or [len(texts)], "data": texts}
    return json.dumps({"inputs": [tensor]}).encode()


BODY = body(["a plain query", "one, two three"])


def request(
    path: str = "/v2/models/m/infer",
    *,
    content: bytes = BODY,
    fields: list[tuple[str, str]] | None = None,
    method: str = "POST",
    version: str = "HTTP/1.1",
    length: str | None = None,
    eol: str = "\r\n",
) -> bytes:
    fields = [("Host", "m"), ("Content-Type", "application/json")] if fields is None else fields
    lines = [f"{method} {path} {version}", *(f"{name}: {value}" for name, value in fields)]
    if length != "none":
        lines.append(f"Content-Length: {len(content) if length is None else length}")
    return (eol.join(lines) + eol + eol).encode("latin-1") + content


# -- what the worker's connection does with the bytes without the front ---------------------------------------


class Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str) -> None:
        return None


def parser_view(data: bytes) -> list:
    """What http_server.py's connection makes of ``data`` without the front: each inference call's (route, body,
    Inference-Header-Content-Length), then ("reply", bytes) for whatever it answered itself, and "close" if it
    closes the connection after answering."""
    seen: list = []

    async def feed() -> None:
        server = http_server.HttpServer(
            app=None,
            infer_routes=ROUTES,
            infer=lambda route, content, header_length, reply: seen.append((route, content, header_length)),
            max_body_bytes=MAX_BODY,
        )
        connection = http_server.HttpConnection(server)
        transport = Transport()
        connection.connection_made(transport)
        connection.data_received(data)
        seen.extend(("reply", w) for w in transport.written)
        if connection.closing or transport.closed:
            seen.append("close")
        for task in server.tasks:  # an ASGI route (app=None here): not an inference request
            task.cancel()

    asyncio.run(feed())
    return seen


def agree(data: bytes):
    """Offer ``data`` to the front and hold any answer to the parser's reading and the body scanner's rows."""
    got = SCANNER.request(data, PATHS, MAX_BODY)
    if got is not None:
        index, rows = got
        head, _, content = data.partition(b"\r\n\r\n")
        assert parser_view(data) == [(NAMES[index], content, None)], data
        assert rows == SCANNER.scan(content), data
    return got


# -- the common request, taken ------------------------------------------------------------------------------

TAKEN = {
    "as the load test sends it": request(),
    "the versioned path": request("/v2/models/m/versions/1/infer"),
    "SageMaker's path": request("/invocations"),
    "no fields but the length": request(fields=[]),
    "the length first, names in odd case": request(length="none", fields=[("cOnTeNt-LeNgTh", str(len(BODY)))]),
    "keep-alive said": request(fields=[("Connection", "Keep-Alive")]),
    "whitespace around values": request(fields=[("Host", " \t m \t"), ("X-Trace", "")], length=f" {len(BODY)}\t"),
    "a length with leading zeros": request(length=f"000{len(BODY)}"),
    "an ALB's fields": request(
        fields=[
            ("X-Forwarded-For", "10.0.0.1"),
            ("X-Forwarded-Proto", "http"),
            ("X-Forwarded-Port", "80"),
            ("Host", "internal-alb.example"),
            ("X-Amzn-Trace-Id", "Root=1-67891233-abcdef012345678912345678"),
            ("Content-Type", "application/json"),
        ]
    ),
    "every token character in a name": request(fields=[("!#$%&'*+-.^_`|~09azAZ", "v")]),
    "a body of one row shaped [1, 1]": request(content=body(["a plain query"], [1, 1])),
}


@pytest.mark.parametrize("case", sorted(TAKEN))
def test_the_common_request_whole_in_one_read_is_taken_in_c(case):
    got = agree(TAKEN[case])
    assert got is not None


DECLINED = {
    "GET": request(method="GET"),
    "lower-case post": request(method="post"),
    "HTTP/1.0": request(version="HTTP/1.0"),
    "HTTP/2.0": request(version="HTTP/2.0"),
    "another model's path": request("/v2/models/other/infer"),
    "a query string": request("/v2/models/m/infer?x=1"),
    "a trailing slash": request("/v2/models/m/infer/"),
    "absolute form": request("http://m/v2/models/m/infer"),
    "Connection: close": request(fields=[("Connection", "close")]),
    "Connection: keep-alive, Upgrade": request(fields=[("Connection", "keep-alive, Upgrade")]),
    "Upgrade": request(fields=[("Upgrade", "h2c")]),
    "chunked": request(fields=[("Transfer-Encoding", "chunked")]),
    "Expect: 100-continue": request(fields=[("Expect", "100-continue")]),
    "the binary extension's header": request(fields=[("Inference-Header-Content-Length", str(len(BODY)))]),
    "no length": request(length="none"),
    "two lengths": request(fields=[("Content-Length", str(len(BODY)))]),
    "a length with a sign": request(length=f"+{len(BODY)}"),
    "a length in hex": request(length=hex(len(BODY))),
    "an empty length": request(length=""),
    "a ten-digit length": request(length=f"{len(BODY):010d}"),
    "a length one short": request(length=str(len(BODY) - 1)),
    "a length one long (the rest not read yet)": request(length=str(len(BODY) + 1)),
    "a body over the limit": request(content=BODY + b" " * MAX_BODY),
    "bare LF line ends": request(eol="\n"),
    "a bare CR in a value": request(fields=[("X-A", "b\rc")]),
    "obs-fold": request(fields=[("X-A", "b\r\n c")]),
    "a space before the colon": request(fields=[("Host ", "m")]),
    "an empty field name": request(fields=[("", "m")]),
    "obs-text in a value": request(fields=[("X-A", "caf\xe9")]),
    "a control byte in a value": request(fields=[("X-A", "a\x01b")]),
    "a head over 16 KiB": request(fields=[("X-Pad", "p" * 16500)]),
    "pipelined: a second request behind it": request() + request(),
    "pipelined: part of a second": request() + b"POST /v2/mo",
    "the head only": request().partition(b"\r\n\r\n")[0] + b"\r\n\r\n",
    "half the head": request()[:20],
    "a body the scanner declines": request(content=body(["q"], [2])),
    "a body with an id": request(content=json.dumps({"id": "1", **json.loads(BODY)}).encode()),
    "a word not cached": request(content=body(["zebra crossing"])),
}


@pytest.mark.parametrize("case", sorted(DECLINED))
def test_anything_else_is_left_to_the_parser(case):
    assert agree(DECLINED[case]) is None


def test_the_front_checks_what_it_is_given():
    with pytest.raises(TypeError):
        SCANNER.request(request(), [b"/invocations"], MAX_BODY)  # paths: a tuple
    with pytest.raises(TypeError):
        SCANNER.request(request(), ("/invocations",), MAX_BODY)  # of bytes
    with pytest.raises(TypeError):
        SCANNER.request(request(), PATHS)
    with pytest.raises(TypeError):
        SCANNER.request("not bytes", PATHS, MAX_BODY)
    assert SCANNER.request(request(), (), MAX_BODY) is None  # no paths, nothing taken


# -- fuzz: near misses of the head, mutated bytes, raw bytes -------------------------------------------------

names = st.sampled_from(
    ["Host", "HOST", "Content-Type", "User-Agent", "Accept", "X-Forwarded-For", "Connection", "connection",
     "Transfer-Encoding", "Expect", "Upgrade", "Inference-Header-Content-Length", "Content-Length", "X y", "X:y",
     "", "X\x7f"]
)  # fmt: skip
values = st.one_of(
    st.sampled_from(["m", "keep-alive", "close", "chunked", "100-continue", "", " padded\t", "a\rb", "a\nb",
                     "caf\xe9", "12", "-1", "h2c", "keep-alive, close"]),
    st.text(st.characters(min_codepoint=0, max_codepoint=255), max_size=6),
)  # fmt: skip
lengths = st.one_of(st.none(), st.sampled_from(["none", "", "+1", " 1 ", "0x10", "99999999999"]), st.integers(-2, 2))


@st.composite
def near_requests(draw) -> bytes:
    content = draw(st.sampled_from([BODY, body(["one"], [1, 1]), body(["q"], [2]), b"{}", b""]))
    length = draw(lengths)
    if isinstance(length, int):
        length = str(len(content) + length)
    data = request(
        draw(st.sampled_from([*ROUTES, "/v2/models/m/infer?q", "/", "/v2/models/m/infer "])),
        content=content,
        fields=draw(st.lists(st.tuples(names, values), max_size=5)),
        method=draw(st.sampled_from(["POST", "POST", "GET", "PUT", "post"])),
        version=draw(st.sampled_from(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/1.2", "http/1.1"])),
        length=length,
        eol=draw(st.sampled_from(["\r\n", "\r\n", "\r\n", "\n"])),
    )
    return data + draw(st.sampled_from([b"", b"", b"POST", request()]))


@settings(max_examples=fuzz_examples(400), deadline=None)
@given(near_requests())
@pytest.mark.fuzz
def test_near_misses_of_the_common_request_are_read_as_the_parser_reads_them(data):
    agree(data)


@settings(max_examples=fuzz_examples(200), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["Host", "Accept", "X-Id", "Connection"]), st.sampled_from(WORDS))))
@pytest.mark.fuzz
def test_well_formed_fields_of_any_kind_leave_the_common_request_taken(fields):
    fields = [(name, "keep-alive" if name == "Connection" else value) for name, value in fields]
    assert agree(request(fields=fields)) is not None  # not vacuous: what the front exists for is taken


@settings(max_examples=fuzz_examples(400), deadline=None)
@given(st.sampled_from(sorted(TAKEN)), st.data())
@pytest.mark.fuzz
def test_a_mutated_request_is_declined_or_read_as_the_parser_reads_it(case, data):
    agree(mutate(TAKEN[case], data, b' :\r\n\t0123456789aZ-/\x00\x7f\xff{}"', 3))


@settings(max_examples=fuzz_examples(200), deadline=None)
@given(st.binary(max_size=200))
@pytest.mark.fuzz
def test_any_bytes_are_declined_or_read_as_the_parser_reads_them(raw):
    agree(b"POST /invocations HTTP/1.1\r\n" + raw)


# -- the connection: what it offers the front, and in what order it answers --------------------------------


class Harness:
    """One connection of http_server.py with a fast handler that takes what the front takes (SCANNER.request) and
    answers when the test says; the parser's requests go to ``infer``, answered the same way."""

    def __init__(self, fast_raises: bool = False) -> None:  # raises: as a handler that took the request
        self.pending: list = []  # (how it came, reply)
        self.fast_raises = fast_raises

    def fast(self, data: bytes, reply) -> bool:
        if self.fast_raises:
            raise RuntimeError("a bug in the handler")
        if SCANNER.request(data, PATHS, MAX_BODY) is None:
            return False
        self.pending.append(("fast", reply))
        return True

    def infer(self, route, content, header_length, reply) -> None:
        self.pending.append(("parser", reply))

    async def run(self, reads: list[bytes], answer_each: bool = True) -> tuple[list[str], list[bytes]]:
        """Feed ``reads``; answer what is pending, in order, after each one (``answer_each``) or after the last."""
        server = http_server.HttpServer(
            app=None, infer_routes=ROUTES, infer=self.infer, max_body_bytes=MAX_BODY, fast=self.fast
        )
        connection = http_server.HttpConnection(server)
        transport = Transport()
        connection.connection_made(transport)
        order: list[str] = []
        for i, data in enumerate(reads):
            connection.data_received(data)
            while self.pending and (answer_each or i == len(reads) - 1):
                how, reply = self.pending.pop(0)  # a reply may bring the next queued request in at once
                order.append(how)
                reply(200, b"", b"%d" % len(order))
        assert not connection.closing
        return order, transport.written


def test_a_read_the_front_takes_is_answered_keep_alive_without_the_parser():
    order, written = asyncio.run(Harness().run([request(), request()]))
    assert order == ["fast", "fast"]
    assert written == [
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n1",
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n2",
    ]


def test_reads_the_front_declines_or_that_arrive_mid_request_go_to_the_parser_in_order():
    whole = request()
    reads = [
        whole[:30],  # half a head: declined, and the parser begins a request
        whole[30:],  # the rest of it: the parser's, though the read alone would not be taken anyway
        whole,  # a whole request while the one before is in flight: queued behind it by the parser
        whole + whole,  # pipelined
    ]
    order, written = asyncio.run(Harness().run(reads, answer_each=False))
    assert order == ["parser"] * 4
    assert [w.rsplit(b"\n", 1)[1] for w in written] == [b"1", b"2", b"3", b"4"]
    # Idle again, the connection offers the front the next read.
    order, _ = asyncio.run(Harness().run([whole[:30], whole[30:], whole]))
    assert order == ["parser", "fast"]


def test_a_handler_that_raises_after_taking_the_request_answers_500_and_keeps_the_connection(caplog):
    order, written = asyncio.run(Harness(fast_raises=True).run([request(), request()]))
    assert order == [] and [w.split(b"\r\n", 1)[0] for w in written] == [b"HTTP/1.1 500 Internal Server Error"] * 2
    assert "inference handler failed" in caplog.text


def test_a_front_that_fails_leaves_the_request_to_the_parser(caplog):
    class Failing:
        def request(self, data, paths, max_body):
            raise MemoryError

    async def offer() -> bool:
        state = ServerState(ready=True, scanner=Failing())
        tally = metrics.RequestTally(asyncio.get_running_loop(), lambda: 0)
        app = build_app(interface=INTERFACE, state=state, max_body_bytes=MAX_BODY, tally=tally)
        return app.fast(request("/v2/models/m/infer"), lambda *reply: pytest.fail("answered"))

    assert asyncio.run(offer()) is False
    assert "the HTTP front failed; the parser takes the request" in caplog.text


def test_every_outcome_of_a_batch_answers_each_request_once_and_a_writer_that_raises_is_a_500(caplog):
    class Batcher:  # takes every request and holds its answer for the test to give
        def __init__(self) -> None:
            self.answers: list = []

        def admit(self, rows: int = 1) -> None:
            pass

        def submit(self, payload, rows: int, done) -> None:
            self.answers.append(done)

    def broken_writer(logits):
        raise RuntimeError("a bug in the reply writer")

    async def run() -> tuple[list, int]:
        state = ServerState(ready=True, batcher=Batcher())
        tally = metrics.RequestTally(asyncio.get_running_loop(), lambda: 0)
        interface = ModelInterface(
            name="m", metadata=METADATA, max_rows=MAX_ROWS, max_text_chars=MAX_CHARS, native_replies=True
        )
        good = build_app(interface=interface, state=state, max_body_bytes=MAX_BODY, tally=tally)
        interface.native_reply = broken_writer  # the app below captures it as it is built
        broken = build_app(interface=interface, state=state, max_body_bytes=MAX_BODY, tally=tally)
        replies: list = []
        for app, scanned in [(good, [[101, 102]]), (broken, [[101, 102]]), (broken, None), (good, None), (good, None)]:
            app.infer("infer", BODY, None, lambda *reply: replies.append(reply), scanned)
        logits = np.array([[0.25, 0.75]], dtype=np.float32)
        two = np.array([[0.25, 0.75], [1.0, 0.0]], dtype=np.float32)
        answers = state.batcher.answers
        answers[0](True, logits)  # the common request, written in C
        answers[1](True, logits)  # its writer raises: 500, not a request left unanswered
        answers[2](True, two)  # a parsed request: interface.response, whose writer raises too
        answers[3](False, RuntimeError("the model failed"))
        answers[4](False, Overloaded("waited too long", 3, queued=True))
        return replies, state.in_flight

    replies, in_flight = asyncio.run(run())
    assert [status for status, _, _ in replies] == [200, 500, 500, 500, 503]
    assert json.loads(replies[0][2])["outputs"][1]["data"] == ["b"]
    assert b"retry-after: 3\r\n" in replies[4][1] and in_flight == 0
    assert [r.getMessage() for r in caplog.records if r.exc_info] == ["inference failed"] * 2


# -- a worker, over real sockets -----------------------------------------------------------------------------


def exchange(port: int, writes: list[bytes], replies: int) -> list[bytes]:
    """Send ``writes`` (a pause between them) on one connection; read ``replies`` replies."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        for i, data in enumerate(writes):
            if i:
                time.sleep(0.05)  # a read of its own
            sock.sendall(data)
        buffer, out = b"", []
        while len(out) < replies:
            head, sep, rest = buffer.partition(b"\r\n\r\n")
            if sep:
                length = int(
                    next(ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")).split(b":")[1]
                )
                if len(rest) >= length:
                    out.append(head + sep + rest[:length])
                    buffer = rest[length:]
                    continue
            chunk = sock.recv(65536)
            assert chunk, f"closed after {len(out)} replies"
            buffer += chunk
    return out


@pytest.mark.parametrize("mode", ["on", "body"])
def test_a_worker_answers_the_front_s_requests_as_the_parser_s(artifact, start_server, mode):
    # The emulated accelerator (a stand-in: no torch) keeps start-up short; the replies are the model's either way.
    server = start_server(artifact, env={"SERVER_TEXT_SCAN": mode}, args=("--standin-accelerator-ms", "1"))
    server.wait_ready()
    ready = [e for e in server.logs() if e.get("msg") == "model ready"]
    assert ready and all(e["text_scan"] is True and e["http_front"] is (mode == "on") for e in ready)
    port = int(server.url.rsplit(":", 1)[1])
    common = request("/v2/models/model/infer", content=body(["a plain query", "one, two three"]))
    head, _, content = common.partition(b"\r\n\r\n")
    exchange(port, [common], 1)  # caches the words: the next ones are the front's (on)
    whole = exchange(port, [common], 1)
    split = exchange(port, [head + b"\r\n\r\n", content], 1)  # the head alone in one read: the parser's
    pipelined = exchange(port, [common + common], 2)
    assert whole[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert split == whole and pipelined == whole * 2
