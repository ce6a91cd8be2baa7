"""`python -m inferstack loadtest`: a load test of one model with Locust, judged against its SLO in an environment.

`--model M --env ENV --target URL`: an open system (requests sent on schedule whatever the server does, latency
counted from when each was due) in steps through the full rate, the planned per-instance target rate times
--instances (or --rate); every step up to it is judged against the model's p99 SLO in ENV and an error budget,
steps above it (--steps 0.5,1,1.5,2) on the p99 of what was admitted and the goodput held. A line per step as it
runs, then the report; exit 0 pass, 1 fail, 2 invalid (generators saturated or behind, nothing measured, Locust
failed) or a usage error. SIGTERM or Ctrl-C stops every Locust process (or Fargate task) the run started.

--target is the model's inference URL (POST; a URL without a path gets /v2/models/<model>/infer, the Neuron
image's route; a Triton endpoint's container answers on /invocations), or sagemaker:ENDPOINT[/COMPONENT] for a
signed InvokeEndpoint with the ambient AWS credentials in ENV's region. Locust runs on this machine: one
process, or a master and --workers worker processes on 127.0.0.1.

Without --target the test runs inside ENV (`load_test:` in environments.yaml, its LoadTest stack deployed):
Locust's master and workers as Fargate tasks in the private subnets (fargate.py), against the deployed model
(its internal load balancer, or a signed InvokeEndpoint), with workers sized from load_test.per_worker_rps. The
release under test is the image digest the model runs there; the results go to the environment's results bucket
under `<digest>/<model>/<run id>/`, where promotion's gate reads them. `--all-models` tests every model deployed
in ENV, one after the other (the pipeline's step before the prod approval); exit status: the worst verdict."""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import tempfile
from pathlib import Path

from inferstack.capacity import planning
from inferstack.command_line import DEFAULT_CONFIG_DIR, UsageError
from inferstack.config import loader
from inferstack.loadtest import report, runner, shape
from inferstack.loadtest.results import FAIL, INVALID, PASS
from inferstack.loadtest.spec import DEFAULT_STEPS, MAX_BODIES, SpecError
from inferstack.loadtest.targets import parse_target

EXIT = {PASS: 0, FAIL: 1, INVALID: 2}
EXIT_USAGE = 2
MAX_PAYLOAD_BYTES = 4 * 1024 * 1024


def parse_fractions(value: str) -> tuple[float, ...]:
    try:
        fractions = tuple(float(part) for part in value.split(","))
    except ValueError:
        raise UsageError(f"--steps: {value!r} is not a comma-separated list of fractions") from None
    try:
        shape.check_fractions(fractions)
    except SpecError as exc:
        raise UsageError(f"--{exc}") from None
    return fractions


def read_payload(path: Path) -> tuple[dict, ...]:
    """A payload file: one request body (a JSON object, KServe v2 for these models) per line; blank lines and
    lines starting with # are skipped. UsageError naming the file and line."""
    try:
        if path.stat().st_size > MAX_PAYLOAD_BYTES:
            raise UsageError(f"--payload: {path}: more than {MAX_PAYLOAD_BYTES // (1024 * 1024)} MiB")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--payload: {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--payload: {path}: not UTF-8 text") from None
    bodies = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            body = json.loads(line)
        except ValueError as exc:
            raise UsageError(f"--payload: {path}:{number}: not JSON ({exc.args[0].split(':')[0]})") from None
        except RecursionError:
            raise UsageError(f"--payload: {path}:{number}: nested too deeply to be a request") from None
        if not isinstance(body, dict) or not isinstance(body.get("inputs"), list) or not body["inputs"]:
            raise UsageError(
                f"--payload: {path}:{number}: a request body is a JSON object with a non-empty "
                f'"inputs" list (KServe v2)'
            )
        bodies.append(body)
        if len(bodies) > MAX_BODIES:
            raise UsageError(f"--payload: {path}: more than {MAX_BODIES} requests")
    if not bodies:
        raise UsageError(f"--payload: {path}: no request in it (one JSON body per line)")
    return tuple(bodies)


def progress(line: str) -> None:
    print(f"  {line}", flush=True)


def run_in_environment(args: argparse.Namespace, project, models, fractions: tuple[float, ...]) -> int:
    """Each of `models` tested in turn from inside the environment (module docstring); the worst exit code."""
    from inferstack.aws import aws_sessions
    from inferstack.loadtest import environment_run

    environment = project.environments[args.env]
    if environment.load_test is None:
        raise UsageError(
            f"--env: {args.env} has no load_test in environments.yaml (no generators there); "
            f"give --target to run from here"
        )
    if args.release is not None:
        raise UsageError(
            "--release: in an environment the release is the image digest the model runs "
            "there, read from it; --release applies to --target runs"
        )
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out: {args.out} exists and is not a directory")
    session = aws_sessions.session_for(args.env, environment, purpose="loadtest", role_arn=args.role_arn)
    worst = 0
    for model in models:
        try:
            result = environment_run.run_model(
                session,
                project,
                args.env,
                model,
                instances=args.instances_given,
                rate=args.rate,
                hold=args.hold,
                fractions=fractions,
                timeout_s=args.timeout,
                bodies=args.bodies,
                log=progress,
            )
        except environment_run.EnvironmentRunError as exc:
            print(f"loadtest: error: {model.name}: {' '.join(str(exc).split())}", file=sys.stderr)
            worst = max(worst, EXIT[INVALID])
            continue
        print(result.to_json() if args.json else report.text(result), end="")
        print(f"stored {result.results_location}")
        if args.out is not None:
            environment_run.save(result, args.out / model.name)
        worst = max(worst, EXIT[result.verdict])
    return worst


def run(args: argparse.Namespace) -> int:
    try:
        with runner.stopped_on_sigterm():
            return _run(args)
    except (KeyboardInterrupt, runner.Terminated) as exc:
        signum = signal.SIGINT if isinstance(exc, KeyboardInterrupt) else signal.SIGTERM
        print(
            f"loadtest: stopped by {signal.Signals(signum).name}: every load generator it started was stopped, "
            f"no result",
            file=sys.stderr,
        )
        return 128 + signum


def _run(args: argparse.Namespace) -> int:
    project = loader.load(args.config_dir, releases=False)
    if args.env not in project.environments:
        raise UsageError(f"--env: unknown environment {args.env!r}; known: {', '.join(project.environments)}")
    if (args.model is None) == (not args.all_models):
        raise UsageError("--model: give one model, or --all-models (environment runs only)")
    deployed = sorted(project.models_in(args.env), key=lambda m: m.name)
    if args.all_models:
        models = deployed
    else:
        try:
            models = [project.model(args.model)]
        except KeyError as exc:
            raise UsageError(f"--model: {exc.args[0]}") from None
    model = models[0] if models else None
    for flag, value, low in (("--rate", args.rate, 0.0), ("--hold", args.hold, 0.0), ("--timeout", args.timeout, 0.0)):
        if value is not None and not (math.isfinite(value) and value > low):
            raise UsageError(f"{flag}: must be a number > 0, got {value:g}")
    args.instances_given = args.instances
    if args.instances is None:
        args.instances = 1
    if args.instances < 1:
        raise UsageError(f"--instances: must be >= 1, got {args.instances}")
    if not 0 <= args.workers <= runner.MAX_WORKERS:
        raise UsageError(f"--workers: must be within 0..{runner.MAX_WORKERS}, got {args.workers}")
    fractions = parse_fractions(args.steps)
    args.bodies = read_payload(args.payload) if args.payload is not None else None
    if args.target is None:
        absent = [m.name for m in models if m.name not in {d.name for d in deployed}]
        if absent:
            raise UsageError(f"--model: {', '.join(absent)} not deployed in {args.env} (deploy_in of its model file)")
        return run_in_environment(args, project, models, fractions)
    if args.all_models:
        raise UsageError("--all-models: tests an environment's deployed models from inside it; not with --target")
    assert model is not None  # --model named one, as --all-models is refused above
    if args.role_arn is not None:
        raise UsageError("--role-arn: applies to environment runs (no --target)")
    environment = project.environments[args.env]
    target = parse_target(args.target, model.name, environment.region)
    try:
        spec = shape.spec_for(
            model,
            args.env,
            environment,
            target=target,
            instances=args.instances,
            rate=args.rate,
            hold=args.hold,
            fractions=fractions,
            release=args.release,
            timeout_s=args.timeout,
            bodies=args.bodies,
        )
    except SpecError as exc:
        raise UsageError(str(exc)) from None
    except planning.PlanningError as exc:
        raise UsageError(f"--rate: none given, and no planned rate for {model.name} in {args.env}: {exc}") from None
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out: {args.out} exists and is not a directory")
    with tempfile.TemporaryDirectory(prefix="inferstack-loadtest-") as scratch:
        out = args.out if args.out is not None else Path(scratch)
        generators = f"{args.workers} worker{'s' * (args.workers > 1)}" if args.workers else "one local generator"
        print(
            f"load test of {model.name} at {target.describe()}: {len(spec.steps)} step{'s' * (len(spec.steps) > 1)}"
            f" through {spec.judged_rate:g} req/s, {generators}"
            + (f" (planned {spec.planned_rate:g} req/s for {spec.plan_basis})" if spec.planned_rate else ""),
            file=sys.stderr if args.json else sys.stdout,
            flush=True,
        )
        try:
            result = runner.run_local(spec, out, workers=args.workers, on_progress=None if args.json else progress)
        except OSError as exc:
            raise UsageError(f"--out: cannot write {out}: {exc.strerror or exc}") from None
        except runner.LoadTestError as exc:
            print(f"loadtest: error: {' '.join(str(exc).split())}", file=sys.stderr)
            return EXIT[INVALID]  # nothing was measured: no verdict
    print(result.to_json() if args.json else report.text(result), end="")
    if args.out is not None and not args.json:
        print(f"wrote {args.out}/: result.json, report.txt, latency.png")
    return EXIT[result.verdict]


def add_parser(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser(
        "loadtest",
        help="load test one model with Locust, judged against its SLO",
        description=__doc__.splitlines()[0].split(": ", 1)[1],
    )
    cmd.add_argument("--model", help="a model name from the config")
    cmd.add_argument(
        "--all-models",
        action="store_true",
        help="every model deployed in --env, one after the other (environment runs: no --target)",
    )
    cmd.add_argument("--env", required=True, help="environment whose SLO and capacity plan apply")
    cmd.add_argument("--target", metavar="URL", help="http(s)://host[:port][/path] or sagemaker:ENDPOINT[/COMPONENT]")
    cmd.add_argument(
        "--workers", type=int, default=0, help="Locust worker processes beside a master (default 0: one local process)"
    )
    cmd.add_argument(
        "--rate",
        type=float,
        metavar="R",
        help="full rate in req/s across the target (default: the planned per-instance target rate x --instances)",
    )
    cmd.add_argument(
        "--instances",
        type=int,
        metavar="N",
        help="instances behind the target (default: 1 with --target; in an environment, its planned "
        "minimum, the rate then being what the plan gives those instances)",
    )
    cmd.add_argument(
        "--hold",
        type=float,
        metavar="S",
        help="seconds each step runs (default: enough requests for a p99, and at least 30 s)",
    )
    cmd.add_argument(
        "--steps",
        default=",".join(f"{f:g}" for f in DEFAULT_STEPS),
        metavar="F,F,...",
        help="fractions of the full rate, rising through 1; above 1: overload steps, judged on the "
        "admitted requests' p99 and the goodput held (default %(default)s)",
    )
    cmd.add_argument(
        "--payload",
        type=Path,
        metavar="FILE",
        help="requests to send in turn: one JSON request body per line (default: smoke's request)",
    )
    cmd.add_argument("--timeout", type=float, default=10.0, metavar="S", help="per request, seconds (default 10)")
    cmd.add_argument("--release", help="the release under test, recorded in the result")
    cmd.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="write result.json, report.txt and latency.png here (created; default: not kept)",
    )
    cmd.add_argument(
        "--role-arn",
        metavar="ARN",
        help="environment runs: assume this role in the environment's account (the pipeline's load test "
        "role) instead of its deploy_role_arn or the ambient credentials",
    )
    cmd.add_argument("--json", action="store_true", help="print the result as JSON instead of the report")
    cmd.add_argument("--config-dir", type=Path, default=DEFAULT_CONFIG_DIR)
    cmd.set_defaults(func=run)
