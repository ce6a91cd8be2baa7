"""JSON Schemas of the YAML files, generated from the pydantic models so editors validate as you type.
The committed copies in model_configs/schema/ are kept in sync by a test."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import TypeAdapter

from inferstack.schema.environments import EnvironmentsFile
from inferstack.schema.model_config import ModelConfig

SCHEMAS = {
    "model.schema.json": lambda: TypeAdapter(ModelConfig).json_schema(),
    "environments.schema.json": lambda: EnvironmentsFile.model_json_schema(),
}


def render() -> dict[str, str]:
    """File name -> schema text, byte-for-byte what `write` puts on disk."""
    out = {}
    for name, build in SCHEMAS.items():
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **build()}
        out[name] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
