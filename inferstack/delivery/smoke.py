"""`python -m inferstack smoke --env ENV`: after a deploy, send each model a known text over the text contract
every model takes (KServe v2 JSON, text_contract.py), check the reply's output names, datatypes and shapes
against what the contract promises for the model's task, and its latency against the model's p99 SLO. One
line per model; exit 1 on any failure.

Endpoints come from the serving stacks' outputs: `Url` (Neuron on ECS: POST {Url}/v2/models/<name>/infer;
a neuron-cores fleet's members through their fleet's stack, POST {Url}{path}/infer with the model's path from
its `ModelPaths`) or `EndpointName` (Triton on SageMaker: InvokeEndpoint, which hands the body to Triton's
/invocations and the endpoint's default model, the ensemble that tokenizes the text), with
`InferenceComponentName` for a model on a fleet's shared endpoint. Such a component may have scaled to zero:
every component is sent one request first, so their cold starts run side by side, and each model's first
answer is awaited for up to its `slo.cold_start_seconds` while SageMaker answers that it has no capacity.
An internal load balancer is reachable only from inside its VPC: `--via auto` (the default) sends those
requests through the foundation's smoke probe, a Lambda function in the private subnets
(inferstack/delivery/smoke_probe/), and times them there; `--via direct` calls every URL from here."""

from __future__ import annotations

import argparse
import json
import math
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from inferstack.aws import aws_sessions, stack_outputs
from inferstack.command_line import DEFAULT_CONFIG_DIR, UsageError
from inferstack.config import Environment, loader
from inferstack.delivery.locate import locate
from inferstack.loadtest import answer
from inferstack.loadtest.answer import Output  # what a reply must hold: one check for smoke and load tests
from inferstack.loadtest.probes import probe_for
from inferstack.schema import kinds

if TYPE_CHECKING:
    import boto3

DEFAULT_REQUESTS = 5
VIA = ("auto", "lambda", "direct")
LATENCY = ("check", "report")
# A synchronous invoke waits for the probe's own request (at most --timeout) plus a cold start.
PROBE_OVERHEAD_S = 30.0
ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::(\d{12}):role/[A-Za-z0-9+=,.@_/-]+$")
# InvokeEndpoint's ValidationError while an inference component has no copy (it scaled to zero): "Inference
# Component has no capacity to process this request. ApplicationAutoScaling may be in-progress (if configured)
# or try to increase the capacity by invoking UpdateInferenceComponentRuntimeConfig API."
NO_CAPACITY = "has no capacity to process this request"
COLD_START_POLL_S = 15.0

# A sender POSTs one JSON body and returns the reply and the latency in ms, measured where the request
# is made (here, or inside the VPC for the probe).
Sender = Callable[[bytes], tuple[bytes, float]]


class SmokeFailure(Exception):
    pass


class NoCapacity(SmokeFailure):
    """An inference component has no copy to answer with yet (scaled to zero; one is on its way)."""


def check_reply(reply: bytes, expected: tuple[Output, ...]) -> None:
    try:
        answer.check(reply, expected)
    except answer.WrongAnswer as exc:
        raise SmokeFailure(str(exc)) from None


def percentile(samples: list[float], q: float) -> float:
    """Nearest rank: with a handful of requests, p99 is the slowest one."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def http_sender(url: str, timeout: float) -> Sender:
    def send(body: bytes) -> tuple[bytes, float]:
        request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
        start = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.read(), (time.perf_counter() - start) * 1000
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:200].decode("utf-8", "replace")
            raise SmokeFailure(f"HTTP {exc.code} from {url}: {' '.join(detail.split())}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise SmokeFailure(f"{url}: {getattr(exc, 'reason', exc)}") from None

    return send


def sagemaker_sender(session: boto3.Session, endpoint: str, timeout: float, component: str | None = None) -> Sender:
    """InvokeEndpoint; `component`: the inference component to invoke on a shared endpoint."""
    import botocore.config

    runtime = session.client(
        "sagemaker-runtime",
        config=botocore.config.Config(read_timeout=timeout, connect_timeout=timeout, retries={"max_attempts": 1}),
    )
    target = {"InferenceComponentName": component} if component else {}
    where = f"endpoint {endpoint}" + (f" component {component}" if component else "")

    def send(body: bytes) -> tuple[bytes, float]:
        start = time.perf_counter()
        try:
            reply = runtime.invoke_endpoint(
                EndpointName=endpoint, ContentType="application/json", Accept="application/json", Body=body, **target
            )["Body"].read()
        except aws_sessions.AWS_ERRORS as exc:
            message = " ".join(str(exc).split())
            raise (NoCapacity if NO_CAPACITY in message else SmokeFailure)(f"{where}: {message}") from None
        return reply, (time.perf_counter() - start) * 1000

    return send


def first_reply(
    send: Sender,
    body: bytes,
    cold_start_s: float,
    *,
    sleep: Callable[[float], None] | None = None,
    clock: Callable[[], float] | None = None,
) -> tuple[bytes, float]:
    """The first answer, and the seconds spent waiting for a copy: while an inference component has no
    capacity, ask again every COLD_START_POLL_S for up to `cold_start_s` (0: not at all). `sleep` and
    `clock`: time.sleep and time.monotonic."""
    sleep, clock = sleep or time.sleep, clock or time.monotonic
    start = clock()
    while True:
        try:
            reply, _ = send(body)
            return reply, clock() - start
        except NoCapacity as exc:
            waited = clock() - start
            if waited + COLD_START_POLL_S > cold_start_s:
                raise SmokeFailure(
                    f"no copy after {waited:.0f} s (cold start allowed: {cold_start_s:g} s): {exc}"
                ) from None
            sleep(COLD_START_POLL_S)


def lambda_client(session: boto3.Session, timeout: float):
    import botocore.config

    return session.client(
        "lambda",
        config=botocore.config.Config(
            read_timeout=timeout + PROBE_OVERHEAD_S, connect_timeout=timeout, retries={"max_attempts": 1}
        ),
    )


def probe_sender(client, function: str, url: str, timeout: float) -> Sender:
    """POST through the smoke probe (inferstack/delivery/smoke_probe/handler.py); its latency is the one measured
    inside the VPC, without the Lambda invoke around it."""
    where = f"probe {function}"

    def send(body: bytes) -> tuple[bytes, float]:
        event = {"url": url, "body": json.loads(body), "timeout": timeout}
        try:
            response = client.invoke(
                FunctionName=function, InvocationType="RequestResponse", Payload=json.dumps(event).encode()
            )
        except aws_sessions.AWS_ERRORS as exc:
            raise SmokeFailure(f"{where}: {' '.join(str(exc).split())}") from None
        raw = response["Payload"].read()
        try:
            result = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise SmokeFailure(f"{where}: result is not JSON: {raw[:80]!r}") from None
        if response.get("FunctionError"):
            detail = result.get("errorMessage") if isinstance(result, dict) else None
            raise SmokeFailure(
                f"{where} failed ({response['FunctionError']}): {' '.join(str(detail or raw[:200]).split())}"
            )
        if not isinstance(result, dict):
            raise SmokeFailure(f"{where}: unexpected result {json.dumps(result)[:120]}")
        if "error" in result:
            raise SmokeFailure(f"{where}: {' '.join(str(result['error']).split())}")
        status, latency = result.get("status"), result.get("latency_ms")
        if not isinstance(status, int) or not isinstance(latency, (int, float)) or isinstance(latency, bool):
            raise SmokeFailure(f"{where}: result without status and latency_ms: {json.dumps(result)[:120]}")
        reply = (json.dumps(result["body"]) if result.get("body") is not None else str(result.get("text", ""))).encode()
        if not 200 <= status < 300:
            detail = reply[:200].decode("utf-8", "replace")
            raise SmokeFailure(f"HTTP {status} from {url} (via {where}): {' '.join(detail.split())}")
        return reply, float(latency)

    return send


class ProbeLookup:
    """The foundation's smoke probe, looked up once per run: its function name, or None if the foundation
    has none (an older foundation, or the stack is missing)."""

    def __init__(self, cloudformation, env_name: str) -> None:
        self._cloudformation, self._env_name = cloudformation, env_name
        self._looked_up = False
        self._function: str | None = None

    @property
    def stack(self) -> str:
        return stack_outputs.stack_name(self._env_name, stack_outputs.FOUNDATION)

    def function(self) -> str | None:
        if not self._looked_up:
            try:
                values = stack_outputs.outputs(self._cloudformation, self._env_name, stack_outputs.FOUNDATION)
            except stack_outputs.StackNotFound:
                values = {}
            self._function = values.get(stack_outputs.PROBE_FUNCTION_NAME) or None
            self._looked_up = True
        return self._function


def smoke_model(
    session: boto3.Session,
    env_name: str,
    environment: Environment,
    model,
    *,
    requests: int,
    timeout: float,
    via: str = "auto",
    probe: ProbeLookup | None = None,
    lambda_=None,
    stack: str | None = None,
    sleep: Callable[[float], None] | None = None,
    latency: str = "check",
) -> str:
    """One line: what was called and the latencies; SmokeFailure with the reason otherwise. `latency`: "check"
    fails a p99 above the SLO, "report" only prints it (an emulator's latency says nothing about a model). `via` applies
    to Neuron models: auto goes through the probe for an internal load balancer when the foundation has
    one; `lambda_` is the Lambda client to invoke it with (default: one from `session`). `stack`: the stack
    that serves the model when it is not the model's own (a neuron-cores fleet's). `sleep`: time.sleep,
    between the first requests to a component that has no copy yet."""
    where = locate(session.client("cloudformation"), env_name, model, stack)
    component = where.component
    if where.url is not None:
        url = where.url
        probe = probe or ProbeLookup(session.client("cloudformation"), env_name)
        function = None
        if via == "lambda" or (via == "auto" and not model.public_load_balancer(environment)):
            function = probe.function()
            if function is None and via == "lambda":
                raise SmokeFailure(
                    f"no smoke probe: stack {probe.stack} has no output "
                    f"{stack_outputs.PROBE_FUNCTION_NAME} (deploy the foundation, or use --via direct "
                    f"from inside the VPC)"
                )
        if function is None:
            target, send = url, http_sender(url, timeout)
        else:
            target = f"{url} via probe {function}"
            send = probe_sender(lambda_ or lambda_client(session, timeout), function, url, timeout)
    else:
        assert where.endpoint is not None  # a location without a url is an endpoint's (locate)
        target = where.describe()
        send = sagemaker_sender(session, where.endpoint, timeout, component)
    probe_request = probe_for(model)
    body = json.dumps(probe_request.body).encode()
    # The first request may be a cold start: not timed (a component that scaled to zero: awaited).
    cold_start_allowed = (model.slo_for(env_name).cold_start_seconds or 0.0) if component else 0.0
    reply, waited = first_reply(send, body, cold_start_allowed, sleep=sleep)
    check_reply(reply, probe_request.outputs)
    samples = []
    for _ in range(requests):
        reply, latency_ms = send(body)
        samples.append(latency_ms)
        check_reply(reply, probe_request.outputs)
    slo = model.slo_for(env_name).p99_latency_ms
    p50, p99 = percentile(samples, 50), percentile(samples, 99)
    summary = f"p50 {p50:.1f} ms, p99 {p99:.1f} ms over {requests} requests (SLO p99 {slo:g} ms), {target}"
    if waited >= COLD_START_POLL_S:
        summary += f", first answer after a {waited:.0f} s cold start"
    if latency == "report":
        summary += ", latency reported, not checked (--latency report)"
    elif p99 > slo:
        raise SmokeFailure(f"latency above the SLO: {summary}")
    return summary


def run(args: argparse.Namespace) -> int:
    project = loader.load(args.config_dir, releases=False)
    if args.env not in project.environments:
        raise UsageError(f"--env: unknown environment {args.env!r}; known: {', '.join(project.environments)}")
    if args.timeout <= 0 or args.requests < 1:
        raise UsageError("--timeout must be > 0 and --requests >= 1")
    known = {m.name for m in project.models}
    unknown = [m for m in args.model or () if m not in known]
    if unknown:
        raise UsageError(f"--model: unknown model(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    deployed = project.models_in(args.env)  # a model file's deploy_in: elsewhere it has no stack to call
    absent = [m for m in args.model or () if m not in {d.name for d in deployed}]
    if absent:
        raise UsageError(
            f"--model: {', '.join(absent)} not deployed in {args.env} (deploy_in of its model "
            f"file); deployed there: {', '.join(sorted(d.name for d in deployed))}"
        )
    environment = project.environments[args.env]
    if args.role_arn is not None:
        match = ROLE_ARN.fullmatch(args.role_arn)
        if match is None:
            raise UsageError(f"--role-arn: not an IAM role ARN: {args.role_arn!r}")
        if match.group(1) != environment.account:
            raise UsageError(
                f"--role-arn: {args.role_arn} is in account {match.group(1)}, not {args.env}'s "
                f"account {environment.account}"
            )
    session = aws_sessions.session_for(args.env, environment, purpose="smoke", role_arn=args.role_arn)
    probe = ProbeLookup(session.client("cloudformation"), args.env)
    chosen = [m for m in sorted(deployed, key=lambda m: m.name) if not args.model or m.name in args.model]
    wake_components(session, args.env, chosen, args.timeout)
    failures = 0
    # Every model, each through the stack that serves it: its own, or its neuron-cores fleet's.
    stacks = {m.name: unit.name for unit in project.image_units(args.env) for m in unit.models}
    for model in chosen:
        try:
            line = f"{model.name}: ok: " + smoke_model(
                session,
                args.env,
                environment,
                model,
                requests=args.requests,
                timeout=args.timeout,
                via=args.via,
                probe=probe,
                stack=stacks[model.name],
                latency=args.latency,
            )
        except (SmokeFailure, stack_outputs.StackNotFound) as exc:
            failures += 1
            message = str(exc).removeprefix(f"{model.name}: ").removeprefix(f"{stacks[model.name]}: ")
            line = f"{model.name}: FAIL: {' '.join(message.split())}"
        except aws_sessions.AWS_ERRORS as exc:
            failures += 1
            line = f"{model.name}: FAIL: {' '.join(str(exc).split())}"
        print(line, flush=True)
    return 1 if failures else 0


def wake_components(session: boto3.Session, env_name: str, models, timeout: float) -> list[str]:
    """Send every Triton model on a shared endpoint one request, answered or not: a component that scaled to
    zero starts its way back now (its NoCapacityInvocationFailures alarm), beside the others, instead of
    when its turn comes. Returns the components woken; any failure here is left to the model's own check."""
    woken = []
    cloudformation = session.client("cloudformation")
    for model in models:
        if kinds.model_kind(model).hosting != "sagemaker":
            continue
        try:
            values = stack_outputs.outputs(cloudformation, env_name, model.name)
            component = values.get(stack_outputs.INFERENCE_COMPONENT_NAME)
            if not component or not values.get(stack_outputs.ENDPOINT_NAME):
                continue
            send = sagemaker_sender(session, values[stack_outputs.ENDPOINT_NAME], timeout, component)
            woken.append(component)
            send(json.dumps(probe_for(model).body).encode())
        except (SmokeFailure, stack_outputs.StackNotFound, *aws_sessions.AWS_ERRORS):
            pass
    return woken


def add_parser(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser(
        "smoke",
        help="call every deployed model once over the shared protocol and check the interface and latency",
        description=__doc__.splitlines()[0].split(": ", 1)[1],
    )
    cmd.add_argument("--env", required=True, help="environment whose `<env>-<model>` stacks are deployed")
    cmd.add_argument("--timeout", type=float, default=10.0, metavar="S", help="per request, seconds (default 10)")
    cmd.add_argument(
        "--requests",
        type=int,
        default=DEFAULT_REQUESTS,
        help=f"timed requests per model for p50/p99 (default {DEFAULT_REQUESTS})",
    )
    cmd.add_argument("--model", action="append", help="only this model (repeatable; default: every model)")
    cmd.add_argument(
        "--latency",
        choices=LATENCY,
        default="check",
        help="check (default) = fail a model whose p99 is above its SLO; report = print the "
        "latencies only (an emulator or a cold test account, where latency means nothing)",
    )
    cmd.add_argument(
        "--via",
        choices=VIA,
        default="auto",
        help="how Neuron models are called: lambda = through the foundation's in-VPC smoke probe, "
        "direct = HTTP from here, auto (default) = the probe for internal load balancers when "
        "the foundation has one, else direct",
    )
    cmd.add_argument(
        "--role-arn",
        metavar="ARN",
        help="assume this role in the environment's account (the pipeline's smoke role) instead of "
        "the environment's deploy_role_arn or the ambient credentials",
    )
    cmd.add_argument("--config-dir", type=Path, default=DEFAULT_CONFIG_DIR)
    cmd.set_defaults(func=run)
