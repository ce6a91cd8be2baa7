from __future__ import annotations

import pytest

from inferstack import config
from tests.conftest import CONFIG_DIR
from tests.infra.synth import Synthesized, synth


@pytest.fixture(scope="session")
def project() -> config.Project:
    return config.load(CONFIG_DIR)


@pytest.fixture(scope="session")
def synthesized(project, tmp_path_factory) -> Synthesized:
    """Every environment, synthesized once per test session."""
    return synth(project, list(project.environments), tmp_path_factory.mktemp("cdk.out"))
