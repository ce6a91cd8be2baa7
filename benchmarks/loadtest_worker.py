"""How many requests a second one Locust generator process sends, and what each request costs it, on this machine;
and (--peak) a whole distributed run at the reference peak.

    python benchmarks/loadtest_worker.py [--rate 2000] [--seconds 10] [--slo-ms 10] [--no-verify]
    python benchmarks/loadtest_worker.py --peak 16000 --workers 8 [--seconds 30] [--server-cpus 0-3]

The target is a trivial HTTP server (asyncio on uvloop, in its own process, answering a canned valid KServe v2
reply), not the CPU serving app: the tiny BERT answers a few hundred requests a second here, and a generator's
limit only shows against a target that is not the bottleneck. Each client sends --rate requests a second to it,
one client after the other:
  (a) inferstack's locustfile, an open system: one scheduling user starts each request when it is due in a
      greenlet of its own, every answer checked, every request recorded into the step's HdrHistogram (one Locust
      process, a local runner: what a worker does, less the master's messages);
  (b) baseline, the scheme (a) replaced: stock Locust, closed-loop FastHttpUsers paced by constant_throughput
      (one request in flight each, as many users as the old pacing gave: at most 50 req/s each, and half of
      1 / SLO), nothing checked or recorded;
  (c) baseline: stock Locust's HttpUser (python-requests), otherwise as (b);
  (d) floor: a raw keep-alive socket client in plain Python (no Locust, no gevent), one connection;
  (e) inferstack's locustfile with a SageMaker target: InvokeEndpoint built and SigV4-signed by botocore, sent by
      FastHttpUser (AWS_ENDPOINT_URL points it at the same server, which answers any path; fake credentials);
  (f) baseline: stock Locust, a User calling boto3's invoke_endpoint (what (e) replaced), nothing checked.
Per client: the rate the server counted, and the client's CPU (user + sys of its process over the measured
window) per request in microseconds, with the rate that CPU cost allows at 90 % of a core (Locust's saturation
threshold). Then (a), (b) and (e) run at the rate their cost allows (unless --no-verify): the sustainable rate of
one generator process, measured, side by side, and the workers the reference peak (16,000 req/s) needs at it.
A generator's cost per request falls as its rate rises (at a low rate every request wakes an idle process), so
measure near the rate of interest.

--peak R --workers N: the real distributed run (runner.run_local: a master and N worker processes on
127.0.0.1) offering R req/s to the same server for --seconds, as `inferstack loadtest` runs it; prints each
generator's CPU, what was sent on time and late, the p99 and the verdict. --server-cpus pins the server (and
--generator-cpus the Locust processes) to CPUs of their own (Linux taskset lists), so neither measures the other.
--serve-workers W: the target is the serving app instead (container/neuron/serving/serve.py, W workers on the emulated
accelerator, --batch-ms per batch of up to 16 rows, its SLO --slo-ms: admission on), with serve_bench.py's tiny
BERT (or --model-dir): the reference workload's server, one intent-bert task of 6 workers, is
`--peak 16000 --serve-workers 6 --workers 12 --server-cpus 0-5 --generator-cpus 6-15` on a 16-core machine. It also
prints the server's side: its CPU per request (every process) and how full its batches were.
--client native (with --serve-workers): the same open system from one compiled process
(benchmarks/floor/load_client.c) instead of Locust, where the cores left over cannot run enough Locust workers to
send the rate on time; the same verdict rule (p99 from the due time within the SLO, errors within 0.1 %).
--connection-order fifo: its due requests go round its connections in turn instead of on the one answered last
(turnaround_floor.py's option), which spreads a burst over the workers as Locust's processes, each user on a
connection of its own, do.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from inferstack.loadtest import report, runner  # noqa: E402 - after sys.path is set
from inferstack.loadtest.spec import (  # noqa: E402 - after sys.path is set
    DEFAULT_ERROR_BUDGET_PERCENT,
    ExpectedOutput,
    LoadTestSpec,
    Step,
    Target,
)

REFERENCE_PEAK = 16_000  # req/s: the reference workload's peak (model_configs/intent-bert.yaml)
# The closed-loop pacing the open model replaced (inferstack/loadtest/pacing.py before it): users of one request in
# flight each, at most 50 req/s, and at most half of what a user whose every answer took the SLO could send.
OLD_MAX_PER_USER = 50.0
OLD_HEADROOM = 0.5

WARMUP_S = 3.0
SATURATED = 0.9  # of one core: Locust's CPU warning threshold
OUTPUTS = [
    {"name": "logits", "datatype": "FP32", "shape": [1, 3], "data": [0.1, 0.2, 0.7]},
    {"name": "label", "datatype": "BYTES", "shape": [1], "data": ["positive"]},
]
BODY = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["inferstack load test"]}]}

SERVER = r"""
import asyncio, json, sys, uvloop
REPLY = json.dumps({"model_name": "m", "outputs": %(outputs)s}).encode()
OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %%d\r\n\r\n" %% len(REPLY) + REPLY
count = 0
class Answer(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buffer = transport, b""
    def data_received(self, data):
        global count
        self.buffer += data
        while True:
            head, sep, rest = self.buffer.partition(b"\r\n\r\n")
            if not sep:
                return
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(rest) < length:
                return
            self.buffer = rest[length:]
            if head.startswith(b"GET /count"):
                text = str(count).encode()
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: %%d\r\n\r\n" %% len(text) + text)
            else:
                count += 1
                self.transport.write(OK)
async def main():
    server = await asyncio.get_running_loop().create_server(Answer, "127.0.0.1", int(sys.argv[1]))
    print("ready", flush=True)
    await server.serve_forever()
uvloop.run(main())
""" % {"outputs": repr(OUTPUTS)}  # noqa: UP031 - a template of Python code: with str.format its braces would need doubling

STOCK = r"""
import json, os
from locust import FastHttpUser, HttpUser, constant_throughput, task
BODY = json.dumps(%(body)r).encode()
Base = HttpUser if os.environ["BENCH_CLIENT"] == "requests" else FastHttpUser
class Stock(Base):
    host = os.environ["BENCH_HOST"]
    wait_time = constant_throughput(float(os.environ["BENCH_PER_USER"]))
    @task
    def infer(self):
        self.client.post("/v2/models/m/infer", data=BODY, headers={"Content-Type": "application/json"})
""" % {"body": BODY}  # noqa: UP031 - a template of Python code: with str.format its braces would need doubling

STOCK_SAGEMAKER = r"""
import json, os
import boto3, botocore.config
from locust import User, constant_throughput, task
BODY = json.dumps(%(body)r).encode()
CLIENT = boto3.client("sagemaker-runtime", region_name="us-east-1",
                      config=botocore.config.Config(max_pool_connections=1000, retries={"total_max_attempts": 1}))
class Stock(User):
    wait_time = constant_throughput(float(os.environ["BENCH_PER_USER"]))
    @task
    def invoke(self):
        CLIENT.invoke_endpoint(EndpointName="m", ContentType="application/json", Accept="application/json",
                               Body=BODY)["Body"].read()
""" % {"body": BODY}  # noqa: UP031 - a template of Python code: with str.format its braces would need doubling

RAW = r"""
import json, socket, sys, time
port, rate = int(sys.argv[1]), float(sys.argv[2])
body = json.dumps(%(body)r).encode()
request = (b"POST /v2/models/m/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"Content-Length: %%d\r\n\r\n" %% len(body)) + body
sock = socket.create_connection(("127.0.0.1", port))
interval, due, buffer = 1.0 / rate, time.monotonic(), b""
while True:
    sock.sendall(request)
    while True:  # read one reply: headers, then Content-Length bytes
        head, sep, rest = buffer.partition(b"\r\n\r\n")
        if sep:
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            if len(rest) >= length:
                json.loads(rest[:length])
                buffer = rest[length:]
                break
        buffer += sock.recv(65536)
    due += interval
    delay = due - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    else:
        due = time.monotonic()
""" % {"body": BODY}  # noqa: UP031 - a template of Python code: with str.format its braces would need doubling


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def served(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/count", timeout=5) as reply:
        return int(reply.read())


def cpu_seconds(process: psutil.Process) -> float:
    """User + system time of a process and its children (Locust's `python -m locust` is one process)."""
    total = 0.0
    for each in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = each.cpu_times()
            total += times.user + times.system
    return total


def measure(name: str, args: list[str], env: dict[str, str], port: int, seconds: float, workdir: Path) -> dict:
    """Start a client, let it warm up, then count what the server answered and what the client spent."""
    log = open(workdir / f"{name}.log", "wb")  # closed below
    process = subprocess.Popen(args, env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        time.sleep(WARMUP_S)
        if process.poll() is not None:
            raise SystemExit(
                f"{name}: exited {process.returncode}: {(workdir / f'{name}.log').read_text(errors='replace')[-1500:]}"
            )
        watched = psutil.Process(process.pid)
        cpu0, count0, t0 = cpu_seconds(watched), served(port), time.monotonic()
        time.sleep(seconds)
        cpu1, count1, t1 = cpu_seconds(watched), served(port), time.monotonic()
    finally:
        runner.stop_groups([process], grace_s=10)
        log.close()
    requests = count1 - count0
    return {
        "name": name,
        "rate": requests / (t1 - t0),
        "cpu_percent": 100 * (cpu1 - cpu0) / (t1 - t0),
        "us_per_request": 1e6 * (cpu1 - cpu0) / requests if requests else math.inf,
    }


def fake_aws(port: int) -> dict[str, str]:
    """boto3 pointed at the local server, with credentials it signs with (the server does not check them)."""
    return {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "AKIDBENCHMARK",
        "AWS_SECRET_ACCESS_KEY": "benchmark",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def spec_for(target: Target, rate: float, slo_ms: float, seconds: float) -> LoadTestSpec:
    return LoadTestSpec(
        model="m",
        target=target,
        bodies=(BODY,),
        outputs=tuple(ExpectedOutput(o["name"], o["datatype"], tuple(o["shape"])) for o in OUTPUTS),
        steps=(Step(rate=rate, seconds=seconds),),
        p99_slo_ms=slo_ms,
    )


def old_pace(rate: float, slo_ms: float) -> tuple[int, float]:
    """(users, per-user rate) of the closed-loop pacing (b) stands for."""
    users = max(1, math.ceil(rate / min(OLD_MAX_PER_USER, OLD_HEADROOM * 1000.0 / slo_ms) - 1e-9))
    return users, rate / users


def inferstack_client(port: int, rate: float, slo_ms: float, seconds: float, workdir: Path, kind: str = "http"):
    target = (
        Target(kind="http", url=f"http://127.0.0.1:{port}/v2/models/m/infer")
        if kind == "http"
        else Target(kind="sagemaker", endpoint="m", region="us-east-1")
    )
    spec = spec_for(target, rate, slo_ms, WARMUP_S + seconds + 30)
    env = runner.locust_environment(spec, workdir / "out")
    if kind == "sagemaker":
        env.update(fake_aws(port))
    (workdir / "out").mkdir(exist_ok=True)
    return runner.locust_args("local"), env


def stock_client(port: int, rate: float, slo_ms: float, client: str, workdir: Path):
    users, per_user = old_pace(rate, slo_ms)
    locustfile = workdir / f"stock_{client}_locustfile.py"
    locustfile.write_text(STOCK_SAGEMAKER if client == "boto3" else STOCK)
    env = {
        **os.environ,
        "BENCH_CLIENT": client,
        "BENCH_HOST": f"http://127.0.0.1:{port}",
        "BENCH_PER_USER": str(per_user),
        **(fake_aws(port) if client == "boto3" else {}),
    }
    args = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(locustfile),
        "--headless",
        "--only-summary",
        "-u",
        str(users),
        "-r",
        str(4 * users),
        "--exit-code-on-error",
        "0",
    ]
    return args, env


def start_server(workdir: Path, port: int, cpus: str | None) -> subprocess.Popen:
    (workdir / "server.py").write_text(SERVER)
    pin = ["taskset", "-c", cpus] if cpus else []
    server = subprocess.Popen(
        [*pin, sys.executable, str(workdir / "server.py"), str(port)], stdout=subprocess.PIPE, start_new_session=True
    )
    if server.stdout.readline().strip() != b"ready":
        runner.stop_groups([server], grace_s=10)
        raise SystemExit("the target server did not start")
    return server


def start_serving_app(workdir: Path, port: int, args) -> tuple[subprocess.Popen, str, list[dict]]:
    """serve.py with --serve-workers workers on the emulated accelerator: (process, infer URL, expected outputs)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import serve_bench

    art = args.model_dir or serve_bench.build_artifact(
        workdir, argparse.Namespace(sequence_length=32, layers=4, hidden_size=256, attention_heads=4)
    )
    labels = json.loads((art / "metadata.json").read_text())["labels"]
    settings = argparse.Namespace(
        max_batch_size=16, max_queue_delay_ms=1.0, workers=args.serve_workers, torch_threads=1
    )
    cpus = cpu_set(args.server_cpus) if args.server_cpus else None
    server = serve_bench.start_server(
        art,
        port,
        settings,
        {"SERVER_SLO_MS": f"{args.slo_ms:g}"},
        cpus=cpus,
        extra_args=("--standin-accelerator-ms", f"{args.batch_ms:g}"),
    )
    outputs = [
        {"name": "logits", "datatype": "FP32", "shape": [1, len(labels)]},
        {"name": "label", "datatype": "BYTES", "shape": [1]},
    ]
    return server, f"http://127.0.0.1:{port}/v2/models/model/infer", outputs


def peak(args) -> int:
    """The real distributed run at --peak: the figures `inferstack loadtest` would report, and the CPU it took."""
    if args.serve_workers:
        return peak_against_serve(args)
    port = free_port()
    where = (f"server on CPUs {args.server_cpus}, " if args.server_cpus else "server unpinned, ") + (
        f"Locust on CPUs {args.generator_cpus}" if args.generator_cpus else "Locust unpinned"
    )
    print(
        f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; {args.workers} workers offering "
        f"{args.peak:g} req/s for {args.seconds:g} s (open system, SLO {args.slo_ms:g} ms); {where}"
    )
    with tempfile.TemporaryDirectory(prefix="loadtest-peak-") as scratch:
        workdir = Path(scratch)
        server = start_server(workdir, port, args.server_cpus)
        if args.generator_cpus:
            os.sched_setaffinity(0, cpu_set(args.generator_cpus))  # inherited by the Locust processes
        try:
            spec = spec_for(
                Target(kind="http", url=f"http://127.0.0.1:{port}/v2/models/m/infer"),
                args.peak,
                args.slo_ms,
                args.seconds,
            )
            served_before = served(port)
            result = runner.run_local(
                spec, workdir / "out", workers=args.workers, on_progress=lambda line: print(f"  {line}", flush=True)
            )
            print(f"server counted {served(port) - served_before:,} requests")
        finally:
            runner.stop_groups([server], grace_s=10)
    return print_peak(args, result)


def peak_against_serve(args) -> int:
    """--peak with the serving app as the target (--serve-workers)."""
    port = free_port()
    limit = args.serve_workers * 16 / (args.batch_ms / 1000)
    where = (f"server on CPUs {args.server_cpus}, " if args.server_cpus else "server unpinned, ") + (
        f"Locust on CPUs {args.generator_cpus}" if args.generator_cpus else "Locust unpinned"
    )
    print(
        f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
        f"serve.py, {args.serve_workers} workers "
        f"on the emulated accelerator ({args.batch_ms:g} ms per batch of up to 16: limit {limit:,.0f} req/s); "
        f"{f'{args.workers} Locust workers' if args.client == 'locust' else 'one native client'} offering "
        f"{args.peak:g} req/s for {args.seconds:g} s (open system, SLO {args.slo_ms:g} ms); "
        f"{where.replace('Locust', 'the generator')}"
    )
    with tempfile.TemporaryDirectory(prefix="loadtest-serve-") as scratch:
        workdir = Path(scratch)
        server, url, outputs = start_serving_app(workdir, port, args)
        if args.generator_cpus:
            os.sched_setaffinity(0, cpu_set(args.generator_cpus))
        if args.client == "native":
            try:
                return native_against_serve(args, workdir, server, port)
            finally:
                stop_serving_app(server)
        import serve_bench  # on sys.path since start_serving_app

        tree = psutil.Process(server.pid)
        cpu_before, (rows_before, batches_before) = cpu_seconds(tree), serve_bench.batch_stats(port)
        try:
            spec = LoadTestSpec(
                model="model",
                target=Target(kind="http", url=url),
                bodies=(BODY,),
                outputs=tuple(ExpectedOutput(o["name"], o["datatype"], tuple(o["shape"])) for o in outputs),
                steps=(Step(rate=args.peak, seconds=args.seconds),),
                p99_slo_ms=args.slo_ms,
            )
            result = runner.run_local(
                spec, workdir / "out", workers=args.workers, on_progress=lambda line: print(f"  {line}", flush=True)
            )
            # The server's side of the run, from the warm server's state to the drained one: its CPU (every
            # process, tokenization included) per request it answered, and how full its batches were.
            cpu = cpu_seconds(tree) - cpu_before
            rows_after, batches_after = serve_bench.batch_stats(port)
            rows, batches = rows_after - rows_before, batches_after - batches_before
        finally:
            stop_serving_app(server)
    status = print_peak(args, result)
    (step,) = result.steps
    print(
        f"server: {cpu * 1e6 / max(step.answered + step.rejected, 1):,.0f} µs of CPU per request answered or "
        f"refused ({cpu:.1f} s over {step.answered:,} answered and {step.rejected:,} refused, every process); "
        f"{rows / max(batches, 1):.1f} rows per batch over {batches:,.0f} batches "
        f"({batches / args.serve_workers / max(step.seconds, 1e-9):,.0f} a second per worker)"
    )
    return status


def stop_serving_app(server: subprocess.Popen) -> None:
    server.terminate()  # serve.py drains, and its supervisor stops the workers
    try:
        server.wait(60)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(10)


def native_against_serve(args, workdir: Path, server: subprocess.Popen, port: int) -> int:
    """--client native: the same open system from benchmarks/floor/load_client.c, one process of compiled code
    instead of Locust, for where the cores left to Locust cannot send the rate on time (a Locust worker spends
    about 450 µs of CPU per request): the server's p99 from the due time, with a generator that is not the
    bottleneck. Prints the figures and the verdict by the same rule: p99 within the SLO, errors within 0.1 %."""
    import turnaround_floor  # the benchmarks share their setup; on sys.path since start_serving_app

    _, client = turnaround_floor.build(workdir)
    requests = workdir / "requests.bin"
    bodies = turnaround_floor.peers.request_bytes("/v2/models/model/infer", turnaround_floor.sb.sample_texts(256))
    requests.write_bytes(b"".join(body + b"\0" for body in bodies))
    # HTTP/1.1 carries one request at a time per connection: enough that a request due finds an idle one while
    # those ahead of it take up to twice the SLO.
    connections = min(1024, max(64, math.ceil(args.peak * args.slo_ms / 1000 * 2)))
    run = argparse.Namespace(
        seconds=args.seconds, warmup=1.0, workers=args.serve_workers, connection_order=args.connection_order
    )
    # The client inherits this process's CPUs: peak_against_serve has pinned it to --generator-cpus.
    cell = turnaround_floor.measure([server], client, [port], connections, run, requests, args.peak, None, port)
    sent = cell.rps * args.seconds + cell.refused
    errors = 100.0 * cell.refused / sent if sent else 0.0
    good = cell.p99_ms <= args.slo_ms and errors <= DEFAULT_ERROR_BUDGET_PERCENT
    print(
        f"native client (benchmarks/floor/load_client.c, {connections} connections, each request on the one "
        f"{turnaround_floor.ORDERS[args.connection_order]}, after a 1 s closed-loop "
        f"warm-up): answered {cell.rps:,.0f} req/s, refused {cell.refused:,} ({errors:.2f} %), "
        f"{cell.late:,} sent more than 1 ms late, {cell.reconnects:,} sent on a new connection after a "
        f"'connection: close'; from the due time p50 {cell.p50_ms:.2f} ms, "
        f"p99 {cell.p99_ms:.2f} ms; verdict {'pass' if good else 'fail'} "
        f"(p99 <= {args.slo_ms:g} ms, errors <= {DEFAULT_ERROR_BUDGET_PERCENT:g} %)"
    )
    print(
        f"server: {cell.cpu_us:,.0f} µs of CPU per request, the warm-up's included (every process); "
        f"{cell.rows_per_batch or 0:.1f} rows per batch, {cell.cycle_ms or 0:.2f} ms per batch per worker "
        f"(the measured run)"
    )
    return 0


def print_peak(args, result) -> int:
    """The run's report as `inferstack loadtest` prints it, and what the generators sent and spent."""
    print(report.text(result), end="")
    (step,) = result.steps
    workers = [g for g in result.generators if g.name.startswith("worker-")]
    print(
        f"\n{args.workers} workers: sent {step.offered:,} ({step.offered / step.seconds:,.0f}/s) of "
        f"{step.due:,.0f} due, {step.late} late; workers' CPU max {max(g.max_cpu_percent for g in workers):.0f} %, "
        f"mean {sum(g.mean_cpu_percent for g in workers) / len(workers):.0f} %; verdict {result.verdict}"
    )
    return 0


def cpu_set(text: str) -> set[int]:
    """A taskset-style CPU list ("0-5,8") as a set of CPU numbers."""
    return {c for part in text.split(",") for c in _cpu_range(part)}


def _cpu_range(part: str) -> range:
    low, _, high = part.partition("-")
    return range(int(low), int(high or low) + 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=2000.0, help="requests a second each client sends (default 2000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per client (default 10)")
    parser.add_argument(
        "--slo-ms",
        type=float,
        default=10.0,
        help="the p99 SLO: (a)'s late threshold and (b)'s closed-loop pacing (default 10)",
    )
    parser.add_argument("--no-verify", action="store_true", help="skip (a) at the rate its CPU cost allows")
    parser.add_argument("--peak", type=float, metavar="R", help="instead: a distributed run offering R req/s")
    parser.add_argument("--workers", type=int, default=8, help="with --peak: Locust workers (default 8)")
    parser.add_argument("--server-cpus", metavar="LIST", help="pin the target server to these CPUs (taskset -c)")
    parser.add_argument("--generator-cpus", metavar="LIST", help="with --peak: pin the Locust processes to these CPUs")
    parser.add_argument(
        "--serve-workers",
        type=int,
        default=0,
        metavar="W",
        help="with --peak: the target is serve.py with W workers on the emulated accelerator",
    )
    parser.add_argument(
        "--client",
        choices=("locust", "native"),
        default="locust",
        help="with --serve-workers: the project's distributed Locust run, or one compiled open-system client",
    )
    parser.add_argument(
        "--connection-order",
        default="lifo",
        help="with --client native: lifo (default), each due request on the connection answered last, or fifo, on "
        "the one idle longest (round the connections in turn)",
    )
    parser.add_argument("--batch-ms", type=float, default=3.0, help="with --serve-workers: emulated time per batch")
    parser.add_argument(
        "--model-dir", type=Path, help="with --serve-workers: a compiled CPU artifact (default: build one)"
    )
    args = parser.parse_args(argv)
    if args.serve_workers < 0 or (args.serve_workers and args.peak is None):
        parser.exit(2, f"{parser.prog}: error: --serve-workers: a positive number of workers, with --peak\n")
    if args.client == "native" and not args.serve_workers:
        parser.exit(2, f"{parser.prog}: error: --client native: only against the serving app (--serve-workers)\n")
    import turnaround_floor  # its generator's orders; benchmarks/, this script's folder, is first on sys.path

    if args.connection_order not in turnaround_floor.ORDERS:
        orders = " or ".join(turnaround_floor.ORDERS)
        parser.exit(2, f"{parser.prog}: error: --connection-order: {orders}, got {args.connection_order!r}\n")
    if args.connection_order != "lifo" and args.client != "native":
        parser.exit(2, f"{parser.prog}: error: --connection-order: only with --client native\n")
    if not (math.isfinite(args.batch_ms) and args.batch_ms > 0):
        parser.exit(2, f"{parser.prog}: error: --batch-ms: must be a number > 0, got {args.batch_ms:g}\n")
    for flag, value in (
        ("--rate", args.rate),
        ("--seconds", args.seconds),
        ("--slo-ms", args.slo_ms),
        ("--peak", args.peak if args.peak is not None else 1.0),
    ):
        if not (math.isfinite(value) and value > 0):
            parser.exit(2, f"{parser.prog}: error: {flag}: must be a number > 0, got {value:g}\n")
    if not 1 <= args.workers <= runner.MAX_WORKERS:
        parser.exit(2, f"{parser.prog}: error: --workers: must be within 1..{runner.MAX_WORKERS}\n")
    if args.peak is not None:
        return peak(args)

    users, per_user = old_pace(args.rate, args.slo_ms)
    print(
        f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; each client at {args.rate:g} "
        f"req/s ((a) open, one scheduling user; (b) closed loop, {users} users x {per_user:g}/s), "
        f"{args.seconds:g} s measured after {WARMUP_S:g} s"
    )
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="loadtest-bench-") as scratch:
        workdir = Path(scratch)
        server = start_server(workdir, port, args.server_cpus)
        try:
            rows = [
                measure(
                    "(a) inferstack locustfile",
                    *inferstack_client(port, args.rate, args.slo_ms, args.seconds, workdir),
                    port,
                    args.seconds,
                    workdir,
                ),
                measure(
                    "(b) stock FastHttpUser",
                    *stock_client(port, args.rate, args.slo_ms, "fast", workdir),
                    port,
                    args.seconds,
                    workdir,
                ),
                measure(
                    "(c) stock HttpUser",
                    *stock_client(port, args.rate, args.slo_ms, "requests", workdir),
                    port,
                    args.seconds,
                    workdir,
                ),
                measure(
                    "(d) raw socket floor",
                    [sys.executable, "-c", RAW, str(port), str(args.rate)],
                    dict(os.environ),
                    port,
                    args.seconds,
                    workdir,
                ),
                measure(
                    "(e) locustfile, SageMaker",
                    *inferstack_client(port, args.rate, args.slo_ms, args.seconds, workdir, kind="sagemaker"),
                    port,
                    args.seconds,
                    workdir,
                ),
                measure(
                    "(f) stock boto3 User",
                    *stock_client(port, args.rate, args.slo_ms, "boto3", workdir),
                    port,
                    args.seconds,
                    workdir,
                ),
            ]
            print(f"\n{'client':<28} {'req/s':>8} {'CPU %':>6} {'us/req':>7} {'req/s at 90 % CPU':>18}")
            for row in rows:
                allows = SATURATED * 1e6 / row["us_per_request"]
                print(
                    f"{row['name']:<28} {row['rate']:>8.1f} {row['cpu_percent']:>6.1f} "
                    f"{row['us_per_request']:>7.0f} {allows:>18,.0f}"
                )
            ours = rows[0]
            print(
                f"\n(a) costs {ours['us_per_request'] / rows[1]['us_per_request']:.2f}x stock FastHttpUser's CPU "
                f"per request, {ours['us_per_request'] / rows[2]['us_per_request']:.2f}x HttpUser's, "
                f"{ours['us_per_request'] / rows[3]['us_per_request']:.1f}x the raw floor's"
            )
            print(
                f"(e) costs {rows[4]['us_per_request'] / rows[5]['us_per_request']:.2f}x boto3's invoke_endpoint "
                f"(f) per request, {rows[4]['us_per_request'] / ours['us_per_request']:.2f}x the HTTP user (a)"
            )
            if not args.no_verify:
                print()
                sustained = {}
                for row, client in ((rows[0], "a"), (rows[1], "b"), (rows[4], "e")):
                    target = math.floor(SATURATED * 1e6 / row["us_per_request"] / 100) * 100
                    made = (
                        inferstack_client(port, target, args.slo_ms, args.seconds, workdir)
                        if client == "a"
                        else inferstack_client(port, target, args.slo_ms, args.seconds, workdir, kind="sagemaker")
                        if client == "e"
                        else stock_client(port, target, args.slo_ms, "fast", workdir)
                    )
                    check = measure(f"({client}) at {target}", *made, port, args.seconds, workdir)
                    verdict = (
                        "sustained"
                        if check["rate"] >= 0.95 * target and check["cpu_percent"] < 100 * SATURATED
                        else "NOT sustained"
                    )
                    print(
                        f"{row['name']} offered {target:,} req/s: answered {check['rate']:,.0f} req/s at "
                        f"{check['cpu_percent']:.0f} % CPU ({check['us_per_request']:.0f} us/req): {verdict}"
                    )
                    sustained[client] = check["rate"] if verdict == "sustained" else None
                for row, client, name in (
                    (rows[0], "a", "open model (a)"),
                    (rows[1], "b", "closed loop (b)"),
                    (rows[4], "e", "SageMaker (e)"),
                ):
                    allows = SATURATED * 1e6 / row["us_per_request"]
                    rate = sustained.get(client)
                    print(
                        f"reference peak {REFERENCE_PEAK:,} req/s with {name}: {math.ceil(REFERENCE_PEAK / allows)} "
                        f"workers at the {allows:,.0f} req/s its cost allows at 90 % of a core"
                        + (
                            f"; {math.ceil(REFERENCE_PEAK / rate)} at the {rate:,.0f} req/s one sustained"
                            if rate
                            else "; that rate was not sustained when run"
                        )
                    )
        finally:
            runner.stop_groups([server], grace_s=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
