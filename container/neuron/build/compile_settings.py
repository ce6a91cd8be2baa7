"""Validated compile settings: the Docker build-arg contract turned into one frozen object.

compile.py's flags mirror the build args one to one (MODEL_SOURCE -> --model, BATCH_SIZE ->
--batch-size, ...). Every rejection raises SettingsError naming the flag, so the CLI can print
one line and exit 2 before anything is written.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

BACKENDS = ("cpu", "inf1", "inf2")
PARALLELISMS = ("data-parallel", "pipeline")
TASKS = ("text-classification",)
MAX_BATCH_SIZE = 1024
MIN_SEQUENCE_LENGTH, MAX_SEQUENCE_LENGTH = 8, 8192
MAX_NEURON_CORES = 64  # inf1.24xlarge, the largest host, has 64 NeuronCores
PIPELINE_FLAG = "--neuroncore-pipeline-cores"


class SettingsError(ValueError):
    """A bad flag value; the message starts with the flag's name."""


@dataclass(frozen=True)
class CompileSettings:
    backend: str
    model_source: str
    model_revision: str | None
    task: str
    labels: tuple[str, ...] | None  # None: take the labels from the model's config
    batch_size: int
    sequence_length: int
    neuron_cores: int
    parallelism: str
    compiler_args: tuple[str, ...]
    out: Path

    @property
    def model_is_local(self) -> bool:
        return looks_like_path(self.model_source)


def looks_like_path(source: str) -> bool:
    """A model source is a local path if it exists or is spelled like one; else a hub id."""
    return Path(source).exists() or source.startswith(("/", "./", "../", "~"))


def parse_int(flag: str, raw: str | int, low: int, high: int) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise SettingsError(f"{flag}: expected an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise SettingsError(f"{flag}: must be between {low} and {high}, got {value}")
    return value


def parse_labels(raw: str | None) -> tuple[str, ...] | None:
    if raw is None or not raw.strip():
        return None
    labels = tuple(label.strip() for label in raw.split(","))
    if any(not label for label in labels):
        raise SettingsError(f"--labels: empty label in {raw!r} (comma-separated, no blanks)")
    if len(set(labels)) != len(labels):
        raise SettingsError(f"--labels: duplicate label in {raw!r}")
    return labels


def parse_compiler_args(raw: str | None) -> tuple[str, ...]:
    """Split COMPILER_ARGS like a shell would; the first token must be a flag."""
    if raw is None or not raw.strip():
        return ()
    try:
        tokens = tuple(shlex.split(raw))
    except ValueError as exc:
        raise SettingsError(f"--compiler-args: cannot split {raw!r}: {exc}") from None
    if not tokens[0].startswith("-"):
        raise SettingsError(f"--compiler-args: expected flags such as --fp32-cast=all, got {tokens[0]!r}")
    return tokens


def pipeline_cores_in(args: tuple[str, ...]) -> int | None:
    for i, token in enumerate(args):
        if token == PIPELINE_FLAG and i + 1 < len(args):
            return parse_int("--compiler-args", args[i + 1], 1, MAX_NEURON_CORES)
        if token.startswith(PIPELINE_FLAG + "="):
            return parse_int("--compiler-args", token.split("=", 1)[1], 1, MAX_NEURON_CORES)
    return None


def build_settings(
    *,
    backend: str,
    model: str,
    revision: str | None,
    task: str,
    labels: str | None,
    batch_size: str | int,
    sequence_length: str | int,
    neuron_cores: str | int,
    parallelism: str,
    compiler_args: str | None,
    out: str,
) -> CompileSettings:
    if backend not in BACKENDS:
        raise SettingsError(f"--backend: must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if not model or not model.strip():
        raise SettingsError("--model: a Hugging Face id or a local model directory is required")
    model = model.strip()
    if looks_like_path(model):
        path = Path(model).expanduser()
        if not path.is_dir():
            raise SettingsError(f"--model: model directory not found: {model}")
        if not (path / "config.json").is_file():
            raise SettingsError(f"--model: {model} has no config.json (not a Hugging Face model directory)")
    if task not in TASKS:
        raise SettingsError(f"--task: must be one of {', '.join(TASKS)}, got {task!r}")
    if parallelism not in PARALLELISMS:
        raise SettingsError(f"--parallelism: must be one of {', '.join(PARALLELISMS)}, got {parallelism!r}")
    cores = parse_int("--neuron-cores", neuron_cores, 1, MAX_NEURON_CORES)
    args = parse_compiler_args(compiler_args)
    flagged = pipeline_cores_in(args)
    if parallelism == "data-parallel":
        # DataParallel copies a one-core model onto every visible core; it cannot run
        # pipeline-compiled models (Neuron docs), so the two settings must agree.
        if cores != 1:
            raise SettingsError(
                "--neuron-cores: data-parallel models use 1 core each; use --parallelism pipeline for more"
            )
        if flagged is not None:
            raise SettingsError(f"--compiler-args: {PIPELINE_FLAG} needs --parallelism pipeline")
    else:
        if backend == "inf2":
            raise SettingsError("--parallelism: pipeline is an inf1 (neuron-cc) mode; use data-parallel on inf2")
        if cores < 2:
            raise SettingsError("--neuron-cores: pipeline mode needs at least 2 cores")
        if flagged is not None and flagged != cores:
            raise SettingsError(f"--compiler-args: {PIPELINE_FLAG} {flagged} disagrees with --neuron-cores {cores}")
        if flagged is None:
            args = args + (PIPELINE_FLAG, str(cores))
    out_path = Path(out)
    if out_path.exists() and not (out_path.is_dir() and not any(out_path.iterdir())):
        raise SettingsError(f"--out: {out} already exists (refusing to overwrite an artifact)")
    return CompileSettings(
        backend=backend,
        model_source=model,
        model_revision=revision.strip() if revision and revision.strip() else None,
        task=task,
        labels=parse_labels(labels),
        batch_size=parse_int("--batch-size", batch_size, 1, MAX_BATCH_SIZE),
        sequence_length=parse_int("--sequence-length", sequence_length, MIN_SEQUENCE_LENGTH, MAX_SEQUENCE_LENGTH),
        neuron_cores=cores,
        parallelism=parallelism,
        compiler_args=args,
        out=out_path,
    )
