"""The documentation site in tests: the pinned MkDocs of .venv-docs, a strict build of a config, and the browser
check (browser_check.py here) that .venv-docs's Python runs against a served site."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import ROOT

DOCS_VENV = ROOT / ".venv-docs"
MKDOCS = DOCS_VENV / "bin" / "mkdocs"
BUILD_TIMEOUT_S = 240
BROWSER_CHECK = Path(__file__).with_name("browser_check.py")


def docs_environment() -> dict[str, str]:
    return {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


def require_docs_venv() -> None:
    if not MKDOCS.is_file():
        # `make setup` builds it; a missing environment fails the tier instead of passing it by skipping.
        pytest.fail(f"{MKDOCS.relative_to(ROOT)} is missing: run `make setup` (the .make/docs target)", pytrace=False)


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of `config` into `site`: what `make docs-build` runs."""
    require_docs_venv()
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        cwd=config.parent,
        env=docs_environment(),
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
