#!/usr/bin/env python3
"""CDK entry point: the only place that reads context. Loads and validates model_configs/, then builds
one Stage per environment (all of them unless `-c environments=dev,staging`) and, when environments.yaml
configures one, the pipeline that deploys those same stages (`-c pipeline=false` leaves it out)."""

import sys
from pathlib import Path

import aws_cdk as cdk

from inferstack import config
from stacks.app_builder import POST_CLI_CONTEXT, PipelineUnavailable, build, pipeline_wanted


def main() -> int:
    app = cdk.App(post_cli_context=POST_CLI_CONTEXT)
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

    pipeline_context = app.node.try_get_context("pipeline")  # "true"/"false" from -c, a bool from cdk.json
    try:
        with_pipeline = pipeline_wanted(project, names,
                                        None if pipeline_context is None else str(pipeline_context).lower())
    except PipelineUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2

    build(app, project, names, pipeline=with_pipeline)
    try:
        app.synth()
    except RuntimeError as exc:  # jsii surfaces the CDK's ValidationError as a RuntimeError
        if "ValidationFailed" not in str(exc):
            raise
        # The CDK printed each finding above; end with one line instead of a jsii traceback.
        print("synth failed: unacknowledged cdk-nag/policy findings (listed above; see validation-report.json)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
