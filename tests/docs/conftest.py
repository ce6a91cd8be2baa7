"""The documentation site's fixtures: the generator module (docs/gen/reference.py, loaded by path: docs/ is not
a package), and the site built once per test session with the pinned MkDocs of .venv-docs."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS_VENV = ROOT / ".venv-docs"
MKDOCS = DOCS_VENV / "bin" / "mkdocs"
BUILD_TIMEOUT_S = 240


def docs_environment() -> dict[str, str]:
    return {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


def require_docs_venv() -> None:
    if not MKDOCS.is_file():
        # `make setup` builds it; a missing environment fails the tier instead of passing it by skipping.
        pytest.fail(f"{MKDOCS.relative_to(ROOT)} is missing: run `make setup` (the .make/docs target)", pytrace=False)


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of `config` into `site`: what `make docs-build` runs."""
    require_docs_venv()
    return subprocess.run([str(MKDOCS), "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
                          cwd=config.parent, env=docs_environment(), capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S)


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
