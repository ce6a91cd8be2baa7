#!/usr/bin/env python3
"""CDK entry point: the only place that reads context. Loads and validates model_configs/, then builds
one Stage per environment (all of them unless `-c environments=dev,staging`) and, when environments.yaml
configures one, the pipeline that deploys those same stages (`-c pipeline=false` leaves it out).

A large fleet without the pipeline synthesizes in parallel shards, each this script run again with
INFERSTACK_SYNTH_SHARD set (`-c inferstack:synth-workers=N|auto`, see inferstack/synthesis/shards.py)."""

import os
import sys
from pathlib import Path

import aws_cdk as cdk

from inferstack import config
from inferstack.synthesis import shards as synth_shards
from stacks.app_builder import POST_CLI_CONTEXT, PipelineUnavailable, build, pipeline_wanted, shard_groups


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
        print(
            f"cdk.json/-c environments: unknown environment(s) {', '.join(unknown)}; "
            f"known: {', '.join(project.environments)}",
            file=sys.stderr,
        )
        return 2

    pipeline_context = app.node.try_get_context("pipeline")  # "true"/"false" from -c, a bool from cdk.json
    try:
        with_pipeline = pipeline_wanted(
            project, names, None if pipeline_context is None else str(pipeline_context).lower()
        )
    except PipelineUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2

    model_names = [m.name for m in project.models]
    shard_spec = os.environ.get(synth_shards.SHARD_ENV)
    if shard_spec:  # one shard of a parallel synth: only its stacks
        try:
            shard = synth_shards.Shard.from_json(shard_spec, list(project.environments), model_names)
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 2
        return synthesize_shard(app, project, shard)
    try:
        deployed = {env: [m.name for m in project.models_in(env)] for env in names}  # a model's deploy_in
        workers = (
            1
            if with_pipeline
            else synth_shards.worker_count(
                app.node.try_get_context("inferstack:synth-workers"), sum(len(m) for m in deployed.values())
            )
        )
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if workers > 1:
        shards = synth_shards.plan_shards(names, deployed, workers, together=shard_groups(project, names))

        def synth_here(shard: synth_shards.Shard, outdir: Path) -> int:
            return synthesize_shard(cdk.App(outdir=str(outdir), post_cli_context=POST_CLI_CONTEXT), project, shard)

        try:
            synth_shards.run_shards(
                shards, Path(app.outdir), [sys.executable, os.path.abspath(sys.argv[0])], synth_here
            )
        except synth_shards.ShardFailed as exc:
            return exc.exit_code
        except synth_shards.ShardsDisagree as exc:
            print(f"synth failed: {exc}", file=sys.stderr)
            return 1
        return 0

    build(app, project, names, pipeline=with_pipeline)
    return synthesize(app)


def synthesize_shard(app: cdk.App, project: config.Project, shard: synth_shards.Shard) -> int:
    build(app, project, list(shard.models), only=shard.models)
    return synthesize(app)


def synthesize(app: cdk.App) -> int:
    try:
        app.synth()
    except RuntimeError as exc:  # jsii surfaces the CDK's ValidationError as a RuntimeError
        if "ValidationFailed" not in str(exc):
            raise
        # The CDK printed each finding above; end with one line instead of a jsii traceback.
        print(
            "synth failed: unacknowledged cdk-nag/policy findings (listed above; see validation-report.json)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
