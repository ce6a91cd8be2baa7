"""One serving process: owns its NeuronCores, loads the model after it was started, serves HTTP.

The supervisor starts each worker as a fresh interpreter with NEURON_RT_VISIBLE_CORES already
set to the worker's own slice, so nothing Neuron-related ever crosses a fork. HTTP comes up first
(live = 200) while a loader thread loads and warms the model; ready flips to 200 only after
warm-up. SIGTERM marks the worker draining (ready = 503), uvicorn stops accepting connections
and waits for in-flight requests, then the batcher finishes its queue, the worker writes its last
EMF metrics line (emf.py) and the process exits 0.
A worker of one of several packed models also keeps its ready marker (readiness.py) in step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time

import uvicorn

import emf
import metrics
from batcher import DynamicBatcher
from http_app import ServerState, build_app
from protocol import ModelInterface
from readiness import PackedReadiness
from server_settings import ServerSettings

log = logging.getLogger("worker")


class WorkerReadiness:
    """This worker's readiness: the routes' ServerState, plus its marker when models are packed."""

    def __init__(self, state: ServerState, packed: PackedReadiness | None, model: str, index: int) -> None:
        self.state, self.packed, self.model, self.index = state, packed, model, index

    def ready(self) -> None:
        if self.packed is not None:
            self.packed.mark_ready(self.model, self.index)
        self.state.ready = True
        if self.state.draining:  # a drain began while the marker was written
            self.drain()

    def drain(self) -> None:
        self.state.draining = True
        if self.packed is not None:
            self.packed.clear(self.model, self.index)


class DrainingServer(uvicorn.Server):
    """uvicorn.Server that flips readiness off as soon as a shutdown signal arrives."""

    def __init__(self, config: uvicorn.Config, readiness: WorkerReadiness) -> None:
        super().__init__(config)
        self.readiness = readiness

    def handle_exit(self, sig, frame) -> None:
        self.readiness.drain()
        super().handle_exit(sig, frame)


def batch_observer(recorder: emf.Recorder | None):
    """What the batcher calls after each executed batch: Prometheus, and the EMF recorder when metrics are on."""
    if recorder is None:
        return lambda rows, seconds: (metrics.BATCH_SIZE.observe(rows), metrics.BATCH_LATENCY.observe(seconds))

    def observe(rows: int, seconds: float) -> None:
        metrics.BATCH_SIZE.observe(rows)
        metrics.BATCH_LATENCY.observe(seconds)
        recorder.batch(rows, seconds * 1000.0)

    return observe


def emf_publisher(settings: ServerSettings, state: ServerState, index: int) -> emf.Publisher | None:
    """This worker's CloudWatch metrics (SERVER_METRICS=emf): per model and per worker, one line per interval."""
    if not settings.metrics:
        return None
    dimensions = {"Service": settings.metrics_service, "Model": settings.model_name, "Worker": str(index)}
    recorder = emf.Recorder(dimensions, always_counted=(emf.REQUESTS, emf.ERRORS))
    gauges = {
        emf.QUEUE_DEPTH: lambda: state.batcher.queue_depth if state.batcher is not None else 0,
        emf.IN_FLIGHT: lambda: state.in_flight,
    }
    return emf.Publisher(recorder, gauges, interval_s=settings.metrics_interval_s)


def load_model(settings: ServerSettings, metadata: dict, readiness: WorkerReadiness, server: DrainingServer, failed: list,
               recorder: emf.Recorder | None = None) -> None:
    state = readiness.state
    try:
        started = time.perf_counter()
        from runner import ModelRunner  # imports torch: only now, inside this worker

        runner = ModelRunner(settings.model_dir, metadata, settings.torch_threads)
        loaded = time.perf_counter()
        runner.warm_up(settings.warmup_iterations, settings.max_batch_size)
        batcher = DynamicBatcher(
            runner.run,
            max_batch_size=settings.max_batch_size,
            max_queue_delay_s=settings.max_queue_delay_ms / 1000.0,
            on_batch=batch_observer(recorder),
            on_queue_depth=metrics.QUEUE_DEPTH.set,
        )
        batcher.start()
        state.batcher = batcher
        readiness.ready()
        log.info(
            "model ready",
            extra={
                "model": settings.model_name,
                "backend": metadata["backend"],
                "visible_cores": os.environ.get("NEURON_RT_VISIBLE_CORES"),
                "load_s": round(loaded - started, 3),
                "warmup_s": round(time.perf_counter() - loaded, 3),
            },
        )
    except Exception as exc:
        state.not_ready_reason = f"model failed to load: {type(exc).__name__}: {exc}"
        log.exception("model failed to load")
        failed.append(exc)
        server.should_exit = True


def watch_parent(server: DrainingServer, readiness: WorkerReadiness) -> None:
    """Exit (gracefully) if the supervisor disappears, so no orphan keeps the cores reserved."""
    parent = os.getppid()
    while not server.should_exit:
        if os.getppid() != parent:
            log.error("supervisor exited; shutting down")
            readiness.drain()
            server.should_exit = True
            return
        time.sleep(1.0)


def run(settings: ServerSettings, metadata: dict, fd: int, packed: PackedReadiness | None = None) -> int:
    # The inference thread needs the GIL back after every model call while the event loop is
    # busy; Python's default 5 ms switch interval would leave it waiting that long each time.
    sys.setswitchinterval(0.0005)
    interface = ModelInterface(
        name=settings.model_name, metadata=metadata, max_rows=settings.max_batch_size, max_text_chars=settings.max_text_chars
    )
    state = ServerState()
    index = int(os.environ.get("SERVER_WORKER_INDEX", "0"))
    readiness = WorkerReadiness(state, packed, settings.model_name, index)
    publisher = emf_publisher(settings, state, index)
    recorder = publisher.recorder if publisher is not None else None
    failed: list = []
    holder: dict = {}

    @contextlib.asynccontextmanager
    async def lifespan(app):
        if publisher is not None:
            publisher.start()
        threading.Thread(
            target=load_model, args=(settings, metadata, readiness, holder["server"], failed, recorder), name="loader",
            daemon=True,
        ).start()
        threading.Thread(target=watch_parent, args=(holder["server"], readiness), name="parent-watch", daemon=True).start()
        yield
        # uvicorn has stopped accepting connections and finished in-flight requests.
        readiness.drain()
        loop = asyncio.get_running_loop()
        if state.batcher is not None:
            await loop.run_in_executor(None, state.batcher.close, settings.drain_timeout_s)
        if publisher is not None:  # after the drain, so the last requests and batches are in its last line
            await loop.run_in_executor(None, publisher.stop)
        log.info("worker stopped")

    app = build_app(
        interface=interface, state=state, max_body_bytes=settings.max_body_bytes, lifespan=lifespan, packed=packed,
        recorder=recorder,
    )
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,  # per-request log lines cost more than the tiny model; errors are still logged
        proxy_headers=False,  # nothing reads the client address, so skip parsing X-Forwarded-* per request
        lifespan="on",
        timeout_keep_alive=75,  # longer than the ALB's 60 s idle timeout, so the ALB closes first
        timeout_graceful_shutdown=settings.drain_timeout_s,
    )
    server = holder["server"] = DrainingServer(config, readiness)
    # uvicorn re-raises the shutdown signal once it has drained, with the handler that was
    # installed before it; make that a no-op so a drained worker exits 0 instead of dying by signal.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: None)
    sock = socket.socket(fileno=fd)
    server.run(sockets=[sock])
    return 1 if failed else 0
