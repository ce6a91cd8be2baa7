"""The Neuron container tests: container/neuron/'s modules importable by bare name, as in the image, and servers
started per test (the tiny BERT and its artifact are tests/conftest.py's fixtures)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.neuron_server import neuron_dir_on_path, ServerProcess

neuron_dir_on_path()


@pytest.fixture
def start_server():
    started: list[ServerProcess] = []

    def start(artifact: Path, env: dict | None = None, args: tuple[str, ...] = ()) -> ServerProcess:
        server = ServerProcess(artifact, env, args)
        started.append(server)
        return server

    yield start
    for server in started:
        try:
            server.stop(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
