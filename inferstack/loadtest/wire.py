"""HTTP/1.1 for the open-model generator: a request already built as bytes, sent on a pooled keep-alive
connection over gevent's sockets, and its reply read back. What FastHttpSession did per request and the load
test does not need (a URL parsed, headers rebuilt and quoted, a response object, a Timeout armed, a select() on
the whole pool) cost a Locust worker over a third of its CPU per request (benchmarks/loadtest_worker.py). Here
a request's bytes are built once per body, and the reply is read by a parser that knows only what a load test
must: the status, the headers, the body by Content-Length, chunks, or the connection's end.

Strict where a reply is malformed (BadReply, one line; the connection is dropped), bounded in time (one deadline
per request, connect and TLS handshake included) and in size. A POST is never retried: a reused connection the
server closed between requests is found before the request is written (a non-blocking poll: readable at rest
means closed or dirty), and one that fails after it counts as the error it is. Imports gevent, never patches:
the tests drive it from a plain process."""

from __future__ import annotations

import http.client
import re
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import gevent.socket
from gevent import monkey

# Limits on a reply: a head or body past them is a BadReply, not a generator's memory spent.
MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
_RECV = 64 * 1024
_DEFAULT_PORTS = {"http": 80, "https": 443}
# The unpatched poll(): a zero-timeout syscall, no greenlet switch, no fd-number limit (select()'s 1024).
_poll = monkey.get_original("select", "poll")
_POLLIN = 0x001
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # a field name (RFC 9110 5.1)


class BadReply(ValueError):
    """A reply that is not HTTP/1.x as RFC 9112 frames it, or past this module's limits: why, in one line."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: dict[str, str]  # names lower-cased; repeated fields joined with ", "
    body: bytes


class Origin:
    """Where requests go: scheme, host and port, and the Host header (RFC 9110 7.2: the port only when it is not
    the scheme's default, as SigV4 signs it)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
            raise ValueError(f"{url!r}: not an http:// or https:// URL with a host")
        self.scheme, self.host = parts.scheme, parts.hostname
        self.port = parts.port or _DEFAULT_PORTS[parts.scheme]
        bracketed = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = bracketed if self.port == _DEFAULT_PORTS[self.scheme] else f"{bracketed}:{self.port}"


def post(origin: Origin, path: str, headers: dict[str, str], body: bytes) -> bytes:
    """A POST's bytes, head and body, ready to send as many times as needed. The reply is asked for without a
    content coding (this client decodes none), unless `headers` say otherwise."""
    fields = {name: value for name, value in headers.items() if name.lower() not in ("host", "content-length")}
    if not any(name.lower() == "accept-encoding" for name in fields):
        fields["Accept-Encoding"] = "identity"
    if " " in path:
        raise ValueError(f"request path {path[:40]!r}: a space would split the request line")
    for text in (path, *fields, *fields.values()):
        if any(c in text for c in "\r\n\0"):
            raise ValueError(f"request line or header {text[:40]!r}: a line break or NUL")
    lines = [f"POST {path} HTTP/1.1", f"Host: {origin.host_header}"]
    lines += [f"{name}: {value}" for name, value in fields.items()]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class _Connection:
    __slots__ = ("sock", "poller")

    def __init__(self, sock) -> None:
        self.sock = sock
        self.poller = _poll()  # no kernel object: poll(2) takes the fd list each call
        self.poller.register(sock.fileno(), _POLLIN)

    def idle_and_open(self) -> bool:
        """At rest a keep-alive connection has nothing to read: readable means the server closed it (or sent
        bytes nobody asked for), and it must not carry a request."""
        try:
            return not self.poller.poll(0)
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Client:
    """A pool of keep-alive connections to one origin, most recently used first (a load balancer's idle timeout
    then closes the surplus). Not bounded here: the caller bounds the requests in flight, and each holds one."""

    def __init__(self, origin: Origin, *, timeout: float, ssl_context=None) -> None:
        if origin.scheme == "https" and ssl_context is None:
            raise ValueError(f"{origin.host_header}: https needs an SSL context")
        self.origin, self.timeout = origin, timeout
        self._ssl = ssl_context if origin.scheme == "https" else None
        self._idle: list[_Connection] = []
        self.connections_opened = 0

    def send(self, request: bytes) -> Reply:
        """Sends `request` (from post()) and returns the reply, within `timeout` seconds in all. Raises what the
        socket raises (ConnectionRefusedError, TimeoutError, ssl errors...), RemoteDisconnected when the server
        closed the connection without a reply, IncompleteRead when it closed one part way, BadReply."""
        deadline = time.monotonic() + self.timeout
        connection = self._take(deadline)
        try:
            connection.sock.settimeout(_left(deadline))
            connection.sock.sendall(request)
            reply, reusable = _read(connection.sock, deadline)
        except BaseException:
            connection.close()
            raise
        if reusable:
            self._idle.append(connection)
        else:
            connection.close()
        return reply

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    def _take(self, deadline: float) -> _Connection:
        while self._idle:
            connection = self._idle.pop()
            if connection.idle_and_open():
                return connection
            connection.close()
        return self._open(deadline)

    def _open(self, deadline: float) -> _Connection:
        sock = gevent.socket.create_connection((self.origin.host, self.origin.port), timeout=_left(deadline))
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # the request leaves in one write anyway
            if self._ssl is not None:
                sock.settimeout(_left(deadline))
                sock = self._ssl.wrap_socket(sock, server_hostname=self.origin.host)
        except BaseException:
            sock.close()
            raise
        self.connections_opened += 1
        return _Connection(sock)


def _left(deadline: float) -> float:
    """A socket timeout for what is left of the request's time: never 0, which would make the socket non-blocking
    (a wait past the deadline then fails as a timeout, not as a would-block)."""
    return max(0.001, deadline - time.monotonic())


class _Reader:
    """The reply's bytes as they arrive, each wait for more bounded by the request's deadline."""

    __slots__ = ("sock", "deadline", "buf", "received")

    def __init__(self, sock, deadline: float) -> None:
        self.sock, self.deadline, self.buf, self.received = sock, deadline, bytearray(), 0

    def more(self) -> bool:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no complete reply within the request's timeout")
        self.sock.settimeout(left)
        chunk = self.sock.recv(_RECV)
        if not chunk:
            return False
        self.received += len(chunk)
        self.buf += chunk
        return True

    def through(self, marker: bytes, limit: int, what: str) -> bytes:
        """Up to `marker` (consumed, not returned)."""
        start = 0
        while (end := self.buf.find(marker, start)) < 0:
            if len(self.buf) > limit:
                raise BadReply(f"{what} over {limit} bytes")
            start = max(0, len(self.buf) - len(marker) + 1)
            if not self.more():
                if not self.received:
                    raise http.client.RemoteDisconnected("the server closed the connection without a reply")
                raise http.client.IncompleteRead(bytes(self.buf))
        if end > limit:
            raise BadReply(f"{what} over {limit} bytes")
        taken = bytes(self.buf[:end])
        del self.buf[: end + len(marker)]
        return taken

    def exactly(self, size: int) -> bytes:
        while len(self.buf) < size:
            if not self.more():
                raise http.client.IncompleteRead(bytes(self.buf), size - len(self.buf))
        taken = bytes(self.buf[:size])
        del self.buf[:size]
        return taken

    def rest(self) -> bytes:
        while self.more():
            if len(self.buf) > MAX_BODY_BYTES:
                raise BadReply(f"body over {MAX_BODY_BYTES} bytes")
        taken = bytes(self.buf)
        self.buf.clear()
        return taken


def _read(sock, deadline: float) -> tuple[Reply, bool]:
    """One reply to one request (interim 1xx replies skipped) and whether the connection may carry another."""
    reader = _Reader(sock, deadline)
    while True:
        version, status, headers = parse_head(reader.through(b"\r\n\r\n", MAX_HEAD_BYTES, "reply head"))
        if not 100 <= status < 200:
            break
        if status == 101:
            raise BadReply("101 Switching Protocols to a POST that asked for no upgrade")
    reusable = version == "HTTP/1.1"
    connection = headers.get("connection", "").lower()
    if "close" in connection:
        reusable = False
    elif "keep-alive" in connection:
        reusable = True
    length = _length(headers)
    if status in (204, 304):
        body = b""
    elif "transfer-encoding" in headers:
        # The request sent no TE field, so chunked is the only transfer coding a server may use (RFC 9112 7.4)
        codings = [c.strip().lower() for c in headers["transfer-encoding"].split(",")]
        if codings != ["chunked"]:
            raise BadReply(f"transfer-encoding {headers['transfer-encoding'][:40]!r}: only chunked was acceptable")
        body = _chunked(reader)
    elif length is not None:
        if length > MAX_BODY_BYTES:
            raise BadReply(f"content-length {length} over {MAX_BODY_BYTES} bytes")
        body = reader.exactly(length)
    else:
        body, reusable = reader.rest(), False
    if reader.buf:  # bytes past the reply to the one request sent: the connection is out of step
        reusable = False
    return Reply(status, headers, body), reusable


def parse_head(head: bytes) -> tuple[str, int, dict[str, str]]:
    """The status line and header fields of a reply head (without its blank line)."""
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if version not in ("HTTP/1.1", "HTTP/1.0") or len(code) != 3 or not code.isdigit() or rest[3:4] not in ("", " "):
        raise BadReply(f"status line {lines[0][:80]!r}")
    status = int(code)
    if status < 100:
        raise BadReply(f"status {status}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name):
            raise BadReply(f"header line {line[:80]!r}")
        name, value = name.lower(), value.strip(" \t")
        if "\n" in value or "\r" in value or "\0" in value:
            raise BadReply(f"header {name}: a line break or NUL in its value")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return version, status, headers


def _length(headers: dict[str, str]) -> int | None:
    if "content-length" not in headers:
        return None
    values = {v.strip() for v in headers["content-length"].split(",")}
    if len(values) != 1 or not (value := values.pop()).isdigit() or not value.isascii():
        raise BadReply(f"content-length {headers['content-length'][:40]!r}")
    return int(value)


def _chunked(reader: _Reader) -> bytes:
    parts, total = [], 0
    while True:
        line = reader.through(b"\r\n", 1024, "chunk size line")
        size_text = line.split(b";", 1)[0].strip(b" \t")
        if not size_text or len(size_text) > 16 or any(c not in b"0123456789abcdefABCDEF" for c in size_text):
            raise BadReply(f"chunk size {line[:40]!r}")
        size = int(size_text, 16)
        if size == 0:
            break
        total += size
        if total > MAX_BODY_BYTES:
            raise BadReply(f"body over {MAX_BODY_BYTES} bytes")
        parts.append(reader.exactly(size))
        if reader.exactly(2) != b"\r\n":
            raise BadReply("a chunk not followed by CRLF")
    while reader.through(b"\r\n", MAX_HEAD_BYTES, "trailer"):  # trailer fields, ignored, up to the blank line
        pass
    return b"".join(parts)
