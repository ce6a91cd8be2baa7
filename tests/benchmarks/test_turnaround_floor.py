"""benchmarks/turnaround_floor.py: the native and Python floors beside serve.py, end to end on the tiny artifact,
and its native load generator's open system. Asserted: what the behaviour decides (every server answered, a
paced run sends what fell due), never a timing."""

from __future__ import annotations

import collections
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import pytest

from tests.support.neuron_server import run_script
from tests.support.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "turnaround_floor.py"
FLOOR = ROOT / "benchmarks" / "floor"
SERVERS = ("native", "python", "python+json", "python+work", "app-python", "app-body", "app")
ROW = re.compile(r"^(\S+) +\| +(\d+)% \( *([\d,]+)\), +[\d.]+ / +[\d.]+, +(\d+) µs +\| +([\d,]+), +[\d.]+", re.M)


def test_the_floors_and_the_app_are_measured_side_by_side(artifact):
    result = run_script(
        SCRIPT,
        "--model-dir",
        str(artifact),
        "--seconds",
        "0.5",
        "--warmup",
        "0.2",
        "--rounds",
        "1",
        "--levels",
        "16",
        "--paced",
        "0.5",
        "--paced-connections",
        "32",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    rows = {m.group(1): m for m in ROW.finditer(out)}
    assert sorted(rows) == sorted(SERVERS), out
    for server, row in rows.items():
        closed_rps, cpu_us, paced_rps = int(row.group(3).replace(",", "")), int(row.group(4)), row.group(5)
        assert closed_rps > 0 and cpu_us > 0 and int(paced_rps.replace(",", "")) > 0, (server, out)
    for goal in ("goal >= 85% of the limit at 16 connections: ", "goal p99 <= 2 x batch + delay"):
        line = next(line for line in out.splitlines() if line.startswith(goal))
        assert re.findall(r"(\S+) (?:met|MISSED)", line.split(": ", 1)[1]) == list(SERVERS), line
    assert re.search(r"servers on CPU [\d,]+, the load generator alone on CPU \d+|share the CPUs", out), out
    assert "; paced requests on the connection whose reply came last (lifo); " in out.splitlines()[0], out
    # The app's model cycle, from its own batch metrics after the warm-up: rows it batched, and no batch faster than
    # the emulated accelerator allows (the cycle includes the batch).
    cycle = re.search(
        r"^model cycle, app paced at 50%: ([\d.]+) rows per batch, ([\d.]+) ms per batch per worker against the "
        r"([\d.]+) ms batch",
        out,
        re.M,
    )
    assert cycle, out
    rows, cycle_ms, batch_ms = map(float, cycle.groups())
    assert 1 <= rows <= 16 and cycle_ms >= 0.95 * batch_ms, cycle.group(0)
    # The app's CPU split: its workers' event loops (their main threads) and the rest, adding up to the table's.
    table = {m.group(1): m for m in ROW.finditer(out)}
    for kind in ("app-python", "app-body", "app"):
        split = re.search(
            rf"^CPU per request at 16 connections, {kind}: (\d+) µs, of which the workers' event loops (\d+) µs and "
            r"their other threads \(inference, prepare, metrics\) and the supervisor (-?\d+) µs",
            out,
            re.M,
        )
        assert split, out
        total, loop, rest = map(int, split.groups())
        assert 0 < loop < total and rest >= 0 and abs(loop + rest - total) <= 1, split.group(0)
        assert abs(total - int(table[kind].group(4))) <= 1, (split.group(0), table[kind].group(0))


def test_one_worker_each_is_measured_against_one_workers_limit(artifact):
    """--workers 1: every server runs one worker, and the limit, the share and the model cycle are one worker's."""
    args = ["--model-dir", str(artifact), "--workers", "1", "--servers", "native,app", "--levels", "8"]
    args += ["--seconds", "0.5", "--warmup", "0.2", "--rounds", "1", "--paced", "0.5", "--paced-connections", "16"]
    args += ["--paced-rates", "500", "--connection-order", "fifo"]
    result = run_script(SCRIPT, *args, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    header = re.search(
        r"^1 worker\(s\), emulated accelerator ([\d.]+) ms per batch .*: limit ([\d,]+) req/s", out, re.M
    )
    assert header and "; paced requests on the connection idle longest (fifo); " in out.splitlines()[0], out
    batch_ms, limit = float(header.group(1)), int(header.group(2).replace(",", ""))
    assert abs(limit - 16 / batch_ms * 1000) <= 0.005 * limit, header.group(0)  # 16 rows (ms rounded)
    rows = {m.group(1): m for m in ROW.finditer(out)}
    assert sorted(rows) == ["app", "native"], out
    # The share printed is of one worker's limit: rounded from the unrounded rate and limit, so within half a point
    # (and the two roundings' 0.02) of the printed rate over the printed limit.
    for row in rows.values():
        assert abs(int(row.group(2)) - int(row.group(3).replace(",", "")) / limit * 100) <= 0.55, row.group(0)
    # --paced-rates: every server also paced at 500 req/s, its p99 in a column of its own and judged by the bound.
    assert re.search(r"\| paced 500/s: p99 ms *$", out.splitlines()[1]), out
    same = re.search(r"^p99 paced at 500 req/s for every server \((\d+)% of the limit\): (.*)$", out, re.M)
    assert same and abs(int(same.group(1)) - 500 / limit * 100) <= 0.55, out
    assert re.findall(r"(\S+) (?:within|PAST)", same.group(2)) == ["native", "app"], same.group(0)
    assert re.search(r"^model cycle, app paced at 50%: [\d.]+ rows per batch", out, re.M), out


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    """The floor server and the load generator, compiled as the benchmark compiles them."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "the benchmark needs a C compiler (cc) on PATH"
    out = tmp_path_factory.mktemp("floor")
    for name in ("floor_server", "load_client"):
        subprocess.run(
            [compiler, "-O2", "-Wall", "-Werror", "-o", str(out / name), str(FLOOR / f"{name}.c")], check=True
        )
    return out


def test_a_paced_run_sends_every_request_that_fell_due_and_no_more(native, tmp_path):
    """The open system: at 400 req/s for 1.5 s, 600 requests, however fast the server answers; the warm-up's closed
    loop is reported apart."""
    server = subprocess.Popen([str(native / "floor_server"), "2", "3000", "1000"], stdout=subprocess.PIPE, text=True)
    try:
        ports = [server.stdout.readline().split()[1] for _ in range(2)]
        body = b'{"inputs":[{"name":"TEXT","datatype":"BYTES","shape":[1],"data":["hello"]}]}'
        request = b"POST /v2/models/model/infer HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        (tmp_path / "requests.bin").write_bytes(request + b"\0")
        result = subprocess.run(
            [str(native / "load_client"), ",".join(ports), "8", "1.5", str(tmp_path / "requests.bin"), "400"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        subprocess.run(["pkill", "-P", str(server.pid)], check=False)
        server.terminate()
        server.wait()
    assert result.returncode == 0, result.stderr
    fields = dict(item.split("=") for item in result.stdout.split())
    assert int(fields["requests"]) == 600, result.stdout
    assert int(fields["warmup"]) > 0 and int(fields["reconnects"]) == 0, result.stdout


@contextmanager
def accepting(serve):
    """A loopback listener that answers each connection with ``serve(connection)``, in a thread of its own, until
    the block ends; yields its port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)

    def accept():
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:  # closed: the block has ended
                return
            threading.Thread(target=serve, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


def run_client(native, tmp_path, port: int, connections: str, seconds: str, *rate_warmup: str) -> dict[str, str]:
    """The generator sending a bare GET; the fields of the line it printed."""
    (tmp_path / "requests.bin").write_bytes(b"GET / HTTP/1.1\r\n\r\n\0")
    command = [str(native / "load_client"), str(port), connections, seconds, str(tmp_path / "requests.bin")]
    result = subprocess.run([*command, *rate_warmup], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return dict(item.split("=") for item in result.stdout.split())


def test_the_measured_run_goes_out_on_the_connections_the_warm_up_opened(native, tmp_path):
    """A paced run whose connections opened as its schedule started would time the server accepting them all at
    once: 6 connections, a warm-up and a paced run, 6 accepts; and every connection carries paced requests."""
    accepted, served = [], []

    def serve(connection):
        accepted.append(connection)
        with connection:
            while connection.recv(65536):
                served.append(connection)
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    with accepting(serve) as port:
        fields = run_client(native, tmp_path, port, "6", "0.5", "200", "0.2")
    assert int(fields["requests"]) == 100 and int(fields["reconnects"]) == 0, fields
    assert len(accepted) == 6, f"{len(accepted)} connections accepted for 6: {fields}"
    assert len(served) == int(fields["warmup"]) + 100, (len(served), fields)


@pytest.mark.parametrize("order", ["lifo", "fifo"])
def test_a_paced_request_goes_out_on_the_connection_freed_last_or_on_the_one_idle_longest(native, tmp_path, order):
    """ORDER: the server answers at once and requests fall due 20 ms apart, so every connection is idle when one
    falls due. lifo takes the one whose reply came last: the same one, request after request. fifo takes the one
    idle longest: round the 6 connections in turn, 8 or 9 of the 50 requests each."""
    served = []

    def serve(connection):
        with connection:
            while connection.recv(65536):
                served.append(connection)
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    with accepting(serve) as port:
        fields = run_client(native, tmp_path, port, "6", "1", "50", "0.2", order)
    assert int(fields["requests"]) == 50 and int(fields["warmup"]) > 0, fields
    paced = collections.Counter(map(id, served[-50:]))  # the warm-up's closed loop has ended before the run
    # A reply later than the next request's due time (a loaded machine: the full suite once held up 15 of 100 at 5 ms
    # apart) frees another connection first: a few requests, not the run.
    if order == "lifo":
        assert paced.most_common(1)[0][1] >= 38, sorted(paced.values())
    else:
        # In turn: 8 or 9 each; a reply held up past the next request's due time could cost its connection a turn.
        assert len(paced) == 6 and max(paced.values()) - min(paced.values()) <= 2, sorted(paced.values())


def test_a_connection_order_other_than_lifo_or_fifo_is_refused(native, tmp_path):
    (tmp_path / "requests.bin").write_bytes(b"GET / HTTP/1.1\r\n\r\n\0")
    command = [str(native / "load_client"), "1", "6", "1", str(tmp_path / "requests.bin"), "100", "1", "random"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == "load_client: ORDER is lifo or fifo, not random\n", result.stderr


def test_replies_other_than_2xx_are_counted_refused_and_kept_out_of_the_latencies(native, tmp_path):
    """A server shedding load answers 503 in microseconds: counted apart, or they would pass for fast answers.
    Here every other reply is a 503 after no wait and every 200 comes 20 ms after its request."""

    def serve(connection):
        replies = 0
        with connection:
            while connection.recv(65536):
                replies += 1
                if replies % 2:
                    time.sleep(0.02)
                    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                else:
                    connection.sendall(
                        b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n"
                    )

    with accepting(serve) as port:
        fields = run_client(native, tmp_path, port, "1", "1", "0", "0.2")
    answered, refused = int(fields["requests"]), int(fields["refused"])
    assert refused > 0 and abs(answered - refused) <= 1, fields  # alternate replies on one connection
    assert float(fields["p50_ms"]) >= 20, fields  # the 200s' latency only: no instant 503 among them


def test_the_load_generator_refuses_a_server_that_closes_with_a_request_in_flight(native, tmp_path):
    """A connection closed before its reply is an error, not a latency: the run stops with one line."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    (tmp_path / "requests.bin").write_bytes(b"GET / HTTP/1.1\r\n\r\n\0")
    client = subprocess.Popen(
        [str(native / "load_client"), str(port), "1", "1", str(tmp_path / "requests.bin")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    connection, _ = listener.accept()
    connection.recv(100)
    connection.close()
    _, stderr = client.communicate(timeout=30)
    listener.close()
    assert client.returncode == 1 and stderr.strip() == "load_client: the server closed a connection", stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seconds", "0"], "--seconds: must be greater than 0, got 0.0"),
        (["--warmup", "-1"], "--warmup: must be greater than 0, got -1.0"),
        (["--rounds", "0"], "--rounds: at least 1, got 0"),
        (["--paced-connections", "0"], "--paced-connections: from 1 to 1024, got 0"),
        (["--levels", "32,x"], "--levels: a comma-separated list of connection counts from 1 to 1024, got '32,x'"),
        (["--paced", "1.5"], "--paced: a comma-separated list of fractions in (0, 1], got '1.5'"),
        (["--paced-rates", "8000,x"], "--paced-rates: a comma-separated list of req/s above 0, at most 1,000,000, got"),
        (["--paced-rates", "0"], "--paced-rates: a comma-separated list of req/s above 0, at most 1,000,000, got '0'"),
        (["--servers", "app,nginx"], "--servers: a comma-separated list of native, python, python+json, "),
        (["--max-queue-delay-ms", "-1"], "--max-queue-delay-ms: not negative, got -1.0"),
        (["--workers", "0"], "--workers: from 1 to 16, got 0"),
        (["--connection-order", "random"], "--connection-order: lifo or fifo, got 'random'"),
    ],
)
def test_bad_arguments(args, message):
    result = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert message in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr


def test_the_app_is_not_measured_without_its_c_path_built():
    # As if this Python's extensions had another suffix: no _text_scan module for it beside serve.py.
    code = (
        "import runpy, sys, sysconfig; get = sysconfig.get_config_var; "
        "sysconfig.get_config_var = lambda key: '.elsewhere.so' if key == 'EXT_SUFFIX' else get(key); "
        f"sys.argv = [{str(SCRIPT)!r}, '--servers', 'native,app']; runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().endswith("_text_scan.elsewhere.so is not built (make setup)"), result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
