"""`python -m inferstack profile MODEL --env ENV`: measure what one instance of a model sustains within its SLO
and write it into the model's throughput_profile, with where, when and how it was measured.

Sources of the measurement, one per run:
  --target URL --instances N   a stepped Locust load test of a running server (this machine, --workers N more)
  (none of the above)          the same test in the environment, from its load test stack's Fargate workers
  --from-result FILE           a load test result.json already made (`inferstack loadtest`, or a copy from S3)
  --from-recommendations FILE  a finished Inference Recommender job (describe-inference-recommendations-job):
                               throughput and model latency at its threshold's percentile (P95, not p99,
                               for the Advanced job --recommender builds)
  --recommender                print (--print-request) or start (--apply) such a job for a SageMaker model
The entry is the highest rate whose step held p99 and the error budget, divided by the instances that served it,
at the instance type the model runs on in ENV (capacity.instance_type, or --instance-type)."""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from inferstack.command_line import DEFAULT_CONFIG_DIR, UsageError
from inferstack.loadtest.results import ResultError, RunResult
from inferstack.profile import entry as profile_entry
from inferstack.profile import measuring, recommendations, recommender_command, writer
from inferstack.profile.entry import ProfileEntry
from inferstack.profile.errors import ProfileFailure
from inferstack.profile.measuring import PROFILE_HEADROOM, PROFILE_STEPS
from inferstack.schema import instances


def add_parser(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser(
        "profile",
        help="measure a model's throughput per instance within its SLO and write "
        "it into its throughput_profile with its provenance",
        description=__doc__.splitlines()[0].split(": ", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[3:]),
    )
    cmd.add_argument("model", help="a model name from model_configs/")
    cmd.add_argument(
        "--env",
        required=True,
        help="environment whose instance type, SLO and (without --target) deployed model are measured",
    )
    cmd.add_argument("--config-dir", type=Path, default=DEFAULT_CONFIG_DIR)
    source = cmd.add_mutually_exclusive_group()
    source.add_argument("--target", metavar="URL", help="measure this server (POST URL, a /v2/models/<name>/infer)")
    source.add_argument("--from-result", type=Path, metavar="FILE", help="profile from a load test's result.json")
    source.add_argument(
        "--from-recommendations",
        type=Path,
        metavar="FILE",
        help="profile from `aws sagemaker describe-inference-recommendations-job` output (JSON)",
    )
    source.add_argument(
        "--recommender", action="store_true", help="build an Inference Recommender job for the deployed SageMaker model"
    )
    load = cmd.add_argument_group("load test")
    load.add_argument(
        "--instances",
        type=int,
        metavar="N",
        help="instances serving the target while it runs (required with --target; default: the result's own record)",
    )
    load.add_argument(
        "--workers",
        type=int,
        default=0,
        metavar="N",
        help="Locust worker processes besides the master (default 0: one local process)",
    )
    load.add_argument(
        "--rate",
        type=float,
        metavar="RPS",
        help="highest rate offered, req/s in all (default: "
        f"{PROFILE_HEADROOM:g} x the entry's throughput x the instances)",
    )
    load.add_argument(
        "--steps",
        default=PROFILE_STEPS,
        metavar="F,F,...",
        help=f"fractions of --rate, rising to 1 (default {PROFILE_STEPS})",
    )
    load.add_argument(
        "--hold", type=float, metavar="S", help="seconds each step holds (default: long enough for a p99)"
    )
    load.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="where the run's result.json and report go (default: profile-runs/<model>-<env>-<UTC time>)",
    )
    load.add_argument("--release", help="release the measured instances run (recorded in measured.release)")
    load.add_argument(
        "--timeout", type=float, metavar="S", help="longest the test may run (default: its steps plus start-up)"
    )
    write = cmd.add_argument_group("writing")
    write.add_argument("--instance-type", help="the profile entry to write (default: capacity.instance_type in ENV)")
    write.add_argument("--dry-run", action="store_true", help="print the entry and check it; write nothing")
    rec = cmd.add_argument_group("Inference Recommender (--recommender)")
    rec.add_argument(
        "--instance-types",
        metavar="A,B",
        help="instance types to compare (default: the model's in "
        "ENV and every ml. type in its throughput_profile); with --from-recommendations: only these",
    )
    rec.add_argument("--role-arn", metavar="ARN", help="IAM role the job runs as (its RoleArn)")
    rec.add_argument("--payload-url", metavar="S3_URL", help="sample payload archive (see --write-payload)")
    rec.add_argument(
        "--write-payload",
        type=Path,
        metavar="FILE",
        help="write the sample payload archive (the smoke test's request, tar.gz) to upload as --payload-url",
    )
    rec.add_argument("--model-name", help="the SageMaker Model to test (default: the one the endpoint in ENV serves)")
    rec.add_argument("--job-name", help="default: <model>-<env>-<UTC time>")
    rec.add_argument("--print-request", action="store_true", help="print the request (JSON)")
    rec.add_argument("--apply", action="store_true", help="start the job (CreateInferenceRecommendationsJob)")
    cmd.set_defaults(func=run)


def run(args: argparse.Namespace, *, today: datetime.date | None = None) -> int:
    from inferstack import config

    project = config.load(args.config_dir)
    try:
        model = project.model(args.model)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    if args.env not in project.environments:
        raise UsageError(f"--env: unknown environment {args.env!r}; known: {', '.join(project.environments)}")
    if not model.deploys_in(args.env):
        raise UsageError(
            f"--env: {model.name} is not deployed in {args.env} (deploy_in: "
            f"{', '.join(model.deploy_in or ())}): it has no instance type or SLO there"
        )
    if args.recommender or args.write_payload:
        return recommender_command.run(args, project, model)
    today = today or datetime.datetime.now(datetime.UTC).date()
    if args.from_recommendations is not None:
        found = _read_recommendations(args, model)
        return _write(args, project, model, list(found.entries), notes=found.notes)
    instance_type = args.instance_type or model.capacity_for(args.env).instance_type
    instances.get(instance_type)  # an unknown type is a usage error with the known list
    measuring.check_load_flags(args)
    if args.from_result is not None:
        result, location = _read_result(args.from_result), str(args.from_result)
        if result.model != model.name:
            raise UsageError(f"--from-result {args.from_result}: a run of {result.model}, not {model.name}")
        environment = result.environment if result.environment in project.environments else None
    elif args.target is not None:
        result, location = measuring.local(args, project, model, instance_type)
        environment = None  # a server outside the environments: what it ran on is the user's word
    else:
        result, location = measuring.in_environment(args, project, model, instance_type)
        environment = args.env
    location = result.results_location or location
    if not location:
        raise ProfileFailure("the run's results have no location to record; nothing written")
    made = profile_entry.from_run(
        result,
        instance_type=instance_type,
        results=location,
        environment=environment,
        instances=args.instances,
        release=args.release,
        today=today,
        p99_slo_ms=model.slo_for(args.env).p99_latency_ms,
    )
    return _write(args, project, model, [made])


def _read_result(path: Path) -> RunResult:
    try:
        return RunResult.from_json(path.read_text(encoding="utf-8"), where=str(path))
    except OSError as exc:
        raise UsageError(f"--from-result {path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--from-result {path}: not UTF-8 text") from None
    except ResultError as exc:
        raise UsageError(str(exc)) from None


def _read_recommendations(args, model) -> recommendations.Recommendations:
    only = set(recommender_command.split(args.instance_types)) if args.instance_types else None
    try:
        return recommendations.read(
            args.from_recommendations, env_name=args.env, slo_p99_ms=model.slo_for(args.env).p99_latency_ms, only=only
        )
    except recommendations.RecommendationsError as exc:
        raise UsageError(f"--from-recommendations {exc}") from None


def _write(args, project, model, entries: list[ProfileEntry], *, notes: tuple[str, ...] = ()) -> int:
    for note in notes:
        print(f"note: {note}")
    if not entries:
        raise ProfileFailure("nothing to write" + (f": {notes[0]}" if len(notes) == 1 else " (notes above)"))
    path = project.model_files[model.name]
    data = {made.instance_type: made.data() for made in entries}
    try:
        if args.dry_run:
            _, text = writer.new_text(path, data)
            writer.check_loads(path, project.config_dir, text)
        else:
            writer.write(path, project.config_dir, data)
    except writer.WriteRefused as exc:
        raise ProfileFailure(str(exc)) from None
    for made in entries:
        print(writer.render(made.instance_type, made.data(), indent=2, step=2, newline="\n").rstrip("\n"))
    for made in entries:
        verb = "would write" if args.dry_run else "wrote"
        print(
            f"{verb} {writer.PROFILE_KEY}.{made.instance_type} in {path}: {made.point.throughput_per_second:g}/s "
            f"per instance at {_latency_text(made.point)}" + (" (dry run: nothing written)" if args.dry_run else "")
        )
    return 0


def _latency_text(point) -> str:
    """The latency as measured, at its own percentile; a p99 nobody measured is called assumed."""
    measured = point.measured
    if measured is None or measured.latency_percentile == "p99":
        return f"p99 {point.p99_latency_ms:g} ms"
    return (
        f"{measured.latency_percentile} {measured.latency_ms:g} ms, not a p99 measurement (the plan assumes "
        f"p99 {point.p99_latency_ms:g} ms until a load test measures it)"
    )
