"""The load tests `inferstack profile` runs: against a server given by URL (Locust on this machine), or against
the deployed model from the environment's own Fargate generators. Each returns the run's result and where it
is stored."""

from __future__ import annotations

import dataclasses
import datetime
import math
from pathlib import Path

from inferstack.command_line import UsageError
from inferstack.loadtest.results import RESULT_FILE, RunResult
from inferstack.loadtest.targets import parse_target
from inferstack.profile import deployed
from inferstack.profile.errors import ProfileFailure

# A profile run offers up to this many times the entry's current figure, in PROFILE_STEPS steps.
PROFILE_HEADROOM = 1.5
PROFILE_STEPS = "0.2,0.4,0.6,0.8,1"


def default_out(model: str, env_name: str) -> Path:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path("profile-runs") / f"{model}-{env_name}-{stamp}"


def check_load_flags(args) -> None:
    for flag, value in (("--rate", args.rate), ("--hold", args.hold), ("--timeout", args.timeout)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UsageError(f"{flag}: must be a number > 0, got {value:g}")
    if args.instances is not None and args.instances < 1:
        raise UsageError(f"--instances: must be >= 1, got {args.instances}")


def profile_rate(model, instance_type: str, instances: int) -> float:
    """The highest rate a profile run offers by default: PROFILE_HEADROOM x what the entry says the instances
    sustain, so the steps pass the current figure and show where the p99 breaks."""
    point = model.throughput_profile.get(instance_type)
    if point is None:
        raise UsageError(
            f"--rate: no throughput_profile entry for {instance_type} to start from; say how "
            f"high to go (req/s across the {instances} instance(s))"
        )
    return point.throughput_per_second * instances * PROFILE_HEADROOM


def _spec(args, project, model, instance_type: str, target, instances: int, *, environment: str | None):
    from inferstack.loadtest import shape
    from inferstack.loadtest.spec import SpecError

    rate = args.rate if args.rate is not None else profile_rate(model, instance_type, instances)
    try:
        fractions = _fractions(args.steps)
        spec = shape.spec_for(
            model,
            args.env,
            project.environments[args.env],
            target=target,
            instances=instances,
            rate=rate,
            hold=args.hold,
            fractions=fractions,
            release=args.release,
        )
    except SpecError as exc:
        raise UsageError(f"--{exc}" if str(exc).startswith("steps") else str(exc)) from None
    # The entry is for `instance_type`; a run outside the environments records none, so that a later
    # --from-result cannot mistake it for a run in one.
    return dataclasses.replace(spec, instance_type=instance_type, environment=environment)


def _fractions(text: str) -> tuple[float, ...]:
    from inferstack.loadtest.spec import SpecError

    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise SpecError(f"steps: {text!r} is not a comma-separated list of fractions") from None


def local(args, project, model, instance_type: str) -> tuple[RunResult, str]:
    if args.instances is None:
        raise UsageError("--instances: with --target, say how many instances serve it (>= 1)")
    try:
        from inferstack.loadtest import runner
    except ImportError:
        raise UsageError(
            "--target: this build has no local load test engine (inferstack.loadtest.runner); "
            "profile from a stored run with --from-result FILE"
        ) from None
    if not 0 <= args.workers <= runner.MAX_WORKERS:
        raise UsageError(f"--workers: must be within 0..{runner.MAX_WORKERS}, got {args.workers}")
    target = parse_target(args.target, model.name, project.environments[args.env].region)
    spec = _spec(args, project, model, instance_type, target, args.instances, environment=None)
    out = args.out or default_out(model.name, args.env)
    try:
        with runner.stopped_on_sigterm():
            result = runner.run_local(
                spec,
                out,
                workers=args.workers,
                timeout=args.timeout,
                on_progress=lambda line: print(f"  {line}", flush=True),
            )
    except (KeyboardInterrupt, runner.Terminated):
        raise ProfileFailure(
            "stopped by a signal: every Locust process it started was stopped, nothing written"
        ) from None
    except OSError as exc:
        raise UsageError(f"--out: cannot write {out}: {exc.strerror or exc}") from None
    except runner.LoadTestError as exc:
        raise ProfileFailure(f"the load test did not finish, nothing written: {exc}") from None
    print(f"load test results in {out}/")
    return result, str(out / RESULT_FILE)


def in_environment(args, project, model, instance_type: str) -> tuple[RunResult, str]:
    """The deployed model, from the environment's own Fargate generators. The instances serving it are counted
    before and after the run: autoscaling that moved them makes a per-instance figure meaningless."""
    fleet = project.fleet_of(model.name, args.env)
    if fleet is not None:
        raise UsageError(
            f"--env: fleet {fleet} carries {model.name} in {args.env}: a test of its share of "
            f"the fleet's instances is not a per-instance profile; measure it on its own "
            f"(--target URL --instances N) or in an environment where it has its own instances"
        )
    environment = project.environments[args.env]
    if environment.load_test is None:
        raise UsageError(
            f"--env: {args.env} has no load_test: (environments.yaml), so no generators inside "
            f"it; measure a server with --target URL --instances N"
        )
    if instance_type != model.capacity_for(args.env).instance_type:
        raise UsageError(
            f"--instance-type: {model.name} runs on {model.capacity_for(args.env).instance_type} "
            f"in {args.env}; a run there measures that type"
        )
    release = args.release or _pinned_release(project, args.env)
    from inferstack.aws import aws_sessions
    from inferstack.loadtest import fargate

    session = aws_sessions.session_for(args.env, environment, purpose="profile")
    try:
        target, count = deployed.target_and_count(session, args.env, model)
        instances = args.instances or count
        if instances != count:
            raise UsageError(f"--instances: {instances}, but {count} serve {model.name} in {args.env} now")
        spec = _spec(args, project, model, instance_type, target, instances, environment=args.env)
        workers = fargate.workers_for(
            spec.steps[-1].rate, environment.load_test.per_worker_rps, environment.load_test.max_workers
        )
        run_id = datetime.datetime.now(datetime.UTC).strftime("profile-%Y%m%dT%H%M%SZ")
        result = fargate.run_in_environment(
            session,
            args.env,
            environment,
            spec,
            workers=workers,
            release=release,
            run_id=run_id,
            timeout=args.timeout or fargate.run_timeout(spec, workers),
            log=lambda line: print(line, flush=True),
        )
        after = deployed.target_and_count(session, args.env, model)[1]
    except (fargate.FargateRunError, deployed.NotDeployed) as exc:
        raise ProfileFailure(str(exc)) from None
    except aws_sessions.AWS_ERRORS as exc:
        raise ProfileFailure(f"AWS: {' '.join(str(exc).split())}") from None
    if after != count:
        raise ProfileFailure(
            f"{model.name} went from {count} to {after} instances during the run (autoscaling): "
            f"the rate per instance is unknown, nothing written; hold min = max for the test"
        )
    return result, result.results_location or ""


def _pinned_release(project, env_name: str) -> str:
    pin = project.releases.get(env_name)
    commit = pin.release.commit if pin is not None else None
    if commit is None:
        raise UsageError(
            f"--release: {env_name} deploys no pinned release with a commit; name the release it "
            f"runs (it keys the results: <release>/<model>/<run>/)"
        )
    return commit[:12]
