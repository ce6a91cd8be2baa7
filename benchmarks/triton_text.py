"""What the text ensemble (`<name>-text`: tokenizer step -> token-id model -> postprocessing step) adds per request
against client-side tokenization (TextCodec + POST of token ids to the token-id model `<name>` by name), on the real
tritonserver 2.51 here (CPU).

    python benchmarks/triton_text.py [--models bert-large-classifier,t5-spelling] [--concurrency 1,4,16]
        [--seconds 5] [--paced-fraction 0.5 | --rate R] [--texts 1] [--work DIR]

Each model is served as the real-Triton tier serves it (tests/support/real_triton.py, rehearsal/triton_server.py):
a tiny random checkpoint of the shipped model's task and labels, exported by container/triton/export.py with the
shipped serving settings (sequence length, batching, instances), a CPU copy of the repository (KIND_GPU ->
KIND_CPU), the onnxruntime stand-in backend, and without the token-id model's queue policy (sized for the g4dn: on
this CPU it would shed the bursts, as the contract tests' fixture drops it too). tritonserver starts as SageMaker's
serve script starts it, with Triton's HTTP front end also on loopback. Two paths, on the same server:
  ensemble:    the text to SageMaker's front end, POST /invocations (the default model, `<name>-text`); the reply
               is the label (and logits) or the text;
  client-side: TextCodec.encode on the caller, the ids to POST /v2/models/<name>/infer on Triton's HTTP front
               end, and the caller's own postprocessing (argmax -> label, or decode -> text).
Loads, both paths at each, side by side (the order alternates from one load to the next):
  closed c=N:   N keep-alive connections sending requests back to back for --seconds;
  paced R/s:    open loop: request i is due at start + i / R and sent then on a new connection whatever the
                others do; latency counts from when it was due. R: --rate, else --paced-fraction of the lower
                of the two paths' best closed-loop req/s, the same R for both.
Per row: requests, answered 200, other; req/s; latency p50 / p99 / mean (ms, from the caller's first step:
tokenization on the client-side path); client CPU ms per request (the request's own thread: JSON, and for the
client-side path tokenization and postprocessing, which the caller pays; TOKENIZERS_PARALLELISM=false so it runs
on that thread); server CPU ms per request (tritonserver and its Python-backend stubs, from /proc); mean rows per
execute of the first ONNX graph (the token-id model still batches). Each `difference` row is ensemble minus
client-side. The load generator is one Python process (threads) on this machine, sharing its cores with
tritonserver. Prints figures only, never asserts.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the caller's tokenization on the calling thread (counted there)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402 - after sys.path is set
import serve_bench as sb  # noqa: E402 - after sys.path is set; the benchmarks share their setup (scripts)

from inferstack.triton import client as triton_client  # noqa: E402 - after sys.path is set
from inferstack.triton import config as triton_config  # noqa: E402 - after sys.path is set
from inferstack.triton.config import RepositorySpec  # noqa: E402 - after sys.path is set
from rehearsal import triton_server  # noqa: E402 - after sys.path is set
from tests.support import real_triton  # noqa: E402 - after sys.path is set

MODELS = tuple(real_triton.TRITON_MODELS)
JSON = {"Content-Type": "application/json"}
WARMUP_REQUESTS = 10


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse prints the usage block over several lines by default
        self.exit(2, f"{self.prog}: error: {message}\n")


# ---------------------------------------------------------------- the served model


@dataclass
class Served:
    name: str
    spec: RepositorySpec
    server: triton_server.TritonServer
    codec: triton_client.TextCodec
    batch_log: Path

    @property
    def task(self) -> str:
        return self.spec.source.task

    @property
    def first_graph(self) -> str:
        return self.name if self.task == "text-classification" else f"{self.name}-encoder"


def export(name: str, work: Path) -> tuple[RepositorySpec, Path]:
    """The tier's tiny checkpoint and export of the shipped model, without the queue policy; kept in `work` (a
    second run with the same --work reuses it)."""
    model = real_triton.shipped(name)
    spec = real_triton.tiny_spec(
        RepositorySpec.of(model).model_copy(update={"queue_policy": None}).model_dump(mode="json"),
        work / "checkpoint" / "model",
    )
    repository = work / "repository"
    done = work / ".done"
    if done.exists() and json.loads(done.read_text()) == json.loads(spec.model_dump_json()):
        return spec, repository
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if model.source.task == "text2text-generation":
        real_triton._tiny_t5(work / "checkpoint")
    else:
        real_triton._tiny_bert(work / "checkpoint", list(model.source.labels))
    result = real_triton._run(
        str(real_triton.EXPORT), "--out", str(repository), env={"TRITON_REPOSITORY_SPEC": spec.model_dump_json()}
    )
    if result.returncode != 0:
        raise SystemExit(f"{name}: export.py exited {result.returncode}: {result.stderr.strip()}")
    done.write_text(spec.model_dump_json())
    return spec, repository


def start(name: str, work: Path, install: triton_server.TritonInstall) -> Served:
    spec, repository = export(name, work / "export")
    run = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    copy = run / "model"  # stands for /opt/ml/model
    triton_server.cpu_copy(repository, copy)
    batch_log = run / "batches.jsonl"
    server = triton_server.TritonServer(
        copy,
        triton_config.server_environment(spec),
        work_dir=run / "server",
        install=install,
        extra_env={triton_server.BATCH_LOG_ENV: str(batch_log)},
        http_front_end=True,
    )
    server.start()
    return Served(name, spec, server, triton_client.TextCodec.from_repository(copy / name), batch_log)


def server_cpu_seconds(pid: int) -> float:
    """utime + stime of tritonserver and every process of its session (the Python-backend stubs)."""
    ticks = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry) == pid or int(fields[3]) == pid:  # fields[3]: the session id (started in a new session)
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- the two paths


@dataclass(frozen=True)
class Sample:
    status: int  # 0: no HTTP answer
    latency: float  # seconds from the caller's first step (or from when the request was due)
    cpu: float  # the request's own thread CPU on the caller, seconds
    answer: tuple = ()


class Route:
    """One way of getting an answer for texts: `call(connection, texts, t0)` -> Sample."""

    label: str

    def __init__(self, served: Served):
        self.served = served

    def port(self) -> int:
        raise NotImplementedError

    def call(self, connection: http.client.HTTPConnection, texts: list[str], t0: float) -> Sample:
        cpu = time.thread_time()
        method, body = self.request(texts)
        cpu = time.thread_time() - cpu
        try:
            connection.request("POST", method, body=body, headers=JSON)
            response = connection.getresponse()
            reply = response.read()
        except (OSError, http.client.HTTPException):
            connection.close()  # reconnects on the next request
            return Sample(0, time.perf_counter() - t0, cpu)
        cpu_after = time.thread_time()
        answer = self.answer(reply) if response.status == 200 else ()
        cpu += time.thread_time() - cpu_after
        return Sample(response.status, time.perf_counter() - t0, cpu, answer)

    def request(self, texts: list[str]) -> tuple[str, bytes]:
        raise NotImplementedError

    def answer(self, reply: bytes) -> tuple:
        raise NotImplementedError


class Ensemble(Route):
    label = "ensemble"

    def port(self) -> int:
        return self.served.server.port

    def request(self, texts):
        return "/invocations", json.dumps(
            {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts)], "data": texts}]}
        ).encode()

    def answer(self, reply):
        outputs = {t["name"]: t["data"] for t in json.loads(reply)["outputs"]}
        return tuple(outputs["label"] if self.served.task == "text-classification" else outputs["text"])


class ClientSide(Route):
    label = "client-side"

    def __init__(self, served: Served):
        super().__init__(served)
        self.output = "logits" if served.task == "text-classification" else "output_ids"
        self.labels = list(served.spec.source.labels)

    def port(self) -> int:
        return self.served.server.http_port

    def request(self, texts):
        body = triton_client.request_body(self.served.codec.encode(texts), outputs=[self.output])
        return f"/v2/models/{self.served.name}/infer", json.dumps(body).encode()

    def answer(self, reply):
        produced = triton_client.parse_response(reply)[self.output]
        if self.served.task == "text-classification":
            return tuple(self.labels[i] for i in np.argmax(produced, axis=1))
        return tuple(self.served.codec.decode(produced))


# ---------------------------------------------------------------- loads


@dataclass
class Run:
    samples: list[Sample]
    seconds: float  # from the start (or the first request due) to the last answer
    server_cpu: float
    batches: list[dict]


def measure(served: Served, load: Callable[[], tuple[list[Sample], float]]) -> Run:
    already = len(triton_server.read_batch_log(served.batch_log))
    cpu = server_cpu_seconds(served.server.process.pid)
    samples, seconds = load()
    cpu = server_cpu_seconds(served.server.process.pid) - cpu
    batches = [r for r in triton_server.read_batch_log(served.batch_log)[already:] if r["model"] == served.first_graph]
    return Run(samples, seconds, cpu, batches)


def closed_loop(path: Route, texts: list[list[str]], concurrency: int, seconds: float) -> tuple[list[Sample], float]:
    """`concurrency` keep-alive connections, each sending its next request when the last is answered."""
    results: list[list[Sample]] = [[] for _ in range(concurrency)]
    barrier = threading.Barrier(concurrency + 1)
    stop = [math.inf]

    def worker(index: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", path.port(), timeout=120)
        barrier.wait()
        i = index
        while time.perf_counter() < stop[0]:
            results[index].append(path.call(connection, texts[i % len(texts)], time.perf_counter()))
            i += concurrency
        connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    start = time.perf_counter()
    stop[0] = start + seconds
    barrier.wait()
    for thread in threads:
        thread.join()
    return [s for r in results for s in r], time.perf_counter() - start


def paced(path: Route, texts: list[list[str]], rate: float, seconds: float) -> tuple[list[Sample], float]:
    """Open loop: request i due at start + i / rate, sent then on a new connection by a thread of the pool (a
    late thread's delay counts: latency runs from when the request was due)."""
    count = max(1, round(rate * seconds))
    samples: list[Sample | None] = [None] * count
    start = time.perf_counter() + 0.2

    def one(i: int) -> None:
        due = start + i / rate
        time.sleep(max(0.0, due - time.perf_counter()))
        connection = http.client.HTTPConnection("127.0.0.1", path.port(), timeout=120)
        try:
            samples[i] = path.call(connection, texts[i % len(texts)], due)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=min(count, 256)) as pool:
        list(pool.map(one, range(count)))
    return samples, time.perf_counter() - start  # type: ignore[return-value]


# ---------------------------------------------------------------- the report


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else math.nan


def figures(run: Run) -> dict[str, float]:
    ok = [s for s in run.samples if s.status == 200]
    latencies = [s.latency for s in ok]
    n = max(1, len(run.samples))
    return {
        "requests": len(run.samples),
        "ok": len(ok),
        "other": len(run.samples) - len(ok),
        "rps": len(ok) / run.seconds if run.seconds > 0 else math.nan,
        "p50": 1000 * quantile(latencies, 0.5),
        "p99": 1000 * quantile(latencies, 0.99),
        "mean": 1000 * sum(latencies) / len(latencies) if latencies else math.nan,
        "client_cpu": 1000 * sum(s.cpu for s in run.samples) / n,
        "server_cpu": 1000 * run.server_cpu / n,
        "rows": (sum(b["rows"] for b in run.batches) / len(run.batches)) if run.batches else math.nan,
    }


HEADER = (
    f"{'load':>13} | {'path':<11} | {'requests':>8} {'200':>6} {'other':>5} | {'req/s':>7} | "
    f"{'p50 ms':>7} {'p99 ms':>7} {'mean ms':>7} | {'client CPU':>10} {'server CPU':>10} | {'rows/exec':>9}"
)


def row(load: str, path: str, f: dict[str, float]) -> str:
    return (
        f"{load:>13} | {path:<11} | {f['requests']:>8} {f['ok']:>6} {f['other']:>5} | {f['rps']:>7.1f} | "
        f"{f['p50']:>7.1f} {f['p99']:>7.1f} {f['mean']:>7.1f} | {f['client_cpu']:>10.2f} {f['server_cpu']:>10.2f} | "
        f"{f['rows']:>9.2f}"
    )


def difference(load: str, e: dict[str, float], c: dict[str, float]) -> str:
    d = {k: e[k] - c[k] for k in ("rps", "p50", "p99", "mean", "client_cpu", "server_cpu", "rows")}
    return (
        f"{load:>13} | {'difference':<11} | {'':>8} {'':>6} {'':>5} | {d['rps']:>+7.1f} | {d['p50']:>+7.1f} "
        f"{d['p99']:>+7.1f} {d['mean']:>+7.1f} | {d['client_cpu']:>+10.2f} {d['server_cpu']:>+10.2f} | "
        f"{d['rows']:>+9.2f}"
    )


def load_average() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def bench(served: Served, args: argparse.Namespace) -> None:
    paths = [Ensemble(served), ClientSide(served)]
    pool = sb.sample_texts(256)
    texts = [[pool[(i * args.texts + j) % len(pool)] for j in range(args.texts)] for i in range(len(pool))]
    # Warm-up (each path's first requests pay for connections and first executions), and a check that the two
    # paths answer alike.
    agree = True
    for route in paths:
        connection = http.client.HTTPConnection("127.0.0.1", route.port(), timeout=120)
        for i in range(WARMUP_REQUESTS):
            route.call(connection, texts[i], time.perf_counter())
        connection.close()
    for i in range(WARMUP_REQUESTS):
        answers = []
        for route in paths:
            connection = http.client.HTTPConnection("127.0.0.1", route.port(), timeout=120)
            answers.append(route.call(connection, texts[i], time.perf_counter()).answer)
            connection.close()
        agree = agree and answers[0] == answers[1] and len(answers[0]) == args.texts
    print(f"both paths give the same answers for {WARMUP_REQUESTS} requests: {'yes' if agree else 'NO'}")
    print(HEADER)
    best = {p.label: 0.0 for p in paths}
    for index, concurrency in enumerate(args.concurrency):
        load = f"closed c={concurrency}"
        got = {}
        for route in paths if index % 2 == 0 else paths[::-1]:
            got[route.label] = figures(
                measure(served, lambda r=route, c=concurrency: closed_loop(r, texts, c, args.seconds))
            )
            best[route.label] = max(best[route.label], got[route.label]["rps"])
        for route in paths:
            print(row(load, route.label, got[route.label]))
        print(difference(load, got["ensemble"], got["client-side"]))
    rate = args.rate or args.paced_fraction * min(best.values())
    if rate > 0:
        load = f"paced {rate:.1f}/s"
        got = {}
        for route in paths if len(args.concurrency) % 2 == 0 else paths[::-1]:
            got[route.label] = figures(measure(served, lambda r=route: paced(r, texts, rate, args.seconds)))
        for route in paths:
            print(row(load, route.label, got[route.label]))
        print(difference(load, got["ensemble"], got["client-side"]))
    else:
        print("paced: skipped (no closed-loop request was answered, so no rate to pace at)")


# ---------------------------------------------------------------- arguments


def positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a {kind.__name__} > 0, got {text}") from None
        if not value > 0 or not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a {kind.__name__} > 0, got {text}")
        return value

    return parse


def concurrency_list(text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"a comma-separated list of positive integers, got {text!r}")
    return [int(p) for p in parts]


def model_list(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",")]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"not a shipped Triton model: {', '.join(map(repr, unknown))} (models: {', '.join(MODELS)})"
        )
    return list(dict.fromkeys(names))


def fraction(text: str) -> float:
    value = positive(float)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be within (0, 1], got {text}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = OneLineParser(prog="triton_text.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=model_list, default=list(MODELS), help="comma-separated, default all")
    parser.add_argument("--concurrency", type=concurrency_list, default=[1, 4, 16], help="closed-loop levels")
    parser.add_argument("--seconds", type=positive(float), default=5.0, help="per load and path")
    pacing = parser.add_mutually_exclusive_group()
    pacing.add_argument(
        "--paced-fraction",
        type=fraction,
        default=0.5,
        help="paced rate / the lower of the two paths' best closed-loop req/s",
    )
    pacing.add_argument("--rate", type=positive(float), help="paced rate in req/s (instead of --paced-fraction)")
    parser.add_argument("--texts", type=positive(int), default=1, help="texts per request")
    parser.add_argument(
        "--work", type=Path, help="keep checkpoints and exports here and reuse them (default: a temporary directory)"
    )
    args = parser.parse_args(argv)
    limit = min(real_triton.shipped(m).serving.max_batch_size for m in args.models)
    if args.texts > limit:
        parser.error(f"--texts: at most {limit} (the max_batch_size of {', '.join(args.models)}), got {args.texts}")
    if args.work is not None and args.work.exists() and not args.work.is_dir():
        parser.error(f"--work: {args.work} is not a directory")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install = triton_server.TritonInstall.locate()
    print(
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node() or 'this machine'}: tritonserver 2.51 "
        f"(real) on CPU, onnxruntime stand-in backend; load average {load_average()}"
    )
    print(
        f"load generator: one Python process (threads) on this machine ({os.cpu_count()} cores), sharing them with "
        f"tritonserver, its Python-backend stubs and whatever else runs; {args.texts} text(s) per request"
    )
    print(
        "ensemble: POST /invocations (SageMaker's front end) -> <name>-text; client-side: TextCodec + POST "
        "/v2/models/<name>/infer (Triton's HTTP front end) + the caller's postprocessing. CPU columns: ms per "
        "request; difference rows: ensemble minus client-side"
    )
    work = args.work or Path(tempfile.mkdtemp(prefix="triton-text-"))
    try:
        for name in args.models:
            served = start(name, work / name, install)
            try:
                spec = served.spec
                print(
                    f"\n{name} ({spec.source.task}, tiny random checkpoint, shipped serving settings: sequence "
                    f"length {spec.export.sequence_length}, max_batch_size {spec.serving.max_batch_size}, "
                    f"{spec.serving.instance_group.count} instance(s) of the token-id graph(s), "
                    f"{spec.serving.tokenizer_instances} of each text step; no queue policy)"
                )
                bench(served, args)
            finally:
                served.server.stop()
            print(f"load average after {name}: {load_average()}")
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
