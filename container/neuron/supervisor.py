"""The container's main process: binds the port, starts the workers, relays signals, reaps them.

It never imports torch or a Neuron package: each worker is a fresh interpreter that inherits its
own listening socket on the shared port and its own NEURON_RT_VISIBLE_CORES slice, and loads the
model itself.
The supervisor exits 0 after a SIGTERM/SIGINT once every worker drained and exited 0; if a
worker dies on its own, it stops the others and exits 1 so the orchestrator replaces the task.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from core_ranges import partition
from server_settings import ServerSettings

log = logging.getLogger("supervisor")
SERVE_SCRIPT = str(Path(__file__).with_name("serve.py"))
# prometheus_client's multiprocess mode: every worker writes its samples under this directory.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def bind(settings: ServerSettings, count: int) -> list[socket.socket]:
    """One listening socket per worker, all on the same port (SO_REUSEPORT).

    The kernel spreads new connections over the sockets by their addresses. With one shared
    socket, whichever worker woke first accepted a whole burst of connections: a client (or a
    load balancer) with a few long-lived keep-alive connections then kept one worker busy and
    the others idle (15 of 16 connections on one of two workers, measured).
    """
    # A plain bind first: it fails if anything holds the port, another server's SO_REUSEPORT
    # group included, which the group's own binds would silently join. It also resolves port 0.
    with socket.create_server((settings.host, settings.port)) as probe:
        port = probe.getsockname()[1]
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            socks.append(socket.create_server((settings.host, port), backlog=2048, reuse_port=True))
    except OSError:
        for sock in socks:
            sock.close()
        raise
    for sock in socks:
        sock.set_inheritable(True)
    return socks


def run(settings: ServerSettings, metadata: dict, argv: list[str]) -> int:
    cores_per_model = 0 if metadata["backend"] == "cpu" else int(metadata["neuron_cores_per_model"])
    slices = partition(settings.visible_cores, settings.workers, cores_per_model)
    # One worker keeps its metrics in memory; several share them through files, which costs
    # a little on every observation.
    metrics_dir = tempfile.mkdtemp(prefix="inferstack-metrics-") if settings.workers > 1 else None
    socks = bind(settings, len(slices))
    port = socks[0].getsockname()[1]
    children: dict[int, subprocess.Popen] = {}
    try:
        for index, (cores, sock) in enumerate(zip(slices, socks)):
            env = dict(os.environ, SERVER_WORKER_INDEX=str(index))
            # Tokenization runs on the worker's inference thread; the tokenizers library's own
            # thread pool would only compete with the event loop for the same cores.
            env.setdefault("TOKENIZERS_PARALLELISM", "false")
            env.pop(MULTIPROC_ENV, None)
            if metrics_dir is not None:
                env[MULTIPROC_ENV] = metrics_dir
            if cores is not None:
                env["NEURON_RT_VISIBLE_CORES"] = cores
            command = [sys.executable, SERVE_SCRIPT, *argv, "--worker-fd", str(sock.fileno())]
            child = subprocess.Popen(command, env=env, pass_fds=(sock.fileno(),))
            children[child.pid] = child
            log.info("worker started", extra={"worker": index, "worker_pid": child.pid, "visible_cores": cores, "port": port})
    finally:
        # Workers hold the sockets now; keeping a copy here would let connections queue
        # unanswered after the workers stop listening during a drain.
        for sock in socks:
            sock.close()
    return supervise(children, metrics_dir)


def supervise(children: dict[int, subprocess.Popen], metrics_dir: str | None) -> int:
    stopping = {"signal": None}

    def forward(signum, frame) -> None:
        if stopping["signal"] is None:
            stopping["signal"] = signum
            log.info("stopping workers", extra={"signal": signal.Signals(signum).name})
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    exit_code = 0
    try:
        while children:
            pid, status = os.wait()
            child = children.pop(pid, None)
            if child is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            child.returncode = code
            if metrics_dir is not None:
                _forget_metrics(pid, metrics_dir)
            if stopping["signal"] is None:
                log.error("worker exited unexpectedly; stopping the others", extra={"worker_pid": pid, "exit_code": code})
                exit_code = 1
                forward(signal.SIGTERM, None)
            elif code != 0:
                log.error("worker failed while stopping", extra={"worker_pid": pid, "exit_code": code})
                exit_code = 1
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    log.info("supervisor exiting", extra={"exit_code": exit_code})
    return exit_code


def _forget_metrics(pid: int, metrics_dir: str) -> None:
    """Drop a dead worker's live gauge files so queue depth stops counting it."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, metrics_dir)
