"""A small HTTP/1.1 server in a thread of the test process, on a free loopback port: the load tests' targets, and
the server class every test's own HTTP server uses."""

from __future__ import annotations

import ssl
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class JsonHandler(BaseHTTPRequestHandler):
    """Keep-alive, as a load balancer answers; replies are JSON with a length; nothing logged."""

    protocol_version = "HTTP/1.1"
    # The headers and the body go out in two writes: with Nagle's algorithm the body would wait for the client's
    # delayed ACK of the headers (40 ms on Linux), a latency no real server adds.
    disable_nagle_algorithm = True

    def reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


class QuietServer(ThreadingHTTPServer):
    """Every test's HTTP server in a thread: one whose handler threads print nothing into later tests."""

    # An open-model generator opens a connection per request in flight: the default backlog of 5 would make
    # the kernel drop connects (a second of SYN retry each) while a burst is accepted.
    request_queue_size = 256
    daemon_threads = True
    ended = False  # the block that served it has ended: its test is over

    def handle_error(self, request, client_address) -> None:
        """A client gone mid-request (a load generator stopping) is not the server's error, and a handler thread
        that outlives its test (daemon threads are not joined) must not print into the next test's captured
        stderr: one did, twice (from two different servers), and failed a CLI test that checks its own stderr
        line for line."""
        if self.ended or isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    def end(self) -> None:
        """Stop serving and close the socket; a handler thread still running prints nothing from here on."""
        self.ended = True
        self.shutdown()
        self.server_close()


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None) -> Iterator[int]:
    """Serve `handler` (over TLS with `tls`) until the block ends; yields the port."""
    server = QuietServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.end()
        thread.join(10)
