"""The serving app beside its peers on the same artifact: TorchServe 0.12 and tritonserver 2.51.

    flock /tmp/cpu.lock .venv/bin/python benchmarks/peers.py [--phases emulated,cpu] [--rounds 3]

Two phases, each with the same artifact (the BERT-Mini-sized CPU artifact serve_bench.py builds), tokenizer,
batching limits (--workers 2, --max-batch-size 16, --max-queue-delay-ms 1) and closed-loop client for every
server (--concurrency 32,64 connections, one one-text KServe v2 request each at a time):
  emulated  the model replaced by the emulated accelerator (container/neuron/serving/standin_accelerator.py, a
            stand-in for a NeuronCore: --batch-ms per batch of up to 16 rows, asleep without the GIL), whose
            limit is workers x 16 rows per batch time; then paced runs (an open loop on 64 connections) at
            --paced fractions of what serve.py sustained, for the p99 bound;
  cpu       the TorchScript model on the CPU, one torch thread per worker; with the naive one-request-at-a-time
            server (benchmarks/naive_server.py) and the raw model's limit (serve_bench.py's (c)), and with
            --baseline-ref REV, serve.py as it was at that commit.
Servers: serve.py; TorchServe (Java frontend, batchSize/maxBatchDelay, 2 Python workers) and Triton (its
dynamic batcher, 2 instances hosted by pytriton) from the side environment .venv-peers (`make .make/peers`;
TorchServe also needs a JRE: `apt-get install openjdk-17-jre-headless`); a peer whose environment is missing
is skipped with a line saying so. Per cell: requests/s, p50/p99, errors, CPU per request (every process of
the server, from /proc, over the measured window), average batch. Rounds interleave the servers; each cell
is the best of its rounds. Prints figures and the goals met or missed; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import serve_bench as sb
from peer_model import read_stats

ROOT = Path(__file__).resolve().parents[1]
SERVING_DIR = ROOT / "container" / "neuron" / "serving"
PEERS_VENV = ROOT / ".venv-peers"  # --peers-venv
CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- servers ---------------------------------------------------------------------------------


@dataclass
class Server:
    name: str
    proc: subprocess.Popen
    port: int
    path: str
    batches: Callable[[], tuple[float, float]] | None = None  # (batches, rows) so far
    workdir: Path | None = None
    own_group: bool = False

    def cpu_seconds(self) -> float:
        return tree_cpu(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            if self.own_group:
                os.killpg(self.proc.pid, signal.SIGTERM)
            else:
                self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            if self.own_group:
                os.killpg(self.proc.pid, signal.SIGKILL)
            else:
                self.proc.kill()
            self.proc.wait(10)


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except FileNotFoundError:
            continue
        for task in tasks:
            try:
                todo += [int(c) for c in Path(f"/proc/{current}/task/{task}/children").read_text().split()]
            except FileNotFoundError:
                pass
    return found


def tree_cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and every process under it (the live ones: a server's processes
    live through the measured window)."""
    total = 0
    for process in descendants(pid):
        try:
            fields = Path(f"/proc/{process}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def serve_batches(port: int) -> tuple[float, float]:
    rows, batches = sb.batch_stats(port)
    return batches, rows


def start_serve(name: str, serve_py: Path, art: Path, args, standin_ms: float | None) -> Server:
    port = sb.free_port()
    env = {
        **os.environ,
        "SERVER_MAX_BATCH_SIZE": str(args.max_batch_size),
        "SERVER_MAX_QUEUE_DELAY_MS": str(args.max_queue_delay_ms),
        "SERVER_WORKERS": str(args.workers),
        "SERVER_TORCH_THREADS": "1",
        "SERVER_LOG_LEVEL": "warning",
    }
    command = [sys.executable, str(serve_py), "--model-dir", str(art), "--port", str(port), "--host", "127.0.0.1"]
    if standin_ms is not None:
        command += ["--standin-accelerator-ms", str(standin_ms)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    sb.wait_ready(port, proc, "/v2/health/ready")
    time.sleep(3)  # ready answers from any one worker: give the others time to warm up
    return Server(name, proc, port, "/v2/models/model/infer", batches=lambda: serve_batches(port))


def start_naive(art: Path) -> Server:
    port = sb.free_port()
    # One torch thread: with two, OpenMP spins at its barriers whenever anything else wants the cores
    # (docs/explanation/performance.md); serve_bench.py measures both.
    return Server("naive", sb.start_baseline(art, port, 1), port, "/v2/models/model/infer")


def baseline_tree(ref: str, work: Path) -> Path:
    """container/neuron as it was at ``ref`` (git archive), for --baseline-ref."""
    target = work / "baseline"
    target.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "container/neuron"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    neuron = target / "container" / "neuron"
    # serve.py moved into serving/; a ref from before that has it at the top of container/neuron.
    return next(path for path in (neuron / "serving" / "serve.py", neuron / "serve.py") if path.is_file())


def peers_python() -> Path | None:
    python = PEERS_VENV / "bin" / "python"
    return python if python.exists() else None


def missing_env() -> str:
    return f"skipped: no side environment at {PEERS_VENV} (make .make/peers)"


def start_torchserve(art: Path, args, standin_ms: float | None, work: Path) -> Server | str:
    """TorchServe 0.12 on the artifact, or why not."""
    python = peers_python()
    if python is None or not (PEERS_VENV / "bin" / "torchserve").exists():
        return missing_env()
    if shutil.which("java") is None:
        return "skipped: no java on PATH (TorchServe's frontend needs a JRE: apt-get install openjdk-17-jre-headless)"
    home = Path(tempfile.mkdtemp(prefix="torchserve-", dir=work))
    store, stats = home / "store", home / "stats"
    store.mkdir()
    stats.mkdir()
    (home / "peer.json").write_text(json.dumps({"standin_ms": standin_ms}))
    extra = [
        art / "model.pt",
        art / "tokenizer.json",
        art / "metadata.json",
        ROOT / "benchmarks" / "peer_model.py",
        SERVING_DIR / "standin_accelerator.py",
        home / "peer.json",
    ]
    subprocess.run(
        [
            str(PEERS_VENV / "bin" / "torch-model-archiver"),
            "--model-name",
            "model",
            "--version",
            "1.0",
            "--handler",
            str(ROOT / "benchmarks" / "torchserve_handler.py"),
            "--extra-files",
            ",".join(map(str, extra)),
            "--export-path",
            str(store),
        ],
        check=True,
        capture_output=True,
    )
    port, management, metrics = sb.free_port(), sb.free_port(), sb.free_port()
    registration = {
        "model": {
            "1.0": {
                "defaultVersion": True,
                "marName": "model.mar",
                "minWorkers": args.workers,
                "maxWorkers": args.workers,
                "batchSize": args.max_batch_size,
                "maxBatchDelay": max(1, round(args.max_queue_delay_ms)),
                "responseTimeout": 120,
            }
        }
    }
    # Logs at WARN, as serve.py runs here: TorchServe's default logs every request (access log, the workers'
    # "Backend received inference" lines) and wrote 20 MB a minute in this benchmark.
    (home / "log4j2.xml").write_text(LOG4J2)
    (home / "config.properties").write_text(
        "\n".join(
            [
                f"vmargs=-Xmx1g -XX:+UseContainerSupport -Dlog4j.configurationFile=file://{home / 'log4j2.xml'}",
                f"inference_address=http://127.0.0.1:{port}",
                f"management_address=http://127.0.0.1:{management}",
                f"metrics_address=http://127.0.0.1:{metrics}",
                f"model_store={store}",
                "load_models=model.mar",
                f"models={json.dumps(registration)}",
                f"default_workers_per_model={args.workers}",
                "disable_token_authorization=true",
                "install_py_dep_per_model=false",
                "metrics_mode=prometheus",
                "disable_system_metrics=true",
                "async_logging=true",
                "job_queue_size=1000",
                "",
            ]
        )
    )
    env = {
        **os.environ,
        "PATH": f"{PEERS_VENV / 'bin'}:{os.environ['PATH']}",
        "LOG_LOCATION": str(home / "logs"),
        "METRICS_LOCATION": str(home / "logs"),
        "PEER_STATS_DIR": str(stats),
        "TS_DISABLE_TOKEN_AUTHORIZATION": "true",
    }
    proc = subprocess.Popen(
        [
            str(PEERS_VENV / "bin" / "torchserve"),
            "--start",
            "--foreground",
            "--ncs",
            "--ts-config",
            str(home / "config.properties"),
            "--model-store",
            str(store),
            "--disable-token-auth",
        ],
        cwd=home,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    server = Server(
        "torchserve",
        proc,
        port,
        "/predictions/model",
        batches=lambda: read_stats(str(stats)),
        workdir=home,
        own_group=True,
    )
    try:
        sb.wait_ready(port, proc, "/ping", timeout=240)
        wait_for_workers(port, management, args.workers)
    except SystemExit as exc:
        server.stop()
        return f"skipped: TorchServe did not start ({exc}; logs in {home / 'logs'})"
    return server


LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders><Console name="STDOUT" target="SYSTEM_OUT"><PatternLayout pattern="%d %p %c - %m%n"/></Console></Appenders>
  <Loggers>
    <Logger name="ACCESS_LOG" level="off"/>
    <Logger name="MODEL_METRICS" level="off"/>
    <Logger name="TS_METRICS" level="off"/>
    <Logger name="MODEL_LOG" level="warn"/>
    <Root level="warn"><AppenderRef ref="STDOUT"/></Root>
  </Loggers>
</Configuration>
"""


def wait_for_workers(port: int, management: int, workers: int, timeout: float = 240) -> None:
    """Until TorchServe's management API reports every worker of the model READY."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{management}/models/model", timeout=5) as response:
                described = json.loads(response.read())
            if sum(w.get("status") == "READY" for w in described[0].get("workers", [])) >= workers:
                return
        except (OSError, ValueError, IndexError):
            pass
        time.sleep(0.5)
    raise SystemExit("TorchServe workers never became ready")


def start_triton(art: Path, args, standin_ms: float | None, work: Path) -> Server | str:
    python = peers_python()
    if python is None:
        return missing_env()
    stats = Path(tempfile.mkdtemp(prefix="triton-stats-", dir=work))
    port = sb.free_port()
    command = [
        str(python),
        str(ROOT / "benchmarks" / "triton_peer.py"),
        "--artifact",
        str(art),
        "--port",
        str(port),
        "--workers",
        str(args.workers),
        "--max-batch-size",
        str(args.max_batch_size),
        "--max-queue-delay-ms",
        str(args.max_queue_delay_ms),
    ]
    if standin_ms is not None:
        command += ["--standin-ms", str(standin_ms)]
    # The Python backend's stub must embed this environment's interpreter: its libpython first on
    # LD_LIBRARY_PATH (else the OS's libpython3.X, whose stdlib does not match), its bin/ first on PATH
    # (where the stub finds its prefix), as rehearsal/triton_server.py runs it.
    libdir = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    env = {
        **os.environ,
        "PEER_STATS_DIR": str(stats),
        "PATH": f"{PEERS_VENV / 'bin'}:{os.environ['PATH']}",
        "LD_LIBRARY_PATH": ":".join(filter(None, [libdir, os.environ.get("LD_LIBRARY_PATH")])),
    }
    env.pop("PYTHONHOME", None)
    log = open(work / f"triton-{port}.log", "w")
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = Server(
        "triton", proc, port, "/v2/models/model/infer", batches=lambda: read_stats(str(stats)), own_group=True
    )
    try:
        sb.wait_ready(port, proc, "/v2/models/model/ready", timeout=240)
    except SystemExit as exc:
        server.stop()
        return f"skipped: Triton did not start ({exc}; log in {log.name})"
    return server


# -- load -------------------------------------------------------------------------------------


def request_bytes(path: str, texts: list[str]) -> list[bytes]:
    """One text per request, shape [1, 1]: what Triton takes for a batched model with one string per row;
    serve.py takes [n] or [n, 1], TorchServe's handler reads the text."""
    out = []
    for text in texts:
        body = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": [text]}]}).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        out.append(head.encode() + body)
    return out


async def _connection(port, requests, stop_at, latencies, errors, offset, interval):
    """Closed loop (interval None): the next request as soon as the reply is in. Paced: request k is due at
    start + k * interval and its latency counts from then, so a slow reply shows in the latency of the ones
    it held up instead of lowering the rate."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        errors.append("connect")
        return
    # perf_counter, not loop.time(): uvloop's clock ticks in whole milliseconds.
    clock = time.perf_counter
    i, due = offset, clock() + (offset % 97) / 97 * (interval or 0)
    try:
        while clock() < stop_at:
            if interval is not None:
                delay = due - clock()
                if delay > 0.0015:  # uvloop sleeps whole milliseconds: wake early rather than late
                    await asyncio.sleep(delay - 0.001)
                started = max(due, clock())  # late: from when it was due; early: from when it left
                due += interval
            else:
                started = clock()
            writer.write(requests[i % len(requests)])
            i += 1
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            await reader.readexactly(length)
            latencies.append(clock() - started)
            if sb.CLOSE.search(head):  # the server closes it after this reply: as a client must, reconnect
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            if not head.startswith(b"HTTP/1.1 200"):
                errors.append(head.split(b"\r\n", 1)[0].decode(errors="replace"))
    except (OSError, asyncio.IncompleteReadError) as exc:
        errors.append(type(exc).__name__)
    finally:
        writer.close()


async def _load(port, requests, connections, duration, rate):
    latencies: list[float] = []
    errors: list[str] = []
    stop_at = time.perf_counter() + duration
    interval = connections / rate if rate else None
    await asyncio.gather(
        *(_connection(port, requests, stop_at, latencies, errors, k * 7, interval) for k in range(connections))
    )
    return latencies, errors


@dataclass
class Cell:
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    cpu_us: float
    batch: float | None
    rounds: list[float] = field(default_factory=list)


def measure(server: Server, texts, connections: int, duration: float, warmup: float, rate: float | None = None) -> Cell:
    requests = request_bytes(server.path, texts)
    sb._run(_load(server.port, requests, connections, warmup, rate))
    batches0 = server.batches() if server.batches else None
    cpu0, started = server.cpu_seconds(), time.perf_counter()
    latencies, errors = sb._run(_load(server.port, requests, connections, duration, rate))
    elapsed = time.perf_counter() - started
    cpu = server.cpu_seconds() - cpu0
    batch = None
    if batches0 is not None:
        batches1 = server.batches()
        batch = (batches1[1] - batches0[1]) / max(1.0, batches1[0] - batches0[0])
    latencies.sort()
    answered = max(1, len(latencies))
    return Cell(
        rps=len(latencies) / elapsed,
        p50_ms=1000 * latencies[len(latencies) // 2] if latencies else float("nan"),
        p99_ms=1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else float("nan"),
        errors=len(errors),
        cpu_us=1e6 * cpu / answered,
        batch=batch,
    )


def standin_batch_s(batch_ms: float, calls: int = 300) -> float:
    """What one emulated batch really takes here (time.sleep wakes a little late)."""
    sys.path.insert(0, str(SERVING_DIR))
    import numpy as np
    from standin_accelerator import StandinAccelerator

    accelerator = StandinAccelerator(batch_ms, 2)
    ids = np.ones((16, 32), dtype=np.int64)
    started = time.perf_counter()
    for _ in range(calls):
        accelerator(ids, ids)
    return (time.perf_counter() - started) / calls


# -- phases -----------------------------------------------------------------------------------


def run_phase(phase: str, art: Path, texts, args, work: Path) -> dict:
    standin = args.batch_ms if phase == "emulated" else None
    servers: list[Server] = []
    skipped: dict[str, str] = {}
    results: dict[tuple[str, int], Cell] = {}
    paced: dict[tuple[str, float], Cell] = {}
    extra: dict = {}
    try:
        servers.append(start_serve("serve.py", SERVING_DIR / "serve.py", art, args, standin))
        if phase == "cpu" and args.baseline_ref:
            servers.append(
                start_serve(f"serve.py@{args.baseline_ref}", baseline_tree(args.baseline_ref, work), art, args, None)
            )
        if phase == "cpu":
            servers.append(start_naive(art))
        for name, start in (("torchserve", start_torchserve), ("triton", start_triton)):
            if name not in args.peers:
                continue
            started = start(art, args, standin, work)
            if isinstance(started, str):
                skipped[name] = started
                print(f"[{phase}] {name}: {started}", flush=True)
            else:
                servers.append(started)
        for round_ in range(args.rounds):
            if phase == "cpu":
                limits = sb.raw_model_limit(art, texts, args.workers, 1, [1, 4, 16, 32], args.limit_seconds)
                extra["raw"] = max(extra.get("raw", 0.0), max(limits.values()))
            for level in args.levels:
                for server in servers:
                    cell = measure(server, texts, level, args.duration, args.warmup)
                    best = results.get((server.name, level))
                    rounds = (best.rounds if best else []) + [cell.rps]
                    if best is None or cell.rps > best.rps:
                        results[(server.name, level)] = cell
                    results[(server.name, level)].rounds = rounds
                    print(
                        f"[{phase}] round {round_ + 1} {server.name:<22} conc {level:>3}: {cell.rps:>7,.0f} req/s "
                        f"p50 {cell.p50_ms:6.2f} p99 {cell.p99_ms:7.2f} cpu {cell.cpu_us:5.0f} us/req "
                        f"batch {cell.batch or 0:4.1f} err {cell.errors}",
                        flush=True,
                    )
        if phase == "emulated" and args.paced:
            top = max(args.levels)
            sustained = results[("serve.py", top)].rps
            for fraction in args.paced:
                rate = fraction * sustained
                for server in servers:
                    cell = measure(server, texts, top, args.duration, args.warmup, rate=rate)
                    paced[(server.name, fraction)] = cell
                    print(
                        f"[{phase}] paced {fraction:.0%} of {sustained:,.0f} ({rate:,.0f} req/s) {server.name:<12}: "
                        f"{cell.rps:>7,.0f} req/s p50 {cell.p50_ms:6.2f} p99 {cell.p99_ms:7.2f} "
                        f"cpu {cell.cpu_us:5.0f} us/req batch {cell.batch or 0:4.1f} err {cell.errors}",
                        flush=True,
                    )
            extra["sustained"] = sustained
    finally:
        for server in servers:
            server.stop()
    return {"servers": [s.name for s in servers], "skipped": skipped, "results": results, "paced": paced, **extra}


# -- report -----------------------------------------------------------------------------------


def table(phase: str, data: dict, levels: list[int], reference: float | None, reference_name: str) -> None:
    print(f"\n{phase}: best of the rounds per cell (rounds' req/s in brackets); {reference_name}")
    print(
        f"{'server':<22} {'conc':>4} | {'req/s':>7} {'of ref':>6} | {'p50 ms':>7} {'p99 ms':>7} | {'CPU us/req':>10} "
        f"| {'batch':>5} | {'errors':>6} | rounds"
    )
    for name in data["servers"]:
        for level in levels:
            cell = data["results"][(name, level)]
            share = f"{cell.rps / reference:>6.0%}" if reference else f"{'':>6}"
            batch = f"{cell.batch:5.1f}" if cell.batch is not None else f"{'-':>5}"
            print(
                f"{name:<22} {level:>4} | {cell.rps:>7,.0f} {share} | {cell.p50_ms:>7.2f} {cell.p99_ms:>7.2f} | "
                f"{cell.cpu_us:>10,.0f} | {batch} | {cell.errors:>6} | " + ", ".join(f"{r:,.0f}" for r in cell.rounds)
            )
    for name, why in data["skipped"].items():
        print(f"{name:<22} {why}")


def verdict(label: str, ok: bool, detail: str) -> None:
    print(f"  {'met   ' if ok else 'MISSED'} {label}: {detail}")


def report(args, phases: dict, limit: dict) -> None:
    print(
        f"\nmachine: {os.cpu_count()} CPUs; python {sys.version.split()[0]}; load average before "
        f"{args.load_before[0]:.2f} / {args.load_before[1]:.2f} / {args.load_before[2]:.2f}, after "
        + " / ".join(f"{v:.2f}" for v in os.getloadavg())
        + " (1/5/15 min; other work on the machine skews every figure)"
    )
    print(
        f"settings: workers={args.workers} max_batch_size={args.max_batch_size} "
        f"max_queue_delay_ms={args.max_queue_delay_ms} "
        f"connections={','.join(map(str, args.levels))} "
        f"duration={args.duration:g}s warmup={args.warmup:g}s rounds={args.rounds}"
    )
    if "emulated" in phases:
        data = phases["emulated"]
        bound = 2 * args.batch_ms + args.max_queue_delay_ms
        print(
            f"\nemulated accelerator: {args.batch_ms:g} ms per batch of up to {args.max_batch_size} rows "
            f"(measured {limit['batch_s'] * 1000:.2f} ms); limit {args.workers} x {args.max_batch_size} / batch = "
            f"{limit['limit']:,.0f} req/s (nominal {args.workers * args.max_batch_size / args.batch_ms * 1000:,.0f})"
        )
        table("emulated", data, args.levels, limit["limit"], "'of ref' = share of the emulated limit")
        if data["paced"]:
            print(
                f"\npaced (open loop, {max(args.levels)} connections; latency from each request's due time), "
                f"fractions of serve.py's {data['sustained']:,.0f} req/s:"
            )
            for (name, fraction), cell in data["paced"].items():
                print(
                    f"  {name:<12} {fraction:>4.0%} offered {fraction * data['sustained']:>7,.0f}: "
                    f"{cell.rps:>7,.0f} req/s "
                    f"p50 {cell.p50_ms:6.2f} p99 {cell.p99_ms:7.2f} CPU {cell.cpu_us:5.0f} us/req "
                    f"batch {cell.batch or 0:4.1f} "
                    f"errors {cell.errors}"
                )
        print("\ngoals (emulated accelerator):")
        serve = {level: data["results"][("serve.py", level)] for level in args.levels}
        for level in args.levels:
            share = serve[level].rps / limit["limit"]
            verdict(f">= 70% of the limit at {level} connections", share >= 0.7, f"{share:.0%}")
        for (name, fraction), cell in data["paced"].items():
            if name == "serve.py":
                verdict(
                    f"p99 <= 2 x batch + delay ({bound:g} ms) at {fraction:.0%} of sustained",
                    cell.p99_ms <= bound,
                    f"{cell.p99_ms:.2f} ms",
                )
        if ("torchserve", args.levels[0]) in data["results"]:
            for level in args.levels:
                ts = data["results"][("torchserve", level)]
                ratio = serve[level].rps / ts.rps
                verdict(
                    f">= 1.5x TorchServe at {level} connections, p99 no higher",
                    ratio >= 1.5 and serve[level].p99_ms <= ts.p99_ms,
                    f"{ratio:.2f}x, p99 {serve[level].p99_ms:.2f} vs {ts.p99_ms:.2f} ms",
                )
        else:
            print("  (TorchServe skipped: no ratio)")
        worst = max(cell.cpu_us for cell in serve.values())
        verdict(
            "CPU per request <= 100 us (every serve.py process, tokenization included)",
            worst <= 100,
            ", ".join(f"{serve[level].cpu_us:.0f} us at {level}" for level in args.levels),
        )
    if "cpu" in phases:
        data = phases["cpu"]
        print(
            f"\nCPU model: the raw model's limit {data['raw']:,.0f} seq/s "
            f"({args.workers} processes x 1 torch thread, best batch)"
        )
        table("cpu", data, args.levels, data["raw"], "'of ref' = share of the raw model's limit")
        print("\ngoals (CPU model: nothing lost):")
        serve = {level: data["results"][("serve.py", level)] for level in args.levels}
        for other in data["servers"][1:]:
            for level in args.levels:
                cell = data["results"][(other, level)]
                print(
                    f"  serve.py / {other} at {level}: {serve[level].rps / cell.rps:.2f}x req/s, "
                    f"p99 {serve[level].p99_ms:.2f} vs {cell.p99_ms:.2f} ms"
                )
        for level in args.levels:
            print(f"  serve.py at {level}: {serve[level].rps / data['raw']:.0%} of the raw model's limit")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model-dir", type=Path, help="a compiled CPU artifact (default: build serve_bench.py's BERT-Mini)"
    )
    parser.add_argument("--phases", default="emulated,cpu")
    parser.add_argument("--peers", default="torchserve,triton")
    parser.add_argument("--concurrency", default="32,64")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-batch-size", type=int, default=16)
    parser.add_argument("--max-queue-delay-ms", type=float, default=1.0)
    parser.add_argument("--batch-ms", type=float, default=3.0, help="the emulated accelerator's time per batch")
    parser.add_argument(
        "--paced", default="0.5,0.8", help="fractions of serve.py's sustained rate for paced runs ('' for none)"
    )
    parser.add_argument("--baseline-ref", help="also run serve.py as it was at this git commit (CPU phase)")
    parser.add_argument("--peers-venv", type=Path, default=PEERS_VENV, help="the peers' side environment")
    parser.add_argument("--limit-seconds", type=float, default=1.0)
    # The model serve_bench.py builds by default (BERT-Mini's dimensions at 32 tokens).
    parser.add_argument("--sequence-length", type=int, default=32)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--attention-heads", type=int, default=4)
    args = parser.parse_args()
    try:
        args.levels = [int(c) for c in args.concurrency.split(",")]
        args.paced = [float(f) for f in args.paced.split(",") if f.strip()]
    except ValueError:
        parser.error("--concurrency and --paced: comma-separated numbers")
    args.phases = [p for p in args.phases.split(",") if p]
    args.peers = [p for p in args.peers.split(",") if p]
    if not args.levels or min(args.levels) <= 0 or any(not 0 < f <= 1 for f in args.paced):
        parser.error("--concurrency: positive integers; --paced: fractions in (0, 1]")
    if not set(args.phases) <= {"emulated", "cpu"} or not set(args.peers) <= {"torchserve", "triton"}:
        parser.error("--phases: emulated and/or cpu; --peers: torchserve and/or triton")
    for name in ("duration", "rounds", "workers", "max_batch_size", "batch_ms", "limit_seconds"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')}: must be greater than 0")
    return args


def main() -> int:
    global PEERS_VENV
    args = parse_args()
    PEERS_VENV = args.peers_venv.absolute()
    args.load_before = os.getloadavg()
    texts = sb.sample_texts(256)
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        work = Path(tmp)
        art = args.model_dir or sb.build_artifact(work, args)
        limit = {}
        phases = {}
        for phase in args.phases:
            if phase == "emulated":
                limit["batch_s"] = standin_batch_s(args.batch_ms)
                limit["limit"] = args.workers * args.max_batch_size / limit["batch_s"]
            phases[phase] = run_phase(phase, art, texts, args, work)
        report(args, phases, limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
