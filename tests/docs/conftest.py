"""The documentation site's fixtures: the generator module (docs/gen/reference.py, loaded by path: docs/ is not
a package), and the site built once per test session with the pinned MkDocs of .venv-docs
(tests/support/docs_site.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.support.docs_site import mkdocs_build
from tests.support.paths import ROOT


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Path:
    """The site as `make docs-build` writes it, built once for the session."""
    site = tmp_path_factory.mktemp("site")
    result = mkdocs_build(ROOT / "mkdocs.yml", site)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    return site


@pytest.fixture(scope="session")
def generator():
    """docs/gen/reference.py as a module."""
    path = ROOT / "docs" / "gen" / "reference.py"
    spec = importlib.util.spec_from_file_location("docs_reference_generator", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module
