"""`python -m inferstack invoke MODEL --env ENV --text T [--text T ...]`: call a deployed model with the text contract
(text_contract.py) and print one line per text: the label and the highest logits, or the generated text
(`--json`: the reply as received). `inferstack invoke --list --env ENV`: every model of the environment, its
kind and where it answers.

Where a model answers comes from its serving stack's outputs (locate.py): a Triton model's SageMaker endpoint,
called with a signed InvokeEndpoint (ContentType application/json) in the environment's region with the
credentials the other commands use (aws_sessions.py); a Neuron model's load balancer URL, called with a plain
HTTP POST (an internal load balancer answers only inside its VPC).

A model that is overloaded or waking answers 503 (the Neuron app with Retry-After; SageMaker passes a container's
503 on as a ModelError with OriginalStatusCode 503, without its headers), or, for an inference component scaled
to zero, a ValidationError "no capacity" until a copy is up (minutes): those are tried again up to --retries
times, after Retry-After or an exponential backoff, each wait at most MAX_DELAY_S. Every failure is one line."""

from __future__ import annotations

import argparse
import email.utils
import json
import math
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import botocore.exceptions

from inferstack.aws import aws_sessions, stack_outputs
from inferstack.command_line import DEFAULT_CONFIG_DIR, Failure, UsageError
from inferstack.config import loader
from inferstack.delivery import smoke
from inferstack.delivery.locate import Location, locate
from inferstack.loadtest import answer, text_contract

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_RETRIES = 2
MAX_RETRIES = 60  # at MAX_DELAY_S each, half an hour: dev's longest allowed cold start
BACKOFF_S = 1.0  # the first wait without Retry-After; doubled each time
MAX_DELAY_S = 30.0
# What a caller may retry: the server or SageMaker said "not now", not "not this request".
RETRY_STATUSES = (429, 503)
RETRY_AWS_CODES = ("ServiceUnavailable", "ThrottlingException", "ModelNotReadyException")


class InvokeFailure(Failure):
    """The call failed: one line naming what (exit 1)."""


class Retryable(InvokeFailure):
    """An answer that says "not now": overloaded, starting, or scaled to zero and waking."""

    def __init__(self, message: str, retry_after: float | None = None, advice: str = "") -> None:
        super().__init__(message)
        self.retry_after, self.advice = retry_after, advice


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _error_detail(body: bytes | str) -> str:
    """The contract's {"error": "<field>: <problem>"}, else the body's start."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("error"), str):
        return _one_line(document["error"])
    return _one_line(text[:200]) or "(empty body)"


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (RFC 9110: a number of seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


# ---------------------------------------------------------------------------------------------------- calls

Call = Callable[[bytes], bytes]


def http_call(url: str, timeout: float, *, internal: bool = False) -> Call:
    """POST the body to a Neuron model's URL. `internal`: the load balancer is internal (said when unreachable)."""

    def call(body: bytes) -> bytes:
        request = urllib.request.Request(
            url, data=body, method="POST", headers={"Content-Type": "application/json", "Accept": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            message = f"{url}: HTTP {exc.code}: {_error_detail(exc.read()[:2000])}"
            if exc.code in RETRY_STATUSES:
                raise Retryable(
                    message,
                    _retry_after(exc.headers.get("Retry-After")),
                    "the model is overloaded, or starting with no task ready (a load balancer with no "
                    "healthy target answers 503 too)",
                ) from None
            raise InvokeFailure(message) from None
        except (urllib.error.URLError, OSError) as exc:
            if isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError):
                raise InvokeFailure(f"{url}: no answer within {timeout:g} s (--timeout)") from None
            hint = (
                (
                    " (an internal load balancer answers only inside its VPC: call from there, or use "
                    "`inferstack smoke --via lambda` to check it)"
                )
                if internal
                else ""
            )
            raise InvokeFailure(f"{url}: unreachable: {_one_line(getattr(exc, 'reason', exc))}{hint}") from None

    return call


def sagemaker_call(runtime, location: Location, *, cold_start_s: float | None = None) -> Call:
    """A signed InvokeEndpoint of the location's endpoint (and component); `cold_start_s`: how long a component
    scaled to zero may take to wake (slo.cold_start_seconds), for the advice."""
    target = {"InferenceComponentName": location.component} if location.component else {}
    where = location.describe()

    def call(body: bytes) -> bytes:
        try:
            return runtime.invoke_endpoint(
                EndpointName=location.endpoint,
                ContentType="application/json",
                Accept="application/json",
                Body=body,
                **target,
            )["Body"].read()
        except botocore.exceptions.ClientError as exc:
            raise _sagemaker_error(where, exc, cold_start_s) from None
        except botocore.exceptions.ReadTimeoutError:
            raise InvokeFailure(f"{where}: no answer within the timeout (--timeout)") from None
        except botocore.exceptions.BotoCoreError as exc:
            raise InvokeFailure(f"{where}: {_one_line(exc)}") from None

    return call


def _sagemaker_error(where: str, exc: botocore.exceptions.ClientError, cold_start_s: float | None) -> InvokeFailure:
    response = exc.response
    code = (response.get("Error") or {}).get("Code", "")
    message = _one_line((response.get("Error") or {}).get("Message", exc))
    if code == "ModelError":
        # The container's own 4xx/5xx, wrapped in a 424: its status and body are in the response.
        status = response.get("OriginalStatusCode")
        detail = _error_detail(response.get("OriginalMessage") or message)
        line = f"{where}: the model answered HTTP {status}: {detail} (ModelError)"
        if status in RETRY_STATUSES:
            return Retryable(line, None, "the model is overloaded")
        return InvokeFailure(line)
    if smoke.NO_CAPACITY in message:
        allowed = f" ({cold_start_s:g} s allowed by its slo.cold_start_seconds)" if cold_start_s else ""
        return Retryable(
            f"{where}: no copy of the model is running (its inference component scaled to zero): {message}",
            None,
            f"the request has started a copy, which takes minutes{allowed}: call again later, or "
            f"wait here with a larger --retries",
        )
    if code in RETRY_AWS_CODES:
        return Retryable(f"{where}: {code}: {message}", None, "SageMaker asks to try again")
    return InvokeFailure(f"{where}: {code or 'error'}: {message}")


def with_retries(
    call: Call,
    body: bytes,
    retries: int,
    *,
    sleep: Callable[[float], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> bytes:
    """call(body), tried again up to `retries` times on a Retryable answer: after its Retry-After, else
    BACKOFF_S doubled each time, every wait at most MAX_DELAY_S."""
    for attempt in range(retries + 1):
        try:
            return call(body)
        except Retryable as exc:
            if attempt == retries:
                tries = f"{retries + 1} tries" if retries else "1 try"
                advice = f"; {exc.advice}" if exc.advice else ""
                raise InvokeFailure(f"{exc} (after {tries}{advice}; retry later or raise --retries)") from None
            delay = min(MAX_DELAY_S, exc.retry_after if exc.retry_after is not None else BACKOFF_S * 2**attempt)
            if log is not None:
                log(f"invoke: {_one_line(exc)}: trying again in {delay:g} s ({attempt + 1} of {retries})")
            (sleep or time.sleep)(delay)
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------------------------------- command


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _client_config(timeout: float) -> botocore.config.Config:
    import botocore.config

    # botocore retries nothing: this command's own loop is the one bound on the time spent.
    return botocore.config.Config(connect_timeout=timeout, read_timeout=timeout, retries={"total_max_attempts": 1})


def _project_and_env(args: argparse.Namespace):
    project = loader.load(args.config_dir, releases=False)
    if args.env not in project.environments:
        raise UsageError(f"--env: unknown environment {args.env!r}; known: {', '.join(project.environments)}")
    return project, project.environments[args.env]


def _session(args: argparse.Namespace, environment):
    if args.role_arn is not None:
        match = smoke.ROLE_ARN.fullmatch(args.role_arn)
        if match is None:
            raise UsageError(f"--role-arn: not an IAM role ARN: {args.role_arn!r}")
        if match.group(1) != environment.account:
            raise UsageError(
                f"--role-arn: {args.role_arn} is in account {match.group(1)}, not {args.env}'s "
                f"account {environment.account}"
            )
    return aws_sessions.session_for(args.env, environment, purpose="invoke", role_arn=args.role_arn)


def _serving_stacks(project, env_name: str) -> dict[str, str]:
    """Model -> the unit whose stack serves it: its own, or its neuron-cores fleet's."""
    return {m.name: unit.name for unit in project.image_units(env_name) for m in unit.models}


def list_models(args: argparse.Namespace) -> int:
    project, environment = _project_and_env(args)
    session = _session(args, environment)
    cloudformation = session.client("cloudformation", config=_client_config(args.timeout))
    stacks = _serving_stacks(project, args.env)
    rows, failed = [("MODEL", "KIND", "TASK", "SERVED AT")], 0
    for model in sorted(project.models_in(args.env), key=lambda m: m.name):
        try:
            served = locate(cloudformation, args.env, model, stacks[model.name]).describe()
        except stack_outputs.StackNotFound as exc:
            failed += 1
            served = "not found: " + _one_line(str(exc).removeprefix(f"{stacks[model.name]}: "))
        rows.append((model.name, model.kind, model.source.task, served))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)) + "  " + row[3])
    return 1 if failed else 0


def invoke_model(args: argparse.Namespace) -> int:
    project, environment = _project_and_env(args)
    try:
        model = project.model(args.model)
    except KeyError:
        known = ", ".join(sorted(m.name for m in project.models))
        raise UsageError(f"unknown model {args.model!r}; known: {known}") from None
    deployed = {m.name for m in project.models_in(args.env)}
    if model.name not in deployed:
        raise UsageError(
            f"{model.name} is not deployed in {args.env} (deploy_in of its model file); deployed "
            f"there: {', '.join(sorted(deployed))}"
        )
    texts = args.text or []
    if not texts:
        raise UsageError("--text: give at least one text (repeat --text for a batch)")
    for index, text in enumerate(texts):
        if not text.strip():  # the models refuse it too (inputs[0].data[i]: empty text): no call needed
            raise UsageError(f"--text #{index + 1}: empty text")
    session = _session(args, environment)
    where = locate(
        session.client("cloudformation", config=_client_config(args.timeout)),
        args.env,
        model,
        _serving_stacks(project, args.env)[model.name],
    )
    if where.url is not None:
        call = http_call(where.url, args.timeout, internal=not model.public_load_balancer(environment))
    else:
        runtime = session.client("sagemaker-runtime", config=_client_config(args.timeout))
        cold_start = model.slo_for(args.env).cold_start_seconds if where.component else None
        call = sagemaker_call(runtime, where, cold_start_s=cold_start)
    body = json.dumps(text_contract.request_body(texts)).encode()
    reply = with_retries(call, body, args.retries, log=_stderr)
    if args.json:
        print(reply.decode("utf-8", "replace"))
    try:
        answer.check(reply, text_contract.expected_outputs(model, len(texts)))
    except answer.WrongAnswer as exc:
        raise InvokeFailure(f"{where.describe()}: not an answer of the text contract: {exc}") from None
    if not args.json:
        for result in text_contract.read_reply(reply, model, len(texts)):
            print(result.line())
    return 0


def run(args: argparse.Namespace) -> int:
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise UsageError(f"--timeout: must be a number of seconds > 0, got {args.timeout:g}")
    if not 0 <= args.retries <= MAX_RETRIES:
        raise UsageError(f"--retries: must be within 0..{MAX_RETRIES}, got {args.retries}")
    if args.list:
        if args.model is not None or args.text:
            raise UsageError("--list: lists every model of --env; give no MODEL nor --text with it")
        return list_models(args)
    if args.model is None:
        raise UsageError("MODEL: name the model to call (or --list to see them)")
    return invoke_model(args)


def add_parser(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser(
        "invoke",
        help="call a deployed model with texts and print its answers "
        "(--list: where every model of an environment answers)",
        description=__doc__.splitlines()[0].split(": ", 1)[1],
    )
    cmd.add_argument("model", nargs="?", metavar="MODEL", help="a model deployed in --env (none with --list)")
    cmd.add_argument("--env", required=True, help="environment whose deployed stacks to call")
    cmd.add_argument(
        "--text",
        action="append",
        metavar="TEXT",
        help="a text to send; every --text goes in one batch, answered in order",
    )
    cmd.add_argument("--json", action="store_true", help="print the reply as received (KServe v2 JSON)")
    cmd.add_argument(
        "--list",
        action="store_true",
        help="print every model of --env: kind, task, and the endpoint or URL it answers at",
    )
    cmd.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help="per request (and per stack lookup), seconds",
    )
    cmd.add_argument(
        "--retries",
        type=int,
        default=DEFAULT_RETRIES,
        metavar="N",
        help=f"tries again after a 503, a throttle or a model waking from zero, after Retry-After or "
        f"an exponential backoff from {BACKOFF_S:g} s, at most {MAX_DELAY_S:g} s a wait "
        f"(at most {MAX_RETRIES})",
    )
    cmd.add_argument(
        "--role-arn",
        metavar="ARN",
        help="assume this role in the environment's account instead of the environment's "
        "deploy_role_arn or the ambient credentials",
    )
    cmd.add_argument("--config-dir", type=Path, default=DEFAULT_CONFIG_DIR)
    cmd.set_defaults(func=run)
