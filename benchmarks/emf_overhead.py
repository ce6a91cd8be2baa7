"""What the serving app's CloudWatch metrics (container/neuron/serving/emf.py) cost per request, in one run.

    python benchmarks/emf_overhead.py [--iterations 300000] [--no-server]

(1) The recorder alone: the calls a worker makes per request (`request()`) and per batch (`batch()`), and
    the plain `observe()` and `count()`, each in a loop against the same loop without the call (the
    baseline), from one thread and from two threads sharing one recorder (the event loop and the
    inference thread do); plus what one interval's flush costs (drain a full window, encode, write).
(2) The server: serve.py with SERVER_METRICS=emf (a 1 s interval, 60 times the default's flushes) against
    SERVER_METRICS=off, the same artifact and load as benchmarks/serve_bench.py's (a), interleaved
    rounds; the EMF server's Requests counts are checked against the requests it answered.
Prints figures only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "container" / "neuron" / "serving"), str(ROOT / "benchmarks")]

import emf  # noqa: E402 - after sys.path is set
import serve_bench  # noqa: E402 - after sys.path is set

VALUES = [random.Random(5).lognormvariate(1.5, 0.6) for _ in range(4096)]  # latencies in ms, a few to tens
MASK = len(VALUES) - 1
DIMENSIONS = {"Service": "bench", "Model": "intent-bert", "Worker": "0"}


def loop_ns(call, iterations: int) -> float:
    """Nanoseconds per iteration of `for i: call(VALUES[i & MASK])` (call=None: the loop alone)."""
    values, mask = VALUES, MASK
    if call is None:
        started = time.perf_counter()
        for i in range(iterations):
            values[i & mask]
        return (time.perf_counter() - started) * 1e9 / iterations
    started = time.perf_counter()
    for i in range(iterations):
        call(values[i & mask])
    return (time.perf_counter() - started) * 1e9 / iterations


def threaded_ns(make_call, iterations: int, threads: int) -> float:
    """Wall nanoseconds per iteration when `threads` threads run `iterations` between them at once."""
    barrier = threading.Barrier(threads + 1)
    share = iterations // threads

    def work() -> None:
        call = make_call()
        barrier.wait()
        loop_ns(call, share)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    started = time.perf_counter()
    for worker in workers:
        worker.join()
    return (time.perf_counter() - started) * 1e9 / (share * threads)


def recorder_figures(iterations: int, repeats: int) -> dict:
    """Best of `repeats` for each loop (the least disturbed by the rest of the machine)."""
    sys.setswitchinterval(0.0005)  # as the worker sets it
    calls = {
        "request(latency) per request": lambda recorder: lambda v: recorder.request(v, False),
        "batch(rows, latency) per batch": lambda recorder: lambda v: recorder.batch(8, v),
        "observe(name, value)": lambda recorder: lambda v: recorder.observe(emf.REQUEST_LATENCY, v),
        "count(name)": lambda recorder: lambda v: recorder.count(emf.REQUESTS),
    }
    noop = lambda v: None  # noqa: E731 - the call itself, without recording
    figures: dict = {
        "baseline": min(loop_ns(None, iterations) for _ in range(repeats)),
        "no-op call": min(loop_ns(noop, iterations) for _ in range(repeats)),
    }
    for name, make in calls.items():
        figures[name] = min(loop_ns(make(emf.Recorder(DIMENSIONS)), iterations) for _ in range(repeats))
    shared = emf.Recorder(DIMENSIONS)
    figures["2 threads: baseline"] = min(threaded_ns(lambda: None, iterations, 2) for _ in range(repeats))
    figures["2 threads: no-op call"] = min(threaded_ns(lambda: noop, iterations, 2) for _ in range(repeats))
    figures["2 threads: request(latency), one recorder"] = min(
        threaded_ns(lambda: calls["request(latency) per request"](shared), iterations, 2) for _ in range(repeats)
    )
    figures["2 threads: observe(name, value), one recorder"] = min(
        threaded_ns(lambda: calls["observe(name, value)"](shared), iterations, 2) for _ in range(repeats)
    )
    figures["flush"] = flush_us(repeats)
    return figures


def flush_us(repeats: int) -> tuple[float, int]:
    """Microseconds to drain, encode and write one full interval of one worker, and the line's bytes."""
    best, size = float("inf"), 0
    with open(os.devnull, "w") as sink:
        output = emf.LineOutput(sink)
        for _ in range(repeats):
            recorder = emf.Recorder(DIMENSIONS, always_counted=(emf.REQUESTS, emf.ERRORS))
            for i in range(5000):
                recorder.request(VALUES[i & MASK])
                recorder.batch(8, VALUES[(i * 7) & MASK])
            for i in range(60):
                recorder.observe(emf.QUEUE_DEPTH, i % 5)
                recorder.observe(emf.IN_FLIGHT, i % 9)
            started = time.perf_counter()
            record = recorder.drain(int(time.time() * 1000))
            output.write([record])
            best = min(best, (time.perf_counter() - started) * 1e6)
            size = max(len(text) + 1 for text in emf.lines(record))
    return best, size


def server_figures(args: argparse.Namespace) -> dict:
    texts = serve_bench.sample_texts(256)
    path = "/v2/models/model/infer"
    with tempfile.TemporaryDirectory(prefix="emf-overhead-") as work:
        art = args.model_dir or serve_bench.build_artifact(Path(work), args)
        ports = {mode: serve_bench.free_port() for mode in ("emf", "off")}
        stdout = open(Path(work) / "emf-stdout.txt", "w")
        servers = {
            "emf": serve_bench.start_server(
                art,
                ports["emf"],
                args,
                {"SERVER_METRICS": "emf", "SERVER_METRICS_INTERVAL_S": str(args.interval_s)},
                stdout=stdout,
            ),
            "off": serve_bench.start_server(art, ports["off"], args, {"SERVER_METRICS": "off"}),
        }
        rounds: dict[str, list[dict]] = {"emf": [], "off": []}
        answered = 0
        try:
            for _ in range(args.rounds):
                for mode in ("emf", "off"):
                    for level in (args.warmup, args.duration):  # the warm-up's requests are answered too
                        result = serve_bench.measure(ports[mode], path, texts, args.concurrency, level, 0)
                        if level == args.duration:
                            rounds[mode].append(result)
                        if mode == "emf":
                            answered += result["answered"]
        finally:
            for server in servers.values():
                server.terminate()
                server.wait(60)
            stdout.close()
        lines = (Path(work) / "emf-stdout.txt").read_text().splitlines()
    counted = sum(json.loads(line).get(emf.REQUESTS, 0) for line in lines if '"Worker"' in line)
    return {"rounds": rounds, "emf_lines": len(lines), "counted": counted, "answered": answered}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300_000, help="per recorder loop")
    parser.add_argument("--repeats", type=int, default=5, help="each recorder loop; the best is reported")
    parser.add_argument(
        "--server",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure serve.py with SERVER_METRICS=emf against off",
    )
    parser.add_argument("--model-dir", type=Path, help="a compiled CPU artifact (default: build serve_bench's)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds measured per round and mode")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval-s", type=int, default=1, help="the EMF server's SERVER_METRICS_INTERVAL_S")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    for name in ("iterations", "repeats", "concurrency", "duration", "warmup", "rounds", "interval_s", "workers"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')}: must be greater than 0, got {getattr(args, name)}")
    # serve_bench's server and model: BERT-Mini's dimensions at 32 tokens, intent-bert's batching.
    args.sequence_length, args.layers, args.hidden_size, args.attention_heads = 32, 4, 256, 4
    args.max_batch_size, args.max_queue_delay_ms, args.torch_threads = 16, 1.0, 1
    return args


def main() -> int:
    args = parse_args()
    load_before = os.getloadavg()[0]
    figures = recorder_figures(args.iterations, args.repeats)
    server = server_figures(args) if args.server else None
    print(
        f"machine: {os.cpu_count()} CPUs; python {sys.version.split()[0]}; load average before {load_before:.2f}, "
        f"after {os.getloadavg()[0]:.2f} (other work on the machine skews every figure)"
    )
    print(
        f"(1) recorder: {args.iterations:,} iterations per loop, best of {args.repeats}; "
        "cost = loop with the call - loop with a no-op call"
    )
    one, two = figures["no-op call"], figures["2 threads: no-op call"]
    print(f"  {'loop alone':<48} {figures['baseline']:>7.0f} ns/iteration")
    print(f"  {'loop with a no-op call (baseline)':<48} {one:>7.0f} ns/iteration")
    for name in (
        "request(latency) per request",
        "batch(rows, latency) per batch",
        "observe(name, value)",
        "count(name)",
    ):
        print(f"  {name:<48} {figures[name]:>7.0f} ns/iteration, cost {figures[name] - one:>5.0f} ns")
    print(f"  {'2 threads: loop with a no-op call (baseline)':<48} {two:>7.0f} ns/iteration")
    for name in ("2 threads: request(latency), one recorder", "2 threads: observe(name, value), one recorder"):
        print(f"  {name:<48} {figures[name]:>7.0f} ns/iteration, cost {figures[name] - two:>5.0f} ns")
    flush, size = figures["flush"]
    print(f"  flush of one full interval (drain, encode, write {size:,} bytes): {flush:,.0f} us, once per interval")
    per_request_ns = figures["request(latency) per request"] - one + (figures["batch(rows, latency) per batch"] - one)
    print(f"  per request, at worst one batch each: {per_request_ns:,.0f} ns")
    if server is None:
        return 0
    print(
        f"\n(2) serve.py, {args.workers} workers x 1 torch thread, max batch 16, queue delay 1 ms; "
        f"{args.concurrency} connections, {args.duration:g} s per round after {args.warmup:g} s, "
        f"{args.rounds} interleaved rounds; EMF at a {args.interval_s} s interval"
    )
    print(f"  {'mode':<4} | {'req/s per round':<28} | {'best':>6} | {'median':>6} | p50 ms | p99 ms (best round)")
    best = {}
    for mode in ("emf", "off"):
        rounds = server["rounds"][mode]
        top = max(rounds, key=lambda r: r["rps"])
        best[mode] = top["rps"]
        per_round = ", ".join(f"{r['rps']:,.0f}" for r in rounds)
        median = statistics.median(r["rps"] for r in rounds)
        print(
            f"  {mode:<4} | {per_round:<28} | {top['rps']:>6,.0f} | {median:>6,.0f} | {top['p50_ms']:>6.2f} | "
            f"{top['p99_ms']:>6.2f}"
        )
    print(f"  emf / off: {best['emf'] / best['off']:.3f} (best rounds)")
    budget_ns = 1e9 * (os.cpu_count() or 1) / best["emf"]
    print(
        f"  recording per request: {per_request_ns:,.0f} ns of the {budget_ns / 1000:,.0f} us of CPU the machine "
        f"spends per request at {best['emf']:,.0f} req/s ({per_request_ns / budget_ns:.3%})"
    )
    print(
        f"  EMF server: {server['emf_lines']} lines; Requests counted {server['counted']:,}, "
        f"answered {server['answered']:,}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
