"""The Neuron container tests: container/neuron/'s modules importable by bare name, as in the image, servers
started per test (the tiny BERT and its artifact are tests/conftest.py's fixtures), and the packed models'
artifact (two tiny BERTs compiled in one step), built once per session."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.build_once import build_once
from tests.support.neuron_server import (
    COMPILE,
    LABELS,
    MAKE_TINY,
    SEQUENCE_LENGTH,
    ServerProcess,
    neuron_dirs_on_path,
    run_script,
)
from tests.support.packed_models import BETA_LABELS

neuron_dirs_on_path()


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


@pytest.fixture(scope="session")
def tiny_bert_two_labels(tmp_path_factory) -> Path:
    def build(target: Path) -> None:
        result = run_script(
            MAKE_TINY, "--kind", "bert", "--out", str(target / "model"), "--labels", ",".join(BETA_LABELS)
        )
        assert result.returncode == 0, result.stderr

    return build_once(tmp_path_factory, "tiny-bert-two-labels", build) / "model"


@pytest.fixture(scope="session")
def packed_models(tiny_bert, tiny_bert_two_labels) -> list[dict]:
    """MODELS: alpha and beta are served; gamma is a pipeline artifact (2 cores per copy) only the
    core-split rejection uses."""
    seq = SEQUENCE_LENGTH
    return [
        {"name": "alpha", "model": str(tiny_bert), "labels": list(LABELS), "sequence_length": seq, "batch_size": 2},
        {"name": "beta", "model": str(tiny_bert_two_labels), "labels": list(BETA_LABELS), "sequence_length": seq},
        {
            "name": "gamma",
            "model": str(tiny_bert),
            "sequence_length": seq,
            "parallelism": "pipeline",
            "neuron_cores": 2,
        },
    ]


@pytest.fixture(scope="session")
def packed_artifact(tmp_path_factory, packed_models) -> Path:
    def build(target: Path) -> None:
        models = json.dumps(packed_models)
        result = run_script(COMPILE, "--backend", "cpu", "--models-json", models, "--out", str(target / "art"))
        assert result.returncode == 0, result.stderr
        (target / "stdout.txt").write_text(result.stdout)

    return build_once(tmp_path_factory, "packed-artifact", build) / "art"
