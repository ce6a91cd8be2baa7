"""The load test as Locust runs it; loaded only by Locust's processes (runner.py, task.py start them), never
imported by the CLI or the tests: importing locust patches the whole process for gevent.

The spec (LoadTestSpec JSON) comes from INFERSTACK_LOADTEST_SPEC, or a file named by
INFERSTACK_LOADTEST_SPEC_FILE. Users: an HTTP POST of the spec's body or a SigV4-signed InvokeEndpoint as botocore
builds it (AWS_ENDPOINT_URL is honoured), both sent by FastHttpUser, each answer checked like smoke's (answer.py): a wrong
answer is a failure of kind "invalid answer: <reason>". The shape walks the spec's steps; at each step the
master tells every generator the step and its per-user pace (pacing.py). Every generator records its own
requests (measure.Recorder) and sends that record with its stats reports; at the end the master (or the one
local process) writes result.json, report.txt and latency.png into INFERSTACK_LOADTEST_OUT."""

from __future__ import annotations

import logging
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

import gevent
import psutil
from locust import FastHttpUser, LoadTestShape, User, events, runners, task
from locust.exception import CatchResponseError
from locust.runners import MasterRunner, WorkerRunner

from inferstack.loadtest import answer, measure, pacing, report
from inferstack.loadtest.runner import OUT_ENV, SPEC_ENV, SPEC_FILE_ENV
from inferstack.loadtest.spec import LoadTestSpec, SpecError

STEP_MESSAGE = "inferstack-step"
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
BODY = SPEC.body_bytes()
PACES = [pacing.pace_for(step.rate, SPEC.p99_slo_ms) for step in SPEC.steps]


class _State:
    """This process's part: its recorder, the current step's pace and grid; on the master, everyone's sum."""

    recorder = measure.Recorder("local")
    aggregator = measure.Aggregator()
    per_user_rate = PACES[0].per_user_rate
    anchor = 0.0  # when the current step began, on this process's clock: the origin of every user's grid
    generators, users_started = 1, 0
    started: str | None = None
    sampler: gevent.Greenlet | None = None
    runner: runners.Runner | None = None


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _apply_step(data: dict) -> None:
    _State.per_user_rate = float(data["per_user_rate"])
    _State.anchor = time.monotonic()
    _State.generators = max(1, int(data["generators"]))
    _State.recorder.begin_step(int(data["index"]), float(data["t0"]), float(data["settle_s"]))


def paced(user: User) -> float:
    """Locust's constant_throughput, on a grid: the user's next slot after the one it just used (or the first
    one from now if it fell behind: no burst to catch up), with the interval and origin of the current step."""
    now = time.monotonic()
    interval = 1.0 / _State.per_user_rate
    user._slot = pacing.next_slot(max(now, user._slot + interval / 2), _State.anchor, interval, user._phase)
    return user._slot - now


def _start_on_phase(user: User) -> None:
    # Interleaved across generators: generator g of n takes its users' phases from indices g, g + n, g + 2n...
    user._phase = pacing.phase(_State.users_started * _State.generators + getattr(_State.runner, "worker_index", 0))
    _State.users_started += 1
    now = time.monotonic()
    user._slot = pacing.next_slot(now, _State.anchor, 1.0 / _State.per_user_rate, user._phase)
    gevent.sleep(user._slot - now)


def _wrong_answer(reply: bytes) -> str | None:
    try:
        answer.check(reply, SPEC.outputs)
    except answer.WrongAnswer as exc:
        return f"invalid answer: {exc}"
    return None


def _judge(response, status_kind) -> None:
    """Mark a FastHttpUser reply (caught) a success or a failure of its kind: no answer at all (refused, reset,
    timed out), a status outside 2xx (its kind from `status_kind()`), or a wrong answer."""
    if not response.status_code:
        kind = measure.error_kind(response.error) if response.error else "no response"
    elif not 200 <= response.status_code < 300:
        kind = status_kind()
    else:
        kind = _wrong_answer(response.content or b"")
    if kind is None:
        response.success()
    else:
        response.failure(kind)


_url = urlsplit(SPEC.target.url or "http://unused")


class HttpTarget(FastHttpUser):
    abstract = SPEC.target.kind != "http"
    host = f"{_url.scheme}://{_url.netloc}"
    network_timeout = connection_timeout = SPEC.timeout_s
    wait_time = paced
    path = (_url.path or "/") + (f"?{_url.query}" if _url.query else "")

    def on_start(self) -> None:
        _start_on_phase(self)

    @task
    def infer(self) -> None:
        with self.client.post(self.path, data=BODY, name=SPEC.model, catch_response=True,
                              headers={"Content-Type": "application/json", "Accept": "application/json"}) as response:
            _judge(response, lambda: f"HTTP {response.status_code}")


class _SignedInvoke:
    """InvokeEndpoint as boto3 sends it, built by botocore (its endpoint resolution, AWS_ENDPOINT_URL included,
    its serializer for the path and headers, its SigV4 signer with the process's credentials, refreshed as they
    expire) and sent by FastHttpUser's client: half of a generator's CPU per request that boto3's own call took
    (benchmarks/loadtest_worker.py, 1,000 req/s: 404 against 867 us), whose cost saturated a generator at about
    1,000 req/s, half of load_test.per_worker_rps. Only the reply is read differently; an error reply goes through
    botocore's parser, so its kind is the AWS error code boto3 would raise ("ModelError", "ThrottlingException")."""

    def __init__(self) -> None:
        import boto3
        from botocore import parsers, serialize
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        session = boto3.Session(region_name=SPEC.target.region)
        client = session.client("sagemaker-runtime")
        self.operation = client.meta.service_model.operation_model("InvokeEndpoint")
        protocol = self.operation.metadata["protocol"]
        params = {"EndpointName": SPEC.target.endpoint, "ContentType": "application/json",
                  "Accept": "application/json", "Body": BODY,
                  **({"InferenceComponentName": SPEC.target.component} if SPEC.target.component else {})}
        request = serialize.create_serializer(protocol).serialize_to_request(params, self.operation)
        endpoint = urlsplit(client.meta.endpoint_url)
        self.host = f"{endpoint.scheme}://{endpoint.netloc}"
        self.path = endpoint.path.rstrip("/") + request["url_path"]
        self.url = self.host + self.path
        self.headers = dict(request["headers"])
        self.credentials = session.get_credentials()
        if self.credentials is None:  # boto3 would fail each call; a run of nothing but failures measures nothing
            sys.exit(f"inferstack locustfile: no AWS credentials to sign InvokeEndpoint of {SPEC.target.endpoint} "
                     f"with (environment variables, a profile, or the task's role)")
        self.signing_name = client.meta.service_model.signing_name
        self.region = client.meta.region_name
        self.parser = parsers.create_parser(protocol)
        self.signer, self.request = SigV4Auth, AWSRequest  # imported once, not per request

    def signed_headers(self) -> dict[str, str]:
        # A signer per request: it holds the credentials, frozen now, as they may have been refreshed since.
        request = self.request(method="POST", url=self.url, data=BODY, headers=dict(self.headers))
        self.signer(self.credentials.get_frozen_credentials(), self.signing_name, self.region).add_auth(request)
        return dict(request.headers.items())

    def error_kind(self, status: int, headers, body: bytes) -> str:
        headers = {str(name).lower(): value for name, value in headers.items()}  # botocore reads them lower-cased
        parsed = self.parser.parse({"status_code": status, "headers": headers, "body": body},
                                   self.operation.output_shape)
        return str((parsed.get("Error") or {}).get("Code") or f"HTTP {status}")


def _ca_bundle(cafile: str | None = None):
    """Certificates checked against the bundle boto3 would use: AWS_CA_BUNDLE, else botocore's own. The `cafile`
    geventhttpclient passes (certifi's, always) is not it, so it is not used."""
    from botocore.httpsession import DEFAULT_CA_BUNDLE

    return gevent.ssl.create_default_context(cafile=os.environ.get("AWS_CA_BUNDLE") or DEFAULT_CA_BUNDLE)


_invoke: _SignedInvoke | None = _SignedInvoke() if SPEC.target.kind == "sagemaker" else None


class SageMakerTarget(FastHttpUser):
    abstract = SPEC.target.kind != "sagemaker"
    host = _invoke.host if _invoke else "http://unused"
    network_timeout = connection_timeout = SPEC.timeout_s
    insecure = False  # FastHttpUser's default skips certificate checks: SageMaker's are checked, as boto3 does
    ssl_context_factory = staticmethod(_ca_bundle)
    wait_time = paced

    def on_start(self) -> None:
        _start_on_phase(self)

    @task
    def invoke(self) -> None:
        with self.client.post(_invoke.path, data=BODY, name=SPEC.model, catch_response=True,
                              headers=_invoke.signed_headers()) as response:
            _judge(response, lambda: _invoke.error_kind(response.status_code, response.headers, response.content or b""))


class Steps(LoadTestShape):
    """The spec's steps; at each new step every generator hears its index, start and pace before the users
    change."""

    _index: int | None = None

    def tick(self):
        run_time = self.get_run_time()
        index = pacing.step_at(SPEC.steps, run_time)
        if index is None:
            return None
        if index != self._index:
            previous = PACES[self._index] if self._index is not None else None
            data = {"index": index, "t0": round(run_time, 3), "per_user_rate": PACES[index].per_user_rate,
                    "settle_s": pacing.settle_s(SPEC.steps[index], PACES[index], previous),
                    "generators": self.runner.worker_count if isinstance(self.runner, MasterRunner) else 1}
            if _State.started is None:
                _State.started = _now_iso()
            if isinstance(self.runner, MasterRunner):
                self.runner.send_message(STEP_MESSAGE, data)
            _apply_step(data)
            self._index = index
        users = PACES[index].users
        # Every user of the step within a quarter of a second (Locust spawns at the given rate per second);
        # each then waits for its phase.
        return users, 4 * users


def _on_request(request_type, name, response_time, response_length, exception=None, **_kwargs) -> None:
    if exception is None:
        kind = None
    elif isinstance(exception, CatchResponseError):
        kind = str(exception.args[0]) if exception.args else "failure"
    else:
        kind = measure.error_kind(exception)
    _State.recorder.record(float(response_time), kind)


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
    elif isinstance(runner, MasterRunner):
        _State.recorder.name = "master"
    environment.events.request.add_listener(_on_request)


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


@events.report_to_master.add_listener
def _on_report_to_master(client_id, data, **_kwargs) -> None:
    # A worker's index comes with the master's answer to its connection: worker-1, worker-2, ...
    _State.recorder.name = f"worker-{getattr(_State.runner, 'worker_index', 0) + 1}"
    data["inferstack"] = _State.recorder.report()


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
    result = _State.aggregator.result(SPEC, started=_State.started or _now_iso(), finished=_now_iso(),
                                      workers=workers)
    try:
        report.write(result, Path(os.environ[OUT_ENV]))
    except OSError as exc:
        log.error("inferstack: cannot write the results to %s: %s", os.environ[OUT_ENV], exc)
        environment.process_exit_code = 3
