"""container/neuron/'s two parts: build/ (what `docker build` runs) never imports serving/ (what the container
runs), so the compile step runs with build/ alone, before serving/ is copied into the image."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.neuron_server import BUILD_DIR, SERVING_DIR


def modules(directory: Path) -> set[str]:
    return {path.stem for path in directory.glob("*.py")}


def imported(path: Path) -> set[str]:
    """Top-level names of every import in the module, lazy ones inside functions included."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def upward_imports(build: Path, serving: Path) -> list[str]:
    serving_modules = modules(serving)
    return sorted(
        f"{path.name} imports {name}" for path in build.glob("*.py") for name in imported(path) & serving_modules
    )


def test_the_parts_share_no_module_name():
    assert modules(BUILD_DIR) and modules(SERVING_DIR)
    assert not modules(BUILD_DIR) & modules(SERVING_DIR)


def test_the_build_part_imports_nothing_of_the_serving_part():
    assert upward_imports(BUILD_DIR, SERVING_DIR) == []


def test_a_build_module_importing_a_serving_module_is_reported(tmp_path: Path):
    build, serving = tmp_path / "build", tmp_path / "serving"
    build.mkdir()
    serving.mkdir()
    (serving / "worker.py").write_text("")
    (build / "compile.py").write_text("def main():\n    import worker\n")
    assert upward_imports(build, serving) == ["compile.py imports worker"]
