"""Servers the load tests run against over real sockets: a small KServe v2 answerer that fails a known share of
requests (503s and wrong answers), and moto's server (the rehearsal's, patched) for S3 and InvokeEndpoint."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from rehearsal import cli_deploy
from tests.support.emulator import ACCOUNT, REGION
from tests.support.threaded_server import JsonHandler, serving

GOOD_OUTPUTS = [
    {"name": "logits", "datatype": "FP32", "shape": [1, 3], "data": [0.1, 0.2, 0.7]},
    {"name": "label", "datatype": "BYTES", "shape": [1], "data": ["positive"]},
]


@dataclass
class Answerer:
    """Every `every`-th request gets a 503, the one after it an answer with the wrong logits shape. Every reply
    sets a cookie, as a load balancer's stickiness would; `cookies_back` counts the requests that sent one."""

    url: str
    every: int
    received: int = 0
    cookies_back: int = 0


@pytest.fixture
def answerer() -> Iterator[Answerer]:
    state = Answerer(url="", every=10)
    lock = threading.Lock()

    class Handler(JsonHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with lock:
                state.received += 1
                state.cookies_back += "Cookie" in self.headers
                number = state.received
            if number % state.every == 0:
                status, outputs = 503, None
            elif number % state.every == 1:
                status, outputs = 200, [{**GOOD_OUTPUTS[0], "shape": [1, 2], "data": [0.1, 0.9]}, GOOD_OUTPUTS[1]]
            else:
                status, outputs = 200, GOOD_OUTPUTS
            self.reply(
                status,
                json.dumps({"model_name": "m", "outputs": outputs} if outputs else {"error": "busy"}).encode(),
                {"Set-Cookie": "AWSALB=target-1; Path=/"},
            )

    with serving(Handler) as port:
        state.url = f"http://127.0.0.1:{port}/v2/models/m/infer"
        yield state


@pytest.fixture(scope="session")
def emulator_server(tmp_path_factory) -> Iterator[cli_deploy.Aws]:
    """moto's server on a free loopback port, one per session (tests keep apart by their names)."""
    with cli_deploy.emulator(tmp_path_factory.mktemp("moto"), cli_deploy.Clock(120)) as endpoint:
        yield cli_deploy.Aws(endpoint=endpoint, account=ACCOUNT, region=REGION)


@pytest.fixture
def emulator(emulator_server, tmp_path, monkeypatch) -> cli_deploy.Aws:
    """This process's AWS settings (and so those of the Locust processes it starts) point at moto's server."""
    for key, value in emulator_server.env(tmp_path).items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return emulator_server
