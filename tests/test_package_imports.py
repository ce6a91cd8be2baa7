"""The product package needs none of the rehearsal's tools. rehearsal/ (used by tests, the Makefile and
benchmarks) needs moto and docker; inferstack/ must import without them and without rehearsal itself:

- every module under inferstack/, found by pkgutil.walk_packages, is imported in a fresh interpreter whose
  sys.meta_path raises ImportError for moto, docker and rehearsal (and their submodules);
- no inferstack/ source imports them anywhere, lazily inside a function included (an import in a function
  body runs only when it is called, so the first check alone would miss it).

Nothing is skipped. Two modules are imported their own way:
- `inferstack.__main__` runs the CLI when imported, so it is imported last, with `--help` (the parser builds
  every subcommand, and exits 0);
- `inferstack.loadtest.locustfile` is the file Locust loads in its own process: importing locust monkey-patches
  the standard library with gevent, and in a process where the CDK's jsii runtime already runs (its threads,
  started by the constructs) that import hangs (locust 2.47). It is imported in an interpreter of its own,
  blocked the same way.
And what inferstack/ imports when a module loads comes from requirements.txt, the file the pipeline's tool
steps (smoke, promote, loadtest) install alone: every module-level import of a third-party module is provided
by a distribution requirements.txt names or one those depend on (with the extras named). What only one feature
needs is imported inside the function that uses it (the Triton client's numpy and tokenizers, the load-test
report's matplotlib). Two files are exempt: the locustfile, which Locust loads in the load-test image
(container/loadtest/requirements.txt installs locust, gevent and psutil there), and wire.py, the HTTP client
only the locustfile imports (gevent's sockets)."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from inferstack.loadtest.runner import SPEC_ENV
from inferstack.loadtest.spec import LoadTestSpec, Step, Target
from tests.support.paths import ROOT

BLOCKED = ("moto", "docker", "rehearsal")
PACKAGE = ROOT / "inferstack"
# Imported in an interpreter of their own (why: the module docstring).
OWN_INTERPRETER = ("inferstack.loadtest.locustfile",)

# argv (JSON each): BLOCKED, OWN_INTERPRETER, then "walk" (every module walk_packages finds, less
# OWN_INTERPRETER) or the list of modules to import. Prints one RESULT line (JSON).
CHILD = r"""
import contextlib, importlib, importlib.abc, io, json, pkgutil, sys, traceback

BLOCKED, OWN_INTERPRETER, what = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
preloaded = sorted(name for name in sys.modules if name.split(".")[0] in BLOCKED)


class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked: inferstack must import without it", name=name)
        return None


sys.meta_path.insert(0, Block())
block_works = {}
for name in BLOCKED:
    try:
        importlib.import_module(name)
        block_works[name] = False
    except ImportError:
        block_works[name] = True

errors, walked, imported = {}, [], []


def failed(name):
    errors[name] = traceback.format_exc(limit=-3)


def load(name):
    try:
        importlib.import_module(name)
        imported.append(name)
    except BaseException:
        failed(name)


if what == "walk":
    import inferstack
    for info in pkgutil.walk_packages(inferstack.__path__, "inferstack.", onerror=failed):
        walked.append(info.name)
        if info.name not in OWN_INTERPRETER and info.name != "inferstack.__main__":
            load(info.name)
    sys.argv = ["python -m inferstack", "--help"]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            importlib.import_module("inferstack.__main__")
        errors["inferstack.__main__"] = "imported without exiting: expected SystemExit(0) from --help"
    except SystemExit as exc:
        if exc.code in (0, None):
            imported.append("inferstack.__main__")
        else:
            errors["inferstack.__main__"] = f"--help exited {exc.code!r}"
    except BaseException:
        failed("inferstack.__main__")
else:
    for name in what:
        load(name)

print("RESULT " + json.dumps({"preloaded": preloaded, "block_works": block_works, "walked": walked,
                              "imported": imported, "errors": errors}))
"""


def source_modules() -> set[str]:
    """Every module under inferstack/, from the files themselves (what walk_packages must find)."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names - {"inferstack"}


def blocked_import(what: str | list[str], env: dict[str, str] | None = None) -> dict:
    """CHILD's report, run in a fresh interpreter from the repository root (rehearsal/ importable there)."""
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", CHILD, *map(json.dumps, (BLOCKED, OWN_INTERPRETER, what))],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stdout[-4000:] + result.stderr[-4000:]
    report = json.loads(lines[-1].removeprefix("RESULT "))
    assert report["preloaded"] == []  # nothing blocked was loaded before the blocker went in
    assert report["block_works"] == {name: True for name in BLOCKED}  # rehearsal/ is on sys.path, yet refused
    assert report["errors"] == {}, "\n".join(f"{name}:\n{error}" for name, error in report["errors"].items())
    return report


def test_every_inferstack_module_imports_without_moto_docker_or_rehearsal():
    walk = blocked_import("walk")
    assert set(walk["walked"]) == source_modules()
    # The locustfile reads its spec when imported, as Locust's processes give it one.
    spec = LoadTestSpec(
        model="m",
        target=Target(kind="http", url="http://127.0.0.1:9/v2/models/m/infer"),
        bodies=({},),
        outputs=(),
        steps=(Step(rate=1.0, seconds=1.0),),
        p99_slo_ms=500.0,
    )
    alone = blocked_import(list(OWN_INTERPRETER), env={SPEC_ENV: spec.to_json()})
    assert alone["imported"] == list(OWN_INTERPRETER)
    assert set(walk["imported"]) | set(alone["imported"]) == source_modules()


def test_no_inferstack_source_imports_moto_docker_or_rehearsal():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno}: {name}" for name in names if name.split(".")[0] in BLOCKED
            ]
    assert found == []


# The load-test image's Locust file and its HTTP client: run by Locust there, with the image's own requirements
# (docstring).
OWN_REQUIREMENTS = {"inferstack/loadtest/locustfile.py", "inferstack/loadtest/wire.py"}


def module_level_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, top-level module) of every absolute import that runs when the module loads: at module level, in
    top-level if/try/with blocks and class bodies; not inside functions, nor under `if TYPE_CHECKING:`."""
    found: list[tuple[int, str]] = []

    def visit(nodes):
        for node in nodes:
            if isinstance(node, ast.Import):
                found.extend((node.lineno, alias.name.split(".")[0]) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.append((node.lineno, node.module.split(".")[0]))
            elif isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, (ast.Try, ast.With, ast.ClassDef)):
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(node, field, []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(tree.body)
    return found


def runtime_distributions(requirements: Path) -> set[str]:
    """The distributions requirements.txt installs: those it names and, recursively, what they require (with the
    extras asked for), as installed here; names normalized as PEP 503 does."""
    todo = [
        Requirement(line.split("#")[0].strip())
        for line in requirements.read_text().splitlines()
        if line.split("#")[0].strip()
    ]
    seen: dict[str, set[str]] = {}
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        extras = set(requirement.extras)
        if name in seen and extras <= seen[name]:
            continue
        seen[name] = seen.get(name, set()) | extras
        for line in importlib.metadata.requires(requirement.name) or []:
            dependency = Requirement(line)
            marker = dependency.marker
            if marker is None or any(marker.evaluate({"extra": extra}) for extra in (seen[name] or {""})):
                todo.append(dependency)
    return set(seen)


def test_module_level_imports_come_from_requirements_txt():
    runtime = runtime_distributions(ROOT / "requirements.txt")
    assert {"aws-cdk-lib", "jsii", "boto3", "botocore", "tritonclient", "grpcio", "protobuf"} <= runtime
    providers = importlib.metadata.packages_distributions()
    standard = set(sys.stdlib_module_names) | {"inferstack", "__future__"}
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative in OWN_REQUIREMENTS:
            continue
        for line, module in module_level_imports(ast.parse(path.read_text(), filename=relative)):
            if module in standard:
                continue
            distributions = {canonicalize_name(d) for d in providers.get(module, [])}
            if not distributions & runtime:
                missing.append(f"{relative}:{line}: {module} ({', '.join(sorted(distributions)) or 'not installed'})")
    assert missing == [], "imported at module level but not installed by requirements.txt:\n" + "\n".join(missing)


def test_the_import_scan_sees_what_runs_on_load_and_not_what_runs_on_use():
    tree = ast.parse(
        "import a.b\nfrom c import d\nfrom . import e\nif TYPE_CHECKING:\n    import f\nelse:\n    import g\n"
        "try:\n    import h\nexcept ImportError:\n    import i\nclass K:\n    import j\n"
        "def use():\n    import k\n"
    )
    assert [module for _, module in module_level_imports(tree)] == ["a", "c", "g", "h", "i", "j"]
