"""HTTP routes: KServe v2 / Triton (health, metadata, infer, repository index), SageMaker
(/ping, /invocations) and Prometheus /metrics, all answering errors as JSON {"error": "..."}.

Built on Starlette (FastAPI's core) without request models: bodies are parsed once by
protocol.py, which keeps the per-request overhead low enough for dynamic batching to pay off.
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
from protocol import HEADER_LENGTH, MODEL_VERSION, ModelInterface, ProtocolError

log = logging.getLogger("http")
SERVER_NAME = "inferstack-neuron"


@dataclass
class ServerState:
    """What the routes need to know about the worker; written by the loader thread."""

    ready: bool = False
    draining: bool = False
    batcher: DynamicBatcher | None = None
    not_ready_reason: str = "model is loading"


def json_response(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":")).encode(), status_code=status, media_type="application/json")


def error(message: str, status: int) -> Response:
    return json_response({"error": message}, status)


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            declared_size = int(declared)
        except ValueError:
            raise ProtocolError("Content-Length: expected an integer") from None
        if declared_size > limit:
            raise ProtocolError(f"body: {declared_size} bytes exceed the limit of {limit}", 413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ProtocolError(f"body: more than {limit} bytes", 413)
        chunks.append(chunk)
    return b"".join(chunks)


def build_app(*, interface: ModelInterface, state: ServerState, max_body_bytes: int, lifespan=None) -> Starlette:
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
            return error(f"model '{params['model']}' not found; this server serves '{name}'", 404)
        version = params.get("version")
        if version is not None and version != MODEL_VERSION:
            return error(f"model '{name}' has no version '{version}'; available: {MODEL_VERSION}", 404)
        return None

    def ready() -> bool:
        return state.ready and not state.draining

    def not_ready() -> Response:
        reason = "server is shutting down" if state.draining else state.not_ready_reason
        return error(reason, 503)

    async def run_inference(request: Request, route: str) -> Response:
        started = time.perf_counter()
        status = 200
        try:
            if state.batcher is None or not state.ready:
                raise ProtocolError(state.not_ready_reason, 503)
            body = await read_body(request, max_body_bytes)
            parsed = interface.parse(body, request.headers.get(HEADER_LENGTH))
            logits = await state.batcher.submit(parsed.payload, parsed.payload.rows)
            content, headers = interface.response(parsed, logits)
            return Response(content, headers=headers)
        except ProtocolError as exc:
            status = exc.status
            log.info("rejected request", extra={"route": route, "status": status, "error": str(exc)})
            return error(str(exc), status)
        except BatcherClosed as exc:
            status = 503
            return error(str(exc), status)
        except Exception:
            status = 500
            log.exception("inference failed", extra={"route": route})
            return error("internal error while running the model", status)
        finally:
            latency[route].observe(time.perf_counter() - started)
            count(route, status)

    async def infer(request: Request) -> Response:
        return check_model(request) or await run_inference(request, "infer")

    async def invocations(request: Request) -> Response:
        return await run_inference(request, "invocations")

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
        return check_model(request) or (json_response({"name": name, "ready": True}) if ready() else not_ready())

    async def repository_index(request: Request) -> Response:
        try:
            body = await read_body(request, max_body_bytes)
            options = json.loads(body) if body.strip() else {}
        except ProtocolError as exc:
            return error(str(exc), exc.status)
        except ValueError as exc:
            return error(f"body: malformed JSON: {exc}", 400)
        if not isinstance(options, dict):
            return error("body: expected a JSON object", 400)
        entry = {"name": name, "version": MODEL_VERSION, "state": "READY" if ready() else "UNAVAILABLE"}
        if not ready():
            entry["reason"] = state.not_ready_reason
        return json_response([] if options.get("ready") and not ready() else [entry])

    async def prometheus(request: Request) -> Response:
        return Response(metrics.render(), media_type=metrics.CONTENT_TYPE)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        return error(f"{request.method} {request.url.path}: {exc.detail}", exc.status_code)

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
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error}, lifespan=lifespan)
