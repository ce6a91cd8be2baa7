"""`python -m inferstack smoke --env ENV`: after a deploy, send each model a known request over the shared
protocol (KServe v2 JSON), check the reply's output names, datatypes and shapes against the model's
interface, and its latency against the model's p99 SLO. One line per model; exit 1 on any failure.

Endpoints come from the serving stacks' outputs: `Url` (Neuron on ECS: POST {Url}/v2/models/<name>/infer)
or `EndpointName` (Triton on SageMaker: InvokeEndpoint, which hands the body to Triton's /invocations)."""

from __future__ import annotations

import argparse
import json
import math
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import boto3
import botocore.config

from inferstack import aws_sessions, stack_outputs
from inferstack.config import NeuronEcsModel, loader

SMOKE_TEXT = "inferstack smoke test"
# Token ids valid in any vocabulary of the shipped models (BERT's "[CLS] hello world [SEP]"; in range for
# T5 too), padded to the configured sequence length: the check is the interface, not the answer.
SMOKE_TOKEN_IDS = (101, 7592, 2088, 102)
DEFAULT_REQUESTS = 5


class SmokeFailure(Exception):
    pass


@dataclass(frozen=True)
class Output:
    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Probe:
    body: dict
    outputs: tuple[Output, ...]


def probe_for(model) -> Probe:
    """The request a model gets and the outputs its interface promises, for a batch of one."""
    if isinstance(model, NeuronEcsModel):
        # container/neuron/README.md: TEXT in, logits [n, labels] and label [n] out.
        body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [SMOKE_TEXT]}]}
        return Probe(body, (Output("logits", "FP32", (1, len(model.source.labels))), Output("label", "BYTES", (1,))))
    from inferstack import triton_config  # the Triton proto: only Triton models need it

    folder = triton_config.folders(model)[0]  # the default model SageMaker routes /invocations to
    inputs = []
    for tensor in folder.inputs:
        (length,) = tensor.dims
        ids = list(SMOKE_TOKEN_IDS[:length]) + [0] * max(0, length - len(SMOKE_TOKEN_IDS))
        data = {"input_ids": ids,
                "attention_mask": [1 if i < len(SMOKE_TOKEN_IDS) else 0 for i in range(length)]}.get(
                    tensor.name, [0] * length)
        inputs.append({"name": tensor.name, "datatype": tensor.type_name.removeprefix("TYPE_"),
                       "shape": [1, length], "data": data})
    outputs = tuple(Output(t.name, t.type_name.removeprefix("TYPE_"), (1, *t.dims)) for t in folder.outputs)
    return Probe({"inputs": inputs}, outputs)


def check_reply(reply: bytes, expected: tuple[Output, ...]) -> None:
    try:
        document = json.loads(reply)
    except (ValueError, UnicodeDecodeError):
        raise SmokeFailure(f"reply is not JSON: {reply[:80]!r}") from None
    if not isinstance(document, dict) or not isinstance(document.get("outputs"), list):
        raise SmokeFailure(f"reply has no 'outputs' list: {json.dumps(document)[:120]}")
    by_name = {o.get("name"): o for o in document["outputs"] if isinstance(o, dict)}
    for want in expected:
        got = by_name.get(want.name)
        if got is None:
            raise SmokeFailure(f"output {want.name} missing (got {', '.join(map(str, by_name)) or 'none'})")
        if got.get("datatype") != want.datatype:
            raise SmokeFailure(f"output {want.name}: datatype {got.get('datatype')}, expected {want.datatype}")
        if tuple(got.get("shape") or ()) != want.shape:
            raise SmokeFailure(f"output {want.name}: shape {got.get('shape')}, expected {list(want.shape)}")
        if _count(got.get("data")) != math.prod(want.shape):
            raise SmokeFailure(f"output {want.name}: {_count(got.get('data'))} values for shape {list(want.shape)}")


def _count(data) -> int:
    if isinstance(data, list):
        return sum(_count(item) for item in data)
    return 0 if data is None else 1


def percentile(samples: list[float], q: float) -> float:
    """Nearest rank: with a handful of requests, p99 is the slowest one."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def http_sender(url: str, timeout: float) -> Callable[[bytes], bytes]:
    def send(body: bytes) -> bytes:
        request = urllib.request.Request(url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:200].decode("utf-8", "replace")
            raise SmokeFailure(f"HTTP {exc.code} from {url}: {' '.join(detail.split())}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise SmokeFailure(f"{url}: {getattr(exc, 'reason', exc)}") from None
    return send


def sagemaker_sender(session: boto3.Session, endpoint: str, timeout: float) -> Callable[[bytes], bytes]:
    runtime = session.client("sagemaker-runtime", config=botocore.config.Config(
        read_timeout=timeout, connect_timeout=timeout, retries={"max_attempts": 1}))

    def send(body: bytes) -> bytes:
        try:
            return runtime.invoke_endpoint(EndpointName=endpoint, ContentType="application/json",
                                           Accept="application/json", Body=body)["Body"].read()
        except aws_sessions.AWS_ERRORS as exc:
            raise SmokeFailure(f"endpoint {endpoint}: {' '.join(str(exc).split())}") from None
    return send


def smoke_model(session: boto3.Session, env_name: str, model, *, requests: int, timeout: float) -> str:
    """One line: what was called and the latencies; SmokeFailure with the reason otherwise."""
    values = stack_outputs.outputs(session.client("cloudformation"), env_name, model.name)
    if isinstance(model, NeuronEcsModel):
        (base,) = stack_outputs.require(values, ("Url",), env_name, model.name)
        target = f"{base.rstrip('/')}/v2/models/{model.name}/infer"
        send = http_sender(target, timeout)
    else:
        (endpoint,) = stack_outputs.require(values, ("EndpointName",), env_name, model.name)
        target = f"endpoint {endpoint}"
        send = sagemaker_sender(session, endpoint, timeout)
    probe = probe_for(model)
    body = json.dumps(probe.body).encode()
    check_reply(send(body), probe.outputs)  # the first request may be a cold start: not timed
    samples = []
    for _ in range(requests):
        start = time.perf_counter()
        reply = send(body)
        samples.append((time.perf_counter() - start) * 1000)
        check_reply(reply, probe.outputs)
    slo = model.slo_for(env_name).p99_latency_ms
    p50, p99 = percentile(samples, 50), percentile(samples, 99)
    summary = f"p50 {p50:.1f} ms, p99 {p99:.1f} ms over {requests} requests (SLO p99 {slo:g} ms), {target}"
    if p99 > slo:
        raise SmokeFailure(f"latency above the SLO: {summary}")
    return summary


def run(args: argparse.Namespace) -> int:
    project = loader.load(args.config_dir, releases=False)
    if args.env not in project.environments:
        raise SmokeUsageError(f"--env: unknown environment {args.env!r}; known: {', '.join(project.environments)}")
    if args.timeout <= 0 or args.requests < 1:
        raise SmokeUsageError("--timeout must be > 0 and --requests >= 1")
    known = {m.name for m in project.models}
    unknown = [m for m in args.model or () if m not in known]
    if unknown:
        raise SmokeUsageError(f"--model: unknown model(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    session = aws_sessions.session_for(args.env, project.environments[args.env], purpose="smoke")
    failures = 0
    for model in sorted(project.models, key=lambda m: m.name):
        if args.model and model.name not in args.model:
            continue
        try:
            line = f"{model.name}: ok: " + smoke_model(session, args.env, model, requests=args.requests,
                                                       timeout=args.timeout)
        except (SmokeFailure, stack_outputs.StackNotFound) as exc:
            failures += 1
            message = str(exc).removeprefix(f"{model.name}: ")
            line = f"{model.name}: FAIL: {' '.join(message.split())}"
        except aws_sessions.AWS_ERRORS as exc:
            failures += 1
            line = f"{model.name}: FAIL: {' '.join(str(exc).split())}"
        print(line, flush=True)
    return 1 if failures else 0


class SmokeUsageError(Exception):
    pass


def add_parser(commands: argparse._SubParsersAction, handler, default_config_dir: Path) -> None:
    cmd = commands.add_parser("smoke", help="call every deployed model once over the shared protocol and "
                                            "check the interface and latency",
                              description=__doc__.splitlines()[0].split(": ", 1)[1])
    cmd.add_argument("--env", required=True, help="environment whose `<env>-<model>` stacks are deployed")
    cmd.add_argument("--timeout", type=float, default=10.0, metavar="S", help="per request, seconds (default 10)")
    cmd.add_argument("--requests", type=int, default=DEFAULT_REQUESTS,
                     help=f"timed requests per model for p50/p99 (default {DEFAULT_REQUESTS})")
    cmd.add_argument("--model", action="append", help="only this model (repeatable; default: every model)")
    cmd.add_argument("--config-dir", type=Path, default=default_config_dir)
    cmd.set_defaults(func=handler)
