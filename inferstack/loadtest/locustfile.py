"""The load test as Locust runs it; loaded only by Locust's processes (runner.py, task.py start them), never
imported by the CLI or the tests: importing locust patches the whole process for gevent.

The spec (LoadTestSpec JSON) comes from INFERSTACK_LOADTEST_SPEC, or a file named by
INFERSTACK_LOADTEST_SPEC_FILE. Load is an open system (pacing.py): each generator runs one scheduling user that
starts every request when it is due, in a greenlet of its own, without waiting for earlier answers. Requests: an
HTTP POST of the spec's bodies in turn, or a SigV4-signed InvokeEndpoint as botocore builds it (AWS_ENDPOINT_URL
is honoured), both sent on pooled keep-alive connections by wire.py and reported to Locust's statistics as its
own HTTP users report them, each answer checked like smoke's (answer.py): a wrong answer is a
failure of kind "invalid answer: <reason>". The shape walks the spec's steps; at each step the master tells every
generator the step and its grid, and prints a line for the step that ended (prefix PROGRESS). Every generator
records its own requests (measure.Recorder: due, sent, ended) and sends that record with its stats reports; at
the end the master (or the one local process) writes result.json, report.txt and latency.png into
INFERSTACK_LOADTEST_OUT."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import gevent
import gevent.event
import gevent.pool
import psutil
from locust import LoadTestShape, User, events, runners
from locust.env import Environment
from locust.exception import CatchResponseError
from locust.runners import MasterRunner, WorkerRunner

from inferstack.loadtest import answer, measure, pacing, report, wire
from inferstack.loadtest.runner import OUT_ENV, PROGRESS, SPEC_ENV, SPEC_FILE_ENV
from inferstack.loadtest.spec import LoadTestSpec, SpecError

STEP_MESSAGE = "inferstack-step"
DRAIN_MESSAGE = "inferstack-drain"
# The run's end waits this long beyond the request timeout for the generators to report every request ended.
DRAIN_SLACK_S = 3.0
DRAIN_POLL_S = 0.1
# Workers report every second, not Locust's 3: the master's view (and a lost last report) is at most 1 s old.
runners.WORKER_REPORT_INTERVAL = 1.0
CPU_SAMPLE_S = 1.0
log = logging.getLogger("inferstack.loadtest")


def _load_spec() -> LoadTestSpec:
    try:
        if os.environ.get(SPEC_ENV):
            return LoadTestSpec.from_json(os.environ[SPEC_ENV])
        if os.environ.get(SPEC_FILE_ENV):
            return LoadTestSpec.from_json(Path(os.environ[SPEC_FILE_ENV]).read_text())
    except (SpecError, OSError) as exc:
        sys.exit(f"inferstack locustfile: {SPEC_ENV if os.environ.get(SPEC_ENV) else SPEC_FILE_ENV}: {exc}")
    sys.exit(f"inferstack locustfile: set {SPEC_ENV} (the spec's JSON) or {SPEC_FILE_ENV} (a file holding it)")


SPEC = _load_spec()
BODIES = SPEC.body_bytes()


class _State:
    """This process's part: its recorder, the current step's grid; on the master, everyone's sum."""

    recorder = measure.Recorder("local", slo_ms=SPEC.p99_slo_ms, late_after_ms=SPEC.late_after_ms)
    aggregator = measure.Aggregator()
    interval = 1.0  # seconds between one scheduling user's requests in the current step
    anchor = 0.0  # when the current step began, on this process's clock: the origin of every user's grid
    generators, users_started = 1, 0
    step_index: int | None = None  # the step running now
    in_flight = 0  # requests sent and not yet ended, this process's: at most SPEC.in_flight_per_generator
    freed = gevent.event.Event()  # set as a request ends: a slot is free
    draining = False  # the last step is over: nothing more is sent, what is in flight is waited for
    started: str | None = None
    sampler: gevent.Greenlet | None = None
    runner: runners.Runner | None = None


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _apply_step(data: dict) -> None:
    _State.interval = 1.0 / float(data["per_user_rate"])
    _State.anchor = time.monotonic()
    _State.generators = max(1, int(data["generators"]))
    _State.step_index = int(data["index"])
    _State.recorder.begin_step(int(data["index"]), float(data["t0"]), float(data["settle_s"]))


class _OpenArrivals:
    """An open system, as a Locust user: the user is a clock that starts each request, due on its grid, in a
    greenlet of its own and goes on to the next one without waiting for the answer. At most
    SPEC.in_flight_per_generator requests are in flight (each holds a connection); when that bound is reached the
    next request waits for a slot and leaves late, its latency still counted from when it was due. Nothing owed
    is skipped (pacing.next_due)."""

    connections: wire.Client  # its pool holds a connection per request in flight, opened as needed
    environment: Environment  # the targets below are Locust Users
    url = ""  # what Locust's statistics name the requests by

    def on_start(self) -> None:
        # Interleaved across generators: generator g of n takes its users' phases from indices g, g + n, g + 2n...
        index = _State.users_started * _State.generators + getattr(_State.runner, "worker_index", 0)
        _State.users_started += 1
        self._phase = pacing.phase(index)
        self._interval = _State.interval
        self._due = pacing.next_slot(time.monotonic(), _State.anchor, _State.interval, self._phase)
        self._body = index % len(BODIES)  # generators start at different requests of a payload
        self._requests = gevent.pool.Group()
        # No cookie jar: each request stands for an independent caller, and the project's target groups have no
        # stickiness (FastHttpSession's, read and written on every request, was 8 % of a generator's CPU).
        self.connections = self.new_client()

    def new_client(self) -> wire.Client:
        raise NotImplementedError

    def until_due(self) -> float:
        return DRAIN_POLL_S if _State.draining else max(0.0, self._due - pacing.TIMER_LEAD_S - time.monotonic())

    def arrive(self) -> None:
        if _State.draining:
            return
        due = self._due
        delay = due - pacing.TIMER_LEAD_S - time.monotonic()
        if delay > 0:
            gevent.sleep(delay)
        held = False
        while _State.in_flight >= SPEC.in_flight_per_generator:  # the bound: wait for a slot, leave late
            held = True
            _State.freed.clear()
            _State.freed.wait()
        if _State.draining:
            # The drain began while this one waited (for its due time or a slot): nothing more is sent. Sent now, it
            # could leave after the drain found nothing in flight and ended the run, and count as never answered.
            return
        _State.in_flight += 1
        body = self._body
        self._body = (self._body + 1) % len(BODIES)
        self._requests.spawn(self._one, due, body, held)
        self._due = pacing.next_due(due, self._interval, _State.anchor, _State.interval, self._phase)
        self._interval = self._interval if self._due < _State.anchor else _State.interval

    def _one(self, due: float, body: int, held: bool) -> None:
        try:
            sent = time.monotonic()
            _State.recorder.left(due, sent, held)
            kind, status, arrived = self.send(body)
            _State.recorder.ended(due, kind, status, sent=sent, at=arrived)
        finally:
            _State.in_flight -= 1
            _State.freed.set()

    def send(self, body: int) -> tuple[str | None, int, float]:
        """Sends BODIES[body]; returns the failure's kind (None: answered), the HTTP status (0: none) and when the
        reply (or the failure) arrived (time.monotonic)."""
        raise NotImplementedError

    def exchange(self, request: bytes, status_kind: Callable[[wire.Reply], str]) -> tuple[str | None, int, float]:
        """One request and its verdict: no answer at all (refused, reset, timed out: the exception's kind), a
        status outside 2xx (its kind from `status_kind`), or a wrong answer; reported to Locust's statistics as
        its HTTP users do, the response time from the request's start. Also returns when the reply arrived: the
        checks and the event after it are the generator's time, not the server's."""
        started = time.monotonic()
        reply: wire.Reply | None = None
        try:
            reply = self.connections.send(request)
        except Exception as exc:  # what the socket, TLS or the reply's framing raised: counted, not fatal
            arrived = time.monotonic()
            kind: str | None = measure.error_kind(exc)
        else:
            arrived = time.monotonic()
            kind = _wrong_answer(reply.body) if 200 <= reply.status < 300 else status_kind(reply)
        self.environment.events.request.fire(
            request_type="POST",
            name=SPEC.model,
            response_time=(arrived - started) * 1000.0,
            response_length=len(reply.body) if reply else 0,
            exception=None if kind is None else CatchResponseError(kind),
            context={},
            url=self.url,
            response=None,
        )
        return kind, reply.status if reply else 0, arrived

    def on_stop(self) -> None:
        # Normally nothing is in flight by now (the shape drains the run first); on an early stop, the requests
        # already sent are still waited for, within the request timeout.
        self._requests.join(timeout=SPEC.timeout_s + 1.0)
        self.connections.close()


def _paced(user: _OpenArrivals) -> float:
    return user.until_due()


def _wrong_answer(reply: bytes) -> str | None:
    try:
        answer.check(reply, SPEC.outputs)
    except answer.WrongAnswer as exc:
        return f"invalid answer: {exc}"
    return None


def _http_status(reply: wire.Reply) -> str:
    return f"HTTP {reply.status}"


_url = urlsplit(SPEC.target.url or "http://unused")
# Each body's request, built once: a request to an HTTP target is the same bytes every time it is sent.
_HTTP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "inferstack-loadtest"}
_origin = wire.Origin(f"{_url.scheme}://{_url.netloc}") if SPEC.target.kind == "http" else None
_path = (_url.path or "/") + (f"?{_url.query}" if _url.query else "")
_http_requests = [wire.post(_origin, _path, _HTTP_HEADERS, body) for body in BODIES] if _origin else []


class HttpTarget(_OpenArrivals, User):
    abstract = SPEC.target.kind != "http"
    host = f"{_url.scheme}://{_url.netloc}"
    url = SPEC.target.url or ""
    wait_time = _paced
    tasks = [_OpenArrivals.arrive]  # Locust collects @task only from User classes, not from a mixin

    def new_client(self) -> wire.Client:
        assert _origin is not None  # set whenever the target is HTTP; otherwise this class is abstract
        # An https target's certificate is checked against the system's CAs, as `smoke` checks it.
        context = gevent.ssl.create_default_context() if _origin.scheme == "https" else None
        return wire.Client(_origin, timeout=SPEC.timeout_s, ssl_context=context)

    def send(self, body: int) -> tuple[str | None, int, float]:
        return self.exchange(_http_requests[body], _http_status)


class _SignedInvoke:
    """InvokeEndpoint as boto3 sends it, built by botocore (its endpoint resolution, AWS_ENDPOINT_URL included,
    its serializer for the path and headers, its SigV4 signer with the process's credentials, refreshed as they
    expire) and sent by wire.py: boto3's own call cost a generator twice its CPU per request
    (benchmarks/loadtest_worker.py, 1,000 req/s: 867 against 404 us with FastHttpUser sending), which saturated
    it at about 1,000 req/s, half of load_test.per_worker_rps. Only the reply is read differently; an error reply
    goes through botocore's parser, so its kind is the AWS error code boto3 would raise ("ModelError",
    "ThrottlingException")."""

    def __init__(self) -> None:
        import boto3
        from botocore import parsers, serialize
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        session = boto3.Session(region_name=SPEC.target.region)
        client = session.client("sagemaker-runtime")
        self.operation = client.meta.service_model.operation_model("InvokeEndpoint")
        protocol = self.operation.metadata["protocol"]
        params = {
            "EndpointName": SPEC.target.endpoint,
            "ContentType": "application/json",
            "Accept": "application/json",
            "Body": BODIES[0],
            **({"InferenceComponentName": SPEC.target.component} if SPEC.target.component else {}),
        }
        request = serialize.create_serializer(protocol).serialize_to_request(params, self.operation)
        endpoint = urlsplit(client.meta.endpoint_url)
        self.host = f"{endpoint.scheme}://{endpoint.netloc}"
        self.origin = wire.Origin(self.host)
        self.path = endpoint.path.rstrip("/") + request["url_path"]
        self.url = self.host + self.path
        self.headers = dict(request["headers"])
        self.credentials = session.get_credentials()
        if self.credentials is None:  # boto3 would fail each call; a run of nothing but failures measures nothing
            sys.exit(
                f"inferstack locustfile: no AWS credentials to sign InvokeEndpoint of {SPEC.target.endpoint} "
                f"with (environment variables, a profile, or the task's role)"
            )
        self.signing_name = client.meta.service_model.signing_name
        self.region = client.meta.region_name
        self.parser = parsers.create_parser(protocol)
        self.signer, self.request = SigV4Auth, AWSRequest  # imported once, not per request

    def signed(self, body: bytes) -> bytes:
        """The request's bytes, signed now. A signer per request: it holds the credentials, frozen now, as they may
        have been refreshed since."""
        request = self.request(method="POST", url=self.url, data=body, headers=dict(self.headers))
        self.signer(self.credentials.get_frozen_credentials(), self.signing_name, self.region).add_auth(request)
        return wire.post(self.origin, self.path, dict(request.headers.items()), body)

    def error_kind(self, reply: wire.Reply) -> str:
        # botocore's parser reads the headers lower-cased, as wire.py gives them
        parsed = self.parser.parse(
            {"status_code": reply.status, "headers": reply.headers, "body": reply.body}, self.operation.output_shape
        )
        return str((parsed.get("Error") or {}).get("Code") or f"HTTP {reply.status}")


def _ca_bundle():
    """Certificates checked against the bundle boto3 would use: AWS_CA_BUNDLE, else botocore's own."""
    from botocore.httpsession import DEFAULT_CA_BUNDLE

    return gevent.ssl.create_default_context(cafile=os.environ.get("AWS_CA_BUNDLE") or DEFAULT_CA_BUNDLE)


_invoke: _SignedInvoke | None = _SignedInvoke() if SPEC.target.kind == "sagemaker" else None


class SageMakerTarget(_OpenArrivals, User):
    abstract = SPEC.target.kind != "sagemaker"
    host = _invoke.host if _invoke else "http://unused"
    url = _invoke.url if _invoke else ""
    wait_time = _paced
    tasks = [_OpenArrivals.arrive]

    def new_client(self) -> wire.Client:
        assert _invoke is not None  # set whenever the target is SageMaker; otherwise this class is abstract
        # Certificates are checked as boto3 checks them (an http:// endpoint, such as an emulator's, has none)
        context = _ca_bundle() if _invoke.origin.scheme == "https" else None
        return wire.Client(_invoke.origin, timeout=SPEC.timeout_s, ssl_context=context)

    def send(self, body: int) -> tuple[str | None, int, float]:
        assert _invoke is not None
        return self.exchange(_invoke.signed(BODIES[body]), _invoke.error_kind)


class Steps(LoadTestShape):
    """The spec's steps; at each new step every generator hears its index, start and grid before the users
    change, and the step that ended is reported in one line."""

    _index: int | None = None
    _interval: float | None = None

    _drain_began: float | None = None

    def tick(self):
        run_time = self.get_run_time()
        index = pacing.step_at(SPEC.steps, run_time)
        generators = self.runner.worker_count if isinstance(self.runner, MasterRunner) else 1
        users = pacing.users_for(generators)
        if index is None:
            return self._drain(run_time, users)
        if index != self._index:
            if self._index is not None:
                _progress(self._index, final=False)
            step = SPEC.steps[index]
            interval = users / step.rate
            data = {
                "index": index,
                "t0": round(run_time, 3),
                "per_user_rate": step.rate / users,
                "settle_s": pacing.settle_s(step, interval, self._interval),
                "generators": generators,
            }
            if _State.started is None:
                _State.started = _now_iso()
            if isinstance(self.runner, MasterRunner):
                self.runner.send_message(STEP_MESSAGE, data)
            _apply_step(data)
            self._index, self._interval = index, interval
            print(
                f"{PROGRESS} step {index + 1} of {len(SPEC.steps)}: {step.rate:g} req/s "
                f"({100 * step.rate / SPEC.judged_rate:.0f} % of the full rate) for {step.seconds:g} s from "
                f"{generators} generator{'s' if generators > 1 else ''}",
                flush=True,
            )
        # One scheduling user per generator, started at once; each waits for its first due time.
        return users, 100

    def _drain(self, run_time: float, users: int):
        """After the last step: nothing more is sent, and the run ends once every generator has reported that all
        it sent has ended (or the request timeout has passed): Locust's own end gives workers half a second."""
        if self._drain_began is None:
            self._drain_began = run_time
            if isinstance(self.runner, MasterRunner):
                self.runner.send_message(DRAIN_MESSAGE, None)
            _drain()
        if isinstance(self.runner, MasterRunner):
            drained = _State.aggregator.drained(self.runner.worker_count)
        else:
            drained = _State.in_flight == 0
        if drained or run_time - self._drain_began > SPEC.timeout_s + DRAIN_SLACK_S:
            return None
        return users, 100


def _drain(*_args, **_kwargs) -> None:
    _State.draining = True
    _State.recorder.stop()


def _progress(index: int, *, final: bool) -> None:
    """The step's line as the master (or the one local process) has it now: workers report every second."""
    if not isinstance(_State.runner, MasterRunner):
        _State.aggregator.add(_State.recorder.report(final=final))
    result = _State.aggregator.result(SPEC, started=_State.started or _now_iso(), finished=_now_iso(), workers=0)
    print(f"{PROGRESS} {report.progress(result, index + 1, result.steps[index])}", flush=True)


def _sample_cpu() -> None:
    process = psutil.Process()
    process.cpu_percent(None)  # the first reading is meaningless: it starts the interval
    while True:
        gevent.sleep(CPU_SAMPLE_S)
        _State.recorder.sample_cpu(process.cpu_percent(None))


def _on_step_message(environment, msg, **_kwargs) -> None:
    _apply_step(msg.data)


@events.init.add_listener
def _on_init(environment, **_kwargs) -> None:
    runner = _State.runner = environment.runner
    if isinstance(runner, WorkerRunner):
        runner.register_message(STEP_MESSAGE, _on_step_message)
        runner.register_message(DRAIN_MESSAGE, _drain)
    elif isinstance(runner, MasterRunner):
        _State.recorder.name = "master"


@events.test_start.add_listener
def _on_test_start(environment, **_kwargs) -> None:
    if _State.sampler is None:
        _State.sampler = gevent.spawn(_sample_cpu)


@events.test_stopping.add_listener
def _on_test_stopping(environment, **_kwargs) -> None:
    # Before the users are stopped: the last step's window closes when its requests stop being sent.
    _State.recorder.stop()
    if _State.sampler is not None:
        _State.sampler.kill(block=False)


def _worker_report() -> dict:
    # A worker's index comes with the master's answer to its connection: worker-1, worker-2, ...
    _State.recorder.name = f"worker-{getattr(_State.runner, 'worker_index', 0) + 1}"
    return {**_State.recorder.report(), "drained": _State.draining and _State.in_flight == 0}


@events.report_to_master.add_listener
def _on_report_to_master(client_id, data, **_kwargs) -> None:
    data["inferstack"] = _worker_report()


@events.worker_report.add_listener
def _on_worker_report(client_id, data, **_kwargs) -> None:
    if data.get("inferstack"):
        _State.aggregator.add(data["inferstack"])


@events.quitting.add_listener
def _on_quitting(environment, **_kwargs) -> None:
    runner = environment.runner
    if isinstance(runner, WorkerRunner) or not os.environ.get(OUT_ENV):
        return
    _State.recorder.stop()
    _State.aggregator.add(_State.recorder.report(final=True))
    workers = len(runner.worker_indexes) if isinstance(runner, MasterRunner) else 0
    result = _State.aggregator.result(SPEC, started=_State.started or _now_iso(), finished=_now_iso(), workers=workers)
    if _State.step_index is not None:
        index = _State.step_index
        print(f"{PROGRESS} {report.progress(result, index + 1, result.steps[index])}", flush=True)
    try:
        report.write(result, Path(os.environ[OUT_ENV]))
    except OSError as exc:
        log.error("inferstack: cannot write the results to %s: %s", os.environ[OUT_ENV], exc)
        environment.process_exit_code = 3
