"""`python -m inferstack COMMAND`: the project's command line.

Every failure a user can cause (bad config, bad arguments) ends in one line per problem on stderr and
exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from inferstack import config
from inferstack.capacity import pricing
from inferstack.command_line import EXIT_FAILURE, EXIT_USAGE, Failure, UsageError
from inferstack.commands import plan, render_triton, schema, validate
from inferstack.delivery import invoke, promote, release, rollback, smoke
from inferstack.loadtest import command as loadtest_command
from inferstack.profile import command as profile_command
from inferstack.review import command as review_command
from inferstack.schema import instances

# Each module registers its command with add_parser(subparsers), setting its handler: the order of `--help`.
# None imports boto3 at module level, so a command that never calls AWS never loads it.
COMMANDS = (
    validate,
    schema,
    plan,
    render_triton,
    review_command,
    release,
    promote,
    rollback,
    smoke,
    invoke,
    profile_command,
    loadtest_command,
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's default prints the whole usage block
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m inferstack", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def _error(command: str, exc: BaseException, prefix: str = "") -> None:
    print(f"{command}: error: {prefix}{' '.join(str(exc).split())}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except config.ConfigError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        print(f"{len(exc.problems)} problem(s) found", file=sys.stderr)
        return EXIT_USAGE
    except (UsageError, pricing.UnknownPrice, instances.UnknownInstanceType) as exc:
        _error(args.command, exc)
        return EXIT_USAGE
    except Failure as exc:
        _error(args.command, exc)
        return EXIT_FAILURE
    except Exception as exc:
        # What AWS answers (credentials, permissions, throttling) is one line too; botocore is imported only
        # here, once a command has failed.
        from inferstack.aws import aws_sessions

        if not isinstance(exc, aws_sessions.AWS_ERRORS):
            raise
        _error(args.command, exc, prefix="AWS: ")
        return EXIT_FAILURE
