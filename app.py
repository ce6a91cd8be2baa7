#!/usr/bin/env python3
"""CDK entry point: the only place that reads context. Loads and validates model_configs/, then builds
one Stage per environment (all of them unless `-c environments=dev,staging`)."""

import sys
from pathlib import Path

import aws_cdk as cdk

from inferstack import config
from stacks.app_builder import build


def main() -> int:
    app = cdk.App()
    config_dir = Path(app.node.try_get_context("inferstack:config-dir") or "model_configs")
    try:
        project = config.load(config_dir)
    except config.ConfigError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 2

    requested = app.node.try_get_context("environments")
    names = [n.strip() for n in requested.split(",") if n.strip()] if requested else list(project.environments)
    unknown = [n for n in names if n not in project.environments]
    if unknown:
        print(f"cdk.json/-c environments: unknown environment(s) {', '.join(unknown)}; "
              f"known: {', '.join(project.environments)}", file=sys.stderr)
        return 2

    build(app, project, names)
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
