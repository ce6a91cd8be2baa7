"""Several models in one container (SERVER_MODELS): each on its own port, NeuronCore range and workers.

parse() turns the JSON into frozen PackedModel objects (keys, names, ports, disjoint core ranges);
preflight() checks them against the compiled artifacts and the container's cores. Both run before
any socket is bound or worker started, and every rejection is one SettingsError naming
SERVER_MODELS[<i>].<key>.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import json_entries
from artifact import ArtifactError, read_metadata
from compile_settings import SettingsError
from core_ranges import LABEL as CORES_LABEL
from core_ranges import format_cores, parse_cores, partition

ENV = "SERVER_MODELS"
REQUIRED = ("name", "port", "visible_cores")
MAX_SLO_MS = 600_000
OPTIONAL = ("workers", "max_batch_size", "max_queue_delay_ms", "slo_ms")
# The same bounds as the single-model settings (server_settings.py).
MAX_WORKERS, MAX_BATCH_SIZE, MAX_QUEUE_DELAY_MS = 64, 1024, 1000


@dataclass(frozen=True)
class PackedModel:
    index: int  # position in SERVER_MODELS, for error messages
    name: str
    port: int
    visible_cores: str  # one range, normalised: "0-1" or "2"
    workers: int
    max_batch_size: int
    max_queue_delay_ms: float
    slo_ms: float | None = None  # its own SLO, which admission answers within (SERVER_SLO_MS otherwise)

    def label(self, key: str) -> str:
        return f"{ENV}[{self.index}].{key}"


@dataclass(frozen=True)
class PackedPlan:
    """One packed model checked against its artifact: what the supervisor starts for it."""

    model: PackedModel
    metadata: dict
    slices: tuple[str, ...]  # NEURON_RT_VISIBLE_CORES of each of its workers


def _number(label: str, value, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SettingsError(f"{label}: expected a number, got {json.dumps(value)}")
    if not low <= value <= high:
        raise SettingsError(f"{label}: must be between {low} and {high}, got {value}")
    return float(value)


def _entry(index: int, raw, *, workers: int, max_batch_size: int, max_queue_delay_ms: float) -> PackedModel:
    where = f"{ENV}[{index}]"
    raw = json_entries.entry(where, raw, known=REQUIRED + OPTIONAL, required=REQUIRED)
    name = raw["name"]
    cores = raw["visible_cores"]
    if isinstance(cores, bool) or not isinstance(cores, (str, int)):
        raise SettingsError(
            f'{where}.visible_cores: expected one range like "0-1" or one index, got {json.dumps(cores)}'
        )
    model = PackedModel(
        index=index,
        name=name,
        port=json_entries.integer(f"{where}.port", raw["port"], 1, 65535),
        visible_cores=format_cores(parse_cores(str(cores), label=f"{where}.visible_cores")),
        workers=json_entries.integer(f"{where}.workers", raw.get("workers", workers), 1, MAX_WORKERS),
        max_batch_size=json_entries.integer(
            f"{where}.max_batch_size", raw.get("max_batch_size", max_batch_size), 1, MAX_BATCH_SIZE
        ),
        max_queue_delay_ms=_number(
            f"{where}.max_queue_delay_ms", raw.get("max_queue_delay_ms", max_queue_delay_ms), 0, MAX_QUEUE_DELAY_MS
        ),
        slo_ms=_number(f"{where}.slo_ms", raw["slo_ms"], 1, MAX_SLO_MS) if "slo_ms" in raw else None,
    )
    # The even split over the workers needs no artifact: reject an uneven one now.
    partition(
        model.visible_cores,
        model.workers,
        0,
        cores_label=model.label("visible_cores"),
        workers_label=model.label("workers"),
    )
    return model


def parse(
    raw: str, *, label: str, workers: int, max_batch_size: int, max_queue_delay_ms: float
) -> tuple[PackedModel, ...]:
    """SERVER_MODELS as frozen entries; workers / max_batch_size / max_queue_delay_ms default to the
    container's single-model settings."""
    models = tuple(
        _entry(i, item, workers=workers, max_batch_size=max_batch_size, max_queue_delay_ms=max_queue_delay_ms)
        for i, item in enumerate(json_entries.array(raw, label))
    )
    for later in models:
        for earlier in models[: later.index]:
            if later.name == earlier.name:
                raise SettingsError(f"{later.label('name')}: {later.name!r} is also {earlier.label('name')}")
            if later.port == earlier.port:
                raise SettingsError(
                    f"{later.label('port')}: {later.port} is also {earlier.label('port')} ({earlier.name})"
                )
            if set(parse_cores(later.visible_cores)) & set(parse_cores(earlier.visible_cores)):
                raise SettingsError(
                    f"{later.label('visible_cores')}: {later.visible_cores} overlaps {earlier.label('visible_cores')} "
                    f"({earlier.name}: {earlier.visible_cores})"
                )
    return models


def preflight(models: tuple[PackedModel, ...], model_dir: Path, container_cores: str | None) -> list[PackedPlan]:
    """Each model's artifact (<model_dir>/<name>/) and core slices, or a SettingsError.

    The artifact's neuron_cores_per_model must divide each worker's share on every backend: the CPU
    backend only stands in for the Neuron runtime, which would refuse such a split.
    """
    available = parse_cores(container_cores) if container_cores and container_cores.strip() else None
    plans = []
    for model in models:
        directory = model_dir / model.name
        if not directory.is_dir():
            compiled = ", ".join(
                sorted(p.name for p in model_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
            )
            raise SettingsError(
                f"{model.label('name')}: no artifact {model.name!r} in {model_dir} (compiled: {compiled or 'none'})"
            )
        try:
            metadata = read_metadata(directory)
        except ArtifactError as exc:
            raise SettingsError(f"{model.label('name')}: {str(exc).removeprefix('--model-dir: ')}") from None
        cores = parse_cores(model.visible_cores)
        if available is not None and not set(cores) <= set(available):
            raise SettingsError(
                f"{model.label('visible_cores')}: {model.visible_cores} is outside the container's "
                f"{CORES_LABEL} {format_cores(available)}"
            )
        slices = partition(
            model.visible_cores,
            model.workers,
            int(metadata["neuron_cores_per_model"]),
            cores_label=model.label("visible_cores"),
            workers_label=model.label("workers"),
        )
        plans.append(PackedPlan(model, metadata, tuple(slices)))
    return plans
