"""Shared test setup. The CDK's jsii runtime runs on `node` from PATH: put the project's Node 22
(node_modules/.bin) first, as the Makefile does, so tests never run on the machine's Node 20."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = ROOT / "model_configs"

_node_bin = ROOT / "node_modules" / ".bin"
if _node_bin.is_dir() and not os.environ.get("PATH", "").startswith(str(_node_bin)):
    os.environ["PATH"] = f"{_node_bin}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.fixture
def aws(monkeypatch):
    """Emulated AWS (moto) with fake credentials, for tests of boto3 code."""
    from moto import mock_aws

    from tests import aws_fakes

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
