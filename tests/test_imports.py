"""The test tree's own rules: no test module imports another test module or a conftest.py (what two test modules
share lives in tests/support/, a fixture in the nearest conftest.py above both), and every module under tests/
other than a test module, a conftest.py or a package's __init__.py is in tests/support/."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.paths import ROOT

TESTS = ROOT / "tests"
# A child process's `python -c` source is a string: an import of a test module there counts too.
IMPORT_IN_TEXT = re.compile(r"\b(?:from\s+([\w.]+)\s+import\s+([\w, ]+)|import\s+([\w.]+))")


def is_test_module(dotted: str) -> bool:
    """`tests.cli.test_cli`, `tests.conftest`, or a bare `conftest` / `test_x` (a directory on sys.path)."""
    last = dotted.rsplit(".", 1)[-1]
    return last == "conftest" or last.startswith("test_")


def package_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])


def imported_modules(source: str, package: str, *, in_strings: bool = True) -> list[tuple[int, str]]:
    """(line, module) for every module `source` imports, `from P import n` counted as P and as P.n (n may be a
    module); relative imports resolved against `package`; with `in_strings`, imports written in string constants
    (a child process's source) too."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names if alias.name != "*"]
        elif in_strings and isinstance(node, ast.Constant) and isinstance(node.value, str):
            for match in IMPORT_IN_TEXT.finditer(node.value):
                module, names, plain = match.groups()
                if plain:
                    found.append((node.lineno, plain))
                else:
                    found.append((node.lineno, module))
                    found += [
                        (node.lineno, f"{module}.{name.split(' as ')[0].strip()}")
                        for name in names.split(",")
                        if name.strip()
                    ]
    return found


def python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_test_module_imports_a_test_module_or_a_conftest():
    offences = [
        f"{path.relative_to(ROOT)}:{line}: imports {module}"
        for path in python_files()
        # this module's own strings are the examples of the test below
        for line, module in imported_modules(
            path.read_text(), package_of(path), in_strings=path != Path(__file__).resolve()
        )
        if is_test_module(module)
    ]
    assert offences == [], "move what they share to tests/support/ (or a fixture to a conftest.py):\n" + "\n".join(
        offences
    )


def test_helpers_live_in_tests_support():
    support = TESTS / "support"
    misplaced = [
        str(path.relative_to(ROOT))
        for path in python_files()
        if not (is_test_module(path.stem) or path.name == "__init__.py") and support not in path.parents
    ]
    assert misplaced == []
    assert [p.name for p in support.glob("*.py") if is_test_module(p.stem)] == []


def test_the_check_sees_every_way_of_importing():
    source = """
import tests.cli.test_cli
from tests.cli import test_cli
from tests.cli.test_cli import run
from tests.container.triton.conftest import serve
from conftest import LABELS
from . import test_cli as cli_tests
from .conftest import thing
import test_sibling
CHILD = "import os; from tests.synthesis.test_synth_shards import helper; helper()"
from tests.support.cli import run
from tests.support import aws_fakes
"""
    flagged = sorted({m for _, m in imported_modules(source, "tests.cli") if is_test_module(m)})
    assert flagged == [
        "conftest",
        "test_sibling",
        "tests.cli.conftest",
        "tests.cli.test_cli",
        "tests.container.triton.conftest",
        "tests.synthesis.test_synth_shards",
    ]
