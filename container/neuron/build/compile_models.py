"""The MODELS build arg: several models compiled into one image, each entry validated like the
single-model build args and turned into its own CompileSettings.

MODELS is a JSON array of objects; each names its model (`name`, the artifact's subdirectory and the
model's name at run time) and repeats the single-model args as keys. Every rejection is one
SettingsError naming MODELS[<i>].<key>, raised before anything is compiled or written.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

import json_entries
from compile_settings import BACKENDS, CompileSettings, SettingsError, build_settings

LABEL = "--models-json (MODELS)"
# key -> the single-model flag it mirrors (None: none); the defaults are the single-model args'
KEYS = {
    "name": None,
    "model": "--model",
    "revision": "--revision",
    "task": "--task",
    "labels": "--labels",
    "batch_size": "--batch-size",
    "sequence_length": "--sequence-length",
    "neuron_cores": "--neuron-cores",
    "parallelism": "--parallelism",
    "compiler_args": "--compiler-args",
}
FLAG_TO_KEY = {flag: key for key, flag in KEYS.items() if flag}
REQUIRED = ("name", "model")


@dataclass(frozen=True)
class PackedCompile:
    index: int
    name: str
    settings: CompileSettings  # its out is <out>/<name>; compile.py retargets it into the staging directory


def relabel(index: int, message: str) -> str:
    """A single-model error ("--labels: ...") as the MODELS entry's ("MODELS[1].labels: ...")."""
    flag, _, rest = message.partition(":")
    key = FLAG_TO_KEY.get(flag.strip())
    return f"MODELS[{index}].{key}:{rest}" if key else f"MODELS[{index}]: {message}"


def _string(where: str, value, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise SettingsError(f"{where}: expected a string, got {json.dumps(value)}")
    return value


def _strings(where: str, value, *, forbid: str = "") -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise SettingsError(f"{where}: expected a list of non-empty strings, got {json.dumps(value)}")
    for item in value:
        if forbid and forbid in item:
            raise SettingsError(f"{where}: {item!r} contains {forbid!r}")
    return value


def _entry(index: int, raw, *, backend: str, out: Path) -> PackedCompile:
    where = f"MODELS[{index}]"
    raw = json_entries.entry(where, raw, known=list(KEYS), required=REQUIRED, joiner=" and ")
    name = raw["name"]
    labels = raw.get("labels")
    try:
        settings = build_settings(
            backend=backend,
            model=_string(f"{where}.model", raw["model"]),
            revision=_string(f"{where}.revision", raw.get("revision"), optional=True),
            task=_string(f"{where}.task", raw.get("task", "text-classification")),
            labels=None if labels is None else ",".join(_strings(f"{where}.labels", labels, forbid=",")),
            batch_size=json_entries.integer(f"{where}.batch_size", raw.get("batch_size", 1)),
            sequence_length=json_entries.integer(f"{where}.sequence_length", raw.get("sequence_length", 128)),
            neuron_cores=json_entries.integer(f"{where}.neuron_cores", raw.get("neuron_cores", 1)),
            parallelism=_string(f"{where}.parallelism", raw.get("parallelism", "data-parallel")),
            compiler_args=shlex.join(_strings(f"{where}.compiler_args", raw.get("compiler_args", []))),
            out=str(out / name),
        )
    except SettingsError as exc:
        message = str(exc)
        raise SettingsError(message if message.startswith(where) else relabel(index, message)) from None
    return PackedCompile(index, name, settings)


def parse_models(raw: str, *, backend: str, out: str) -> list[PackedCompile]:
    if backend not in BACKENDS:
        raise SettingsError(f"--backend: must be one of {', '.join(BACKENDS)}, got {backend!r}")
    out_path = Path(out)
    if out_path.exists() and not (out_path.is_dir() and not any(out_path.iterdir())):
        raise SettingsError(f"--out: {out} already exists (refusing to overwrite an artifact)")
    entries = [_entry(i, item, backend=backend, out=out_path) for i, item in enumerate(json_entries.array(raw, LABEL))]
    for later in entries:
        for earlier in entries[: later.index]:
            if later.name == earlier.name:
                raise SettingsError(f"MODELS[{later.index}].name: {later.name!r} is also MODELS[{earlier.index}].name")
    return entries
