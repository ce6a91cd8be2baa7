"""http_server.py, the worker's HTTP/1.1 server, driven in-process through a recording transport: every
reply leaves in one write (status line, headers and body together), pipelined requests are answered in
order, and the limits, 100 Continue, keep-alive and the drain behave as uvicorn's did for the worker."""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

# serving/ and build/'s flat modules, on the path from conftest.py (ruff would count them third-party).
# isort: split
from http_server import CONTINUE, JSON_HEADER, HttpConnection, HttpServer

INFER = b"/v2/models/m/infer"


class Transport:
    """What the protocol sees of a socket: every write() is recorded as it was made."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.reading = True

    def write(self, data: bytes) -> None:
        assert not self.closed, "write after close"
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    abort = close

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str):
        return ("127.0.0.1", 8080)


async def ping(request):
    return JSONResponse({"status": "healthy"})


async def echo(request):
    return PlainTextResponse((await request.body()).decode() + "|" + request.url.path)


ASGI = Starlette(routes=[Route("/ping", ping, methods=["GET"]), Route("/echo/{x}", echo, methods=["POST"])])


def post(path: bytes, body: bytes, *headers: bytes) -> bytes:
    extra = b"".join(h + b"\r\n" for h in headers)
    return b"POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s" % (path, extra, len(body), body)


def parse(write: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = write.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert int(headers["content-length"]) == len(body), write
    return int(lines[0].split()[1]), headers, body


class Setup:
    def __init__(self, answer_later: bool = True, max_body_bytes: int = 1000) -> None:
        self.pending: list = []  # (route, body, reply) the inference handler was given
        self.answer_later = answer_later
        self.server = HttpServer(
            app=ASGI, infer_routes={INFER.decode(): "infer"}, infer=self.infer, max_body_bytes=max_body_bytes
        )

    def infer(self, route, body, header_length, reply) -> None:
        if self.answer_later:  # as a batch would: after the handler returned
            self.pending.append((route, body, reply))
        elif body == b"binary":
            reply(
                200, b"content-type: application/octet-stream\r\ninference-header-content-length: 2\r\n", b"{}\x01\x02"
            )
        else:
            reply(200, JSON_HEADER, json.dumps({"route": route, "echo": body.decode()}).encode())

    def answer_all(self) -> None:
        pending, self.pending = self.pending, []
        for route, body, reply in pending:
            reply(200, JSON_HEADER, json.dumps({"route": route, "echo": body.decode()}).encode())

    def connect(self) -> tuple[HttpConnection, Transport]:
        connection, transport = HttpConnection(self.server), Transport()
        connection.connection_made(transport)
        return connection, transport


def run(coroutine):
    return asyncio.run(coroutine)


def test_an_inference_reply_leaves_in_one_write_whenever_its_batch_answers():
    async def scenario():
        setup = Setup(answer_later=True)
        connection, transport = setup.connect()
        connection.data_received(post(INFER, b'{"a": 1}'))
        assert transport.writes == []  # nothing is written before the answer: no early headers
        setup.answer_all()
        assert len(transport.writes) == 1
        status, headers, body = parse(transport.writes[0])
        assert status == 200 and headers["content-type"] == "application/json"
        assert json.loads(body) == {"route": "infer", "echo": '{"a": 1}'}
        assert not transport.closed  # keep-alive

    run(scenario())


def test_a_binary_reply_and_a_refusal_also_leave_in_one_write_each():
    async def scenario():
        setup = Setup(answer_later=False)
        connection, transport = setup.connect()
        connection.data_received(post(INFER, b"binary"))
        connection.data_received(post(INFER, b"x" * 1001))  # over max_body_bytes
        assert len(transport.writes) == 2
        status, headers, body = parse(transport.writes[0])
        assert (status, headers["inference-header-content-length"], body) == (200, "2", b"{}\x01\x02")
        status, headers, body = parse(transport.writes[1])
        assert status == 413 and json.loads(body) == {"error": "body: 1001 bytes exceed the limit of 1000"}
        assert not transport.closed

    run(scenario())


def test_other_routes_go_through_asgi_and_their_reply_is_one_write_too():
    async def scenario():
        setup = Setup()
        connection, transport = setup.connect()
        connection.data_received(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        connection.data_received(post(b"/echo/%41?q=1", b"hello"))
        connection.data_received(b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n")
        for _ in range(20):
            await asyncio.sleep(0)
        replies = [parse(w) for w in transport.writes]
        assert [r[0] for r in replies] == [200, 200, 404]
        assert json.loads(replies[0][2]) == {"status": "healthy"}
        assert replies[1][2] == b"hello|/echo/A"  # the path percent-decoded for the app, the query apart

    run(scenario())


def test_pipelined_requests_are_answered_in_order_one_write_each():
    async def scenario():
        setup = Setup(answer_later=True)
        connection, transport = setup.connect()
        connection.data_received(
            post(INFER, b"first") + b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n" + post(INFER, b"third")
        )
        assert len(setup.pending) == 1  # the second waits for the first's answer
        setup.answer_all()
        for _ in range(20):
            await asyncio.sleep(0)
        setup.answer_all()
        replies = [parse(w) for w in transport.writes]
        assert [r[0] for r in replies] == [200, 200, 200]
        assert json.loads(replies[0][2])["echo"] == "first"
        assert json.loads(replies[1][2]) == {"status": "healthy"}
        assert json.loads(replies[2][2])["echo"] == "third"

    run(scenario())


def test_100_continue_is_sent_before_the_body_is_read():
    async def scenario():
        setup = Setup(answer_later=False)
        connection, transport = setup.connect()
        connection.data_received(
            b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
        )
        assert transport.writes == [CONTINUE]
        connection.data_received(b"{}")
        assert len(transport.writes) == 2 and parse(transport.writes[1])[0] == 200

    run(scenario())


@pytest.mark.parametrize(
    "request_bytes, status",
    [
        (b"NOT HTTP AT ALL\r\n\r\n", 400),
        (b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", 431),
    ],
)
def test_a_request_that_cannot_be_served_gets_json_and_the_connection_closes(request_bytes, status):
    async def scenario():
        setup = Setup()
        connection, transport = setup.connect()
        connection.data_received(request_bytes)
        for _ in range(5):
            await asyncio.sleep(0)
        assert len(transport.writes) == 1
        got, headers, body = parse(transport.writes[0])
        assert got == status and headers["connection"] == "close" and "error" in json.loads(body)
        assert transport.closed

    run(scenario())


@pytest.mark.parametrize(
    "request_bytes",
    [
        post(INFER, b"{}", b"Connection: close"),
        b"POST /v2/models/m/infer HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}",
    ],
)
def test_connection_close_and_http_1_0_close_after_the_reply(request_bytes):
    async def scenario():
        setup = Setup(answer_later=True)
        connection, transport = setup.connect()
        connection.data_received(request_bytes)
        setup.answer_all()
        assert len(transport.writes) == 1 and parse(transport.writes[0])[1]["connection"] == "close"
        assert transport.closed

    run(scenario())


def test_head_gets_the_headers_without_the_body():
    async def scenario():
        setup = Setup()
        connection, transport = setup.connect()
        connection.data_received(b"HEAD /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        for _ in range(20):
            await asyncio.sleep(0)
        head, _, body = transport.writes[0].partition(b"\r\n\r\n")
        assert (
            head.startswith(b"HTTP/1.1 200")
            and body == b""
            and b"content-length: %d" % len(b'{"status":"healthy"}') in head
        )

    run(scenario())


def test_the_drain_closes_idle_connections_now_and_busy_ones_after_their_reply():
    async def scenario():
        setup = Setup(answer_later=True)
        idle, idle_transport = setup.connect()
        busy, busy_transport = setup.connect()
        busy.data_received(post(INFER, b"in flight"))
        drain = asyncio.ensure_future(setup.server.shutdown(timeout=30))
        await asyncio.sleep(0)
        assert idle_transport.closed and not busy_transport.closed
        idle.connection_lost(None)
        setup.answer_all()
        status, headers, _ = parse(busy_transport.writes[0])
        assert status == 200 and headers["connection"] == "close" and busy_transport.closed
        busy.connection_lost(None)
        await asyncio.wait_for(drain, 5)
        assert setup.server.connections == set()

    run(scenario())


def test_a_reply_for_a_client_that_went_away_is_dropped():
    async def scenario():
        setup = Setup(answer_later=True)
        connection, transport = setup.connect()
        connection.data_received(post(INFER, b"{}"))
        connection.connection_lost(ConnectionResetError())
        setup.answer_all()  # the batch still ran; nobody to tell
        assert transport.writes == []

    run(scenario())
