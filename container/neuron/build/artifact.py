"""The compiled artifact on disk: layout, metadata JSON, source checksums, atomic publishing.

An artifact directory holds the traced TorchScript model, the fast tokenizer next to it and
metadata.json describing the tensor interface and how it was built. compile.py writes it into a
temporary sibling directory and renames it into place, so --out is either complete or absent.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MODEL_FILE = "model.pt"
METADATA_FILE = "metadata.json"
TOKENIZER_FILE = "tokenizer.json"
FORMAT_VERSION = 1


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def source_checksums(model_dir: Path) -> tuple[str, dict[str, str]]:
    """SHA-256 per model file and one digest over all of them (path + content, sorted)."""
    files = {}
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(model_dir).as_posix()
        if any(part.startswith(".") for part in rel.split("/")):
            continue  # .git, .cache: not part of the model
        files[rel] = sha256_file(path)
    overall = hashlib.sha256("".join(f"{rel}\0{digest}\n" for rel, digest in files.items()).encode()).hexdigest()
    return overall, files


@contextmanager
def staged_directory(final: Path) -> Iterator[Path]:
    """Yield a temporary sibling of ``final``; rename it into place only if the block succeeds."""
    final = final.resolve()
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=final.parent))
    try:
        yield staging
        os.chmod(staging, 0o755)
        if final.exists():
            final.rmdir()  # settings validation only lets an empty directory through
        os.replace(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_metadata(directory: Path, metadata: dict) -> None:
    text = json.dumps(metadata, indent=2, sort_keys=True) + "\n"
    (directory / METADATA_FILE).write_text(text, encoding="utf-8")


class ArtifactError(ValueError):
    """The directory is not a usable artifact."""


def read_metadata(directory: Path) -> dict:
    path = directory / METADATA_FILE
    if not path.is_file():
        raise ArtifactError(f"--model-dir: {directory} has no {METADATA_FILE} (not a compiled artifact)")
    try:
        metadata = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"--model-dir: cannot read {path}: {exc}") from None
    if metadata.get("format_version") != FORMAT_VERSION:
        raise ArtifactError(
            f"--model-dir: {path} has format_version {metadata.get('format_version')!r}, expected {FORMAT_VERSION}"
        )
    for name in (MODEL_FILE, TOKENIZER_FILE):
        if not (directory / name).is_file():
            raise ArtifactError(f"--model-dir: {directory} is missing {name}")
    return metadata
