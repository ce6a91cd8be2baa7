"""The worker's HTTP/1.1 server: an asyncio protocol on httptools (the parser uvicorn uses), on uvloop.

Inference requests never become ASGI calls or asyncio tasks: the connection hands the body to the
inference handler with a callback, and the batch that ran it calls back with the reply, which leaves
in one write (status line, headers and body together). Every other route is an ASGI call into the
Starlette app (http_app.py), its reply buffered and written once too. Under load the per-request
ASGI machinery, a task per request and a second write() per reply were a third of the worker's CPU
(docs/explanation/performance.md), and the write() pair cost the client a second wake-up per reply.

What uvicorn did for the worker and this does instead: keep-alive (75 s idle, longer than the ALB's
60 s), HTTP/1.1 pipelining (requests answered in order, reading paused while too many wait), 100
Continue, body and header limits (413, 431), malformed requests (400, then close), and the drain:
stop accepting, close idle connections, let busy ones finish their current request, wait at most
the drain timeout. Connections are accepted on the socket the supervisor shares between a model's
workers, least-connections first (connection_share.py).
"""

from __future__ import annotations

import asyncio
import collections
import http
import logging
import socket
import urllib.parse
from collections.abc import Callable
from typing import Any

import httptools

# The modules beside this one, flat on the path (ruff would sort them in with the third-party ones).
# isort: split
from connection_share import AWAY, ConnectionShare

log = logging.getLogger("http")

# (status, extra header lines, body): what a handler gives back. Header lines are ready-made bytes,
# each ending in CRLF; content-length and connection are added here.
Reply = Callable[[int, bytes, bytes], None]
# handler(route, body, inference-header-content-length or None, reply): answers now or later, once.
InferHandler = Callable[[str, bytes, "str | None", Reply], None]
# fast(data, reply): True when ``data`` was one whole request it took (and answers through ``reply``, once);
# False, having done nothing, leaves the bytes to the parser.
FastHandler = Callable[[bytes, Reply], bool]

STATUS_LINES = {status.value: f"HTTP/1.1 {status.value} {status.phrase}\r\n".encode() for status in http.HTTPStatus}
JSON_HEADER = b"content-type: application/json\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
MAX_HEADER_BYTES = 64 * 1024
MAX_PIPELINED = 32  # requests parsed ahead of the one being answered before reading pauses


def json_error(message: str) -> bytes:
    import json

    return json.dumps({"error": message}).encode()


class Request:
    __slots__ = (
        "method",
        "target",
        "headers",
        "body",
        "size",
        "keep_alive",
        "http_version",
        "error",
        "header_length",
        "content_length",
        "expect_continue",
    )

    def __init__(self) -> None:
        self.target = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.size = 0
        self.error: tuple[int, str, bool] | None = None  # (status, message, close the connection after)
        self.header_length: str | None = None
        self.content_length: str | None = None
        self.expect_continue = False


# What the fast handler takes, as the parser would have given it: a keep-alive HTTP/1.1 POST (no Connection:
# close, no HTTP/1.0); _reply reads only these.
FAST_REQUEST = Request()
FAST_REQUEST.method, FAST_REQUEST.http_version, FAST_REQUEST.keep_alive = b"POST", "1.1", True


class HttpServer:
    def __init__(
        self,
        *,
        app: Any,
        infer_routes: dict[str, str],
        infer: InferHandler,
        max_body_bytes: int,
        keep_alive_s: float = 75.0,
        share: ConnectionShare | None = None,
        on_connections: Callable[[int], None] = lambda count: None,
        fast: FastHandler | None = None,
    ) -> None:
        """``app``: ASGI app for every request that is not a POST to one of ``infer_routes`` (path -> route
        name), which go to ``infer``; ``share``: the model's other workers, when there are any;
        ``on_connections``: told the number of open connections whenever it changes; ``fast``: offered each
        read that starts a request on an idle connection, before the parser (http_app.fast_inference)."""
        self.app = app
        self.infer_routes = {path.encode(): route for path, route in infer_routes.items()}
        self.infer = infer
        self.fast = fast
        self.max_body_bytes = max_body_bytes
        self.keep_alive_s = keep_alive_s
        self.share = share
        self.on_connections = on_connections
        self.connections: set[HttpConnection] = set()
        self.tasks: set[asyncio.Task] = set()
        self.accepted = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sock: socket.socket | None = None
        self._listening = False
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed: asyncio.Event | None = None
        self._handing_over = 0  # connections told to close after their reply (rebalance), not closed yet

    # -- accepting ------------------------------------------------------------------------------

    def listen(self, sock: socket.socket) -> None:
        self._loop = asyncio.get_running_loop()
        sock.setblocking(False)
        self._sock = sock
        if self.share is not None:
            self._loop.add_reader(self.share.wake_read_fd, self._woken)
        self._check_turn()
        self._sweeper = self._loop.call_later(min(5.0, self.keep_alive_s / 2), self._sweep)

    def _check_turn(self) -> None:
        if self._sock is None:
            return
        turn = self.share is None or self.share.my_turn()
        if turn and not self._listening:
            self._loop.add_reader(self._sock.fileno(), self._accept)
            self._listening = True
        elif not turn and self._listening:
            self._loop.remove_reader(self._sock.fileno())
            self._listening = False
            self.share.wake_others()  # one of them is behind now: its turn

    def _woken(self) -> None:
        self.share.drain_wakeups()
        self._check_turn()

    def _accept(self) -> None:
        while self._listening:
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. EMFILE: log it, keep serving the connections there are
                log.error("accept failed", extra={"error": str(exc)})
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.accepted += 1
            if self.share is not None:
                self.share.add(1)
            task = self._loop.create_task(self._loop.connect_accepted_socket(lambda: HttpConnection(self), conn))
            self.tasks.add(task)
            task.add_done_callback(self._connected)
            self._check_turn()

    def _connected(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and self.share is not None:
            self.share.add(-1)  # counted when accepted, but never became a connection
            self._check_turn()

    def stop_accepting(self) -> None:
        if self._sock is None:
            return
        if self._listening:
            self._loop.remove_reader(self._sock.fileno())
            self._listening = False
        if self.share is not None:
            self._loop.remove_reader(self.share.wake_read_fd)
            self.share.leave()
        self._sock.close()
        self._sock = None

    # -- connections ------------------------------------------------------------------------------

    def opened(self, connection: HttpConnection) -> None:
        self.connections.add(connection)
        self.on_connections(len(self.connections))

    def rebalance(self) -> bool:
        """True when this worker holds two or more connections more than the model's least-loaded other
        worker: the caller closes its connection after the reply (``connection: close``), and the client's
        next connection goes to a worker with fewer (least-connections accept). Keep-alive connections stay
        where they were accepted, so without this, the connections that moved to the others while a worker
        restarted (or that its clients closed) would stay there, and the model's load with them."""
        share = self.share
        if share is None:
            return False
        mine = share.mine - self._handing_over
        if mine <= min(share.counts) + 1:  # the common case, asked at every reply: nobody has two fewer
            return False
        if mine >= AWAY // 2:  # draining or not yet warm: the accept side handles it
            return False
        counts, index = share.counts, share.index
        fewest = min((counts[i] for i in range(len(counts)) if i != index), default=AWAY)
        if fewest >= AWAY // 2 or mine <= fewest + 1:
            return False
        self._handing_over += 1
        return True

    def closed(self, connection: HttpConnection) -> None:
        if connection.handed_over:
            self._handing_over -= 1
        self.connections.discard(connection)
        self.on_connections(len(self.connections))
        if self.share is not None:
            self.share.add(-1)
            self._check_turn()
        if not self.connections and self._closed is not None:
            self._closed.set()

    def _sweep(self) -> None:
        """Close keep-alive connections idle for longer than the keep-alive timeout."""
        now = self._loop.time()
        for connection in list(self.connections):
            if connection.idle_since is not None and now - connection.idle_since > self.keep_alive_s:
                connection.close()
        self._sweeper = self._loop.call_later(min(5.0, self.keep_alive_s / 2), self._sweep)

    async def shutdown(self, timeout: float) -> None:
        """Stop accepting; close idle connections now and busy ones after their current reply; after
        ``timeout`` seconds close whatever is left."""
        self.stop_accepting()
        for connection in list(self.connections):
            connection.finish()
        if self.connections:
            self._closed = asyncio.Event()
            try:
                await asyncio.wait_for(self._closed.wait(), timeout)
            except asyncio.TimeoutError:
                log.warning("drain timed out; closing connections", extra={"connections": len(self.connections)})
                for connection in list(self.connections):
                    connection.abort()
        if self._sweeper is not None:
            self._sweeper.cancel()
        for task in list(self.tasks):
            task.cancel()


class HttpConnection(asyncio.Protocol):
    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        try:  # answer the first of pipelined requests even when a later one says "close" (httptools >= 0.6.3)
            self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        except AttributeError:
            pass
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.request: Request | None = None  # being parsed
        self.waiting: collections.deque[Request] = collections.deque()  # parsed, not answered yet
        self.busy = False  # a request is being answered
        self.closing = False  # close after the current reply (draining, or the client asked)
        self.lost = False
        self.paused = False
        self.idle_since: float | None = None
        self.handed_over = False  # closed after its reply to even out the workers' connections
        self.replies = 0
        self._header_bytes = 0
        self._disconnected: asyncio.Future | None = None

    # -- transport events -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.server.opened(self)
        self.idle_since = self.loop.time()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.waiting.clear()
        if self._disconnected is not None and not self._disconnected.done():
            self._disconnected.set_result(None)
        self.server.closed(self)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return  # nothing more is answered on this connection
        self.idle_since = None
        fast = self.server.fast
        # A read on an idle connection (nothing half-parsed, queued or being answered) that is one whole request
        # of the common kind is read in C and answered without the parser's callbacks: a keep-alive HTTP/1.1
        # POST, as the parser would have seen it (http_app.fast_inference). Anything else is fed to the parser.
        if fast is not None and self.request is None and not self.busy and not self.waiting:
            self.busy = True
            try:
                if fast(data, self._fast_reply):
                    return
            except Exception:  # it had taken the request (it answers its own errors): this is a bug, not a bad request
                log.exception("inference handler failed")
                if self.busy:
                    self._fast_reply(500, JSON_HEADER, json_error("internal error"))
                return
            self.busy = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.closing = True  # no protocol upgrades here: answer what was asked, then close
        except httptools.HttpParserError as exc:
            self._fail(400, f"invalid HTTP request: {exc}")

    def pause_writing(self) -> None:  # a client that does not read its replies stops being read from
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        if not self.paused:
            self.transport.resume_reading()

    # -- parser callbacks -------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.request = Request()
        self._header_bytes = 0

    def on_url(self, url: bytes) -> None:
        request = self.request
        request.target += url
        self._header_bytes += len(url)
        if self._header_bytes > MAX_HEADER_BYTES and request.error is None:
            request.error = (414, "request target too long", True)

    def on_header(self, name: bytes, value: bytes) -> None:
        request = self.request
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > MAX_HEADER_BYTES:
            if request.error is None:
                request.error = (431, "request headers too large", True)
            return
        name = name.lower()
        request.headers.append((name, value))
        if name == b"content-length":
            request.content_length = value.decode("latin-1")
        elif name == b"inference-header-content-length":
            request.header_length = value.decode("latin-1")
        elif name == b"expect" and value.lower() == b"100-continue":
            request.expect_continue = True

    def on_headers_complete(self) -> None:
        request = self.request
        parser = self.parser
        request.method = parser.get_method()
        request.http_version = parser.get_http_version()
        request.keep_alive = request.http_version == "1.1" and parser.should_keep_alive()
        if request.error is None and request.content_length is not None:
            try:
                declared = int(request.content_length)
            except ValueError:
                declared = 0  # httptools has already refused a malformed Content-Length
            if declared > self.server.max_body_bytes:
                request.error = (413, f"body: {declared} bytes exceed the limit of {self.server.max_body_bytes}", False)
        if request.expect_continue and request.error is None and not self.busy and not self.waiting:
            self.transport.write(CONTINUE)

    def on_body(self, body: bytes) -> None:
        request = self.request
        if request.error is not None:
            return  # read and dropped: the reply is already decided
        request.size += len(body)
        if request.size > self.server.max_body_bytes:
            request.error = (413, f"body: more than {self.server.max_body_bytes} bytes", False)
            request.body = []
            return
        request.body.append(body)

    def on_message_complete(self) -> None:
        request, self.request = self.request, None
        if self.closing or self.lost:
            return
        self.waiting.append(request)
        if len(self.waiting) > MAX_PIPELINED and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        if not self.busy:
            self._next()

    # -- answering --------------------------------------------------------------------------------

    def _next(self) -> None:
        """Answer waiting requests in order; returns when one is answered later, or none is left."""
        while self.waiting and not self.busy and not self.lost:
            request = self.waiting.popleft()
            self.busy = True
            if request.error is not None:
                status, message, close = request.error
                if close:
                    self.closing = True
                self._reply(request, status, JSON_HEADER, json_error(message))
                continue
            path, _, query = request.target.partition(b"?")
            route = self.server.infer_routes.get(path) if request.method == b"POST" else None
            body = b"".join(request.body) if len(request.body) != 1 else request.body[0]
            if route is not None:
                try:
                    self.server.infer(
                        route,
                        body,
                        request.header_length,
                        lambda status, headers, content, request=request: self._reply(
                            request, status, headers, content
                        ),
                    )
                except Exception:  # the handler answers its own errors; this is a bug, not a bad request
                    log.exception("inference handler failed")
                    if self.busy:
                        self._reply(request, 500, JSON_HEADER, json_error("internal error"))
            else:
                task = self.loop.create_task(self._asgi(request, path, query, body))
                self.server.tasks.add(task)
                task.add_done_callback(self.server.tasks.discard)
        if self.paused and len(self.waiting) <= MAX_PIPELINED // 2 and not self.lost:
            self.paused = False
            self.transport.resume_reading()
        if not self.busy and not self.waiting:
            if self.closing and not self.lost:
                self.transport.close()
            else:
                self.idle_since = self.loop.time()

    def _fast_reply(self, status: int, headers: bytes, content: bytes) -> None:
        self._reply(FAST_REQUEST, status, headers, content)

    def _reply(self, request: Request, status: int, headers: bytes, content: bytes) -> None:
        """Write one reply (one write: head and body together) and move on to the next request."""
        if self.lost:
            return
        keep_alive = request.keep_alive and not self.closing
        # Only a connection that has answered before: one just accepted came by least-connections, and an imbalance
        # it sees is a close not yet processed. Nothing pipelined behind it is lost.
        if keep_alive and self.replies and not self.waiting and self.server.rebalance():
            keep_alive, self.handed_over = False, True
        self.replies += 1
        head = STATUS_LINES.get(status) or f"HTTP/1.1 {status} Unknown\r\n".encode()
        connection = b"" if keep_alive else b"connection: close\r\n"
        body = b"" if request.method == b"HEAD" else content
        self.transport.write(b"%s%scontent-length: %d\r\n%s\r\n%s" % (head, headers, len(content), connection, body))
        if not keep_alive:
            self.closing = True
            self.waiting.clear()
        self.busy = False
        if self.waiting or self.closing:
            self._next()
        else:
            self.idle_since = self.loop.time()

    def _fail(self, status: int, message: str) -> None:
        """A request that cannot be parsed: answer it (after the ones before it) and close."""
        self.closing = True
        request = Request()
        request.method, request.keep_alive, request.error = b"GET", False, (status, message, True)
        self.waiting.append(request)
        if not self.busy:
            self._next()

    async def _asgi(self, request: Request, path: bytes, query: bytes, body: bytes) -> None:
        """One request through the ASGI app; its reply is gathered and written once."""
        raw_path = path
        text_path = raw_path.decode("latin-1")
        if "%" in text_path:
            text_path = urllib.parse.unquote(text_path)
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": request.http_version,
            "method": request.method.decode("latin-1"),
            "scheme": "http",
            "path": text_path,
            "raw_path": raw_path,
            "root_path": "",
            "query_string": query,
            "headers": request.headers,
            "server": _address(self.transport.get_extra_info("sockname")),
            "client": _address(self.transport.get_extra_info("peername")),
            "state": {},
        }
        sent_body = False
        started: dict = {}
        chunks: list[bytes] = []

        async def receive() -> dict:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            if self._disconnected is None:
                self._disconnected = self.loop.create_future()
                if self.lost:
                    self._disconnected.set_result(None)
            await self._disconnected
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                started.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        try:
            await self.server.app(scope, receive, send)
            status = started["status"]
            lines = b"".join(
                name.lower() + b": " + value + b"\r\n"
                for name, value in started.get("headers", ())
                if name.lower() not in (b"content-length", b"connection", b"transfer-encoding")
            )
        except Exception:
            log.exception("request failed", extra={"path": text_path})
            status, lines, chunks = 500, JSON_HEADER, [json_error("internal error")]
        self._reply(request, status, lines, b"".join(chunks))

    # -- closing ----------------------------------------------------------------------------------

    def finish(self) -> None:
        """Draining: close now if idle, else after the reply being worked on."""
        self.closing = True
        self.waiting.clear()
        if not self.busy and not self.lost:
            self.transport.close()

    def close(self) -> None:
        if not self.lost:
            self.transport.close()

    def abort(self) -> None:
        if not self.lost:
            self.transport.abort()


def _address(address: Any) -> tuple[str, int] | None:
    return tuple(address[:2]) if isinstance(address, tuple) else None
