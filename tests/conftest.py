"""Shared test setup. The CDK's jsii runtime runs on `node` from PATH: put the project's Node 22
(node_modules/.bin) first, as the Makefile does, so tests never run on the machine's Node 20.

The fixtures several folders use are here; helpers are imported from tests/support/, never from a test module
or a conftest.py (tests/test_imports.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.paths import CONFIG_DIR, ROOT

# Hypothesis (the fuzz-marked tests): derandomized, so every run, local or CI, tries the same examples and
# a failure reproduces; no example database written into the checkout. To hunt for new bugs by hand:
# HYPOTHESIS_PROFILE=explore FUZZ_SCALE=20 (fresh random examples, twenty times as many).
try:
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "ci", derandomize=True, database=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
    )
    settings.register_profile("explore", parent=settings.get_profile("ci"), derandomize=False)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
except ImportError:  # only the fuzz tests need it
    pass

_node_bin = ROOT / "node_modules" / ".bin"
if _node_bin.is_dir() and not os.environ.get("PATH", "").startswith(str(_node_bin)):
    os.environ["PATH"] = f"{_node_bin}{os.pathsep}{os.environ.get('PATH', '')}"


def pytest_collection_modifyitems(items):
    """The CLI deploy rehearsal (one test, about 3 minutes) first: xdist hands tests out in this order, so the
    longest one starts at once and the other worker runs the rest beside it, instead of it starting last and
    running alone. Otherwise the collected order, unchanged."""
    items.sort(key=lambda item: item.get_closest_marker("cli_rehearsal") is None)


@pytest.fixture(autouse=True, scope="session")
def shared_botocore_data():
    """Every botocore session the tests create (theirs, moto's, the product's) on the process's shared data
    loader, as the product's own sessions are (inferstack/aws/aws_sessions.py): parsing botocore's JSON again
    for each new session was over half of the moto-backed tests' time. The loader holds read-only data."""
    import botocore.session

    from inferstack.aws import aws_sessions

    patch = pytest.MonkeyPatch()
    patch.setattr(botocore.session, "create_loader", aws_sessions.shared_loader)
    yield
    patch.undo()


@pytest.fixture
def aws(monkeypatch):
    """Emulated AWS (moto) with fake credentials, for tests of boto3 code."""
    from moto import mock_aws

    from tests.support import aws_fakes

    for key, value in aws_fakes.FAKE_CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        yield


@pytest.fixture
def config_copy(tmp_path: Path) -> Path:
    """A writable copy of model_configs/ for tests that change it."""
    target = tmp_path / "model_configs"
    shutil.copytree(CONFIG_DIR, target)
    return target


# ----------------------------------------------------------------------------- the synthesized app


@pytest.fixture(scope="session")
def project():
    """The shipped model_configs/, loaded."""
    from inferstack import config

    return config.load(CONFIG_DIR)


@pytest.fixture(scope="session")
def synthesized(project, tmp_path_factory):
    """Every environment, synthesized once per test session (a tests.support.synth.Synthesized)."""
    from tests.support.synth import synth

    return synth(project, list(project.environments), tmp_path_factory.mktemp("cdk.out"))


# ----------------------------------------------------------------------------- the Neuron serving app


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    """A tiny random BERT checkpoint (benchmarks/make_tiny_model.py), built once per session."""
    from tests.support import neuron_server

    return neuron_server.build_tiny_bert(tmp_path_factory)


@pytest.fixture(scope="session")
def artifact(tmp_path_factory, tiny_bert) -> Path:
    """tiny_bert compiled for the CPU backend (container/neuron/build/compile.py), built once per session."""
    from tests.support import neuron_server

    return neuron_server.build_artifact(tmp_path_factory, tiny_bert)
