"""`python -m inferstack diff BASE_CDK_OUT HEAD_CDK_OUT`: load both assemblies, diff them, write the
report (Markdown or JSON) and one diagram per environment. Nothing is written unless both assemblies
load and the environments asked for exist; then --out's and --diagrams' directories are created when missing
(a runbook's `--out review/x.md` works in a fresh checkout), and each file is written whole (temporary file,
then rename)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from inferstack.command_line import UsageError
from inferstack.review import assembly, classes, diagram, diff, render_json, render_markdown, schemas
from inferstack.review.changes import CLASSES

# The report found what --fail-on-replace or --fail-on asked to fail on (usage and input errors are 2).
EXIT_PROTECTED_REPLACEMENT = 3
EXIT_FAIL_ON = EXIT_PROTECTED_REPLACEMENT


class OutputError(Exception):
    """--out or --diagrams points somewhere that cannot be written."""


INPUT_ERRORS = (assembly.AssemblyError, schemas.SchemasUnavailable, OutputError, diff.UnknownEnvironment)


def _fail_on(value: str) -> list[str]:
    try:
        return classes.parse([value])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser(
        "diff",
        help="offline infrastructure diff of two synthesized cloud assemblies",
        description="Compare two `cdk synth` outputs (no AWS credentials needed) and report "
        "per environment and stack what is added, removed, modified or replaced.",
    )
    cmd.add_argument("base", type=Path, metavar="BASE_CDK_OUT", help="cdk.out of the base (e.g. the target branch)")
    cmd.add_argument("head", type=Path, metavar="HEAD_CDK_OUT", help="cdk.out of the proposed change")
    cmd.add_argument("--format", choices=("markdown", "json"), default="markdown")
    cmd.add_argument(
        "--fail-on-replace",
        action="store_true",
        help=f"exit {EXIT_PROTECTED_REPLACEMENT} when a protected (serving or stateful) resource would be replaced",
    )
    cmd.add_argument(
        "--fail-on",
        type=_fail_on,
        action="append",
        default=[],
        metavar="CLASS[,CLASS...]",
        help=f"exit {EXIT_FAIL_ON} when any change has one of these classes, one line per change on "
        f"stderr; repeatable; classes: {', '.join(CLASSES)}, or {classes.ANY}",
    )
    cmd.add_argument(
        "--env",
        action="append",
        metavar="ENV",
        help="compare only this environment (repeatable; default: every environment of either side)",
    )
    cmd.add_argument("--out", type=Path, help="write the report to this file (default: standard output)")
    cmd.add_argument(
        "--diagrams",
        type=Path,
        metavar="DIR",
        help="write <env>.dot per environment here, and <env>.svg when graphviz `dot` is on PATH "
        "(default: next to --out; none when the report goes to standard output)",
    )
    cmd.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    """`run`, its bad input (INPUT_ERRORS: a missing directory, not an assembly, an unwritable --out) a usage error."""
    try:
        return run(args)
    except INPUT_ERRORS as exc:
        raise UsageError(str(exc)) from None


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None


def _check_directory(path: Path, option: str) -> None:
    if path.exists() and not path.is_dir():
        raise OutputError(f"{option} {path}: not a directory")


def _make_directory(path: Path, option: str) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{option} {path}: cannot create: {exc.strerror or exc}") from None


def _diagrams(head: assembly.Assembly, report: diff.Report, directory: Path, relative_to: Path | None) -> list[dict]:
    """Write <env>.dot (and .svg) per environment of the head. Paths in the returned listing are relative
    to the report's directory when there is one, so links in a posted report keep working."""
    _make_directory(directory, "--diagrams")
    by_name = {e.name: e for e in report.environments}
    written = []
    for env_name in [n for n in head.environments if n in by_name]:  # --env restricts these too
        dot_path = directory / f"{diagram.file_name(env_name)}.dot"
        _write(dot_path, diagram.build(head, env_name, by_name.get(env_name)))
        svg_path, note = diagram.render_svg(dot_path)
        print(f"wrote {dot_path}" + (f" and {svg_path}" if svg_path else f" ({note})"), file=sys.stderr)

        def shown(p: Path | None) -> str | None:
            if p is None:
                return None
            return os.path.relpath(p.resolve(), relative_to) if relative_to else str(p)

        written.append({"environment": env_name, "dot": shown(dot_path), "svg": shown(svg_path), "note": note})
    return written


def run(args: argparse.Namespace) -> int:
    base = assembly.load(args.base)
    head = assembly.load(args.head)
    out: Path | None = args.out
    if out is not None:
        _check_directory(out.parent, "--out")
    diagrams_dir = args.diagrams or (out.parent if out is not None else None)
    if diagrams_dir is not None:
        _check_directory(diagrams_dir, "--diagrams")

    report = diff.diff(base, head, args.env)
    if out is not None:
        _make_directory(out.parent, "--out")
    diagrams = (
        _diagrams(head, report, diagrams_dir, out.parent.resolve() if out else None)
        if diagrams_dir is not None
        else None
    )
    if args.format == "json":
        text = render_json.render(report, diagrams=diagrams)
    else:
        text = render_markdown.render(report, diagrams=[_diagram_line(d) for d in diagrams or []])
    if out is None:
        sys.stdout.write(text)
    else:
        _write(out, text)

    for env in report.one_sided():
        print(f"{env.note}: its {len(env.stacks)} stack(s) not compared", file=sys.stderr)
    status = 0
    protected = report.protected_replacements()
    if protected:
        names = ", ".join(f"{env}/{r.stack}/{r.logical_id} ({r.type})" for env, r in protected)
        print(f"{len(protected)} protected resource(s) would be replaced: {names}", file=sys.stderr)
        if args.fail_on_replace:
            status = EXIT_PROTECTED_REPLACEMENT
    wanted = [c for c in CLASSES if any(c in given for given in args.fail_on)]
    offending = classes.offending(report, wanted) if wanted else []
    for line in offending:
        print(f"fail-on: {line}", file=sys.stderr)
    if offending:
        status = EXIT_FAIL_ON
    return status


def _diagram_line(d: dict) -> str:
    svg = f", rendered as `{d['svg']}`" if d["svg"] else f" ({d['note']})"
    return f"{d['environment']}: `{d['dot']}`{svg}"
