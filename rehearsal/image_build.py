"""Image build rehearsal: what `docker build` would do with each image asset of a synthesized cloud
assembly, run on a machine without a Docker engine.

For every Docker image asset in the assembly (the staged directory, Dockerfile and build arguments
`cdk deploy` hands to Docker):
- the context is the staged directory reduced by Docker's own .dockerignore matcher (the `docker`
  SDK's `exclude_paths`), reading the ignore file BuildKit reads (`<Dockerfile>.dockerignore`
  beside the Dockerfile, else `<context>/.dockerignore`);
- every stage of the Dockerfile is interpreted in order: WORKDIR, COPY (from the context or an
  earlier stage), ARG/ENV, `RUN pip install -r <file>` (the file must be in the image and pin every
  requirement exactly; a side environment is built from it), and the build step itself (a RUN that
  runs Python), executed with the same working directory, script path and arguments, the image's
  paths mapped under a scratch root, the side environment's Python first on PATH and nothing from
  the checkout on sys.path;
- what the step imported is compared with the context (no module of the package may be imported
  from outside it, none may sit in it unused) and with the requirements file.

What cannot run here has one stand-in each, listed in the report: the base images (not pulled: the
side environment plays the Python the base image brings, plus the packages a Neuron DLC ships), the
Neuron compiler (compile.py's CPU backend), the hub checkpoint (a tiny random checkpoint of the
same architecture put where a local checkpoint goes: the family of inferstack.schema.families read from
the checkpoint's config.json where it is in the context, else source.family, else the hub id's name, else
the task's default; one per entry of a packed image's MODELS, with the entry's labels), system steps
(useradd, chown: skipped; mkdir emulated), and PyTorch's CPU wheel index (unreachable here; the same +cpu wheel
comes from the machine's local wheel directory).

    python -m rehearsal.image_build --assembly cdk.out          # rehearse every image asset
    python -m rehearsal.image_build --prepare                   # build the side environments
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from docker.utils.build import exclude_paths

from inferstack.schema import families
from rehearsal import dockerfile as df

ROOT = Path(__file__).resolve().parents[1]
ENVS_DIR = ROOT / ".venv-images"
MAKE_TINY = ROOT / "benchmarks" / "make_tiny_model.py"
# The CPU build of the torch the images pin (container/triton/requirements-export.txt), from the
# machine's local wheel directory: PyTorch's own index is unreachable here.
TORCH_CPU = "torch==2.13.0+cpu"
UNREACHABLE_INDEX = re.compile(r"^--extra-index-url\s+https://download\.pytorch\.org/\S*\s*$")
STEP_TIMEOUT_S = 900
CHECKPOINT_DIR = "rehearsal-checkpoint"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[\w,\s-]+\])?==([\w.+!-]+)$")
_PYTHON = re.compile(r"(^|[\s;&|(])python3?\s")
_IMPORT_TIME = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|(\s*)(\S+)$")


class RehearsalError(Exception):
    """The image would not build (one line: the image, the Dockerfile line or file, the reason)."""


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ---------------------------------------------------------------- the assets cdk deploy would build


@dataclass(frozen=True)
class ImageAsset:
    asset_id: str
    stacks: tuple[str, ...]
    directory: Path  # the staged context in the cloud assembly
    dockerfile: str  # relative to directory
    build_args: Mapping[str, str]

    @property
    def label(self) -> str:
        return f"{'/'.join(self.stacks)} ({self.dockerfile})"


def image_assets(assembly: Path) -> list[ImageAsset]:
    """Every Docker image asset in a cloud assembly (nested stage assemblies included), once each."""
    found: dict[str, ImageAsset] = {}
    for manifest in sorted(assembly.rglob("*.assets.json")):
        stack = _display_names(manifest.parent).get(manifest.name.removesuffix(".assets.json"))
        stack = stack or manifest.name.removesuffix(".assets.json")
        for asset_id, entry in json.loads(manifest.read_text()).get("dockerImages", {}).items():
            source = entry["source"]
            if "directory" not in source:
                raise RehearsalError(f"{manifest}: image asset {asset_id[:12]} is not built from a directory")
            known = found.get(asset_id)
            found[asset_id] = ImageAsset(
                asset_id,
                (known.stacks if known else ()) + (stack,),
                (manifest.parent / source["directory"]).resolve(),
                source.get("dockerFile", "Dockerfile"),
                dict(source.get("dockerBuildArgs", {})),
            )
    return list(found.values())


def _display_names(assembly: Path) -> dict[str, str]:
    """{stack artifact id: display name such as dev/t5-spelling} of one (nested) assembly."""
    manifest = assembly / "manifest.json"
    artifacts = json.loads(manifest.read_text()).get("artifacts", {}) if manifest.is_file() else {}
    return {
        key: value.get("displayName", key)
        for key, value in artifacts.items()
        if value.get("type") == "aws:cloudformation:stack"
    }


# ---------------------------------------------------------------- the context Docker would send


def ignore_file(directory: Path, dockerfile: str) -> Path | None:
    """The ignore file BuildKit applies: `<Dockerfile>.dockerignore` beside it wins over the root's."""
    for candidate in (directory / f"{dockerfile}.dockerignore", directory / ".dockerignore"):
        if candidate.is_file():
            return candidate
    return None


def ignore_patterns(path: Path | None) -> list[str]:
    if path is None:
        return []
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def build_context(directory: Path, dockerfile: str, out: Path, *, patterns: list[str] | None = None) -> list[str]:
    """Copy what Docker would send into `out`; return the files, relative and sorted."""
    if patterns is None:
        patterns = ignore_patterns(ignore_file(directory, dockerfile))
    kept = exclude_paths(str(directory), list(patterns), dockerfile=dockerfile)
    files = []
    for relative in sorted(kept):
        source = directory / relative
        if source.is_dir():
            (out / relative).mkdir(parents=True, exist_ok=True)
        elif source.is_file():
            (out / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, out / relative)
            files.append(relative)
    return files


def _tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


# ---------------------------------------------------------------- requirements and side environments


def exact_pins(text: str, *, source: str) -> dict[str, str]:
    """{normalised name: version} of a requirements file in which every requirement is `name==version`."""
    pins = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #")[0].strip()
        if not line or line.startswith("#") or line.startswith("--"):
            continue
        match = _PIN.match(line)
        if match is None:
            raise RehearsalError(f"{source}:{number}: {line!r} is not an exact pin (name==version)")
        pins[_normal(match.group(1))] = match.group(3)
    return pins


def installable(text: str, base_packages: Iterable[str]) -> str:
    """The requirements as pip can install them here: the unreachable PyTorch index dropped (its +cpu
    wheel is in the local wheel directory), plus what the base image would bring."""
    lines = [line for line in text.splitlines() if not UNREACHABLE_INDEX.match(line.strip())]
    return "\n".join([*lines, *base_packages]) + "\n"


def side_environment(name: str, requirements: str, *, no_deps: bool = False) -> Path:
    """A virtual environment with exactly these requirements (installed as the image installs them:
    `no_deps` as `pip install --no-deps`), rebuilt only when they change."""
    env = ENVS_DIR / name
    stamp = env / "requirements.sha256"
    digest = hashlib.sha256(f"no_deps={no_deps}\n{requirements}".encode()).hexdigest()
    if stamp.is_file() and stamp.read_text() == digest:
        return env
    shutil.rmtree(env, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write(requirements)
    try:
        result = subprocess.run(
            [
                str(env / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                *(["--no-deps"] if no_deps else []),
                "-r",
                handle.name,
            ],
            capture_output=True,
            text=True,
            timeout=1800,
        )
    finally:
        os.unlink(handle.name)
    if result.returncode != 0:
        shutil.rmtree(env, ignore_errors=True)
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise RehearsalError(f"side environment {name}: pip install failed: {last}")
    stamp.write_text(digest)
    return env


def distributions_of(env: Path, modules: Iterable[str]) -> dict[str, set[str]]:
    """{top-level module: normalised distributions providing it} in a side environment. Modules that
    are not there at all are left out: -X importtime also lists optional imports that failed."""
    code = (
        "import json, sys, importlib.util as u, importlib.metadata as m; d = m.packages_distributions(); "
        "print(json.dumps({k: d.get(k, []) for k in json.loads(sys.argv[1]) if u.find_spec(k)}))"
    )
    result = subprocess.run(
        [str(env / "bin" / "python"), "-c", code, json.dumps(sorted(set(modules)))],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    return {module: {_normal(d) for d in dists} for module, dists in json.loads(result.stdout).items()}


# ---------------------------------------------------------------- what cannot run here, per image


@dataclass(frozen=True)
class Recipe:
    """The stand-ins for one Dockerfile. Everything else is the Dockerfile's own."""

    name: str
    tiny_kind: str | None  # the stand-in's architecture where the model's is unknown (None: from the task)
    base_packages: tuple[str, ...] = ()  # what the base image brings that the build step imports
    full_lock: bool = False  # every distribution the step imports must be pinned in the image's file
    context_package: str | None = None  # its modules in the context must be exactly those imported
    command_stand_ins: tuple[tuple[str, str, str], ...] = ()  # (pattern, replacement, why)
    model: bool = True  # the build compiles or exports a model (a tiny checkpoint stands in for it)


TRITON = Recipe("triton", None, full_lock=True, context_package="inferstack")
# The Neuron DLCs bring torch (with torch-neuron / torch-neuronx) and numpy; the CPU build of torch
# stands in, and compile.py runs its CPU backend (torch.jit.trace) behind the same interface.
_NEURON_CPU = (
    (
        r"--backend (inf1|inf2)\b",
        "--backend cpu",
        "the Neuron compiler needs the Neuron SDK: compile.py's CPU backend traces the same model",
    ),
)
NEURON_INF1 = Recipe("neuron-inf1", "bert", (TORCH_CPU,), command_stand_ins=_NEURON_CPU)
NEURON_INF2 = Recipe("neuron-inf2", "bert", (TORCH_CPU,), command_stand_ins=_NEURON_CPU)
# The load-test generators' image holds no model: its build step imports what its entrypoint runs, and that
# closure must be exactly inferstack's modules in its context and distributions its requirements pin.
LOADTEST = Recipe("loadtest", None, full_lock=True, context_package="inferstack", model=False)
RECIPES = {
    "container/triton/Dockerfile": TRITON,
    "Dockerfile.inf1": NEURON_INF1,
    "Dockerfile.inf2": NEURON_INF2,
    "container/loadtest/Dockerfile": LOADTEST,
}
# Where each recipe's requirements file lives in the repository (for --prepare, before any synth).
REQUIREMENTS = {
    "triton": ROOT / "container/triton/requirements-export.txt",
    "neuron-inf1": ROOT / "container/neuron/requirements-inf1.txt",
    "neuron-inf2": ROOT / "container/neuron/requirements-inf2.txt",
    "loadtest": ROOT / "container/loadtest/requirements.txt",
}


def recipe_for(asset: ImageAsset) -> Recipe:
    try:
        return RECIPES[asset.dockerfile]
    except KeyError:
        raise RehearsalError(
            f"{asset.label}: no rehearsal recipe for {asset.dockerfile} (add one to rehearsal/image_build.py)"
        ) from None


def tiny_checkpoint(
    kind: str, out: Path, *, labels: str = "", hidden_size: int | None = None, max_position: int = 512
) -> None:
    args = [sys.executable, str(MAKE_TINY), "--kind", kind, "--out", str(out), "--max-position", str(max_position)]
    if labels:
        args += ["--labels", labels]
    if hidden_size:
        args += ["--hidden-size", str(hidden_size)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RehearsalError(f"tiny {kind} checkpoint: {(result.stderr.strip().splitlines() or ['failed'])[-1]}")


def stand_in_family(
    task: str, *, source: str | None, local: bool, context: Path, family: str | None = None, fallback: str | None = None
) -> tuple[str, str]:
    """(the family the stand-in is built as, where it came from): a local checkpoint's config.json in the
    context (model_type), else the model's `source.family`, else the hub id's name, else `fallback` or the
    task's default. The same order as `validate` (inferstack/config/architecture.py)."""
    found: list[tuple[str | None, str]] = []
    if local and source:
        config = (context / source / "config.json").resolve()
        if config.is_relative_to(context.resolve()) and config.is_file():
            try:
                model_type = json.loads(config.read_text(encoding="utf-8")).get("model_type")
            except (OSError, ValueError, AttributeError):
                model_type = None
            found.append((model_type if isinstance(model_type, str) else None, "its config.json"))
    found.append((family, "source.family"))
    if not local:
        found.append((families.from_name(source), "its name"))
    for name, origin in found:
        if name in families.FAMILIES:
            return name, origin
    return fallback or families.default_for_task(task), "family unknown: the task's default"


def stand_in_checkpoint(recipe: Recipe, build_args: Mapping[str, str], context: Path) -> tuple[dict[str, str], str]:
    """Put a tiny checkpoint of the model's architecture where a local checkpoint goes; return the
    build arguments that point at it and a line for the report."""
    args = dict(build_args)
    if not recipe.model:
        return args, "no model in this image: no checkpoint to stand in for"
    if recipe is TRITON:
        spec = json.loads(args["TRITON_REPOSITORY_SPEC"])
        source, export = spec["source"], spec["export"]
        local = source.get("local_path") is not None
        replaced = source.get("huggingface_id") or source.get("local_path")
        kind, origin = stand_in_family(
            source["task"], source=replaced, local=local, context=context, family=source.get("family")
        )
        relative = f"container/triton/{CHECKPOINT_DIR}"
        tiny_checkpoint(
            kind,
            context / relative,
            labels=",".join(source.get("labels") or []),
            hidden_size=export.get("hidden_size"),
            max_position=max(512, export["sequence_length"]),
        )
        spec["source"] = {"local_path": relative, "task": source["task"], "labels": source.get("labels") or []}
        args["TRITON_REPOSITORY_SPEC"] = json.dumps(spec, separators=(",", ":"))
        return args, f"checkpoint {replaced} -> a tiny random {kind} ({origin}) at {relative} (no hub downloads here)"
    if args.get("MODELS", "").strip():
        packed = _packed_models(args["MODELS"])
        if packed is None:
            return args, "MODELS left as given: compile.py rejects what it cannot read"
        replaced, kinds = [], []
        for entry in packed:
            relative = f"./{CHECKPOINT_DIR}/{entry['name']}"
            model = str(entry.get("model") or "")
            kind, _ = stand_in_family(
                str(entry.get("task", families.TEXT_CLASSIFICATION)),
                source=model,
                local=_is_local(model, context),
                context=context,
                fallback=recipe.tiny_kind,
            )
            tiny_checkpoint(
                kind,
                context / CHECKPOINT_DIR / entry["name"],
                labels=",".join(entry.get("labels") or []),
                max_position=max(512, int(entry.get("sequence_length", 128))),
            )
            replaced.append(f"{entry['model']} -> {relative}")
            kinds.append(f"{entry['name']}: {kind}")
            entry["model"] = relative
        args["MODELS"] = json.dumps(packed, separators=(",", ":"))
        return args, (
            f"MODELS: {', '.join(replaced)}, each a tiny random checkpoint of its family "
            f"({', '.join(kinds)}) with its entry's labels (no hub downloads here)"
        )
    relative = f"./{CHECKPOINT_DIR}"
    model = args.get("MODEL_SOURCE") or ""
    kind, origin = stand_in_family(
        args.get("TASK", families.TEXT_CLASSIFICATION),
        source=model,
        local=_is_local(model, context),
        context=context,
        fallback=recipe.tiny_kind,
    )
    tiny_checkpoint(
        kind,
        context / CHECKPOINT_DIR,
        labels=args.get("LABELS", ""),
        max_position=max(512, int(args.get("SEQUENCE_LENGTH", "128"))),
    )
    replaced, args["MODEL_SOURCE"] = args.get("MODEL_SOURCE"), relative
    return args, f"MODEL_SOURCE {replaced} -> a tiny random {kind} ({origin}) at {relative} (no hub downloads here)"


def _is_local(model: str, context: Path) -> bool:
    """A Neuron MODEL_SOURCE (or MODELS entry) that names a directory (./models/x), not a hub id: how
    compile_settings.looks_like_path tells them apart, run in the context."""
    return model.startswith(("/", "./", "../", "~")) or (bool(model) and (context / model).exists())


def _packed_models(raw: str) -> list[dict] | None:
    """The MODELS entries whose checkpoints a stand-in can replace, or None: what compile.py would
    reject (not JSON, not a list of named models) is left for the build step to reject in its own words."""
    try:
        entries = json.loads(raw)
    except json.JSONDecodeError:
        return None
    if not isinstance(entries, list) or not entries:
        return None
    if not all(
        isinstance(e, dict)
        and isinstance(e.get("name"), str)
        and isinstance(e.get("model"), str)
        and isinstance(e.get("labels", []), list)
        and isinstance(e.get("sequence_length", 128), int)
        and re.fullmatch(r"[a-z][a-z0-9-]*", e["name"])
        for e in entries
    ):
        return None
    return entries


# ---------------------------------------------------------------- running the Dockerfile's stages


@dataclass
class StepRun:
    line: int
    command: str
    seconds: float
    imports: set[str]


@dataclass
class ImageReport:
    asset: ImageAsset
    recipe: Recipe
    context_files: list[str]
    ignore_file: str | None
    stand_ins: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    steps: list[StepRun] = field(default_factory=list)
    requirements: dict[str, str] = field(default_factory=dict)  # file in the image -> its text
    from_base_image: list[str] = field(default_factory=list)
    image_root: Path | None = None  # the final stage's filesystem (mapped paths)

    @property
    def imports(self) -> set[str]:
        return set().union(*(step.imports for step in self.steps)) if self.steps else set()

    def lines(self) -> list[str]:
        out = [
            f"{self.asset.label}: context {len(self.context_files)} files (ignore file: {self.ignore_file or 'none'})"
        ]
        out += [f"  step {self.asset.dockerfile}:{s.line} ran in {s.seconds:.1f} s: {s.command}" for s in self.steps]
        out += [f"  stand-in: {line}" for line in self.stand_ins]
        out += [f"  skipped system step: {line}" for line in self.skipped]
        if self.from_base_image:
            out.append(f"  imported from the base image (not checked here): {', '.join(self.from_base_image)}")
        return out


class _Stage:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.workdir = "/"
        self.env: dict[str, str] = {}
        self.shell = ["/bin/sh", "-c"]
        self.python_env: Path | None = None


class Rehearsal:
    def __init__(self, asset: ImageAsset, work: Path, *, patterns: list[str] | None = None) -> None:
        self.asset = asset
        self.recipe = recipe_for(asset)
        self.work = work
        self.context = work / "context"
        self.context.mkdir(parents=True)
        ignore = ignore_file(asset.directory, asset.dockerfile)
        files = build_context(asset.directory, asset.dockerfile, self.context, patterns=patterns)
        self.report = ImageReport(
            asset, self.recipe, files, "(given)" if patterns is not None else ignore and ignore.name
        )
        self.mapped_roots: set[str] = {"tmp", "home", "root"}

    # -- paths
    def _map(self, stage: _Stage, text: str) -> str:
        roots = "|".join(sorted(map(re.escape, self.mapped_roots)))
        return re.sub(rf"(?<![\w./-])/(({roots})(?=[/\s'\";&|)]|$))", lambda m: f"{stage.root}/{m.group(1)}", text)

    def _path(self, stage: _Stage, path: str) -> Path:
        absolute = path if path.startswith("/") else f"{stage.workdir.rstrip('/')}/{path}"
        self.mapped_roots.add(absolute.strip("/").split("/")[0] or "tmp")
        return stage.root / absolute.lstrip("/")

    def fail(self, line: int, reason: str) -> RehearsalError:
        return RehearsalError(f"{self.asset.label}: {self.asset.dockerfile}:{line}: {reason}")

    # -- the run
    def run(self) -> ImageReport:
        dockerfile = self.context / self.asset.dockerfile
        if not dockerfile.is_file():
            raise self.fail(0, "the Dockerfile is not in the build context")
        preamble, stages = df.read(dockerfile)
        args, stand_in = stand_in_checkpoint(self.recipe, self.asset.build_args, self.context)
        self.report.stand_ins.append(stand_in)
        globals_ = {}
        for instruction in preamble:
            name, default = _arg(instruction, {})
            globals_[name] = args.get(name, default)
        digest = _tree_digest(self.context)
        finished: dict[str, Path] = {}
        stage_root = None
        for index, stage in enumerate(stages):
            stage_root = self.work / f"stage{index}"
            self._run_stage(stage, _Stage(stage_root), args, globals_, finished)
            finished[stage.name or str(index)] = stage_root
        self.report.image_root = stage_root
        self._check_imports()
        if _tree_digest(self.context) != digest:
            raise self.fail(0, "the build step wrote into the build context (a bind mount is read-only)")
        return self.report

    def _run_stage(
        self,
        stage: df.Stage,
        state: _Stage,
        build_args: Mapping[str, str],
        globals_: Mapping[str, str],
        finished: Mapping[str, Path],
    ) -> None:
        state.root.mkdir(parents=True)
        scope: dict[str, str] = {}
        for instruction in stage.instructions:
            keyword = instruction.keyword
            variables = {**scope, **state.env}
            if keyword == "ARG":
                name, default = _arg(instruction, variables)
                scope[name] = build_args.get(name, globals_.get(name, default))
            elif keyword == "ENV":
                for word in instruction.words(variables):
                    key, _, value = word.partition("=")
                    state.env[key] = value
            elif keyword == "WORKDIR":
                target = instruction.words(variables)[0]
                state.workdir = target if target.startswith("/") else f"{state.workdir.rstrip('/')}/{target}"
                self._path(state, state.workdir).mkdir(parents=True, exist_ok=True)
            elif keyword == "SHELL":
                state.shell = json.loads(instruction.arguments)
            elif keyword == "COPY":
                self._copy(instruction, state, variables, finished)
            elif keyword == "RUN":
                self._run(instruction, state, {**scope, **state.env})
            # USER, EXPOSE, HEALTHCHECK, ENTRYPOINT, CMD, LABEL: nothing to build

    def _copy(
        self, instruction: df.Instruction, state: _Stage, variables: dict[str, str], finished: Mapping[str, Path]
    ) -> None:
        words = instruction.words(variables)
        sources, dest = words[:-1], words[-1]
        origin = self.context
        if "from" in instruction.flags:
            if instruction.flags["from"] not in finished:
                raise self.fail(instruction.line, f"COPY --from={instruction.flags['from']}: no such earlier stage")
            origin = finished[instruction.flags["from"]]
        target = self._path(state, dest)
        for source in sources:
            matches = sorted(origin.glob(source.lstrip("/"))) if "*" in source else [origin / source.lstrip("/")]
            matches = [m for m in matches if m.exists()]
            if not matches:
                where = "the build context" if origin is self.context else f"stage {instruction.flags['from']}"
                raise self.fail(instruction.line, f"COPY {source}: not in {where}")
            for match in matches:
                if match.is_dir():
                    shutil.copytree(match, target, dirs_exist_ok=True)
                elif dest.endswith("/") or len(sources) > 1 or len(matches) > 1:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(match, target / match.name)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(match, target)

    def _run(self, instruction: df.Instruction, state: _Stage, variables: dict[str, str]) -> None:
        text, line = instruction.arguments, instruction.line
        if re.search(r"\bpip3? install\b", text):
            self._install(instruction, state, variables)
        elif _PYTHON.search(text):
            self._build_step(instruction, state, variables)
        else:
            for match in re.finditer(r"mkdir -p ((?:[^\s&;|]+\s*)+)", text):
                for path in match.group(1).split():
                    self._path(state, path).mkdir(parents=True, exist_ok=True)
            self.report.skipped.append(f"{self.asset.dockerfile}:{line}: {' '.join(text.split())[:90]}")

    def _install(self, instruction: df.Instruction, state: _Stage, variables: dict[str, str]) -> None:
        words = shlex.split(df.expand(instruction.arguments, variables))
        files = [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-r", "--requirement")]
        files += [w.split("=", 1)[1] for w in words if w.startswith("--requirement=")]
        if not files:
            raise self.fail(instruction.line, "pip install without a requirements file: nothing pins what it installs")
        text = ""
        for name in files:
            path = self._path(state, name)
            if not path.is_file():
                raise self.fail(instruction.line, f"pip install -r {name}: the file is not in the image")
            exact_pins(path.read_text(), source=name)
            self.report.requirements[name] = path.read_text()
            text += path.read_text()
        state.python_env = side_environment(
            self.recipe.name, installable(text, self.recipe.base_packages), no_deps="--no-deps" in words
        )

    def _build_step(self, instruction: df.Instruction, state: _Stage, variables: dict[str, str]) -> None:
        line = instruction.line
        if state.python_env is None:
            raise self.fail(line, "a Python step before any `pip install -r`: the rehearsal has no environment for it")
        command = instruction.arguments
        for pattern, replacement, why in self.recipe.command_stand_ins:
            command, count = re.subn(pattern, replacement, command)
            if count:
                self.report.stand_ins.append(f"{pattern} -> {replacement}: {why}")
        mount = instruction.flags.get("mount", "")
        if mount:
            options = dict(part.partition("=")[::2] for part in mount.split(","))
            if options.get("type") != "bind" or options.get("source", ".") not in (".", ""):
                raise self.fail(line, f"--mount={mount}: only a bind mount of the context is rehearsed")
            target = self._path(state, options["target"])
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(target, ignore_errors=True)
            target.symlink_to(self.context, target_is_directory=True)
        cwd = self._path(state, state.workdir)
        cwd.mkdir(parents=True, exist_ok=True)
        mapped = self._map(state, command)
        env = {key: self._map(state, value) for key, value in variables.items()}
        env.update(
            PATH=f"{state.python_env / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            HOME=str(state.root / "root"),
            LANG="C.UTF-8",
            PYTHONNOUSERSITE="1",
            PYTHONPROFILEIMPORTTIME="1",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
        )
        (state.root / "root").mkdir(exist_ok=True)
        started = time.monotonic()
        try:
            result = subprocess.run(
                [*state.shell, mapped], cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            raise self.fail(line, f"the build step ran over {STEP_TIMEOUT_S} s") from None
        # -X importtime writes to stderr, which a step may route into its build log (stdout).
        imports, streams = set(), {}
        for name, output in (("stdout", result.stdout), ("stderr", result.stderr)):
            streams[name] = []
            for text in output.splitlines():
                match = _IMPORT_TIME.match(text)
                if match:
                    imports.add(match.group(2))
                elif text.strip():
                    streams[name].append(text.strip())
        if result.returncode != 0:
            reason = (streams["stderr"] or streams["stdout"] or ["no output"])[-1]
            raise self.fail(line, f"build step failed (exit {result.returncode}): {reason}")
        self.report.steps.append(StepRun(line, " ".join(command.split())[:160], time.monotonic() - started, imports))

    # -- what the build step imported
    def _check_imports(self) -> None:
        imports = self.report.imports
        package = self.recipe.context_package
        if package:
            in_context = {
                _module_name(path)
                for path in self.report.context_files
                if path.startswith(f"{package}/") and path.endswith(".py")
            }
            problem = closure_problem(
                package, {m for m in imports if m == package or m.startswith(f"{package}.")}, in_context
            )
            if problem:
                raise self.fail(0, problem)
        env = ENVS_DIR / self.recipe.name
        top_level = third_party(imports)
        top_level -= {p.split("/")[0].removesuffix(".py") for p in self.report.context_files}
        top_level -= {p.name.removesuffix(".py") for p in self._image_python_files()}
        pinned: dict[str, str] = {}
        for name, text in self.report.requirements.items():
            pinned.update(exact_pins(text, source=name))
        base = {_normal(_PIN.match(p).group(1)) for p in self.recipe.base_packages}
        missing, unowned = unpinned_imports(distributions_of(env, top_level), set(pinned) | base)
        if self.recipe.full_lock and (missing or unowned):
            files = ", ".join(self.report.requirements)
            raise self.fail(0, f"the build step imports {', '.join(missing + unowned)}, not pinned in {files}")
        # A Neuron DLC brings these itself; what it ships cannot be listed here.
        self.report.from_base_image = missing + unowned

    def _image_python_files(self) -> list[Path]:
        root = self.report.image_root
        return [p for p in root.rglob("*.py") if p.is_file()] if root else []


def _arg(instruction: df.Instruction, variables: dict[str, str]) -> tuple[str, str]:
    """(name, default) of `ARG name[=default]`, the default unquoted as the builder does (`ARG X=""`
    is empty, not two quote characters)."""
    name, _, default = instruction.words(variables)[0].partition("=")
    return name, default


def third_party(imports: Iterable[str]) -> set[str]:
    """Top-level modules outside the standard library (private ones, such as the `_distutils_hack`
    setuptools' .pth file loads at interpreter start, are not the step's imports)."""
    return {m.split(".")[0] for m in imports if not m.startswith("_")} - set(sys.stdlib_module_names)


def _module_name(path: str) -> str:
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def closure_problem(package: str, imported: set[str], in_context: set[str]) -> str | None:
    """The package's modules the build step imported must be exactly those the context holds."""
    unused = sorted(in_context - imported)
    outside = sorted(imported - in_context)
    if outside:
        return f"the build step imports {', '.join(outside)} from outside the build context"
    if unused:
        return (
            f"the build context holds {', '.join(unused)}, which the build step never imports "
            f"(drop it from the ignore file's allow-list)"
        )
    return None


def unpinned_imports(providers: Mapping[str, set[str]], pinned: set[str]) -> tuple[list[str], list[str]]:
    """(imported modules no pinned distribution provides, named with their distributions; modules
    installed by no distribution at all)."""
    missing, unknown = [], []
    for module, dists in sorted(providers.items()):
        if not dists:
            unknown.append(module)
        elif not dists & pinned:
            missing.append(f"{module} ({', '.join(sorted(dists))})")
    return missing, unknown


def rehearse(asset: ImageAsset, work: Path, *, patterns: list[str] | None = None) -> ImageReport:
    return Rehearsal(asset, work, patterns=patterns).run()


def prepare() -> list[Path]:
    """Build every recipe's side environment from the repository's requirements files (make setup)."""
    recipes = {recipe.name: recipe for recipe in RECIPES.values()}
    return [
        side_environment(
            name,
            installable(REQUIREMENTS[name].read_text(), recipes[name].base_packages),
            no_deps=recipes[name].full_lock,
        )
        for name in sorted(recipes)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rehearsal.image_build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--assembly", type=Path, help="a synthesized cloud assembly (cdk.out)")
    parser.add_argument("--prepare", action="store_true", help="build the side environments and exit")
    parser.add_argument("--keep", type=Path, help="keep each image's rehearsed filesystem under this directory")
    args = parser.parse_args(argv)
    try:
        if args.prepare:
            for env in prepare():
                print(f"side environment ready: {env}")
            return 0
        if args.assembly is None:
            parser.error("--assembly or --prepare is required")
        assets = image_assets(args.assembly)
        if not assets:
            print(f"{args.assembly}: no Docker image assets (images pinned by a release?)", file=sys.stderr)
            return 2
        work = args.keep or Path(tempfile.mkdtemp(prefix="image-rehearsal-"))
        try:
            for number, asset in enumerate(assets):
                report = rehearse(asset, work / f"{number:02d}-{asset.asset_id[:12]}")
                print("\n".join(report.lines()))
        finally:
            if args.keep is None:
                shutil.rmtree(work, ignore_errors=True)
    except (RehearsalError, df.DockerfileError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"{len(assets)} image(s) rehearsed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
