"""`python -m inferstack COMMAND`: the project's command line.

Every failure a user can cause (bad config, bad arguments) ends in one line per problem on stderr and
exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from inferstack import config
from inferstack.config import json_schema

DEFAULT_CONFIG_DIR = Path("model_configs")
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's default prints the whole usage block
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _cmd_validate(args: argparse.Namespace) -> int:
    project = config.load(args.config_dir)
    print(f"{args.config_dir}: {len(project.environments)} environments, {len(project.models)} models: OK")
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    for path in json_schema.write(args.out):
        print(f"wrote {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m inferstack", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    validate = commands.add_parser("validate", help="check model_configs/ and report every problem")
    validate.add_argument("--config-dir", type=Path, default=DEFAULT_CONFIG_DIR)
    validate.set_defaults(func=_cmd_validate)

    schema = commands.add_parser("schema", help="write the JSON Schemas of the YAML files")
    schema.add_argument("--out", type=Path, default=DEFAULT_CONFIG_DIR / "schema")
    schema.set_defaults(func=_cmd_schema)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except config.ConfigError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        print(f"{len(exc.problems)} problem(s) found", file=sys.stderr)
        return EXIT_USAGE
