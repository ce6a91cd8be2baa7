"""`python -m inferstack schema`: write the JSON Schemas of the YAML files."""

from __future__ import annotations

import argparse
from pathlib import Path

from inferstack.command_line import DEFAULT_CONFIG_DIR
from inferstack.config import json_schema


def add_parser(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser("schema", help="write the JSON Schemas of the YAML files")
    cmd.add_argument("--out", type=Path, default=DEFAULT_CONFIG_DIR / "schema")
    cmd.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for path in json_schema.write(args.out):
        print(f"wrote {path}")
    return 0
