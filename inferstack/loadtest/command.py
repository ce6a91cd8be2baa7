"""`python -m inferstack loadtest`: a load test of one model with Locust, judged against its SLO in an environment.

`--model M --env ENV --target URL`: steps up to the planned per-instance target rate times --instances (or
--rate), judged against the model's p99 SLO in ENV and an error budget. Prints the report; exit 0 pass, 1 fail,
2 invalid (a saturated generator, nothing measured, Locust failed) or a usage error.

--target is the model's inference URL (POST; a URL without a path gets /v2/models/<model>/infer, the Neuron
image's route; a Triton endpoint's container answers on /invocations), or sagemaker:ENDPOINT[/COMPONENT] for a
signed InvokeEndpoint with the ambient AWS credentials in ENV's region. Locust runs on this machine: one
process, or a master and --workers worker processes on 127.0.0.1."""

from __future__ import annotations

import argparse
import math
import re
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from inferstack.capacity import planning
from inferstack.config import loader
from inferstack.loadtest import report, runner, shape
from inferstack.loadtest.results import FAIL, INVALID, PASS
from inferstack.loadtest.spec import DEFAULT_STEPS, SpecError, Target

EXIT = {PASS: 0, FAIL: 1, INVALID: 2}
EXIT_USAGE = 2
# SageMaker's EndpointName / InferenceComponentName pattern.
SAGEMAKER_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")


class LoadTestUsageError(Exception):
    """A bad argument: one line naming the flag, exit 2."""


def parse_target(value: str, model_name: str, region: str) -> Target:
    if value.startswith("sagemaker:"):
        endpoint, _, component = value.removeprefix("sagemaker:").partition("/")
        for what, name in (("endpoint", endpoint), ("inference component", component)):
            if (name or what == "endpoint") and not SAGEMAKER_NAME.fullmatch(name):
                raise LoadTestUsageError(f"--target: {what} name {name!r} is not a SageMaker name "
                                         f"(letters, digits and hyphens, at most 63)")
        return Target(kind="sagemaker", endpoint=endpoint, component=component or None, region=region)
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        raise LoadTestUsageError(f"--target: bad port in {value!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LoadTestUsageError(f"--target: {value!r} is neither an http(s) URL nor sagemaker:ENDPOINT[/COMPONENT]")
    if parts.path in ("", "/"):
        value = f"{value.rstrip('/')}/v2/models/{model_name}/infer"
    return Target(kind="http", url=value)


def parse_fractions(value: str) -> tuple[float, ...]:
    try:
        fractions = tuple(float(part) for part in value.split(","))
    except ValueError:
        raise LoadTestUsageError(f"--steps: {value!r} is not a comma-separated list of fractions") from None
    try:
        shape.check_fractions(fractions)
    except SpecError as exc:
        raise LoadTestUsageError(f"--{exc}") from None
    return fractions


def run_in_environment(args: argparse.Namespace) -> int:
    """Without --target the test runs from inside the environment's VPC (Locust on Fargate) against the
    deployed model; not available in this version."""
    raise LoadTestUsageError("--target: required (a run from inside the environment is not available yet)")


def run(args: argparse.Namespace) -> int:
    project = loader.load(args.config_dir, releases=False)
    if args.env not in project.environments:
        raise LoadTestUsageError(f"--env: unknown environment {args.env!r}; known: {', '.join(project.environments)}")
    try:
        model = project.model(args.model)
    except KeyError as exc:
        raise LoadTestUsageError(f"--model: {exc.args[0]}") from None
    for flag, value, low in (("--rate", args.rate, 0.0), ("--hold", args.hold, 0.0), ("--timeout", args.timeout, 0.0)):
        if value is not None and not (math.isfinite(value) and value > low):
            raise LoadTestUsageError(f"{flag}: must be a number > 0, got {value:g}")
    if args.instances < 1:
        raise LoadTestUsageError(f"--instances: must be >= 1, got {args.instances}")
    if not 0 <= args.workers <= runner.MAX_WORKERS:
        raise LoadTestUsageError(f"--workers: must be within 0..{runner.MAX_WORKERS}, got {args.workers}")
    fractions = parse_fractions(args.steps)
    if args.target is None:
        return run_in_environment(args)
    environment = project.environments[args.env]
    target = parse_target(args.target, model.name, environment.region)
    try:
        spec = shape.spec_for(model, args.env, environment, target=target, instances=args.instances, rate=args.rate,
                              hold=args.hold, fractions=fractions, release=args.release, timeout_s=args.timeout)
    except SpecError as exc:
        raise LoadTestUsageError(str(exc)) from None
    except planning.PlanningError as exc:
        raise LoadTestUsageError(f"--rate: none given, and no planned rate for {model.name} in {args.env}: "
                                 f"{exc}") from None
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise LoadTestUsageError(f"--out: {args.out} exists and is not a directory")
    with tempfile.TemporaryDirectory(prefix="inferstack-loadtest-") as scratch:
        out = args.out if args.out is not None else Path(scratch)
        try:
            result = runner.run_local(spec, out, workers=args.workers)
        except OSError as exc:
            raise LoadTestUsageError(f"--out: cannot write {out}: {exc.strerror or exc}") from None
        except runner.LoadTestError as exc:
            print(f"loadtest: error: {' '.join(str(exc).split())}", file=sys.stderr)
            return EXIT[INVALID]  # nothing was measured: no verdict
    print(result.to_json() if args.json else report.text(result), end="")
    if args.out is not None and not args.json:
        print(f"wrote {args.out}/: result.json, report.txt, latency.png")
    return EXIT[result.verdict]


def add_parser(commands: argparse._SubParsersAction, handler, default_config_dir: Path) -> None:
    cmd = commands.add_parser("loadtest", help="load test one model with Locust, judged against its SLO",
                              description=__doc__.splitlines()[0].split(": ", 1)[1])
    cmd.add_argument("--model", required=True, help="a model name from the config")
    cmd.add_argument("--env", required=True, help="environment whose SLO and capacity plan apply")
    cmd.add_argument("--target", metavar="URL", help="http(s)://host[:port][/path] or sagemaker:ENDPOINT[/COMPONENT]")
    cmd.add_argument("--workers", type=int, default=0,
                     help="Locust worker processes beside a master (default 0: one local process)")
    cmd.add_argument("--rate", type=float, metavar="R",
                     help="full rate in req/s across the target (default: the planned per-instance target rate x "
                          "--instances)")
    cmd.add_argument("--instances", type=int, default=1, metavar="N", help="instances behind the target (default 1)")
    cmd.add_argument("--hold", type=float, metavar="S",
                     help="seconds each step runs (default: enough requests for a p99, and at least 30 s)")
    cmd.add_argument("--steps", default=",".join(f"{f:g}" for f in DEFAULT_STEPS), metavar="F,F,...",
                     help="fractions of the full rate, rising to 1 (default %(default)s)")
    cmd.add_argument("--timeout", type=float, default=10.0, metavar="S", help="per request, seconds (default 10)")
    cmd.add_argument("--release", help="the release under test, recorded in the result")
    cmd.add_argument("--out", type=Path, metavar="DIR",
                     help="write result.json, report.txt and latency.png here (created; default: not kept)")
    cmd.add_argument("--json", action="store_true", help="print the result as JSON instead of the report")
    cmd.add_argument("--config-dir", type=Path, default=default_config_dir)
    cmd.set_defaults(func=handler)
