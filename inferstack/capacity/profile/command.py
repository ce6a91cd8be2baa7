"""`python -m inferstack profile MODEL --env ENV`: measure what one instance of a model sustains within its SLO
and write it into the model's throughput_profile, with where, when and how it was measured.

Sources of the measurement, one per run:
  --target URL --instances N   a stepped Locust load test of a running server (this machine, --workers N more)
  (none of the above)          the same test in the environment, from its load test stack's Fargate workers
  --from-result FILE           a load test result.json already made (`inferstack loadtest`, or a copy from S3)
  --from-recommendations FILE  a finished Inference Recommender job (describe-inference-recommendations-job)
  --recommender                print (--print-request) or start (--apply) such a job for a SageMaker model
The entry is the highest rate whose step held p99 and the error budget, divided by the instances that served it,
at the instance type the model runs on in ENV (capacity.instance_type, or --instance-type)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
from pathlib import Path

from inferstack import atomic_write
from inferstack.capacity.profile import entry as profile_entry
from inferstack.capacity.profile import deployed, recommendations, recommender, writer
from inferstack.capacity.profile.entry import ProfileEntry, ProfileRefused
from inferstack.loadtest.results import RESULT_FILE, ResultError, RunResult
from inferstack.schema import instances


# A profile run offers up to this many times the entry's current figure, in PROFILE_STEPS steps.
PROFILE_HEADROOM = 1.5
PROFILE_STEPS = "0.2,0.4,0.6,0.8,1"


class ProfileUsageError(Exception):
    """A bad argument (exit 2)."""


class ProfileFailure(Exception):
    """The measurement cannot be written, or AWS refused (exit 1): one line."""


def add_parser(commands: argparse._SubParsersAction, handler, default_config_dir: Path) -> None:
    cmd = commands.add_parser("profile", help="measure a model's throughput per instance within its SLO and write "
                              "it into its throughput_profile with its provenance",
                              description=__doc__.splitlines()[0].split(": ", 1)[1],
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog="\n".join(__doc__.splitlines()[3:]))
    cmd.add_argument("model", help="a model name from model_configs/")
    cmd.add_argument("--env", required=True, help="environment whose instance type, SLO and (without --target) "
                     "deployed model are measured")
    cmd.add_argument("--config-dir", type=Path, default=default_config_dir)
    source = cmd.add_mutually_exclusive_group()
    source.add_argument("--target", metavar="URL", help="measure this server (POST URL, a /v2/models/<name>/infer)")
    source.add_argument("--from-result", type=Path, metavar="FILE", help="profile from a load test's result.json")
    source.add_argument("--from-recommendations", type=Path, metavar="FILE",
                        help="profile from `aws sagemaker describe-inference-recommendations-job` output (JSON)")
    source.add_argument("--recommender", action="store_true",
                        help="build an Inference Recommender job for the deployed SageMaker model")
    load = cmd.add_argument_group("load test")
    load.add_argument("--instances", type=int, metavar="N", help="instances serving the target while it runs "
                      "(required with --target; default: the result's own record)")
    load.add_argument("--workers", type=int, default=0, metavar="N",
                      help="Locust worker processes besides the master (default 0: one local process)")
    load.add_argument("--rate", type=float, metavar="RPS", help="highest rate offered, req/s in all (default: "
                      f"{PROFILE_HEADROOM:g} x the entry's throughput x the instances)")
    load.add_argument("--steps", default=PROFILE_STEPS, metavar="F,F,...", help="fractions of --rate, rising to 1 "
                      f"(default {PROFILE_STEPS})")
    load.add_argument("--hold", type=float, metavar="S", help="seconds each step holds (default: long enough "
                      "for a p99)")
    load.add_argument("--out", type=Path, metavar="DIR", help="where the run's result.json and report go "
                      "(default: profile-runs/<model>-<env>-<UTC time>)")
    load.add_argument("--release", help="release the measured instances run (recorded in measured.release)")
    load.add_argument("--timeout", type=float, metavar="S", help="longest the test may run (default: its steps "
                      "plus start-up)")
    write = cmd.add_argument_group("writing")
    write.add_argument("--instance-type", help="the profile entry to write (default: capacity.instance_type in ENV)")
    write.add_argument("--dry-run", action="store_true", help="print the entry and check it; write nothing")
    rec = cmd.add_argument_group("Inference Recommender (--recommender)")
    rec.add_argument("--instance-types", metavar="A,B", help="instance types to compare (default: the model's in "
                     "ENV and every ml. type in its throughput_profile); with --from-recommendations: only these")
    rec.add_argument("--role-arn", metavar="ARN", help="IAM role the job runs as (its RoleArn)")
    rec.add_argument("--payload-url", metavar="S3_URL", help="sample payload archive (see --write-payload)")
    rec.add_argument("--write-payload", type=Path, metavar="FILE", help="write the sample payload archive (the "
                     "smoke test's request, tar.gz) to upload as --payload-url")
    rec.add_argument("--model-name", help="the SageMaker Model to test (default: the one the endpoint in ENV serves)")
    rec.add_argument("--job-name", help="default: <model>-<env>-<UTC time>")
    rec.add_argument("--print-request", action="store_true", help="print the request (JSON)")
    rec.add_argument("--apply", action="store_true", help="start the job (CreateInferenceRecommendationsJob)")
    cmd.set_defaults(func=handler)


def run(args: argparse.Namespace, *, today: datetime.date | None = None) -> int:
    from inferstack import config

    project = config.load(args.config_dir)
    try:
        model = project.model(args.model)
    except KeyError as exc:
        raise ProfileUsageError(exc.args[0]) from None
    if args.env not in project.environments:
        raise ProfileUsageError(f"--env: unknown environment {args.env!r}; known: {', '.join(project.environments)}")
    if not model.deploys_in(args.env):
        raise ProfileUsageError(f"--env: {model.name} is not deployed in {args.env} (deploy_in: "
                                f"{', '.join(model.deploy_in or ())}): it has no instance type or SLO there")
    if args.recommender or args.write_payload:
        return _recommender(args, project, model)
    today = today or datetime.datetime.now(datetime.timezone.utc).date()
    if args.from_recommendations is not None:
        found = _read_recommendations(args, model)
        return _write(args, project, model, list(found.entries), notes=found.notes)
    instance_type = args.instance_type or model.capacity_for(args.env).instance_type
    instances.get(instance_type)  # an unknown type is a usage error with the known list
    _check_load_flags(args)
    if args.from_result is not None:
        result, location = _read_result(args.from_result), str(args.from_result)
        if result.model != model.name:
            raise ProfileUsageError(f"--from-result {args.from_result}: a run of {result.model}, not {model.name}")
        environment = result.environment if result.environment in project.environments else None
    elif args.target is not None:
        result, location = _measure_local(args, project, model, instance_type)
        environment = None  # a server outside the environments: what it ran on is the user's word
    else:
        result, location = _measure_in_environment(args, project, model, instance_type)
        environment = args.env
    location = result.results_location or location
    if not location:
        raise ProfileFailure("the run's results have no location to record; nothing written")
    made = profile_entry.from_run(result, instance_type=instance_type, results=location, environment=environment,
                                  instances=args.instances, release=args.release, today=today,
                                  p99_slo_ms=model.slo_for(args.env).p99_latency_ms)
    return _write(args, project, model, [made])


def _read_result(path: Path) -> RunResult:
    try:
        return RunResult.from_json(path.read_text(encoding="utf-8"), where=str(path))
    except OSError as exc:
        raise ProfileUsageError(f"--from-result {path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ProfileUsageError(f"--from-result {path}: not UTF-8 text") from None
    except ResultError as exc:
        raise ProfileUsageError(str(exc)) from None


def _default_out(model: str, env_name: str) -> Path:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path("profile-runs") / f"{model}-{env_name}-{stamp}"


def _check_load_flags(args) -> None:
    for flag, value in (("--rate", args.rate), ("--hold", args.hold), ("--timeout", args.timeout)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ProfileUsageError(f"{flag}: must be a number > 0, got {value:g}")
    if args.instances is not None and args.instances < 1:
        raise ProfileUsageError(f"--instances: must be >= 1, got {args.instances}")


def profile_rate(model, instance_type: str, instances: int) -> float:
    """The highest rate a profile run offers by default: PROFILE_HEADROOM x what the entry says the instances
    sustain, so the steps pass the current figure and show where the p99 breaks."""
    point = model.throughput_profile.get(instance_type)
    if point is None:
        raise ProfileUsageError(f"--rate: no throughput_profile entry for {instance_type} to start from; say how "
                                f"high to go (req/s across the {instances} instance(s))")
    return point.throughput_per_second * instances * PROFILE_HEADROOM


def _spec(args, project, model, instance_type: str, target, instances: int, *, environment: str | None):
    from inferstack.loadtest import shape
    from inferstack.loadtest.spec import SpecError

    rate = args.rate if args.rate is not None else profile_rate(model, instance_type, instances)
    try:
        fractions = _fractions(args.steps)
        spec = shape.spec_for(model, args.env, project.environments[args.env], target=target, instances=instances,
                              rate=rate, hold=args.hold, fractions=fractions, release=args.release)
    except SpecError as exc:
        raise ProfileUsageError(f"--{exc}" if str(exc).startswith("steps") else str(exc)) from None
    # The entry is for `instance_type`; a run outside the environments records none, so that a later
    # --from-result cannot mistake it for a run in one.
    return dataclasses.replace(spec, instance_type=instance_type, environment=environment)


def _fractions(text: str) -> tuple[float, ...]:
    from inferstack.loadtest.spec import SpecError

    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise SpecError(f"steps: {text!r} is not a comma-separated list of fractions") from None


def _measure_local(args, project, model, instance_type: str) -> tuple[RunResult, str]:
    if args.instances is None:
        raise ProfileUsageError("--instances: with --target, say how many instances serve it (>= 1)")
    try:
        from inferstack.loadtest import command as loadtest_command, runner
    except ImportError:
        raise ProfileUsageError("--target: this build has no local load test engine (inferstack.loadtest.runner); "
                                "profile from a stored run with --from-result FILE") from None
    if not 0 <= args.workers <= runner.MAX_WORKERS:
        raise ProfileUsageError(f"--workers: must be within 0..{runner.MAX_WORKERS}, got {args.workers}")
    try:
        target = loadtest_command.parse_target(args.target, model.name, project.environments[args.env].region)
    except loadtest_command.LoadTestUsageError as exc:
        raise ProfileUsageError(str(exc)) from None
    spec = _spec(args, project, model, instance_type, target, args.instances, environment=None)
    out = args.out or _default_out(model.name, args.env)
    try:
        result = runner.run_local(spec, out, workers=args.workers, timeout=args.timeout)
    except OSError as exc:
        raise ProfileUsageError(f"--out: cannot write {out}: {exc.strerror or exc}") from None
    except runner.LoadTestError as exc:
        raise ProfileFailure(f"the load test did not finish, nothing written: {exc}") from None
    print(f"load test results in {out}/")
    return result, str(out / RESULT_FILE)


def _measure_in_environment(args, project, model, instance_type: str) -> tuple[RunResult, str]:
    """The deployed model, from the environment's own Fargate generators. The instances serving it are counted
    before and after the run: autoscaling that moved them makes a per-instance figure meaningless."""
    fleet = project.fleet_of(model.name, args.env)
    if fleet is not None:
        raise ProfileUsageError(f"--env: fleet {fleet} carries {model.name} in {args.env}: a test of its share of "
                                f"the fleet's instances is not a per-instance profile; measure it on its own "
                                f"(--target URL --instances N) or in an environment where it has its own instances")
    environment = project.environments[args.env]
    if environment.load_test is None:
        raise ProfileUsageError(f"--env: {args.env} has no load_test: (environments.yaml), so no generators inside "
                                f"it; measure a server with --target URL --instances N")
    if instance_type != model.capacity_for(args.env).instance_type:
        raise ProfileUsageError(f"--instance-type: {model.name} runs on {model.capacity_for(args.env).instance_type} "
                                f"in {args.env}; a run there measures that type")
    release = args.release or _pinned_release(project, args.env)
    from inferstack.delivery import aws_sessions
    from inferstack.loadtest import fargate

    session = aws_sessions.session_for(args.env, environment, purpose="profile")
    try:
        target, count = deployed.target_and_count(session, args.env, model)
        instances = args.instances or count
        if instances != count:
            raise ProfileUsageError(f"--instances: {instances}, but {count} serve {model.name} in {args.env} now")
        spec = _spec(args, project, model, instance_type, target, instances, environment=args.env)
        workers = fargate.workers_for(spec.steps[-1].rate, environment.load_test.per_worker_rps,
                                      environment.load_test.max_workers)
        run_id = datetime.datetime.now(datetime.timezone.utc).strftime("profile-%Y%m%dT%H%M%SZ")
        result = fargate.run_in_environment(session, args.env, environment, spec, workers=workers, release=release,
                                            run_id=run_id, timeout=args.timeout or spec.seconds + 900,
                                            log=lambda line: print(line, flush=True))
        after = deployed.target_and_count(session, args.env, model)[1]
    except (fargate.FargateRunError, deployed.NotDeployed) as exc:
        raise ProfileFailure(str(exc)) from None
    except aws_sessions.AWS_ERRORS as exc:
        raise ProfileFailure(f"AWS: {' '.join(str(exc).split())}") from None
    if after != count:
        raise ProfileFailure(f"{model.name} went from {count} to {after} instances during the run (autoscaling): "
                             f"the rate per instance is unknown, nothing written; hold min = max for the test")
    return result, result.results_location or ""


def _pinned_release(project, env_name: str) -> str:
    pin = project.releases.get(env_name)
    commit = pin.release.commit if pin is not None else None
    if commit is None:
        raise ProfileUsageError(f"--release: {env_name} deploys no pinned release with a commit; name the release it "
                                f"runs (it keys the results: <release>/<model>/<run>/)")
    return commit[:12]


def _read_recommendations(args, model) -> recommendations.Recommendations:
    only = set(_split(args.instance_types)) if args.instance_types else None
    try:
        return recommendations.read(args.from_recommendations, env_name=args.env,
                                    slo_p99_ms=model.slo_for(args.env).p99_latency_ms, only=only)
    except recommendations.RecommendationsError as exc:
        raise ProfileUsageError(f"--from-recommendations {exc}") from None


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


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
        point = made.point
        verb = "would write" if args.dry_run else "wrote"
        print(f"{verb} {writer.PROFILE_KEY}.{made.instance_type} in {path}: {point.throughput_per_second:g}/s per "
              f"instance at p99 {point.p99_latency_ms:g} ms" + (" (dry run: nothing written)" if args.dry_run else ""))
    return 0


def _recommender(args, project, model) -> int:
    from inferstack.config import TritonSageMakerModel
    from inferstack.delivery import smoke

    if not isinstance(model, TritonSageMakerModel):
        raise ProfileUsageError(f"--recommender: {model.name} is a {model.kind} model; Inference Recommender tests "
                                f"SageMaker models (triton-sagemaker): measure it with --target or in the environment")
    if args.write_payload is not None:
        try:
            atomic_write.write_bytes(args.write_payload, recommender.payload_archive(smoke.probe_for(model).body))
        except OSError as exc:
            raise ProfileUsageError(f"--write-payload {args.write_payload}: cannot write: {exc.strerror or exc}") from None
        print(f"wrote {args.write_payload}: upload it to S3 and pass its s3:// URL as --payload-url")
        if not args.recommender:
            return 0
    if not (args.print_request or args.apply):
        raise ProfileUsageError("--recommender: say --print-request (show the request) or --apply (start the job)")
    missing = [flag for flag, value in (("--role-arn", args.role_arn), ("--payload-url", args.payload_url))
               if not value]
    if missing:
        raise ProfileUsageError(f"--recommender needs {' and '.join(missing)}")
    types = _split(args.instance_types) if args.instance_types else _default_types(model, args.env)
    for itype in types:
        instances.get(itype)  # unknown: a usage error listing the known ones
    fleet = project.fleet_of(model.name, args.env)
    if args.model_name is None and fleet is not None:
        raise ProfileUsageError(f"--recommender: in {args.env} {model.name} is an inference component on fleet "
                                f"{fleet}'s endpoint, not a model of its own; use an environment where it has its "
                                f"own endpoint, or name a SageMaker Model with --model-name")
    session = None
    if args.model_name is None or args.apply:
        from inferstack.delivery import aws_sessions

        session = aws_sessions.session_for(args.env, project.environments[args.env], purpose="profile")
    model_name = args.model_name or _deployed_model_name(session, model, args.env)
    name = args.job_name or recommender.job_name(model.name, args.env, datetime.datetime.now(datetime.timezone.utc))
    try:
        request = recommender.build(model, args.env, model_name=model_name, role_arn=args.role_arn,
                                    instance_types=types, payload_url=args.payload_url, name=name)
    except recommender.RequestInvalid as exc:
        raise ProfileUsageError(f"--recommender: the request breaks the SageMaker API's rules: {exc}") from None
    if args.print_request:
        print(json.dumps(request, indent=2))
    if args.apply:
        arn = _start(session.client("sagemaker"), request)
        print(f"started {arn}; when it is COMPLETED: aws sagemaker describe-inference-recommendations-job "
              f"--job-name {name} > {name}.json && python -m inferstack profile {model.name} --env {args.env} "
              f"--from-recommendations {name}.json")
    return 0


def _default_types(model, env_name: str) -> list[str]:
    deployed = model.capacity_for(env_name).instance_type
    return [deployed] + sorted(t for t in model.throughput_profile if t.startswith("ml.") and t != deployed)


def _deployed_model_name(session, model, env_name: str) -> str:
    from inferstack.delivery import aws_sessions

    try:
        return deployed.model_name(session.client("cloudformation"), session.client("sagemaker"), env_name, model.name)
    except deployed.NotDeployed as exc:
        raise ProfileFailure(str(exc)) from None
    except aws_sessions.AWS_ERRORS as exc:
        raise ProfileFailure(f"AWS: {' '.join(str(exc).split())}") from None


def start(client, request: dict) -> str:
    """CreateInferenceRecommendationsJob; its ARN."""
    return client.create_inference_recommendations_job(**request)["JobArn"]


def _start(client, request: dict) -> str:
    from inferstack.delivery import aws_sessions

    try:
        return start(client, request)
    except aws_sessions.AWS_ERRORS as exc:
        raise ProfileFailure(f"AWS: {' '.join(str(exc).split())}") from None
