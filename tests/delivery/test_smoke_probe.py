"""The smoke probe's handler (inferstack/delivery/smoke_probe/handler.py) over real HTTP against local servers:
the reply, status and latency it reports, and every way it refuses or fails, each as one line."""

from __future__ import annotations

import json
import socket
import time
from http.server import BaseHTTPRequestHandler

import pytest

from inferstack.delivery.smoke_probe import handler as probe
from tests.support.threaded_server import serving

LOCAL = {"PROBE_ALLOWED_HOST_SUFFIXES": "localhost,127.0.0.1", "PROBE_ALLOWED_NETWORKS": "127.0.0.0/8,::1/128"}


class Recorder(BaseHTTPRequestHandler):
    """POST /echo answers the request back; /status/N answers N with a JSON error; /text answers plain
    text; /slow answers after a second."""

    received: list[dict] = []

    def do_POST(self) -> None:  # http.server's naming
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append({"path": self.path, "body": body, "headers": dict(self.headers)})
        if self.path.startswith("/status/"):
            self._answer(int(self.path.rsplit("/", 1)[1]), json.dumps({"error": "no such model"}).encode())
        elif self.path == "/text":
            self._answer(200, b"plain words", "text/plain")
        elif self.path == "/slow":
            time.sleep(1.0)
            self._answer(200, b"{}")
        else:
            self._answer(200, json.dumps({"echo": json.loads(body), "path": self.path}).encode())

    def _answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def server():
    with serving(Recorder) as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def local(monkeypatch):
    for key, value in LOCAL.items():
        monkeypatch.setenv(key, value)
    Recorder.received.clear()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again: nothing listens there


def test_posts_the_json_and_reports_status_body_and_latency(server, local):
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["hi"]}]}
    result = probe.handler({"url": f"{server}/v2/models/m/infer?x=1", "body": body, "timeout": 5})
    assert result["status"] == 200
    assert result["body"] == {"echo": body, "path": "/v2/models/m/infer?x=1"}
    assert 0 < result["latency_ms"] < 5000
    (request,) = Recorder.received
    assert json.loads(request["body"]) == body
    assert request["headers"]["Content-Type"] == "application/json"
    assert request["headers"]["Host"] == server.removeprefix("http://")
    json.dumps(result)  # a Lambda result must serialize


def test_localhost_by_name_is_resolved_and_checked(server, local):
    port = server.rsplit(":", 1)[1]
    result = probe.handler({"url": f"http://localhost:{port}/echo", "body": [1, 2], "timeout": 5})
    assert (result["status"], result["body"]["echo"]) == (200, [1, 2])


@pytest.mark.parametrize("status", [404, 503])
def test_non_2xx_is_reported_with_its_body(server, local, status):
    result = probe.handler({"url": f"{server}/status/{status}", "body": {}, "timeout": 5})
    assert (result["status"], result["body"]) == (status, {"error": "no such model"})
    assert "error" not in result  # an HTTP reply came back: the caller judges it


def test_a_reply_that_is_not_json_comes_back_as_text(server, local):
    result = probe.handler({"url": f"{server}/text", "body": {}, "timeout": 5})
    assert (result["status"], result["body"], result["text"]) == (200, None, "plain words")


def test_timeout_is_one_line(server, local):
    result = probe.handler({"url": f"{server}/slow", "body": {}, "timeout": 0.2})
    assert result == {"error": f"{server}/slow: no reply within 0.2 s"}


def test_connection_refused_is_one_line(local):
    port = free_port()
    result = probe.handler({"url": f"http://127.0.0.1:{port}/v2/models/m/infer", "body": {}, "timeout": 2})
    assert result == {"error": f"http://127.0.0.1:{port}/v2/models/m/infer: connection refused (127.0.0.1:{port})"}


def test_https_to_a_plain_http_server_fails_cleanly(server, local):
    url = server.replace("http://", "https://") + "/echo"
    result = probe.handler({"url": url, "body": {}, "timeout": 2})
    assert list(result) == ["error"] and result["error"].startswith(f"{url}: ")
    assert "\n" not in result["error"]


@pytest.mark.parametrize(
    "url, message",
    [
        ("ftp://127.0.0.1/x", "url scheme must be http or https, got 'ftp'"),
        ("file:///etc/passwd", "url scheme must be http or https, got 'file'"),
        ("//127.0.0.1:8080/x", "url scheme must be http or https, got 'none'"),
        ("http:///x", "url has no host: http:///x"),
        ("http://user:pw@127.0.0.1/x", "url must not carry credentials"),
        ("http://127.0.0.1:99999/x", "url has an invalid port: http://127.0.0.1:99999/x"),
        (
            "http://169.254.169.254/latest/meta-data",
            "host 169.254.169.254 is not allowed (allowed: *localhost, *127.0.0.1)",
        ),
        ("http://example.com/x", "host example.com is not allowed (allowed: *localhost, *127.0.0.1)"),
        ("http://evil-localhost/x", "host evil-localhost is not allowed (allowed: *localhost, *127.0.0.1)"),
    ],
)
def test_refused_urls_make_no_request(local, url, message):
    assert probe.handler({"url": url, "body": {}, "timeout": 2}) == {"error": message}
    assert Recorder.received == []


def test_an_allowed_name_resolving_outside_the_networks_is_refused(server, monkeypatch, local):
    monkeypatch.setenv("PROBE_ALLOWED_NETWORKS", "10.10.0.0/16")
    result = probe.handler({"url": f"{server}/echo", "body": {}, "timeout": 2})
    assert result == {"error": "host 127.0.0.1 resolves to 127.0.0.1, outside the allowed networks (10.10.0.0/16)"}
    assert Recorder.received == []


def test_load_balancer_names_match_the_region_suffix():
    allowed = probe.Allowed((".us-east-1.elb.amazonaws.com",), ())
    allowed.check_host("internal-dev-i-Neuro-ABC-123.us-east-1.elb.amazonaws.com")
    with pytest.raises(probe.ProbeError):
        allowed.check_host("internal-x.us-west-2.elb.amazonaws.com")
    with pytest.raises(probe.ProbeError):
        allowed.check_host("us-east-1.elb.amazonaws.com.attacker.example")


@pytest.mark.parametrize(
    "event, message",
    [
        ("not an object", "event must be an object with url, body and timeout"),
        ({"body": {}}, "url must be a non-empty string"),
        ({"url": "http://127.0.0.1/"}, "body is required (the JSON request to POST)"),
        ({"url": "http://127.0.0.1/", "body": {}, "timeout": 0}, "timeout must be a number of seconds in (0, 50]"),
        ({"url": "http://127.0.0.1/", "body": {}, "timeout": 51}, "timeout must be a number of seconds in (0, 50]"),
        ({"url": "http://127.0.0.1/", "body": {}, "timeout": "5"}, "timeout must be a number of seconds in (0, 50]"),
    ],
)
def test_bad_events_are_one_line(local, event, message):
    assert probe.handler(event) == {"error": message}


def test_an_unconfigured_probe_calls_nothing(server, monkeypatch):
    monkeypatch.delenv("PROBE_ALLOWED_NETWORKS", raising=False)
    monkeypatch.setenv("PROBE_ALLOWED_HOST_SUFFIXES", "127.0.0.1")
    result = probe.handler({"url": f"{server}/echo", "body": {}, "timeout": 2})
    assert result["error"].startswith("the probe is not configured: ")
