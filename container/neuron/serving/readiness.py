"""Readiness across the workers of several packed models: one marker file per ready worker.

The supervisor creates a private directory and hands it to every worker. A worker writes
`<model>.<index>` there (a temporary file renamed, so a marker is whole or absent) once it is
warmed up, and removes it as soon as it starts draining; the supervisor removes a dead worker's.
A model is ready when all its workers' markers exist, the container when every model is: a few
stat calls per probe, with no traffic between the workers. A worker the supervisor restarts has a
`<model>.<index>.restarting` marker instead until its replacement is warm: it takes no connections
meanwhile, so its model stays ready as long as another of its workers is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# A worker's exit status when its model failed to load: at start-up the supervisor stops rather than retry.
LOAD_FAILED = 3
RESTARTING = ".restarting"


def marker_path(directory: Path | str, model: str, index: int) -> Path:
    return Path(directory) / f"{model}.{index}"


def restarting_path(directory: Path | str, model: str, index: int) -> Path:
    return Path(directory) / f"{model}.{index}{RESTARTING}"


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
        restarting_path(self.directory, model, index).unlink(missing_ok=True)

    def clear(self, model: str, index: int) -> None:
        self.marker(model, index).unlink(missing_ok=True)

    def ready_workers(self, model: str) -> int:
        return sum(self.marker(model, i).exists() for i in range(self.workers[model]))

    def model_ready(self, model: str) -> bool:
        """Every worker ready, but for those being restarted, and at least one ready."""
        ready = 0
        for i in range(self.workers[model]):
            if self.marker(model, i).exists():
                ready += 1
            elif not restarting_path(self.directory, model, i).exists():
                return False
        return ready > 0

    def not_ready(self) -> list[str]:
        """The models with a worker that is not ready, in SERVER_MODELS order."""
        return [name for name in self.ports if not self.model_ready(name)]
