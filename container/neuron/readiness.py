"""Readiness across the workers of several packed models: one marker file per ready worker.

The supervisor creates a private directory and hands it to every worker. A worker writes
`<model>.<index>` there (a temporary file renamed, so a marker is whole or absent) once it is
warmed up, and removes it as soon as it starts draining; the supervisor removes a dead worker's.
A model is ready when all its workers' markers exist, the container when every model is: a few
stat calls per probe, with no traffic between the workers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def marker_path(directory: Path | str, model: str, index: int) -> Path:
    return Path(directory) / f"{model}.{index}"


class PackedReadiness:
    def __init__(self, directory: Path, ports: Mapping[str, int], workers: Mapping[str, int]) -> None:
        self.directory = Path(directory)
        self.ports = dict(ports)  # every packed model's port, in SERVER_MODELS order
        self.workers = dict(workers)

    @property
    def names(self) -> list[str]:
        return list(self.ports)

    def marker(self, model: str, index: int) -> Path:
        return marker_path(self.directory, model, index)

    def mark_ready(self, model: str, index: int) -> None:
        temporary = self.directory / f".{model}.{index}.tmp"
        temporary.write_bytes(b"")
        os.replace(temporary, self.marker(model, index))

    def clear(self, model: str, index: int) -> None:
        self.marker(model, index).unlink(missing_ok=True)

    def ready_workers(self, model: str) -> int:
        return sum(self.marker(model, i).exists() for i in range(self.workers[model]))

    def model_ready(self, model: str) -> bool:
        return all(self.marker(model, i).exists() for i in range(self.workers[model]))

    def not_ready(self) -> list[str]:
        """The models with a worker that is not ready, in SERVER_MODELS order."""
        return [name for name in self.ports if not self.model_ready(name)]
