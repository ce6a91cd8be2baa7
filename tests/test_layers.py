"""The layers of inferstack/ (CONTRIBUTING.md), as .importlinter states them: every import, a lazy one in a
function body or one under TYPE_CHECKING included, points to the importer's own layer or one below it. A
planted upward import breaks the contract, so the check can fail."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT

CONTRACT = ROOT / ".importlinter"


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """import-linter's own command on the package under `root`, with the contract of the repository."""
    command = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run(
        [sys.executable, "-c", command, "--config", str(CONTRACT), "--no-cache"],
        cwd=root,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_import_keeps_to_the_layers():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 1 kept, 0 broken." in result.stdout


def test_an_upward_import_breaks_the_contract_and_is_named(tmp_path):
    shutil.copytree(ROOT / "inferstack", tmp_path / "inferstack", ignore=shutil.ignore_patterns("__pycache__"))
    planted = tmp_path / "inferstack" / "schema" / "kinds.py"
    planted.write_text(
        planted.read_text()
        + "\n\ndef _planted():\n    from inferstack import cli  # noqa: F401 - the planted import is the point\n"
    )
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "inferstack.schema is not allowed to import inferstack.cli" in result.stdout
    assert "inferstack.schema.kinds -> inferstack.cli" in result.stdout


def test_a_package_the_contract_does_not_name_breaks_it(tmp_path):
    shutil.copytree(ROOT / "inferstack", tmp_path / "inferstack", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "inferstack" / "unplaced.py").write_text('"""A module in no layer."""\n')
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "inferstack.unplaced" in result.stdout + result.stderr
