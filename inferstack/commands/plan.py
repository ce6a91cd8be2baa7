"""`python -m inferstack plan`: capacity and cost per model and environment (the report: plan_report.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from inferstack import config
from inferstack.command_line import DEFAULT_CONFIG_DIR, UsageError
from inferstack.commands import plan_report


def add_parser(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser("plan", help="capacity and cost per model and environment")
    cmd.add_argument("--config-dir", type=Path, default=DEFAULT_CONFIG_DIR)
    cmd.add_argument("--env", help="one environment (default: all)")
    cmd.add_argument("--json", action="store_true", help="one JSON object per model and environment")
    cmd.add_argument(
        "--compare",
        action="store_true",
        help="also plan every profiled instance type and mark the cheapest that meets the SLO, and "
        "one checkpoint compiled for Inf1 and for Inf2 side by side at the Inf1 model's SLO",
    )
    cmd.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
        for section in (
            plan_report.not_deployed_to_text(absent),
            plan_report.fleets_to_text(fleets),
            plan_report.generations_to_text(generations),
        ):
            if section:
                print()
                print(section)
    return 0
