"""`python -m inferstack COMMAND`: the project's command line.

Every failure a user can cause (bad config, bad arguments) ends in one line per problem on stderr and
exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from inferstack import atomic_write, config
from inferstack.delivery import aws_sessions
from inferstack.schema import instances, kinds
from inferstack.capacity import plan_report, pricing
from inferstack.config import json_schema
from inferstack.review import assembly
from inferstack.review import command as review_command

DEFAULT_CONFIG_DIR = Path("model_configs")
EXIT_FAILURE = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's default prints the whole usage block
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _cmd_validate(args: argparse.Namespace) -> int:
    project = config.load(args.config_dir)
    for warning in project.warnings:
        print(warning, file=sys.stderr)
    warned = f", {len(project.warnings)} warning(s)" if project.warnings else ""
    print(f"{args.config_dir}: {len(project.environments)} environments, {len(project.models)} models, "
          f"{len(project.fleets)} fleets: OK{warned}")
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    for path in json_schema.write(args.out):
        print(f"wrote {path}")
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    project = config.load(args.config_dir)
    if args.env is not None and args.env not in project.environments:
        raise UsageError(f"--env: unknown environment {args.env!r}; known: {', '.join(project.environments)}")
    envs = [args.env] if args.env else list(project.environments)
    rows = plan_report.build(project, envs, compare=args.compare)
    fleets = plan_report.build_fleets(project, envs)
    generations = plan_report.build_generations(project, envs) if args.compare else []
    absent = plan_report.not_deployed(project, envs)
    if args.json:
        print(plan_report.to_json(rows, fleets, generations, absent))
    else:
        print(plan_report.to_table(rows))
        for section in (plan_report.not_deployed_to_text(absent), plan_report.fleets_to_text(fleets),
                        plan_report.generations_to_text(generations)):
            if section:
                print()
                print(section)
    return 0


class UsageError(Exception):
    """A bad argument found after parsing; printed as one line, exit 2."""


def _cmd_render_triton(args: argparse.Namespace) -> int:
    # Imported here: the Triton proto is only needed by this command.
    from inferstack.triton import config as triton_config

    project = config.load(args.config_dir)
    try:
        model = project.model(args.model)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    if kinds.model_kind(model) is not kinds.TRITON_SAGEMAKER:
        raise UsageError(f"{model.name} is a {model.kind} model; render-triton renders "
                         f"{kinds.TRITON_SAGEMAKER.name} models")
    try:
        out = triton_config.write_repository(model, args.out)
    except triton_config.RepositoryError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {args.out}: {exc.strerror or exc}") from None
    names = ", ".join(spec.name for spec in triton_config.folders(model))
    print(f"wrote {out}: {names} (default model {triton_config.default_model_name(model)})")
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    try:
        return review_command.run(args)
    except review_command.INPUT_ERRORS as exc:  # missing dir, not an assembly, unwritable --out
        raise UsageError(str(exc)) from None


def _cmd_release(args: argparse.Namespace) -> int:
    from inferstack.delivery import release

    try:
        commit = release.git_commit(args.commit, Path.cwd())
        manifest = release.build(args.cdk_out, args.config_dir, commit)
    except (release.ReleaseError, assembly.AssemblyError) as exc:
        raise UsageError(str(exc)) from None
    if not args.out.parent.is_dir():
        raise UsageError(f"--out {args.out}: directory {args.out.parent} does not exist")
    try:
        atomic_write.write_text(args.out, release.dump(manifest))
    except OSError as exc:
        raise UsageError(f"--out {args.out}: cannot write: {exc.strerror or exc}") from None
    images = sum(len(s["images"]) for e in manifest["environments"].values() for s in e["stacks"].values())
    print(f"wrote {args.out}: commit {commit[:12]}, {len(manifest['environments'])} environments, "
          f"{images} image assets")
    return 0


def _run_delivery(run, args: argparse.Namespace, usage_error: type[Exception], error: type[Exception]) -> int:
    """promote and rollback: their usage errors exit 2, what AWS or the registry answers exits 1, in one line."""
    from inferstack.delivery import ecr_images

    try:
        return run(args)
    except usage_error as exc:
        raise UsageError(str(exc)) from None
    except (error, ecr_images.ImageError, aws_sessions.SessionError) as exc:
        raise Failure(str(exc)) from None
    except aws_sessions.AWS_ERRORS as exc:  # credentials, permissions, throttling
        raise Failure(f"AWS: {exc}") from None


def _cmd_promote(args: argparse.Namespace) -> int:
    from inferstack.delivery import promote

    return _run_delivery(promote.run, args, promote.PromoteUsageError, promote.PromoteError)


def _cmd_rollback(args: argparse.Namespace) -> int:
    from inferstack.delivery import rollback

    return _run_delivery(rollback.run, args, rollback.RollbackUsageError, rollback.RollbackError)


def _cmd_smoke(args: argparse.Namespace) -> int:
    from inferstack.delivery import smoke

    try:
        return smoke.run(args)
    except smoke.SmokeUsageError as exc:
        raise UsageError(str(exc)) from None
    except aws_sessions.SessionError as exc:
        raise Failure(str(exc)) from None


def _cmd_profile(args: argparse.Namespace) -> int:
    from inferstack.capacity.profile import command as profile_command, entry as profile_entry

    try:
        return profile_command.run(args)
    except profile_command.ProfileUsageError as exc:
        raise UsageError(str(exc)) from None
    except (profile_command.ProfileFailure, profile_entry.ProfileRefused, aws_sessions.SessionError) as exc:
        raise Failure(str(exc)) from None


def _cmd_loadtest(args: argparse.Namespace) -> int:
    from inferstack.loadtest import command as loadtest

    try:
        return loadtest.run(args)
    except loadtest.LoadTestUsageError as exc:
        raise UsageError(str(exc)) from None
    except aws_sessions.SessionError as exc:  # no credentials, or a role that cannot be assumed
        raise Failure(str(exc)) from None


def _cmd_invoke(args: argparse.Namespace) -> int:
    from inferstack.delivery import invoke, stack_outputs

    try:
        return invoke.run(args)
    except invoke.InvokeUsageError as exc:
        raise UsageError(str(exc)) from None
    except (invoke.InvokeFailure, stack_outputs.StackNotFound, aws_sessions.SessionError) as exc:
        raise Failure(str(exc)) from None
    except aws_sessions.AWS_ERRORS as exc:  # the stack lookup: credentials, permissions, throttling
        raise Failure(f"AWS: {exc}") from None


class Failure(Exception):
    """The command ran but what it checks or does failed (exit 1, one line)."""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m inferstack", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    validate = commands.add_parser("validate", help="check model_configs/ and report every problem")
    validate.add_argument("--config-dir", type=Path, default=DEFAULT_CONFIG_DIR)
    validate.set_defaults(func=_cmd_validate)

    schema = commands.add_parser("schema", help="write the JSON Schemas of the YAML files")
    schema.add_argument("--out", type=Path, default=DEFAULT_CONFIG_DIR / "schema")
    schema.set_defaults(func=_cmd_schema)
    plan = commands.add_parser("plan", help="capacity and cost per model and environment")
    plan.add_argument("--config-dir", type=Path, default=DEFAULT_CONFIG_DIR)
    plan.add_argument("--env", help="one environment (default: all)")
    plan.add_argument("--json", action="store_true", help="one JSON object per model and environment")
    plan.add_argument("--compare", action="store_true",
                      help="also plan every profiled instance type and mark the cheapest that meets the SLO, and "
                           "one checkpoint compiled for Inf1 and for Inf2 side by side at the Inf1 model's SLO")
    plan.set_defaults(func=_cmd_plan)

    render = commands.add_parser("render-triton", help="write a Triton model repository skeleton "
                                 "(config.pbtxt per model folder, empty version dirs)")
    render.add_argument("model", help="a triton-sagemaker model name from model_configs/")
    render.add_argument("--out", type=Path, required=True, help="a directory that does not exist or is empty")
    render.add_argument("--config-dir", type=Path, default=DEFAULT_CONFIG_DIR)
    render.set_defaults(func=_cmd_render_triton)
    review_command.add_parser(commands, _cmd_diff)

    release_cmd = commands.add_parser("release", help="write the release manifest of a synthesized cdk.out")
    release_cmd.add_argument("--cdk-out", type=Path, required=True, help="output directory of `cdk synth`")
    release_cmd.add_argument("--out", type=Path, required=True, help="manifest file to write (JSON)")
    release_cmd.add_argument("--commit", help="git commit to record (default: git rev-parse HEAD)")
    release_cmd.add_argument("--config-dir", type=Path, default=DEFAULT_CONFIG_DIR)
    release_cmd.set_defaults(func=_cmd_release)

    # Imported lazily by their handlers (boto3 clients); the parsers are cheap.
    from inferstack.delivery import invoke, promote, rollback, smoke
    promote.add_parser(commands, _cmd_promote, DEFAULT_CONFIG_DIR)
    rollback.add_parser(commands, _cmd_rollback, DEFAULT_CONFIG_DIR)
    smoke.add_parser(commands, _cmd_smoke, DEFAULT_CONFIG_DIR)
    invoke.add_parser(commands, _cmd_invoke, DEFAULT_CONFIG_DIR)
    from inferstack.capacity.profile import command as profile_command
    profile_command.add_parser(commands, _cmd_profile, DEFAULT_CONFIG_DIR)
    from inferstack.loadtest import command as loadtest
    loadtest.add_parser(commands, _cmd_loadtest, DEFAULT_CONFIG_DIR)
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
    except (UsageError, pricing.UnknownPrice, instances.UnknownInstanceType) as exc:
        print(f"{args.command}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_USAGE
    except Failure as exc:
        print(f"{args.command}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_FAILURE
