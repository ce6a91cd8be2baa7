"""`python -m inferstack validate`: load model_configs/ and report every problem."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inferstack import config
from inferstack.command_line import DEFAULT_CONFIG_DIR


def add_parser(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser("validate", help="check model_configs/ and report every problem")
    cmd.add_argument("--config-dir", type=Path, default=DEFAULT_CONFIG_DIR)
    cmd.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    project = config.load(args.config_dir)
    for warning in project.warnings:
        print(warning, file=sys.stderr)
    warned = f", {len(project.warnings)} warning(s)" if project.warnings else ""
    print(
        f"{args.config_dir}: {len(project.environments)} environments, {len(project.models)} models, "
        f"{len(project.fleets)} fleets: OK{warned}"
    )
    return 0
