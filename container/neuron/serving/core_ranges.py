"""Split the container's NeuronCores into one disjoint, contiguous range per worker process.

The Neuron runtime reserves every core named in NEURON_RT_VISIBLE_CORES for the process that
loads a model, until it exits; the variable takes one index ("3") or one range ("0-3"). Each
worker therefore gets its own contiguous slice, set in its environment before it loads anything.
"""

from __future__ import annotations

import re

from compile_settings import SettingsError

_SPEC = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")
LABEL = "NEURON_RT_VISIBLE_CORES"


def parse_cores(spec: str, *, label: str = LABEL) -> range:
    match = _SPEC.match(spec)
    if not match:
        raise SettingsError(f"{label}: expected a core index or a range like 0-3, got {spec!r}")
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) is not None else first
    if last < first:
        raise SettingsError(f"{label}: range {spec!r} ends before it starts")
    return range(first, last + 1)


def format_cores(cores: range) -> str:
    return str(cores.start) if len(cores) == 1 else f"{cores.start}-{cores.stop - 1}"


def partition(
    spec: str | None,
    workers: int,
    cores_per_model: int,
    *,
    cores_label: str = LABEL,
    workers_label: str = "--workers (SERVER_WORKERS)",
) -> list[str | None]:
    """NEURON_RT_VISIBLE_CORES for each worker; None means leave the variable unset.

    The labels name the setting in errors: the container's variables, or one packed model's keys.
    """
    if spec is None or not spec.strip():
        if workers > 1 and cores_per_model:
            raise SettingsError(f"{cores_label}: set the container's cores (e.g. 0-15) to run {workers} workers")
        return [None] * workers
    cores = parse_cores(spec, label=cores_label)
    if len(cores) % workers:
        raise SettingsError(
            f"{workers_label}: {len(cores)} cores in {spec!r} do not split evenly over {workers} workers"
        )
    share = len(cores) // workers
    if cores_per_model and share % cores_per_model:
        raise SettingsError(
            f"{workers_label}: {share} cores per worker is not a multiple of the model's {cores_per_model} cores"
        )
    return [format_cores(cores[i * share : (i + 1) * share]) for i in range(workers)]
