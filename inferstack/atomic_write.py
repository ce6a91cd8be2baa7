"""Write a file whole or not at all (temporary sibling, then rename): a failed command never leaves a
half-written manifest or pin behind."""

from __future__ import annotations

import os
from pathlib import Path


def write_text(path: Path, text: str) -> None:
    """Raises OSError (with strerror) when the directory is missing or not writable."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: Path, data: bytes) -> None:
    """Raises OSError (with strerror) when the directory is missing or not writable."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
