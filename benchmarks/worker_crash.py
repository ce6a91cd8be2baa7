"""What a worker's crash costs: serve.py under open load while one of its workers is killed with SIGKILL.

    .venv/bin/python benchmarks/worker_crash.py [--model-dir ART] [--load 0.4] [--connections 64]

serve.py with --workers workers on the emulated accelerator (--batch-ms per batch of up to 16 rows, so the
model's capacity does not depend on what else the CPUs run), offered --load times its limit (workers x 16 /
batch time) as an open system: each connection sends one request every connections / rate seconds, on schedule
whatever the server does, and a request's latency counts from when it was due. After --before seconds one
worker gets SIGKILL; the load goes on until its replacement is serving (or --give-up seconds) plus --after.
A connection that fails reconnects at once and sends what fell due meanwhile, late.

Two modes, side by side in one run:
  restart   the supervisor restarts the dead worker in place (SERVER_MAX_RESTARTS=3, the default);
  exit      the baseline, the supervisor as it was: SERVER_MAX_RESTARTS=0, so one worker's death stops the
            task (ECS would start another one: minutes that are not emulated here).
Per mode: the requests due, answered 200, failed (and how: a connection the kill closed, refused connects),
the killed worker's open connections at the kill (each holds at most one request: HTTP/1.1 without
pipelining), the latency of the connections the kill never touched (the other worker's) before and after it,
goodput per half second around the kill, and the restart's timeline from the server's own log. The load
generator runs in this process; with two or more CPUs it is pinned to the last one and the server to the
others (--no-pin shares them). Prints figures only; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serve_bench as sb  # the benchmarks share their setup; they are scripts, not a package

PATH = "/v2/models/model/infer"
MODES = {"restart": "3", "exit": "0"}  # SERVER_MAX_RESTARTS; the baseline last
BIN_S = 0.5
CLOSE = re.compile(rb"(?i)\r\nconnection: *close\r\n")


@dataclass
class Outcome:
    due: float  # perf_counter when it was due
    latency: float | None  # None: no reply
    status: int  # 0: no reply
    connection: int
    failure: str = ""


async def _connection(
    port: int,
    index: int,
    requests: list[bytes],
    start: float,
    interval: float,
    stop_at: float,
    out: list[Outcome],
    ended: dict[int, str],
) -> None:
    clock = time.perf_counter
    due = start + (index % 97) / 97 * interval
    k = index * 7
    reader = writer = None
    while due < stop_at:
        if writer is None:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError as exc:
                out.append(Outcome(due, None, 0, index, f"connect: {type(exc).__name__}"))
                due += interval
                await asyncio.sleep(max(0.0, due - clock()))
                continue
        delay = due - clock()
        if delay > 0.0015:  # uvloop sleeps whole milliseconds: wake early rather than late
            await asyncio.sleep(delay - 0.001)
        try:
            writer.write(requests[k % len(requests)])
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            await reader.readexactly(length)
            out.append(Outcome(due, clock() - due, int(head[9:12]), index))
            if CLOSE.search(head):  # the server hands this connection over (rebalancing): as an ALB, reconnect
                writer.close()
                reader = writer = None
        # RuntimeError: uvloop's write on a transport the server already closed
        except (OSError, asyncio.IncompleteReadError, RuntimeError) as exc:
            out.append(Outcome(due, None, 0, index, f"in flight: {type(exc).__name__}"))
            ended[index] = type(exc).__name__
            writer.close()
            reader = writer = None
        k += 1
        due += interval
    if writer is not None:
        writer.close()


def server_log(path: Path) -> list[dict]:
    entries = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def wait_for(path: Path, predicate, timeout: float, proc: subprocess.Popen) -> dict | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        for entry in server_log(path):
            if predicate(entry):
                return entry
        time.sleep(0.02)
    return None


def open_connections(port: int) -> dict[int, int]:
    text = sb.scrape(port)
    return {
        int(pid): int(float(value))
        for pid, value in re.findall(r'^inference_open_connections\{pid="(\d+)"\} (\S+)$', text, re.MULTILINE)
    }


async def _crash_run(port: int, proc: subprocess.Popen, log: Path, args, rate: float) -> dict:
    requests = sb.request_bytes(PATH, sb.sample_texts(256))
    interval = args.connections / rate
    out: list[Outcome] = []
    ended: dict[int, str] = {}
    start = time.perf_counter() + 0.2
    stop_at = start + args.before + args.give_up + args.after
    load = asyncio.gather(
        *(_connection(port, i, requests, start, interval, stop_at, out, ended) for i in range(args.connections))
    )
    task = asyncio.ensure_future(load)
    await asyncio.sleep(start + args.before - time.perf_counter())
    started = {e["worker"]: e["worker_pid"] for e in server_log(log) if e.get("msg") == "worker started"}
    victim = started[0]
    loop = asyncio.get_running_loop()
    # Its open connections: an upper bound of its requests in flight (the scrape's own may be among them).
    on_victim = (await loop.run_in_executor(None, open_connections, port)).get(victim, 0)
    killed_at, killed_wall = time.perf_counter(), time.time()
    os.kill(victim, signal.SIGKILL)
    restarted = await loop.run_in_executor(
        None, wait_for, log, lambda e: e.get("msg") == "worker restarted" and e.get("dead_pid") == victim, 10, proc
    )
    ready = None
    if restarted is not None:
        ready = await loop.run_in_executor(
            None,
            wait_for,
            log,
            lambda e: e.get("msg") == "model ready" and e.get("pid") == restarted["worker_pid"],
            args.give_up,
            proc,
        )
    ended_at = time.perf_counter()
    if ready is None or proc.poll() is not None:
        ended_at = max(ended_at, killed_at + 2.0)  # the baseline: watch the silence a while
    remaining = ended_at + args.after - time.perf_counter()
    await asyncio.sleep(max(0.0, remaining))
    stop = time.perf_counter()
    # Stop the schedule now rather than at stop_at: shift what is not due yet out of the window.
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    out = [o for o in out if o.due <= stop]
    return {
        "out": out,
        "start": start,
        "killed_at": killed_at,
        "killed_wall": killed_wall,
        "stop": stop,
        "victim": victim,
        "on_victim": on_victim,
        "ended": ended,
        "restarted": restarted,
        "ready": ready,
        "exit_code": proc.poll(),
    }


def p99_ms(latencies: list[float]) -> float:
    if not latencies:
        return float("nan")
    latencies = sorted(latencies)
    return 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]


def wall(ts: str) -> float:
    """A log entry's ts (UTC, milliseconds) as time.time() reads it."""
    import calendar

    seconds, millis = ts.rstrip("Z").split(".")
    return calendar.timegm(time.strptime(seconds, "%Y-%m-%dT%H:%M:%S")) + int(millis) / 1000


def summarise(run: dict) -> dict:
    out, kill = run["out"], run["killed_at"]
    ok = [o for o in out if o.status == 200]
    failed = [o for o in out if o.status != 200]
    kinds: dict[str, int] = {}
    for o in failed:
        key = o.failure or f"HTTP {o.status}"
        kinds[key] = kinds.get(key, 0) + 1
    touched = set(run["ended"])
    untouched = [o for o in ok if o.connection not in touched]
    before = [o.latency for o in untouched if o.due < kill]
    after = [o.latency for o in untouched if o.due >= kill]
    bins: list[tuple[float, int, int, float]] = []
    t = run["start"]
    while t < run["stop"]:
        due = [o for o in out if t <= o.due < t + BIN_S]
        bins.append(
            (
                t - kill,
                len(due),
                sum(1 for o in due if o.status == 200),
                p99_ms([o.latency for o in due if o.status == 200]),
            )
        )
        t += BIN_S
    timeline = {}
    if run["restarted"] is not None:
        timeline["restarted_s"] = wall(run["restarted"]["ts"]) - run["killed_wall"]
    if run["ready"] is not None:
        timeline["ready_s"] = wall(run["ready"]["ts"]) - run["killed_wall"]
        timeline["warmup_s"] = run["ready"].get("warmup_s")
    after_kill = [o for o in out if o.due >= kill]
    return {
        "due": len(out),
        "ok": len(ok),
        "failed": len(failed),
        "kinds": kinds,
        "on_victim": run["on_victim"],
        "touched": len(touched),
        "before_p99": p99_ms(before),
        "after_p99": p99_ms(after),
        "untouched_failed": sum(
            1 for o in failed if o.connection not in touched and not o.failure.startswith("connect")
        ),
        "after_ok_share": sum(1 for o in after_kill if o.status == 200) / max(1, len(after_kill)),
        "bins": bins,
        "timeline": timeline,
        "exit_code": run["exit_code"],
    }


def run_mode(art: Path, args, mode: str, server_cpus, work: Path) -> dict:
    port = sb.free_port()
    log = work / f"{mode}.log"
    settings = argparse.Namespace(
        max_batch_size=16, max_queue_delay_ms=args.max_queue_delay_ms, workers=args.workers, torch_threads=1
    )
    env = {"SERVER_MAX_RESTARTS": MODES[mode], "SERVER_LOG_LEVEL": "info"}
    with open(log, "w") as sink:
        proc = sb.start_server(
            art,
            port,
            settings,
            env,
            stdout=sink,
            stderr=sink,
            extra_args=("--standin-accelerator-ms", f"{args.batch_ms:g}"),
            cpus=server_cpus,
        )
        try:
            rate = args.load * args.workers * 16 / (args.batch_ms / 1000)
            run = sb._run(_crash_run(port, proc, log, args, rate))
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return {"rate": rate, **summarise(run)}


def report(args, results: dict, server_cpus, generator_cpus) -> None:
    where = (
        f"server on CPU {','.join(map(str, sorted(server_cpus)))}, load generator on CPU "
        f"{','.join(map(str, sorted(generator_cpus)))}"
        if server_cpus
        else "server and load generator share the CPUs"
    )
    limit = args.workers * 16 / (args.batch_ms / 1000)
    print(
        f"worker crash: serve.py, {args.workers} workers, "
        f"emulated accelerator {args.batch_ms:g} ms per batch of up to 16 "
        f"(limit {limit:,.0f} req/s), offered {args.load:.0%} of it ({args.load * limit:,.0f} req/s) open-loop on "
        f"{args.connections} connections; worker 0 killed with SIGKILL after {args.before:g} s; {where}; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'mode':>8} | {'due':>6} {'200':>6} {'failed':>6} | {'killed worker conns':>19} | "
        f"{'untouched p99 before/after ms':>29} | {'200 after kill':>14} | restarted / serving again"
    )
    for mode, r in results.items():
        line = r["timeline"]
        back = (
            f"{line['restarted_s']:.2f} s / {line['ready_s']:.2f} s (warm-up {line.get('warmup_s')} s)"
            if "ready_s" in line
            else f"never (server exit code {r['exit_code']})"
        )
        print(
            f"{mode:>8} | {r['due']:>6} {r['ok']:>6} {r['failed']:>6} | {r['on_victim']:>19} | "
            f"{r['before_p99']:>13.2f} / {r['after_p99']:<13.2f} | {r['after_ok_share']:>14.1%} | {back}"
        )
        print(
            f"{'':>8}   failures: "
            + (", ".join(f"{k} {v}" for k, v in sorted(r["kinds"].items())) or "none")
            + f"; on connections the kill did not close: {r['untouched_failed']}"
        )
    print(f"per {BIN_S:g} s by when requests were due, from the kill: answered 200 / due, p99 ms of the 200s")
    for mode, r in results.items():
        cells = [f"{t:+.1f}s {ok}/{due} {p99:.0f}" for t, due, ok, p99 in r["bins"] if -1.5 <= t <= 8]
        print(f"{mode:>8} | " + "  ".join(cells))
    r = results.get("restart")
    if r is not None:
        checks = {
            "failures no more than the killed worker's connections": r["failed"] <= max(r["on_victim"], 0),
            "no failure on the other worker's connections": r["untouched_failed"] == 0,
            "the replacement serving again": "ready_s" in r["timeline"],
        }
        print("targets with restart: " + ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in checks.items()))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model-dir", type=Path, help="a compiled CPU artifact (default: build serve_bench's tiny BERT)"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-ms", type=float, default=3.0, help="the emulated accelerator's time per batch")
    parser.add_argument("--max-queue-delay-ms", type=float, default=1.0)
    parser.add_argument("--load", type=float, default=0.4, help="offered load as a fraction of the limit")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--before", type=float, default=2.0, help="seconds of load before the kill")
    parser.add_argument("--after", type=float, default=2.0, help="seconds of load once the worker is back")
    parser.add_argument("--give-up", type=float, default=20.0, help="seconds to wait for the replacement")
    parser.add_argument("--modes", default=",".join(MODES), help="restart, exit (the baseline), or both")
    parser.add_argument("--no-pin", action="store_true", help="share the CPUs between server and load generator")
    args = parser.parse_args()

    def fail(message: str) -> None:  # one line, as the other benchmarks refuse arguments
        parser.exit(2, f"{parser.prog}: error: {message}\n")

    if args.workers < 2:
        fail("--workers: at least 2 (one dies, another serves)")
    for name in ("batch_ms", "load", "before", "after", "give_up"):
        if not getattr(args, name) > 0:
            fail(f"--{name.replace('_', '-')}: must be greater than 0, got {getattr(args, name)}")
    if args.connections < 1 or args.max_queue_delay_ms < 0:
        fail("--connections: at least 1; --max-queue-delay-ms: not negative")
    args.mode_list = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(args.mode_list) - set(MODES))
    if unknown or not args.mode_list:
        fail(f"--modes: a comma-separated list of {', '.join(MODES)}, got {args.modes!r}")
    return args


def main() -> int:
    args = parse_args()
    server_cpus, generator_cpus = sb.cpu_split(not args.no_pin)
    with tempfile.TemporaryDirectory(prefix="worker-crash-") as work:
        ns = argparse.Namespace(sequence_length=32, layers=4, hidden_size=256, attention_heads=4)
        art = args.model_dir or sb.build_artifact(Path(work), ns)
        if generator_cpus:
            os.sched_setaffinity(0, generator_cpus)
        results = {mode: run_mode(art, args, mode, server_cpus, Path(work)) for mode in args.mode_list}
    report(args, results, server_cpus, generator_cpus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
