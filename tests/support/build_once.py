"""Build an expensive test input once per session, shared between pytest-xdist workers (a file lock in
the workers' common base temp dir)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock


def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # With xdist each worker has its own basetemp under one common parent.
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def build_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    shared = shared_dir(tmp_path_factory)
    target = shared / name
    with FileLock(str(shared / f"{name}.lock")):
        if not (target / ".done").exists():
            build(target)
            (target / ".done").write_text("ok")
    return target
