"""How far the serving app's Python request path stands from what this machine allows: the app beside two floors.

    .venv/bin/python benchmarks/turnaround_floor.py [--model-dir ART] [--seconds 4] [--rounds 2]

With as many clients as the workers have batch rows (32 connections for 2 workers of 16), nothing overlaps the
accelerator's time while a batch's replies go out and its clients' next requests come in: the share of the
limit is at most batch / (batch + turnaround), whatever the batching does, and the turnaround is the request
path's cost, sixteen times. This runs, on the same emulated accelerator (--batch-ms per batch of up to 16 rows,
--workers (2 by default), --max-queue-delay-ms, the app's batching rules), side by side:
  native        benchmarks/floor/floor_server.c: epoll, the request's head and length read, a fixed reply;
                no interpreter on the path (compiled here with cc);
  python        benchmarks/floor/python_floor.py: the app's own stack (uvloop, a Protocol, httptools), nothing
                else: a fixed reply;
  python+json   the same, also decoding each request's JSON body;
  python+work   the same glue doing the request work the app cannot skip, with the app's own code: the request
                parsed and checked, its text tokenized, the batch stacked, each reply built from its logits;
  app-python    serve.py itself (container/neuron/serving), SERVER_PIPELINE on, with the stand-in accelerator,
                every request through its Python path (SERVER_TEXT_SCAN=off): the app as it was before text_scan.c;
  app-body      the same with the common request's body read, tokenized and replied to in C, its HTTP head through
                httptools (SERVER_TEXT_SCAN=body): the app as it was before the HTTP front;
  app           the same with a read that holds one whole common request taken in C, its head included, before the
                parser (SERVER_TEXT_SCAN=on, the default).
Each is measured by one native load generator (benchmarks/floor/load_client.c), closed loop at --levels
connections, then as an open system at --paced fractions of its own sustained rate at the highest level, over
--paced-connections connections (HTTP/1.1 carries one request at a time each), with latency from when each
request was due. Servers run on every CPU but the last; the generator alone on the last
(--no-pin shares them). Prints figures and each goal met or missed per server; asserts nothing. For the app's
paced runs it also prints the model's cycle, from its own batch metrics: rows per batch, and time per batch per
worker against the emulated batch's, the rest being the model idle between batches (the hand-off from the
inference thread to the event loop and back), and how its CPU per request splits between its workers' event loops
(their main threads) and the rest (their inference, prepare and metrics threads, and the supervisor).
--paced-rates paces every server at the same absolute rates too: "80 % of sustained" offers a server that sustains
more a higher rate, and near the limit the p99 turns on the rate (the generator reuses the connection freed last, so
which worker gets a request follows which answered last, and the split between two workers swings for a second at a
time); at one rate for all, the servers' p99 compare like for like. --connection-order fifo sends each paced
request on the connection idle longest instead, round the connections in turn: the workers then share the requests
as they share the connections, whichever answered last.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import peers  # noqa: E402  (the benchmarks share their setup; they are scripts, not a package)
import serve_bench as sb  # noqa: E402

FLOOR = HERE / "floor"
SERVERS = ("native", "python", "python+json", "python+work", "app-python", "app-body", "app")
APPS = ("app-python", "app-body", "app")  # serve.py, SERVER_TEXT_SCAN off, body and on
# load_client's ORDER: which idle connection a paced request goes out on (a closed loop has no choice to make).
ORDERS = {"lifo": "whose reply came last (lifo)", "fifo": "idle longest (fifo)"}
ROWS = 16
RESULT = re.compile(
    r"requests=(\d+) seconds=([\d.]+) p50_ms=([\d.]+) p99_ms=([\d.]+) late=(\d+) warmup=(\d+)"
    r" reconnects=(\d+) refused=(\d+)"
)


@dataclass(frozen=True)
class Cell:
    rps: float
    p50_ms: float
    p99_ms: float
    late: int
    cpu_us: float  # the server's CPU per request, every process and thread
    rows_per_batch: float | None = None  # the app's paced cells: its batches after the warm-up, from /metrics
    cycle_ms: float | None = None  # the model's time per batch per worker, idle time between batches included
    refused: int = 0  # non-2xx replies (a server shedding load): not in rps or the percentiles
    reconnects: int = 0  # replies that said "connection: close" (the app evening out its workers' connections)
    loop_us: float | None = None  # the app's: of cpu_us, its workers' main threads (the event loops)


def build(work: Path) -> tuple[Path, Path]:
    """The native floor server and load generator, compiled from benchmarks/floor/ with the system's cc."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("turnaround_floor.py: error: no C compiler (cc) on PATH to build benchmarks/floor/*.c")
    built = []
    for name in ("floor_server", "load_client"):
        target = work / name
        command = [compiler, "-O2", "-Wall", "-Werror", "-o", str(target), str(FLOOR / f"{name}.c")]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"turnaround_floor.py: error: {name}.c does not compile: {result.stderr.strip()[:500]}")
        built.append(target)
    return built[0], built[1]


def read_ports(proc: subprocess.Popen, count: int, timeout: float = 30) -> list[int]:
    """The "port N" lines a floor server prints as it listens."""
    ports, deadline = [], time.monotonic() + timeout
    while len(ports) < count:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the floor server exited (code {proc.poll()}) before listening")
        match = re.fullmatch(r"port (\d+)\n?", line)
        if match:
            ports.append(int(match.group(1)))
        if time.monotonic() > deadline:
            raise RuntimeError("the floor server did not listen in time")
    return ports


def start(kind: str, args: argparse.Namespace, art: Path | None, server: Path, batch_s: float, cpus) -> tuple:
    """(the processes, the ports a client spreads its connections over)."""
    delay_ms = args.max_queue_delay_ms
    if kind == "native":
        proc = subprocess.Popen(
            [str(server), str(args.workers), str(round(batch_s * 1e6)), str(round(delay_ms * 1000))],
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=sb.pinned(cpus),
            start_new_session=True,
        )
        return [proc], read_ports(proc, args.workers)
    if kind in ("python", "python+json", "python+work"):
        # --batch-ms, not the measured batch: time.sleep wakes as late here as it does in the app's stand-in.
        extra = {"python": [], "python+json": ["--json"], "python+work": ["--work", str(art)]}[kind]
        procs = [
            subprocess.Popen(
                [sys.executable, str(FLOOR / "python_floor.py"), str(args.batch_ms), str(delay_ms), *extra],
                stdout=subprocess.PIPE,
                text=True,
                preexec_fn=sb.pinned(cpus),
            )
            for _ in range(args.workers)
        ]
        return procs, [read_ports(proc, 1)[0] for proc in procs]
    port = sb.free_port()
    ns = argparse.Namespace(max_batch_size=ROWS, max_queue_delay_ms=delay_ms, workers=args.workers, torch_threads=1)
    proc = sb.start_server(
        art,
        port,
        ns,
        {"SERVER_PIPELINE": "on", "SERVER_TEXT_SCAN": {"app-python": "off", "app-body": "body", "app": "on"}[kind]},
        extra_args=("--standin-accelerator-ms", str(args.batch_ms)),
        cpus=cpus,
    )
    return [proc], [port]


def stop(procs: list[subprocess.Popen], kind: str) -> None:
    for proc in procs:
        if proc.poll() is None:
            # The native server's workers are its children, in its own session; serve.py stops its own workers.
            if kind == "native":
                os.killpg(proc.pid, signal.SIGTERM)
            else:
                proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def server_cpu(procs: list[subprocess.Popen]) -> float:
    return sum(peers.tree_cpu(proc.pid) for proc in procs)


def thread_cpu(procs: list[subprocess.Popen]) -> dict[tuple[int, int], int]:
    """Nanoseconds on a CPU of every live thread of the app's processes, by (process, thread): each thread's
    schedstat, not /proc/PID/stat's clock ticks, as a short cell's split of the app's CPU between its event loops
    and the rest is a few ticks, and two tick counts subtracted could put the rest below zero."""
    found = {}
    for proc in procs:
        for process in peers.descendants(proc.pid):
            try:
                tasks = os.listdir(f"/proc/{process}/task")
            except FileNotFoundError:
                continue
            for task in tasks:
                try:
                    found[process, int(task)] = int(
                        Path(f"/proc/{process}/task/{task}/schedstat").read_text().split()[0]
                    )
                except (FileNotFoundError, ProcessLookupError):  # gone meanwhile
                    continue
    return found


def app_cpu(before: dict, after: dict, procs: list[subprocess.Popen]) -> tuple[float, float]:
    """(all of the app's CPU seconds between two thread_cpu readings, those of its workers' main threads, where
    each runs its event loop: a main thread's id is its process's). A thread that started meanwhile counts from
    zero, one that ended is lost: the app's threads live as long as their worker."""
    supervisors = {proc.pid for proc in procs}
    total = loops = 0
    for (process, task), ns in after.items():
        spent = ns - before.get((process, task), 0)
        total += spent
        if task == process and process not in supervisors:
            loops += spent
    return total / 1e9, loops / 1e9


def measure(
    procs,
    client: Path,
    ports: list[int],
    connections: int,
    args,
    requests: Path,
    rate: float,
    cpus,
    metrics_port: int | None = None,
    app: bool = False,
):
    """One cell; with ``metrics_port`` (the app's), also its batches from the end of the warm-up (read then, from
    a timer: the generator runs the warm-up and the cell in one process) to the end; ``app``: also the share of
    its CPU its event loops took."""
    before = 0.0 if app else server_cpu(procs)
    threads_before = thread_cpu(procs) if app else {}
    seconds = args.seconds
    command = [str(client), ",".join(map(str, ports)), str(connections), str(seconds), str(requests)]
    command += [f"{rate:.1f}", str(args.warmup), args.connection_order]  # rate 0: a closed loop
    at_start: list[tuple[float, float]] = []
    timer = None
    if metrics_port is not None:
        timer = threading.Timer(args.warmup, lambda: at_start.append(sb.batch_stats(metrics_port)))
        timer.start()
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=seconds + 60, preexec_fn=sb.pinned(cpus), check=False
        )
    finally:
        if timer is not None:
            timer.cancel()
            timer.join()
    match = RESULT.search(result.stdout)
    if result.returncode != 0 or match is None:
        raise RuntimeError(f"load_client failed ({result.returncode}): {result.stderr.strip()[:300]}")
    count, elapsed, p50, p99, late, warmup, reconnects, refused = match.groups()
    # The warm-up's requests cost CPU too; refusals (admission on) are the measured run's.
    answered = int(count) + int(warmup) + int(refused)
    if app:  # the app's CPU and its split, both from the same threads' counters
        cpu_s, loop_s = app_cpu(threads_before, thread_cpu(procs), procs)
        cpu_us, loop_us = cpu_s / answered * 1e6, loop_s / answered * 1e6
    else:
        cpu_us, loop_us = (server_cpu(procs) - before) / answered * 1e6, None
    rows_per_batch = cycle_ms = None
    if metrics_port is not None and not at_start:  # the timer's own failure is printed by its thread
        raise RuntimeError(f"the app's /metrics on port {metrics_port} could not be read at the end of the warm-up")
    if at_start:
        rows, batches = (end - start for end, start in zip(sb.batch_stats(metrics_port), at_start[0], strict=True))
        if batches > 0:
            rows_per_batch, cycle_ms = rows / batches, float(elapsed) * args.workers / batches * 1000
    return Cell(
        int(count) / float(elapsed),
        float(p50),
        float(p99),
        int(late),
        cpu_us,
        rows_per_batch,
        cycle_ms,
        int(refused),
        int(reconnects),
        loop_us,
    )


def median_cell(cells: list[Cell]) -> Cell:
    ordered = sorted(cells, key=lambda cell: cell.rps)
    return ordered[len(ordered) // 2]


def median_p99(cells: list[Cell]) -> Cell:
    """At one offered rate the rounds' req/s are the same: the median is of the p99."""
    ordered = sorted(cells, key=lambda cell: cell.p99_ms)
    return ordered[len(ordered) // 2]


def run(args: argparse.Namespace, work: Path) -> dict:
    server, client = build(work)
    server_cpus, generator_cpus = sb.cpu_split(not args.no_pin)
    ns = argparse.Namespace(sequence_length=32, layers=4, hidden_size=256, attention_heads=4)
    art = None
    if {*APPS, "python+work"} & set(args.server_list):
        art = args.model_dir or sb.build_artifact(work, ns)
    batch_s = peers.standin_batch_s(args.batch_ms)
    requests = work / "requests.bin"
    texts = sb.sample_texts(256)
    requests.write_bytes(b"".join(r + b"\0" for r in peers.request_bytes("/v2/models/model/infer", texts)))
    kinds = args.server_list
    closed: dict[str, dict[int, list[Cell]]] = {kind: {level: [] for level in args.level_list} for kind in kinds}
    paced: dict[str, dict[float, list[Cell]]] = {kind: {f: [] for f in args.paced_list} for kind in kinds}
    paced_at: dict[str, dict[float, list[Cell]]] = {kind: {r: [] for r in args.paced_rate_list} for kind in kinds}
    for _ in range(args.rounds):  # rounds interleave the servers, so a noisy minute does not land on one of them
        for kind in args.server_list:
            procs, ports = start(kind, args, art, server, batch_s, server_cpus)
            try:
                for level in args.level_list:
                    closed[kind][level].append(
                        measure(procs, client, ports, level, args, requests, 0, generator_cpus, app=kind in APPS)
                    )
                sustained = closed[kind][max(args.level_list)][-1].rps
                for fraction in args.paced_list:
                    cell = measure(
                        procs,
                        client,
                        ports,
                        args.paced_connections,
                        args,
                        requests,
                        fraction * sustained,
                        generator_cpus,
                        metrics_port=ports[0] if kind in APPS else None,
                    )
                    paced[kind][fraction].append(cell)
                for rate in args.paced_rate_list:
                    paced_at[kind][rate].append(
                        measure(procs, client, ports, args.paced_connections, args, requests, rate, generator_cpus)
                    )
            finally:
                stop(procs, kind)
    return {
        "batch_s": batch_s,
        "cpus": (server_cpus, generator_cpus),
        "closed": {k: {lv: median_cell(c) for lv, c in v.items()} for k, v in closed.items()},
        "paced": {k: {f: median_cell(c) for f, c in v.items()} for k, v in paced.items()},
        "paced_at": {k: {r: median_p99(c) for r, c in v.items()} for k, v in paced_at.items()},
    }


def report(args: argparse.Namespace, result: dict) -> None:
    batch_s = result["batch_s"]
    limit = args.workers * ROWS / batch_s
    bound_ms = 2 * batch_s * 1000 + args.max_queue_delay_ms
    server_cpus, generator_cpus = result["cpus"]
    where = (
        f"servers on CPU {','.join(map(str, sorted(server_cpus)))}, the load generator alone on CPU "
        f"{','.join(map(str, sorted(generator_cpus)))}"
        if server_cpus
        else "servers and load generator share the CPUs"
    )
    print(
        f"{args.workers} worker(s), emulated accelerator {batch_s * 1000:.2f} ms per batch of up to {ROWS} rows "
        f"(--batch-ms {args.batch_ms:g}), queue delay {args.max_queue_delay_ms:g} ms: limit {limit:,.0f} req/s; "
        f"{where}; paced requests on the connection {ORDERS[args.connection_order]}; "
        f"{args.seconds:g} s per cell, median of {args.rounds} round(s); "
        f"load average {os.getloadavg()[0]:.2f} at the end"
    )
    head = ["server".ljust(12)]
    head += [f"{level} connections: of limit, p50 / p99 ms, CPU".ljust(44) for level in args.level_list]
    head += [f"paced {fraction:.0%}: req/s, p99 ms".ljust(24) for fraction in args.paced_list]
    head += [f"paced {rate:,.0f}/s: p99 ms".ljust(20) for rate in args.paced_rate_list]
    print(" | ".join(head))
    for kind in args.server_list:
        cells = [kind.ljust(12)]
        for level in args.level_list:
            cell = result["closed"][kind][level]
            cells.append(
                f"{cell.rps / limit:4.0%} ({cell.rps:6,.0f}), {cell.p50_ms:5.2f} / {cell.p99_ms:5.2f}, "
                f"{cell.cpu_us:3.0f} µs".ljust(44)
            )
        for fraction in args.paced_list:
            cell = result["paced"][kind][fraction]
            late = f", {cell.late} late" if cell.late else ""
            cells.append(f"{cell.rps:6,.0f}, {cell.p99_ms:5.2f}{late}".ljust(24))
        for rate in args.paced_rate_list:
            cell = result["paced_at"][kind][rate]
            late = f", {cell.late} late" if cell.late else ""
            cells.append(f"{cell.p99_ms:5.2f}{late}".ljust(20))
        print(" | ".join(cells))
    share = args.share_goal
    verdicts = []
    for kind in args.server_list:
        met = all(result["closed"][kind][level].rps / limit >= share for level in args.level_list)
        verdicts.append(f"{kind} {'met' if met else 'MISSED'}")
    levels = " and ".join(map(str, args.level_list))
    print(f"goal >= {share:.0%} of the limit at {levels} connections: " + ", ".join(verdicts))
    top = max(args.paced_list)
    verdicts = [
        f"{kind} {'met' if result['paced'][kind][top].p99_ms <= bound_ms else 'MISSED'}" for kind in args.server_list
    ]
    print(f"goal p99 <= 2 x batch + delay ({bound_ms:.2f} ms) paced at {top:.0%} of sustained: " + ", ".join(verdicts))
    for rate in args.paced_rate_list:
        within = [
            f"{kind} {'within' if result['paced_at'][kind][rate].p99_ms <= bound_ms else 'PAST'}"
            for kind in args.server_list
        ]
        print(
            f"p99 paced at {rate:,.0f} req/s for every server ({rate / limit:.0%} of the limit): " + ", ".join(within)
        )
    for kind in APPS:
        for fraction in args.paced_list:
            cell = result["paced"].get(kind, {}).get(fraction)
            if cell is None or cell.cycle_ms is None:
                continue
            idle = cell.cycle_ms - batch_s * 1000
            print(
                f"model cycle, {kind} paced at {fraction:.0%}: {cell.rows_per_batch:.1f} rows per batch, "
                f"{cell.cycle_ms:.2f} ms per batch per worker against the {batch_s * 1000:.2f} ms batch "
                f"({idle:.2f} ms of it with the model idle or waiting to fill)"
            )
    for level in args.level_list:
        for kind in args.server_list:
            rps = result["closed"][kind][level].rps
            turnaround_ms = args.workers * ROWS / rps * 1000 - batch_s * 1000 if rps else float("inf")
            print(
                f"turnaround at {level} connections, {kind}: {turnaround_ms:.2f} ms per cycle "
                f"(the cycle is {ROWS * args.workers} / req/s, less the batch)"
            )
    for level in args.level_list:
        for kind in APPS:
            cell = result["closed"].get(kind, {}).get(level)
            if cell is None or cell.loop_us is None:
                continue
            print(
                f"CPU per request at {level} connections, {kind}: {cell.cpu_us:.0f} µs, of which the workers' event "
                f"loops {cell.loop_us:.0f} µs and their other threads (inference, prepare, metrics) and the "
                f"supervisor {cell.cpu_us - cell.loop_us:.0f} µs"
            )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, help="a compiled CPU artifact (default: build the tiny BERT)")
    parser.add_argument("--batch-ms", type=float, default=3.0, help="the emulated accelerator's time per batch")
    parser.add_argument("--max-queue-delay-ms", type=float, default=1.0)
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="workers of every server (1: one worker alone on the servers' core, as where each has cores of its "
        "own; pass --levels to match, 16 rows per worker)",
    )
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per cell, after the warm-up")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of closed loop before each cell")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--levels", default="32,64", help="closed-loop connection counts")
    parser.add_argument("--paced", default="0.5,0.8", help="open-system rates, as fractions of each one's sustained")
    parser.add_argument(
        "--paced-rates",
        default="",
        help="open-system rates in req/s, the same for every server (default: none), after the --paced cells",
    )
    parser.add_argument(
        "--paced-connections",
        type=int,
        default=256,
        help="connections of the paced runs: enough that a request due never waits for a free one",
    )
    parser.add_argument(
        "--connection-order",
        default="lifo",
        help="which idle connection a paced request goes out on: lifo (default), the one whose reply came last, as "
        "urllib3's and Go's connection pools reuse them; fifo, the one idle longest, round the connections in turn",
    )
    parser.add_argument("--share-goal", type=float, default=0.85, help="the share of the limit asked for")
    parser.add_argument("--servers", default=",".join(SERVERS), help=f"any of {', '.join(SERVERS)}")
    parser.add_argument("--no-pin", action="store_true", help="share the CPUs between servers and load generator")
    args = parser.parse_args(argv)

    def fail(message: str) -> None:  # one line, as the other benchmarks refuse arguments
        parser.exit(2, f"{parser.prog}: error: {message}\n")

    for name in ("batch_ms", "seconds", "warmup"):
        if not getattr(args, name) > 0:
            fail(f"--{name.replace('_', '-')}: must be greater than 0, got {getattr(args, name)}")
    if not args.max_queue_delay_ms >= 0:
        fail(f"--max-queue-delay-ms: not negative, got {args.max_queue_delay_ms}")
    if args.rounds < 1:
        fail(f"--rounds: at least 1, got {args.rounds}")
    if not 1 <= args.workers <= 16:
        fail(f"--workers: from 1 to 16, got {args.workers}")
    if args.connection_order not in ORDERS:
        fail(f"--connection-order: {' or '.join(ORDERS)}, got {args.connection_order!r}")
    if not 1 <= args.paced_connections <= 1024:
        fail(f"--paced-connections: from 1 to 1024, got {args.paced_connections}")
    try:
        args.level_list = [int(v) for v in args.levels.split(",") if v]
    except ValueError:
        args.level_list = []
    if not args.level_list or not all(1 <= v <= 1024 for v in args.level_list):
        fail(f"--levels: a comma-separated list of connection counts from 1 to 1024, got {args.levels!r}")
    try:
        args.paced_list = [float(v) for v in args.paced.split(",") if v]
    except ValueError:
        args.paced_list = []
    if not args.paced_list or not all(0 < v <= 1 for v in args.paced_list):
        fail(f"--paced: a comma-separated list of fractions in (0, 1], got {args.paced!r}")
    try:
        args.paced_rate_list = [float(v) for v in args.paced_rates.split(",") if v]
    except ValueError:
        args.paced_rate_list = [0.0]
    if not all(0 < v <= 1_000_000 for v in args.paced_rate_list):
        fail(f"--paced-rates: a comma-separated list of req/s above 0, at most 1,000,000, got {args.paced_rates!r}")
    args.server_list = [s for s in args.servers.split(",") if s]
    unknown = sorted(set(args.server_list) - set(SERVERS))
    if unknown or not args.server_list:
        fail(f"--servers: a comma-separated list of {', '.join(SERVERS)}, got {args.servers!r}")
    text_scan = sb.SERVE.parent / f"_text_scan{sysconfig.get_config_var('EXT_SUFFIX')}"
    needs = [kind for kind in ("app-body", "app") if kind in args.server_list]
    if needs and not text_scan.is_file():  # else they would quietly measure app-python
        fail(f"--servers {needs[0]}: {text_scan} is not built (make setup)")
    return args


def main() -> int:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="turnaround-floor-") as work:
        result = run(args, Path(work))
    report(args, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
