"""Shared test setup. The CDK's jsii runtime runs on `node` from PATH: put the project's Node 22
(node_modules/.bin) first, as the Makefile does, so tests never run on the machine's Node 20."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = ROOT / "model_configs"

# Hypothesis (the fuzz-marked tests): derandomized, so every run, local or CI, tries the same examples and
# a failure reproduces; no example database written into the checkout. To hunt for new bugs by hand:
# HYPOTHESIS_PROFILE=explore FUZZ_SCALE=20 (fresh random examples, twenty times as many).
try:
    from hypothesis import HealthCheck, settings

    settings.register_profile("ci", derandomize=True, database=None, print_blob=True,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("explore", parent=settings.get_profile("ci"), derandomize=False)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
except ImportError:  # only the fuzz tests need it
    pass


def fuzz_examples(count: int) -> int:
    """A fuzz test's example count: modest by default (the suite stays fast), scaled by FUZZ_SCALE."""
    return count * int(os.environ.get("FUZZ_SCALE", "1"))

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


def without_fleets(config_dir: Path, keep_models: tuple[str, ...] | None = None) -> Path:
    """Edit a config copy so every model runs on its own instances or endpoint: environments.yaml without its
    `fleets:` block and, with `keep_models`, only those models' files (a smaller, faster synth)."""
    import yaml

    path = config_dir / "environments.yaml"
    data = yaml.safe_load(path.read_text())
    data.pop("fleets", None)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    if keep_models is not None:
        for model_file in config_dir.glob("*.yaml"):
            if model_file.name != "environments.yaml" and model_file.stem not in keep_models:
                model_file.unlink()
    return config_dir
