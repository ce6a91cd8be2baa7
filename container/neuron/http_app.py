"""HTTP routes: KServe v2 / Triton (health, metadata, infer, repository index), SageMaker
(/ping, /invocations) and Prometheus /metrics, all answering errors as JSON {"error": "..."}.

Built on Starlette (FastAPI's core) without request models; the inference routes themselves are
answered by a thin ASGI front (InferenceFastPath) and parsed once by protocol.py, which keeps the
per-request overhead low enough for dynamic batching to pay off. Each inference request's latency and
outcome also go to the worker's CloudWatch metrics (emf.py), when they are on.

In a container packing several models (SERVER_MODELS) each port serves one model's routes;
readiness and the repository index also cover the other models, through their ready markers.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import metrics
from batcher import BatcherClosed, DynamicBatcher
from emf import Recorder
from protocol import HEADER_LENGTH, MODEL_VERSION, ModelInterface, ProtocolError, parse_json
from readiness import PackedReadiness

log = logging.getLogger("http")
SERVER_NAME = "inferstack-neuron"


@dataclass
class ServerState:
    """What the routes need to know about the worker; written by the loader thread."""

    ready: bool = False
    draining: bool = False
    batcher: DynamicBatcher | None = None
    not_ready_reason: str = "model is loading"
    in_flight: int = 0  # inference requests accepted and not yet answered (changed on the event loop only)


JSON_HEADERS = {"content-type": "application/json"}


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


def build_app(
    *,
    interface: ModelInterface,
    state: ServerState,
    max_body_bytes: int,
    lifespan=None,
    packed: PackedReadiness | None = None,
    recorder: Recorder | None = None,
) -> InferenceFastPath:
    """The worker's routes; ``packed`` is set when this worker is one of several packed models';
    ``recorder`` takes every inference request's latency and outcome for the EMF metrics (emf.py)."""
    name = interface.name
    latency = {route: metrics.REQUEST_LATENCY.labels(route) for route in ("infer", "invocations")}
    outcomes: dict[tuple[str, int], Any] = {}

    def count(route: str, status: int) -> None:
        child = outcomes.get((route, status))
        if child is None:
            child = outcomes[(route, status)] = metrics.REQUESTS.labels(route, str(status))
        child.inc()

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

    async def run_inference(body_chunks, declared_length: str | None, header_length: str | None, route: str):
        """(status, content, headers) for one inference request; never raises."""
        started = time.perf_counter()
        status = 200
        state.in_flight += 1
        try:
            if state.batcher is None or not state.ready:
                raise ProtocolError(state.not_ready_reason, 503)
            body = await read_limited(body_chunks, declared_length, max_body_bytes)
            parsed = interface.parse(body, header_length)
            logits = await state.batcher.submit(parsed.payload, parsed.payload.rows)
            content, headers = interface.response(parsed, logits)
            return status, content, headers
        except ProtocolError as exc:
            status = exc.status
            log.info("rejected request", extra={"route": route, "status": status, "error": str(exc)})
            return status, error_body(str(exc)), JSON_HEADERS
        except BatcherClosed as exc:
            status = 503
            return status, error_body(str(exc)), JSON_HEADERS
        except Exception:
            status = 500
            log.exception("inference failed", extra={"route": route})
            return status, error_body("internal error while running the model"), JSON_HEADERS
        finally:
            state.in_flight -= 1
            elapsed = time.perf_counter() - started
            latency[route].observe(elapsed)
            count(route, status)
            if recorder is not None:
                recorder.request(elapsed * 1000.0, status >= 500)

    async def starlette_inference(request: Request, route: str) -> Response:
        headers = request.headers
        status, content, reply_headers = await run_inference(
            request.stream(), headers.get("content-length"), headers.get(HEADER_LENGTH), route
        )
        return Response(content, status_code=status, headers=reply_headers)

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
        return json_response({"name": SERVER_NAME, "version": "1", "extensions": ["binary_tensor_data", "model_repository"]})

    async def model_metadata(request: Request) -> Response:
        return check_model(request) or json_response(interface.metadata())

    async def model_ready(request: Request) -> Response:
        return check_model(request) or (json_response({"name": name, "ready": True}) if model_is_ready() else not_ready())

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

    fast_routes = {
        f"/v2/models/{name}/infer": "infer",
        f"/v2/models/{name}/versions/{MODEL_VERSION}/infer": "infer",
        "/invocations": "invocations",
    }
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
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error}, lifespan=lifespan)
    return InferenceFastPath(app, fast_routes, run_inference)


class InferenceFastPath:
    """ASGI front: the inference routes are answered here, straight from ASGI messages, and
    everything else goes to Starlette. Skipping Starlette's request/response objects and
    middleware on the hot path leaves more of the event loop's core for parsing and batching."""

    def __init__(self, app: Starlette, routes: dict[str, str], run_inference) -> None:
        self.app = app
        self.routes = routes
        self.run_inference = run_inference

    async def __call__(self, scope, receive, send) -> None:
        route = self.routes.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        declared = header_length = None
        for key, value in scope["headers"]:
            if key == b"content-length":
                declared = value.decode("latin-1")
            elif key == b"inference-header-content-length":
                header_length = value.decode("latin-1")
        status, content, headers = await self.run_inference(_body_chunks(receive), declared, header_length, route)
        raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        raw_headers.append((b"content-length", str(len(content)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": raw_headers})
        await send({"type": "http.response.body", "body": content})


async def _body_chunks(receive):
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return
