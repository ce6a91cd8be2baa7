"""HTTP routes: KServe v2 / Triton (health, metadata, infer, repository index), SageMaker
(/ping, /invocations) and Prometheus /metrics, all answering errors as JSON {"error": "..."}.

Built on Starlette (FastAPI's core) without request models; the inference routes themselves are
answered without ASGI (http_server.py calls ``infer`` with the body and a reply callback) and parsed
once by protocol.py, which keeps the per-request overhead low enough for dynamic batching to pay off.
Each inference request's latency and outcome also go to the worker's CloudWatch metrics (emf.py),
when they are on. A request the batcher would not answer within the SLO is refused at once: 503 with
Retry-After, counted as rejected (batcher.py, Admission).

In a container packing several models (SERVER_MODELS) each port serves one model's routes;
readiness and the repository index also cover the other models, through their ready markers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

# The modules beside this one, flat on the path (ruff would sort them in with the third-party ones).
# isort: split
import metrics
from batcher import BatcherClosed, DynamicBatcher, Overloaded
from protocol import HEADER_LENGTH, MODEL_VERSION, PLAIN_TEXT_REPLY, ModelInterface, ProtocolError, parse_json
from readiness import PackedReadiness
from runner import EncodedRows

log = logging.getLogger("http")
SERVER_NAME = "inferstack-neuron"


@dataclass
class ServerState:
    """What the routes need to know about the worker; written by the loader thread."""

    ready: bool = False
    draining: bool = False
    batcher: DynamicBatcher | None = None
    prepare: Any = staticmethod(lambda payload: payload)  # the runner's early tokenization, once loaded
    scanner: Any = None  # the runner's text_scanner: the common request to ids in C (text_scan.c), once loaded
    not_ready_reason: str = "model is loading"
    in_flight: int = 0  # inference requests accepted and not yet answered (changed on the event loop only)


JSON_HEADER = b"content-type: application/json\r\n"


def header_lines(headers: dict[str, str]) -> bytes:
    return b"".join(f"{name.lower()}: {value}\r\n".encode("latin-1") for name, value in headers.items())


def error_body(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


def json_response(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":")).encode(), status_code=status, media_type="application/json")


def error(message: str, status: int) -> Response:
    return Response(error_body(message), status_code=status, media_type="application/json")


async def read_limited(chunks, declared: str | None, limit: int) -> bytes:
    """The request body, or a 413 ProtocolError as soon as it is known to exceed ``limit``."""
    if declared is not None:
        try:
            declared_size = int(declared)
        except ValueError:
            raise ProtocolError("Content-Length: expected an integer") from None
        if declared_size > limit:
            raise ProtocolError(f"body: {declared_size} bytes exceed the limit of {limit}", 413)
    parts, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise ProtocolError(f"body: more than {limit} bytes", 413)
        parts.append(chunk)
    return b"".join(parts)


async def read_body(request: Request, limit: int) -> bytes:
    return await read_limited(request.stream(), request.headers.get("content-length"), limit)


@dataclass(frozen=True)
class App:
    """The worker's routes as http_server.py serves them: ``asgi`` for everything, ``infer`` for POSTs to
    ``infer_routes`` (path -> route name), and before either ``fast`` for a read that holds one whole common
    request (``fast(data, reply)``: False leaves the bytes to the HTTP parser)."""

    asgi: Starlette
    infer_routes: dict[str, str]
    infer: Any
    fast: Any = None


def build_app(
    *,
    interface: ModelInterface,
    state: ServerState,
    max_body_bytes: int,
    tally: metrics.RequestTally,
    packed: PackedReadiness | None = None,
) -> App:
    """The worker's routes; ``tally`` takes every inference request's latency and status for Prometheus and,
    when it has one, the EMF recorder (emf.py); ``packed`` is set when this worker is one of several packed
    models'."""
    name = interface.name

    def check_model(request: Request) -> Response | None:
        params = request.path_params
        if params["model"] != name:
            if packed is not None and params["model"] in packed.ports:
                other = params["model"]
                return error(f"model '{other}' is served on port {packed.ports[other]}; this port serves '{name}'", 404)
            return error(f"model '{params['model']}' not found; this server serves '{name}'", 404)
        version = params.get("version")
        if version is not None and version != MODEL_VERSION:
            return error(f"model '{name}' has no version '{version}'; available: {MODEL_VERSION}", 404)
        return None

    def worker_ready() -> bool:
        return state.ready and not state.draining

    def ready() -> bool:
        """The whole container: this worker, and with packed models every worker of every model."""
        return worker_ready() and (packed is None or not packed.not_ready())

    def model_is_ready() -> bool:
        """This port's model: this worker, and with packed models every worker of the model."""
        return worker_ready() and (packed is None or packed.model_ready(name))

    def not_ready_reason() -> str:
        if state.draining:
            return "server is shutting down"
        if not state.ready or packed is None:
            return state.not_ready_reason
        waiting = packed.not_ready()
        return f"waiting for every worker of {', '.join(repr(m) for m in waiting)}" if waiting else "ready"

    def not_ready() -> Response:
        return error(not_ready_reason(), 503)

    def finish(
        route: str, reply, started: float, status: int, headers: bytes, content: bytes, rejected: str | None = None
    ) -> None:
        state.in_flight -= 1
        tally.request(route, status, time.perf_counter() - started, rejected)  # and, gathered, to the EMF recorder
        reply(status, headers, content)

    def refuse(route: str, reply, started: float, exc: Overloaded) -> None:
        headers = JSON_HEADER + b"retry-after: %d\r\n" % exc.retry_after_s
        finish(route, reply, started, 503, headers, error_body(str(exc)), exc.reason)

    native_reply = interface.native_reply  # the common request's reply in C (None: SERVER_TEXT_SCAN off)

    def done(route: str, reply, started: float, parsed, ok: bool, value) -> None:
        """A request's batch came back (the batcher calls this, through a partial, with ``ok`` and ``value``)."""
        if ok:
            try:
                # The common request (no id, the default outputs) straight to the C writer; None (logits it does not
                # take) and every other request go through interface.response, which answers them all.
                content = native_reply(value) if parsed is PLAIN_TEXT_REPLY and native_reply is not None else None
                if content is not None:
                    headers = None
                else:
                    content, headers = interface.response(parsed, value)
            except Exception:
                log.exception("inference failed", extra={"route": route})
                finish(route, reply, started, 500, JSON_HEADER, error_body("internal error while running the model"))
                return
            finish(route, reply, started, 200, JSON_HEADER if headers is None else header_lines(headers), content)
        elif isinstance(value, Overloaded):  # waited past what the SLO allows: refused, not run
            refuse(route, reply, started, value)
        else:
            finish(route, reply, started, 500, JSON_HEADER, error_body("internal error while running the model"))

    def handle_inference(
        route: str, body: bytes, header_length: str | None, reply, scanned: list[list[int]] | None = None
    ) -> None:
        """One inference request, answered through ``reply(status, header lines, content)`` exactly once:
        at once when it is refused, else when its batch has run (http_server.py calls this). ``scanned``: the
        request's rows of ids, already read in C with its HTTP head (``fast_inference``); ``body`` is unused then."""
        started = time.perf_counter()
        state.in_flight += 1
        try:
            batcher = state.batcher
            if batcher is None or not state.ready:
                raise ProtocolError(state.not_ready_reason, 503)
            if scanned is not None:  # read and tokenized with its head in C (fast_inference)
                rows = scanned
            else:
                batcher.admit()  # before parsing: a refusal costs a few microseconds, whatever the body
                scanner = state.scanner
                rows = scanner.scan(body) if scanner is not None and header_length is None else None
            if rows is not None:  # the common request, read and tokenized in one C call
                parsed, payload = PLAIN_TEXT_REPLY, EncodedRows(rows)
            else:  # everything else, and every refusal
                parsed = interface.parse(body, header_length)
                payload = state.prepare(parsed.payload)
            # submit admits it with its rows: the scanned request's one check, the parsed one's second. A partial,
            # not a closure per request: this runs for every request, and a closure is built each time.
            batcher.submit(payload, payload.rows, partial(done, route, reply, started, parsed))
            tally.touch()  # the queue depth changed
        except ProtocolError as exc:
            log.info("rejected request", extra={"route": route, "status": exc.status, "error": str(exc)})
            finish(route, reply, started, exc.status, JSON_HEADER, error_body(str(exc)))
        except Overloaded as exc:
            refuse(route, reply, started, exc)
        except BatcherClosed as exc:
            finish(route, reply, started, 503, JSON_HEADER, error_body(str(exc)))
        except Exception:
            log.exception("inference failed", extra={"route": route})
            finish(route, reply, started, 500, JSON_HEADER, error_body("internal error while running the model"))

    def fast_inference(data: bytes, reply) -> bool:
        """One read that holds exactly one whole common request (text_scan.c's Scanner.request: the HTTP head and
        the body checked and tokenized in one C call), answered as ``handle_inference`` answers it; False, having
        done nothing, for everything else, which the HTTP parser and the Python path take as before."""
        scanner = state.scanner
        if scanner is None:
            return False
        try:
            taken = scanner.request(data, fast_paths, max_body_bytes)
        except Exception:  # a bug (or no memory): the parser still answers the request
            log.exception("the HTTP front failed; the parser takes the request")
            return False
        if taken is None:
            return False
        index, rows = taken
        handle_inference(fast_names[index], b"", None, reply, rows)
        return True

    async def starlette_inference(request: Request, route: str) -> Response:
        """The inference routes reached through Starlette (a path http_server.py does not match as it is,
        e.g. percent-encoded): the same handler, awaited."""
        try:
            body = await read_body(request, max_body_bytes)
        except ProtocolError as exc:
            return error(str(exc), exc.status)
        answered = asyncio.get_running_loop().create_future()
        handle_inference(route, body, request.headers.get(HEADER_LENGTH), lambda *reply: answered.set_result(reply))
        status, headers, content = await answered
        raw = [tuple(line.split(b": ", 1)) for line in headers.split(b"\r\n") if line]
        response = Response(content, status_code=status)
        response.raw_headers = [(k, v) for k, v in response.raw_headers if k != b"content-type"] + raw
        return response

    async def infer(request: Request) -> Response:
        return check_model(request) or await starlette_inference(request, "infer")

    async def invocations(request: Request) -> Response:
        return await starlette_inference(request, "invocations")

    async def live(request: Request) -> Response:
        return json_response({"live": True})

    async def server_ready(request: Request) -> Response:
        return json_response({"ready": True}) if ready() else not_ready()

    async def ping(request: Request) -> Response:
        return json_response({"status": "healthy"}) if ready() else not_ready()

    async def server_metadata(request: Request) -> Response:
        return json_response(
            {"name": SERVER_NAME, "version": "1", "extensions": ["binary_tensor_data", "model_repository"]}
        )

    async def model_metadata(request: Request) -> Response:
        return check_model(request) or json_response(interface.metadata())

    async def model_ready(request: Request) -> Response:
        return check_model(request) or (
            json_response({"name": name, "ready": True}) if model_is_ready() else not_ready()
        )

    def index_entries() -> list[dict]:
        if packed is None:
            entry = {"name": name, "version": MODEL_VERSION, "state": "READY" if ready() else "UNAVAILABLE"}
            if not ready():
                entry["reason"] = state.not_ready_reason
            return [entry]
        entries = []
        for model in packed.names:
            up = model_is_ready() if model == name else packed.model_ready(model)
            entry = {"name": model, "version": MODEL_VERSION, "state": "READY" if up else "UNAVAILABLE"}
            if not up:
                if model == name and not worker_ready():
                    entry["reason"] = not_ready_reason()
                else:
                    ready_count = packed.ready_workers(model)
                    entry["reason"] = f"{ready_count} of {packed.workers[model]} workers ready"
            entries.append(entry)
        return entries

    async def repository_index(request: Request) -> Response:
        try:
            body = await read_body(request, max_body_bytes)
            options = parse_json(body, "body") if body.strip() else {}
        except ProtocolError as exc:
            return error(str(exc), exc.status)
        if not isinstance(options, dict):
            return error("body: expected a JSON object", 400)
        entries = index_entries()
        return json_response([e for e in entries if e["state"] == "READY"] if options.get("ready") else entries)

    async def prometheus(request: Request) -> Response:
        return Response(metrics.render(), media_type=metrics.CONTENT_TYPE)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        return error(f"{request.method} {request.url.path}: {exc.detail}", exc.status_code)

    # What http_server.py answers without ASGI: path -> route name.
    fast_routes = {
        f"/v2/models/{name}/infer": "infer",
        f"/v2/models/{name}/versions/{MODEL_VERSION}/infer": "infer",
        "/invocations": "invocations",
    }
    fast_paths = tuple(path.encode() for path in fast_routes)  # for fast_inference, in C
    fast_names = tuple(fast_routes.values())
    routes = [
        Route("/v2/models/{model}/infer", infer, methods=["POST"]),
        Route("/invocations", invocations, methods=["POST"]),
        Route("/v2/models/{model}/versions/{version}/infer", infer, methods=["POST"]),
        Route("/ping", ping, methods=["GET"]),
        Route("/v2/health/live", live, methods=["GET"]),
        Route("/v2/health/ready", server_ready, methods=["GET"]),
        Route("/v2", server_metadata, methods=["GET"]),
        Route("/v2/models/{model}", model_metadata, methods=["GET"]),
        Route("/v2/models/{model}/versions/{version}", model_metadata, methods=["GET"]),
        Route("/v2/models/{model}/ready", model_ready, methods=["GET"]),
        Route("/v2/models/{model}/versions/{version}/ready", model_ready, methods=["GET"]),
        Route("/v2/repository/index", repository_index, methods=["POST"]),
        Route("/metrics", prometheus, methods=["GET"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error})
    return App(app, fast_routes, handle_inference, fast_inference)
