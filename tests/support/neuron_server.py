"""The Neuron serving app (container/neuron/) in tests: a tiny BERT and its CPU artifact (built once per test
session and shared between pytest-xdist workers, a file lock in the common base temp dir, because each costs
seconds of CPU; the `tiny_bert` and `artifact` fixtures of tests/conftest.py), the container's scripts run by
this interpreter, and live servers (`ServerProcess`).

The modules of container/neuron/build/ and serving/ import each other by bare name, as they do in the image:
`neuron_dirs_on_path()` puts both folders on sys.path (tests/container/neuron/conftest.py calls it for the tests
there).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support.build_once import build_once
from tests.support.paths import ROOT

NEURON_DIR = ROOT / "container" / "neuron"  # the image's build context
BUILD_DIR = NEURON_DIR / "build"  # what `docker build` runs
SERVING_DIR = NEURON_DIR / "serving"  # what the container runs
COMPILE = BUILD_DIR / "compile.py"
SERVE = SERVING_DIR / "serve.py"
HEALTHCHECK = SERVING_DIR / "healthcheck.py"
MAKE_TINY = ROOT / "benchmarks" / "make_tiny_model.py"
PYTHON = sys.executable
SEQUENCE_LENGTH = 32
LABELS = ("negative", "neutral", "positive")


def neuron_dirs_on_path() -> None:
    """Put container/neuron/'s serving/ and build/ first on sys.path, once: their modules import each other by
    bare name (serving's from build, as serve.py arranges it in the image)."""
    for directory in (BUILD_DIR, SERVING_DIR):
        if str(directory) not in sys.path:
            sys.path.insert(0, str(directory))


NEURON_MONITOR_STANDIN = Path(__file__).with_name("neuron_monitor_standin.py")


def neuron_monitor_standin(directory: Path) -> Path:
    """The neuron-monitor stand-in (neuron_monitor_standin.py; the real one needs Inferentia) as an executable
    file run by this interpreter, for SERVER_NEURON_MONITOR."""
    path = directory / "neuron-monitor"
    path.write_text(f'#!/bin/sh\nexec "{PYTHON}" "{NEURON_MONITOR_STANDIN}" "$@"\n')
    path.chmod(0o755)
    return path


def open_connections(url: str) -> dict[str, float]:
    """inference_open_connections per worker pid, as /metrics reports it (this request's connection included)."""
    text = requests.get(url + "/metrics", timeout=10).text
    return {
        pid: float(value)
        for pid, value in re.findall(r'^inference_open_connections\{pid="(\d+)"\} (\S+)$', text, re.MULTILINE)
    }


@contextlib.contextmanager
def idle_connections(server, count: int) -> Iterator[dict[str, float]]:
    """Once the readiness probes' connections are gone, open `count` keep-alive connections to `server`, one request
    each (so each is accepted before the next opens); yields open_connections then (on one more), closes them."""
    deadline = time.monotonic() + 60
    while sum(open_connections(server.url).values()) != 1:  # a worker may not have seen a probe's go yet
        assert time.monotonic() < deadline, open_connections(server.url)
        time.sleep(0.05)
    clients: list[socket.socket] = []
    try:
        for _ in range(count):
            client = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            client.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            assert client.recv(4096).startswith(b"HTTP/1.1 200")
            clients.append(client)
        yield open_connections(server.url)
    finally:
        for client in clients:
            client.close()


def run_script(script: Path, *args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def build_tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    def build(target: Path) -> None:
        result = run_script(MAKE_TINY, "--kind", "bert", "--out", str(target / "model"), "--labels", ",".join(LABELS))
        assert result.returncode == 0, result.stderr

    return build_once(tmp_path_factory, "tiny-bert", build) / "model"


def build_artifact(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path) -> Path:
    def build(target: Path) -> None:
        result = run_script(
            COMPILE,
            "--backend",
            "cpu",
            "--model",
            str(tiny_bert),
            "--out",
            str(target / "art"),
            "--sequence-length",
            str(SEQUENCE_LENGTH),
            "--batch-size",
            "2",
            "--compiler-args=--fp32-cast=all",
        )
        assert result.returncode == 0, result.stderr

    return build_once(tmp_path_factory, "tiny-bert-artifact", build) / "art"


def reference_logits(artifact: Path, texts: list[str]):
    """What the artifact computes for these texts, outside the server (a numpy array)."""
    neuron_dirs_on_path()
    import torch
    from backends import load_torchscript
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(artifact / "tokenizer.json"))
    metadata = json.loads((artifact / "metadata.json").read_text())
    length = metadata["sequence_length"]
    tokenizer.enable_truncation(max_length=length)
    tokenizer.enable_padding(length=length, pad_id=metadata["pad_token_id"])
    encodings = tokenizer.encode_batch(texts)
    ids = torch.tensor([e.ids for e in encodings])
    mask = torch.tensor([e.attention_mask for e in encodings])
    with torch.inference_mode():
        return load_torchscript(str(artifact / "model.pt"))(ids, mask).numpy()


class ServerProcess:
    """serve.py in a subprocess on an OS-assigned port, with its JSON log lines collected.

    port=None passes no --port (packed models name theirs in SERVER_MODELS); the url is then the
    first worker's port. separate_stdout=True keeps stdout (the EMF metrics lines) apart from stderr
    (the logs): `stdout_lines` and `lines`; otherwise both are in `lines`, as a terminal shows them.
    """

    def __init__(
        self,
        artifact: Path,
        env: dict | None = None,
        args: tuple[str, ...] = (),
        port: str | None = "0",
        separate_stdout: bool = False,
    ) -> None:
        self.proc = subprocess.Popen(
            [
                PYTHON,
                str(SERVE),
                "--model-dir",
                str(artifact),
                *(("--port", port) if port is not None else ()),
                "--host",
                "127.0.0.1",
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if separate_stdout else subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.lines: list[str] = []
        self.stdout_lines: list[str] = []
        self._port_seen = threading.Event()
        self.port: int | None = None
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stderr or self.proc.stdout,), daemon=True)]
        if separate_stdout:
            self._readers.append(threading.Thread(target=self._collect, args=(self.proc.stdout,), daemon=True))
        for reader in self._readers:
            reader.start()
        if not self._port_seen.wait(30):
            self.kill()
            raise AssertionError("server did not report its port:\n" + "\n".join(self.lines))
        self.url = f"http://127.0.0.1:{self.port}"

    def _collect(self, stream) -> None:
        for line in stream:
            self.stdout_lines.append(line.rstrip("\n"))

    def finish_reading(self, timeout: float = 10) -> None:
        """After the process exited: wait until everything it wrote has been read."""
        for reader in self._readers:
            reader.join(timeout)

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))
            if self.port is None:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("msg") == "worker started":
                    self.port = entry["port"]
                    self._port_seen.set()

    def logs(self) -> list[dict]:
        out = []
        for line in list(self.lines):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def wait_ready(self, timeout: float = 180) -> None:
        # Generous: on a loaded 2-core machine torch's import alone can take tens of seconds.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "server exited:\n" + "\n".join(self.lines)
            try:
                if requests.get(self.url + "/v2/health/ready", timeout=2).status_code == 200:
                    return
            except (requests.ConnectionError, requests.Timeout):  # not listening yet, or too busy to answer
                pass
            time.sleep(0.05)
        raise AssertionError("server never became ready:\n" + "\n".join(self.lines))

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
