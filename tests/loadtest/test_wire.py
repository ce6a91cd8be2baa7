"""wire.py, the generator's HTTP/1.1 client: against scripted servers on real loopback sockets (keep-alive and its
end, the framings a reply may use, a server that stalls or cuts off), and its reply parser fuzzed."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import gevent.ssl
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from inferstack.loadtest import measure, wire
from tests.support.tls import self_signed

REQUEST_END = b"\r\n\r\n"
Reading = Callable[[socket.socket], "bytes | None"]


def read_request(conn: socket.socket) -> bytes | None:
    """One request, head and Content-Length body; None when the client closed the connection."""
    data = b""
    while REQUEST_END not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(REQUEST_END)
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += conn.recv(65536)
    return head + REQUEST_END + body


@contextmanager
def scripted(script: Callable[[socket.socket, Reading], None]) -> Iterator[tuple[int, list[bytes]]]:
    """A loopback server running `script(conn, read)` on each connection it accepts, `read(conn)` reading the next
    request; yields the port and the requests read."""
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=run, args=(conn,), daemon=True).start()

    def run(conn: socket.socket) -> None:
        with conn:
            try:
                script(conn, reading)
            except OSError:
                pass

    def reading(conn: socket.socket) -> bytes | None:
        request = read_request(conn)
        if request is not None:
            seen.append(request)
        return request

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], seen
    finally:
        done.set()
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() in progress, which close() alone does not
        listener.close()
        thread.join(5)


def serve(replies: list[bytes], *, close_after: bool = False):
    """A script answering each request on a connection with the next of `replies`."""

    def script(conn: socket.socket, read: Reading) -> None:
        for reply in replies:
            if read(conn) is None:
                return
            conn.sendall(reply)
        if close_after:
            return
        while read(conn) is not None:
            conn.sendall(replies[-1])

    return script


OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'


def client(port: int, timeout: float = 5.0) -> wire.Client:
    return wire.Client(wire.Origin(f"http://127.0.0.1:{port}"), timeout=timeout)


def request(port: int, body: bytes = b'{"text":"hi"}') -> bytes:
    return wire.post(
        wire.Origin(f"http://127.0.0.1:{port}"), "/invocations", {"Content-Type": "application/json"}, body
    )


def test_a_request_is_sent_as_built_and_the_connection_is_kept_for_the_next():
    with scripted(serve([OK])) as (port, seen):
        c = client(port)
        replies = [c.send(request(port, b'{"n":%d}' % i)) for i in range(3)]
    assert [(r.status, r.body) for r in replies] == [(200, b'{"ok":true}')] * 3
    assert replies[0].headers["content-type"] == "application/json"
    assert c.connections_opened == 1
    assert seen[0].startswith(b"POST /invocations HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % port)
    assert seen[2].endswith(b'Content-Length: 7\r\n\r\n{"n":2}')


def test_a_connection_the_server_closed_at_rest_is_not_used_again():
    # The server answers once and closes, as a load balancer's idle timeout does between two requests.
    with scripted(serve([OK], close_after=True)) as (port, seen):
        c = client(port)
        assert c.send(request(port)).status == 200
        time.sleep(0.2)  # the FIN arrives
        assert c.send(request(port)).status == 200
    assert c.connections_opened == 2 and len(seen) == 2


@pytest.mark.parametrize(
    "reply",
    [
        b'HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 11\r\n\r\n{"ok":true}',
        b'HTTP/1.0 200 OK\r\nContent-Length: 11\r\n\r\n{"ok":true}',
    ],
    ids=["connection-close", "http/1.0"],
)
def test_a_reply_that_ends_its_connection_is_answered_and_the_next_request_opens_another(reply):
    with scripted(serve([reply, reply], close_after=True)) as (port, _):
        c = client(port)
        assert [c.send(request(port)).body for _ in range(2)] == [b'{"ok":true}'] * 2
    assert c.connections_opened == 2


@pytest.mark.parametrize(
    ("reply", "body"),
    [
        (
            b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;x=1\r\n{"ok\r\n7\r\n":true}\r\n0\r\nT: 1\r\n\r\n',
            b'{"ok":true}',
        ),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", b"{}"),
        (b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", b""),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}", b"{}"),
    ],
    ids=["chunked", "100-continue", "204", "repeated-length"],
)
def test_each_framing_of_a_reply_gives_its_body(reply, body):
    with scripted(serve([reply])) as (port, _):
        c = client(port)
        assert c.send(request(port)).body == body
        assert c.send(request(port)).body == body
    assert c.connections_opened == 1


def test_a_reply_without_a_length_runs_to_the_connections_end():
    with scripted(serve([b'HTTP/1.1 200 OK\r\n\r\n{"ok":true}'], close_after=True)) as (port, _):
        c = client(port)
        assert c.send(request(port)).body == b'{"ok":true}'
        assert c.send(request(port)).body == b'{"ok":true}'
    assert c.connections_opened == 2


@pytest.mark.parametrize(
    ("reply", "error", "kind"),
    [
        (b"", http.client.RemoteDisconnected, "RemoteDisconnected"),
        (b'HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n{"cut":', http.client.IncompleteRead, "IncompleteRead"),
        (b"HTTP/1.1 200 OK\r\nContent-", http.client.IncompleteRead, "IncompleteRead"),
        (b"ICY 200 OK\r\n\r\n", wire.BadReply, "BadReply"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", wire.BadReply, "BadReply"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", wire.BadReply, "BadReply"),
        (b"HTTP/1.1 200 OK\r\nX: a\r\n folded\r\nContent-Length: 0\r\n\r\n", wire.BadReply, "BadReply"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", wire.BadReply, "BadReply"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", wire.BadReply, "BadReply"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"a" * (wire.MAX_HEAD_BYTES + 10), wire.BadReply, "BadReply"),
    ],
    ids=[
        "nothing",
        "cut-body",
        "cut-head",
        "not-http",
        "two-lengths",
        "negative-length",
        "folded",
        "chunk-size",
        "unasked-coding",
        "huge-head",
    ],
)
def test_a_reply_cut_short_or_malformed_is_an_error_of_its_kind_and_the_connection_is_dropped(reply, error, kind):
    with scripted(serve([reply], close_after=True)) as (port, _):
        c = client(port)
        with pytest.raises(error) as caught:
            c.send(request(port))
    assert measure.error_kind(caught.value) == kind
    assert c._idle == []


def test_the_timeout_bounds_the_whole_request_not_each_wait():
    # A server that trickles its head a byte every 20 ms: each wait is short, the reply never completes.
    def trickle(conn: socket.socket, read: Reading) -> None:
        read(conn)
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 500:
            conn.sendall(bytes([byte]))
            time.sleep(0.02)

    with scripted(trickle) as (port, _):
        c = client(port, timeout=0.3)
        with pytest.raises(TimeoutError) as caught:
            c.send(request(port))
    assert measure.error_kind(caught.value) == measure.TIMEOUT


@pytest.fixture
def tls_server(tmp_path) -> Iterator[tuple[int, Path]]:
    """A TLS server answering OK with a self-signed certificate for 127.0.0.1; yields its port and certificate."""
    cert_file, key_file = self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)

    def script(conn: socket.socket, read: Reading) -> None:
        with context.wrap_socket(conn, server_side=True) as tls:
            serve([OK])(tls, read)  # type: ignore[arg-type]

    with scripted(script) as (port, _):
        yield port, cert_file


def test_https_checks_the_certificate_against_the_contexts_cas_and_keeps_the_connection(tls_server):
    port, cert_file = tls_server
    origin = wire.Origin(f"https://127.0.0.1:{port}")
    trusting = wire.Client(origin, timeout=5, ssl_context=gevent.ssl.create_default_context(cafile=str(cert_file)))
    assert [trusting.send(request(port)).body for _ in range(2)] == [b'{"ok":true}'] * 2
    assert trusting.connections_opened == 1
    system = wire.Client(origin, timeout=5, ssl_context=gevent.ssl.create_default_context())
    with pytest.raises(ssl.SSLCertVerificationError) as caught:
        system.send(request(port))
    assert measure.error_kind(caught.value) == "SSLCertVerificationError"


def test_a_refused_connection_is_its_error():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    with pytest.raises(ConnectionRefusedError):
        client(port).send(request(port))


def test_the_host_header_names_the_port_only_when_it_is_not_the_schemes():
    assert wire.Origin("https://runtime.sagemaker.eu-west-1.amazonaws.com").host_header == (
        "runtime.sagemaker.eu-west-1.amazonaws.com"
    )
    assert wire.Origin("http://10.0.0.1:8080").host_header == "10.0.0.1:8080"
    assert wire.Origin("http://[::1]:8080").host_header == "[::1]:8080"
    with pytest.raises(ValueError, match="not an http"):
        wire.Origin("ftp://example.com")
    with pytest.raises(ValueError, match="https needs an SSL context"):
        wire.Client(wire.Origin("https://example.com"), timeout=1)


@pytest.mark.parametrize("bad", [{"X-A": "1\r\nX-Injected: 2"}, {"X-A\n": "1"}, {"X-A": "\0"}])
def test_a_header_that_would_split_the_request_is_refused(bad):
    with pytest.raises(ValueError, match="line break or NUL"):
        wire.post(wire.Origin("http://h"), "/p", bad, b"")


def test_a_path_that_would_split_the_request_line_is_refused():
    with pytest.raises(ValueError, match="a space would split the request line"):
        wire.post(wire.Origin("http://h"), "/a b", {}, b"")
    with pytest.raises(ValueError, match="line break or NUL"):
        wire.post(wire.Origin("http://h"), "/a\r\nX:1", {}, b"")


# -- the parser, fuzzed: whatever a server sends, a reply, one of three errors, or more bytes awaited -------------


class Feed:
    """A socket that hands out `data` in the given pieces, then the connection's end."""

    def __init__(self, data: bytes, cuts: list[int]) -> None:
        self.pieces, at = [], 0
        for cut in sorted(cuts):
            self.pieces.append(data[at:cut])
            at = cut
        self.pieces.append(data[at:])
        self.pieces = [p for p in self.pieces if p]

    def settimeout(self, _t: float) -> None:
        pass

    def recv(self, _n: int) -> bytes:
        return self.pieces.pop(0) if self.pieces else b""


def read_all(data: bytes, cuts: list[int]) -> tuple[wire.Reply, bool]:
    return wire._read(Feed(data, cuts), time.monotonic() + 60)


@pytest.mark.fuzz
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=6))
def test_any_bytes_parse_to_a_reply_or_one_of_the_three_errors(data, cuts):
    try:
        reply, _ = read_all(data, cuts)
    except (wire.BadReply, http.client.IncompleteRead, http.client.RemoteDisconnected):
        return
    assert 200 <= reply.status <= 999 and isinstance(reply.body, bytes)


@pytest.mark.fuzz
@settings(max_examples=300, deadline=None)
@example(304, b"", "close", [], [])  # no body, whatever the framing: the connection stays usable
@given(
    st.integers(200, 599),
    st.binary(max_size=300),
    st.sampled_from(["length", "chunked", "close"]),
    st.lists(st.integers(1, 40), max_size=5),
    st.lists(st.integers(0, 600), max_size=6),
)
def test_a_well_framed_reply_parses_back_whatever_its_pieces(status, body, framing, chunk_sizes, cuts):
    if status in (204, 304):
        body = b""
    head = b"HTTP/1.1 %d Whatever\r\nX-Empty:\r\nX-Pad:  v \t\r\n" % status
    if framing == "length":
        data = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
    elif framing == "chunked":
        data, rest = head + b"Transfer-Encoding: chunked\r\n\r\n", body
        for size in [*chunk_sizes, len(body)]:
            piece, rest = rest[:size], rest[size:]
            if piece:
                data += b"%x\r\n" % len(piece) + piece + b"\r\n"
        data += b"0\r\n\r\n"
    else:
        data = head + b"\r\n" + body
    reply, reusable = read_all(data, cuts)
    assert (reply.status, reply.body) == (status, body)
    assert reply.headers["x-empty"] == "" and reply.headers["x-pad"] == "v"
    assert reusable == (framing != "close" or status in (204, 304))
