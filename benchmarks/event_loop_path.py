"""The serving app's per-request Python on its event loop, without sockets or threads in the way.

    .venv/bin/python benchmarks/event_loop_path.py [--model-dir ART] [--cycles 2000] [--rounds 3]

turnaround_floor.py measures the whole worker, where the kernel's socket work, the threads' wake-ups and the
machine's noise sit on top of the app's own code. This runs that code alone, in one process: a worker's objects
as worker.py builds them (the HTTP server and its connections, the routes, the batcher with admission on, the
Prometheus tally in multiprocess mode, the EMF recorder, the runner on the emulated accelerator at 0 ms), sixteen
connections with in-memory transports, and the batcher's hand-off to the inference thread replaced by a list. Each
cycle feeds every connection one request (the load test's bodies, as turnaround_floor.py sends them), runs the
batch they fill in this thread (stacked, the model called, its metrics observed, as the inference thread would)
and hands the results back, which writes the sixteen replies. Timed apart: reading the requests up to the batcher,
and the batch's replies (both on the event loop), then per batch the stacking, the model call and its metrics (the
inference thread's work). Each SERVER_TEXT_SCAN mode (--modes) in interleaved rounds, the median per mode. Every
reply is checked (a 200 to each request, in order), and how many requests the HTTP front took is printed.
Prints figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import peers  # noqa: E402  (the benchmarks share their setup; they are scripts, not a package)
import serve_bench as sb  # noqa: E402

SERVING = sb.SERVE.parent
MODES = ("off", "body", "on")
ROWS = 16


class Transport:
    """What a connection writes, kept; nothing else a transport does is needed here."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def get_extra_info(self, name: str) -> None:
        return None

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        raise AssertionError("a connection closed: every request here is a keep-alive one")


async def run_mode(mode: str, art: Path, cycles: int, warmup: int, requests: list[bytes]) -> dict:
    # The worker's modules, imported as worker.py has them (flat, beside serve.py).
    import emf
    import http_server
    import metrics
    from batcher import DynamicBatcher
    from http_app import ServerState, build_app
    from protocol import ModelInterface
    from runner import ModelRunner
    from server_settings import Admission
    from worker import batch_observer

    loop = asyncio.get_running_loop()
    metadata = json.loads((art / "metadata.json").read_text())
    scan = mode != "off"
    interface = ModelInterface(name="model", metadata=metadata, max_rows=ROWS, max_text_chars=2048, native_replies=scan)
    runner = ModelRunner(art, metadata, 1, 0.0, native_stack=scan)  # as worker.py sets it from SERVER_TEXT_SCAN
    state = ServerState()
    recorder = emf.Recorder({"Service": "bench", "Model": "model", "Worker": "0"}, always_counted=(emf.REQUESTS,))
    tally = metrics.RequestTally(loop, lambda: state.batcher.queue_depth, recorder=recorder)
    sent: list = []
    batcher = DynamicBatcher(
        runner.execute,
        prepare_batch=runner.stack,
        pipeline=True,
        max_batch_size=ROWS,
        # Long enough that batches leave full whatever a slow moment here (the first cycles tokenize in Python): the
        # path is measured, not the batching rule; admission runs as it would, with an SLO above that delay.
        max_queue_delay_s=0.1,
        loop=loop,
        on_send=tally.flush,
        on_delivered=tally.flush,
        execute=lambda batch, trigger: sent.append(batch),
        admission=Admission(slo_ms=10_000.0, budget_s=8.0, initial_batch_s=0.003),
    )
    state.ready, state.batcher, state.prepare = True, batcher, runner.prepare
    state.scanner = runner.text_scanner(ROWS, 2048) if scan else None
    if scan and state.scanner is None:
        raise SystemExit(f"event_loop_path.py: error: SERVER_TEXT_SCAN={mode} needs the _text_scan module (make setup)")
    app = build_app(interface=interface, state=state, max_body_bytes=1 << 20, tally=tally)
    taken = [0]

    def fast(data: bytes, reply) -> bool:
        took = app.fast(data, reply)
        taken[0] += took
        return took

    server = http_server.HttpServer(
        app=app.asgi,
        infer_routes=app.infer_routes,
        infer=app.infer,
        max_body_bytes=1 << 20,
        fast=fast if mode == "on" else None,
    )
    connections = []
    for _ in range(ROWS):
        connection = http_server.HttpConnection(server)
        connection.connection_made(Transport())
        connections.append(connection)
    observe = batch_observer(recorder)
    read_s = reply_s = stack_s = model_s = metrics_s = 0.0
    k = 0
    for cycle in range(warmup + cycles):
        if cycle == warmup:  # the words cached, every shape seen: measure from here
            read_s = reply_s = stack_s = model_s = metrics_s = 0.0
            taken[0] = 0
        t0 = time.perf_counter()
        for connection in connections:
            connection.data_received(requests[k % len(requests)])
            k += 1
        t1 = time.perf_counter()
        if len(sent) != 1 or len(sent[0]) != ROWS:
            raise SystemExit(f"event_loop_path.py: error: {mode}: the sixteen requests did not leave as one batch")
        batch = sent.pop()
        stacked = runner.stack([item.payload for item in batch])
        t2 = time.perf_counter()
        outcome = [(True, logits) for logits in runner.execute(stacked)]
        t3 = time.perf_counter()
        observe(ROWS, t3 - t1, "full")
        t4 = time.perf_counter()
        batcher.finished(batch, outcome)
        t5 = time.perf_counter()
        read_s += t1 - t0
        stack_s += t2 - t1
        model_s += t3 - t2
        metrics_s += t4 - t3
        reply_s += t5 - t4
        for connection in connections:
            written = connection.transport.written
            if len(written) != 1 or not written[0].startswith(b"HTTP/1.1 200 OK\r\n"):
                raise SystemExit(f"event_loop_path.py: error: {mode}: a request was not answered 200: {written[:1]}")
            written.clear()
    per_request = 1e6 / (cycles * ROWS)
    return {
        "read": read_s * per_request,
        "reply": reply_s * per_request,
        "stack": stack_s * 1e6 / cycles,
        "model": model_s * 1e6 / cycles,
        "metrics": metrics_s * 1e6 / cycles,
        "taken": taken[0],
        "requests": cycles * ROWS,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, help="a compiled CPU artifact (default: build the tiny BERT)")
    parser.add_argument("--cycles", type=int, default=2000, help="measured cycles of sixteen requests per round")
    parser.add_argument("--warmup", type=int, default=50, help="unmeasured cycles first (the word cache fills)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES), help=f"SERVER_TEXT_SCAN modes: any of {', '.join(MODES)}")
    args = parser.parse_args(argv)
    args.mode_list = [m for m in args.modes.split(",") if m]
    if not args.mode_list or set(args.mode_list) - set(MODES):
        parser.error(f"--modes: a comma-separated list of {', '.join(MODES)}, got {args.modes!r}")
    if args.cycles < 1 or args.warmup < 1 or args.rounds < 1:
        parser.error("--cycles, --warmup and --rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="event-loop-path-") as work:
        # Prometheus as a worker of several has it: every update a write to a shared file (metrics.py).
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(Path(work) / "prometheus")
        Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir()
        sys.path[:0] = [str(SERVING), str(SERVING.parent / "build")]
        ns = argparse.Namespace(sequence_length=32, layers=4, hidden_size=256, attention_heads=4)
        art = args.model_dir or sb.build_artifact(Path(work), ns)
        requests = peers.request_bytes("/v2/models/model/infer", sb.sample_texts(256))
        results: dict[str, list[dict]] = {mode: [] for mode in args.mode_list}
        for _ in range(args.rounds):  # interleaved, so a noisy moment does not land on one mode
            for mode in args.mode_list:
                results[mode].append(asyncio.run(run_mode(mode, art, args.cycles, args.warmup, requests)))
    print(
        f"one process, 16 connections in memory, {args.cycles} cycles of 16 requests per round after {args.warmup}, "
        f"median of {args.rounds} round(s); load average {os.getloadavg()[0]:.2f}"
    )
    for mode in args.mode_list:
        median = {key: statistics.median(r[key] for r in results[mode]) for key in results[mode][0]}
        print(
            f"SERVER_TEXT_SCAN={mode}: event loop {median['read'] + median['reply']:.2f} µs per request (reading up "
            f"to the batcher {median['read']:.2f}, the replies {median['reply']:.2f}); per batch of 16: stacking "
            f"{median['stack']:.0f} µs, the model call {median['model']:.0f} µs, its metrics "
            f"{median['metrics']:.0f} µs; taken by the HTTP front: {int(median['taken'])} of {int(median['requests'])}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
