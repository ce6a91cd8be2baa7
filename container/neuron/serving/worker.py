"""One serving process: owns its NeuronCores, loads the model after it was started, serves HTTP.

The supervisor starts each worker as a fresh interpreter with NEURON_RT_VISIBLE_CORES already
set to the worker's own slice, so nothing Neuron-related ever crosses a fork. HTTP comes up first
(live = 200) while a loader thread loads and warms the model; ready flips to 200 only after
warm-up. SIGTERM marks the worker draining (ready = 503), the HTTP server (http_server.py) stops
accepting connections and waits for in-flight requests, then the batcher finishes its queue, the
worker writes its last EMF metrics line (emf.py) and the process exits 0.
A worker of one of several packed models also keeps its ready marker (readiness.py) in step.
A worker the supervisor started in place of a dead one finds its connection-share slot away and
joins the share only once warm, so its model's other workers take the connections until then.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
import sys
import threading
import time

import emf
import metrics
from batcher import DELAY, DRAIN, FULL, DynamicBatcher
from connection_share import ConnectionShare
from http_app import ServerState, build_app
from http_server import HttpServer
from protocol import ModelInterface
from readiness import LOAD_FAILED, PackedReadiness
from server_settings import ServerSettings

log = logging.getLogger("worker")


class WorkerReadiness:
    """This worker's readiness: the routes' ServerState, plus its marker when models are packed, and its
    place in the connection share when it replaces a dead worker."""

    def __init__(
        self,
        state: ServerState,
        packed: PackedReadiness | None,
        model: str,
        index: int,
        share: ConnectionShare | None = None,
    ) -> None:
        self.state, self.packed, self.model, self.index, self.share = state, packed, model, index, share

    def ready(self) -> None:
        if self.packed is not None:
            self.packed.mark_ready(self.model, self.index)
        self.state.ready = True
        joined = self.share is not None and self.share.away and not self.state.draining
        if joined:
            self.share.join()
        if self.state.draining:  # a drain began while the marker was written, or the share joined
            self.drain()
            if joined:  # the drain may have left the share before the join: leave it again
                self.share.leave()

    def drain(self) -> None:
        self.state.draining = True
        if self.packed is not None:
            self.packed.clear(self.model, self.index)


def batch_observer(recorder: emf.Recorder | None):
    """What the batcher calls after each executed batch: Prometheus, and the EMF recorder when metrics are on."""
    triggers = {trigger: metrics.BATCHES.labels(trigger) for trigger in (FULL, DELAY, DRAIN)}

    def observe(rows: int, seconds: float, trigger: str) -> None:
        metrics.BATCH_SIZE.observe(rows)
        metrics.BATCH_LATENCY.observe(seconds)
        triggers[trigger].inc()
        if recorder is not None:
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


def load_model(
    settings: ServerSettings,
    metadata: dict,
    readiness: WorkerReadiness,
    stop,
    failed: list,
    recorder: emf.Recorder | None,
    loop: asyncio.AbstractEventLoop,
    tally: metrics.RequestTally,
) -> None:
    state = readiness.state
    try:
        started = time.perf_counter()
        # runner imports torch (unless the stand-in replaces the model): only now, inside this worker.
        from runner import ModelRunner

        runner = ModelRunner(
            settings.model_dir,
            metadata,
            settings.torch_threads,
            settings.standin_accelerator_ms,
            native_stack=settings.text_scan,  # SERVER_TEXT_SCAN on or body: the common batch stacked in C too
        )
        loaded = time.perf_counter()
        full_batch_s = runner.warm_up(settings.warmup_iterations, settings.max_batch_size)
        batcher = DynamicBatcher(
            runner.execute,
            prepare_batch=runner.stack,
            prepare_now=runner.stack_now,  # the common batch, stacked in C on the loop: the thread only starts it
            pipeline=settings.pipeline,  # SERVER_PIPELINE
            max_batch_size=settings.max_batch_size,
            max_queue_delay_s=settings.max_queue_delay_ms / 1000.0,
            loop=loop,
            on_batch=batch_observer(recorder),
            on_send=tally.flush,
            on_delivered=tally.flush,
            admission=settings.admission,  # a packed model's own SLO (for_model), else SERVER_SLO_MS
        )
        batcher.assume_batch_s(full_batch_s)  # admission starts from this machine's measured batch time
        batcher.start()
        state.prepare = runner.prepare
        if settings.text_scan:  # SERVER_TEXT_SCAN
            state.scanner = runner.text_scanner(settings.max_batch_size, settings.max_text_chars)
        state.batcher = batcher
        # Everything loaded so far lives as long as the worker: out of the garbage collector's sight, a
        # full collection no longer walks it (13 ms with the emulated accelerator, 83 ms with torch
        # loaded, measured here: a pause every request in flight would wait out).
        gc.freeze()
        readiness.ready()
        log.info(
            "model ready",
            extra={
                "model": settings.model_name,
                "backend": metadata["backend"],
                "visible_cores": os.environ.get("NEURON_RT_VISIBLE_CORES"),
                "load_s": round(loaded - started, 3),
                "warmup_s": round(time.perf_counter() - loaded, 3),
                "text_scan": state.scanner is not None,
                "http_front": state.scanner is not None and settings.text_scan_head,
            },
        )
    except Exception as exc:
        state.not_ready_reason = f"model failed to load: {type(exc).__name__}: {exc}"
        log.exception("model failed to load")
        failed.append(exc)
        stop()


def watch_parent(stop, stopping: asyncio.Event) -> None:
    """Exit (gracefully) if the supervisor disappears, so no orphan keeps the cores reserved."""
    parent = os.getppid()
    while not stopping.is_set():
        if os.getppid() != parent:
            log.error("supervisor exited; shutting down")
            stop()
            return
        time.sleep(1.0)


def run_loop(main) -> None:
    """uvloop when installed (both images have it): a cheaper event loop for the same code."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)


def run(
    settings: ServerSettings,
    metadata: dict,
    fd: int,
    packed: PackedReadiness | None = None,
    share: ConnectionShare | None = None,
) -> int:
    """Serve on the listening socket ``fd``; ``share``: the model's other workers on that socket."""
    # The inference thread needs the GIL for a moment as each batch starts and ends, usually while the
    # event loop is busy with requests: it waits up to the switch interval each time, with the model idle
    # (Python's default of 5 ms is more than a Neuron batch takes). The two threads contend only then.
    sys.setswitchinterval(0.0001)
    interface = ModelInterface(
        name=settings.model_name,
        metadata=metadata,
        max_rows=settings.max_batch_size,
        max_text_chars=settings.max_text_chars,
        native_replies=settings.text_scan,  # SERVER_TEXT_SCAN: the common request's reply in C too
    )
    state = ServerState()
    index = int(os.environ.get("SERVER_WORKER_INDEX", "0"))
    metrics.WORKER_RESTARTS.set(int(os.environ.get("SERVER_WORKER_RESTARTS", "0")))
    readiness = WorkerReadiness(state, packed, settings.model_name, index, share)
    publisher = emf_publisher(settings, state, index)
    recorder = publisher.recorder if publisher is not None else None
    failed: list = []

    sock = socket.socket(fileno=fd)

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        tally = metrics.RequestTally(
            loop, lambda: state.batcher.queue_depth if state.batcher is not None else 0, recorder=recorder
        )
        app = build_app(
            interface=interface,
            state=state,
            max_body_bytes=settings.max_body_bytes,
            tally=tally,
            packed=packed,
        )

        def stop() -> None:  # from any thread: a signal, a failed load, a vanished supervisor
            readiness.drain()
            loop.call_soon_threadsafe(stopping.set)

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop)
        if publisher is not None:
            publisher.start()
        server = HttpServer(
            app=app.asgi,
            infer_routes=app.infer_routes,
            infer=app.infer,
            max_body_bytes=settings.max_body_bytes,
            keep_alive_s=75,  # longer than the ALB's 60 s idle timeout, so the ALB closes first
            share=share,
            on_connections=metrics.OPEN_CONNECTIONS.set,
            fast=app.fast if settings.text_scan_head else None,  # SERVER_TEXT_SCAN=on
        )
        server.listen(sock)
        threading.Thread(
            target=load_model,
            args=(settings, metadata, readiness, stop, failed, recorder, loop, tally),
            name="loader",
            daemon=True,
        ).start()
        threading.Thread(target=watch_parent, args=(stop, stopping), name="parent-watch", daemon=True).start()
        await stopping.wait()
        # Readiness is off already; no new connections, in-flight requests answered, then the batcher's queue.
        await server.shutdown(settings.drain_timeout_s)
        if state.batcher is not None:
            await state.batcher.drain(settings.drain_timeout_s)
        if publisher is not None:  # after the drain, so the last requests and batches are in its last line
            tally.flush()  # the requests answered since the last batch (refusals, say) to the recorder
            await loop.run_in_executor(None, publisher.stop)
        log.info("worker stopped")

    run_loop(serve())
    return LOAD_FAILED if failed else 0
