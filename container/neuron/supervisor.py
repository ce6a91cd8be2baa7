"""The container's main process: binds the port, starts the workers, relays signals, reaps them.

It never imports torch or a Neuron package: each worker is a fresh interpreter that inherits the
port's listening socket and its own NEURON_RT_VISIBLE_CORES slice, and loads the model itself. The
workers of one model take turns accepting connections, least-connections first (connection_share.py).
The supervisor exits 0 after a SIGTERM/SIGINT once every worker drained and exited 0; if a
worker dies on its own, it stops the others and exits 1 so the orchestrator replaces the task.
With several packed models (SERVER_MODELS) it does the same for each model at once: every model
gets its own port, its own workers on its own core range, and its own metrics directory; the
workers share one private directory of ready markers (readiness.py).
With SERVER_NEURON_MONITOR it also runs neuron-monitor (neuron_monitor.py) and writes its reports as
EMF lines; each worker tags its Neuron runtime "<model>/<index>" (NEURON_PROCESS_TAG) so they split
per model. neuron-monitor is not a worker: its exit never stops the container.
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
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from compile_settings import SettingsError
from connection_share import ConnectionShare
from core_ranges import partition
from neuron_monitor import NeuronMonitor
from packing import PackedPlan
from readiness import marker_path
from server_settings import ServerSettings

log = logging.getLogger("supervisor")
SERVE_SCRIPT = str(Path(__file__).with_name("serve.py"))
# prometheus_client's multiprocess mode: every worker writes its samples under this directory.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


@dataclass
class WorkerGroup:
    """The workers serving one model on one port."""

    model: str | None  # the packed model's name; None in a single-model container
    slices: list[str | None]  # NEURON_RT_VISIBLE_CORES of each worker
    sock: socket.socket  # the port's listening socket, shared by the group's workers
    metrics_dir: str | None  # shared by the group's workers when there are several
    args: tuple[str, ...] = ()  # added to each worker's command line
    served: str = "model"  # the served model's name: its workers' NEURON_PROCESS_TAG is "<served>/<index>"

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]


@dataclass
class Child:
    process: subprocess.Popen
    group: WorkerGroup
    index: int


def bind(settings: ServerSettings) -> socket.socket:
    return bind_port(settings.host, settings.port)


def bind_port(host: str, port: int) -> socket.socket:
    """The port's listening socket, inherited by each of its workers. One socket, not one per worker
    (SO_REUSEPORT): the kernel's hash spread connections unevenly (6-10 of 16 per worker), and each
    worker batches only its own connections' requests. The workers balance it themselves."""
    sock = socket.create_server((host, port), backlog=2048)
    sock.set_inheritable(True)
    return sock


def _metrics_dir(workers: int) -> str | None:
    # One worker keeps its metrics in memory; several share them through files, which costs
    # a little on every observation.
    return tempfile.mkdtemp(prefix="inferstack-metrics-") if workers > 1 else None


def run(settings: ServerSettings, metadata: dict, argv: list[str]) -> int:
    cores_per_model = 0 if metadata["backend"] == "cpu" else int(metadata["neuron_cores_per_model"])
    slices = partition(settings.visible_cores, settings.workers, cores_per_model)
    sock = bind(settings)
    group = WorkerGroup(None, slices, sock, _metrics_dir(len(slices)), served=settings.model_name)
    children = start([group], argv)
    return supervise(children, [group], ready_dir=None, monitor=start_neuron_monitor(settings, [group.served]))


def run_packed(settings: ServerSettings, plans: list[PackedPlan], argv: list[str]) -> int:
    """Every packed model's sockets are bound before any worker starts: a taken port fails alone."""
    groups: list[WorkerGroup] = []
    try:
        for plan in plans:
            model = plan.model
            try:
                sock = bind_port(settings.host, model.port)
            except OSError as exc:
                reason = os.strerror(exc.errno) if exc.errno else str(exc)  # create_server appends the address
                raise SettingsError(f"{model.label('port')}: cannot listen on {settings.host}:{model.port}: {reason}") from None
            groups.append(WorkerGroup(model.name, list(plan.slices), sock, None, ("--worker-model", model.name),
                                      served=model.name))
    except BaseException:
        for group in groups:
            group.sock.close()
        raise
    for group in groups:
        group.metrics_dir = _metrics_dir(len(group.slices))
    ready_dir = tempfile.mkdtemp(prefix="inferstack-ready-")
    for group in groups:
        group.args += ("--ready-dir", ready_dir)
    children = start(groups, argv)
    monitor = start_neuron_monitor(settings, [group.served for group in groups])
    return supervise(children, groups, ready_dir=ready_dir, monitor=monitor)


def start_neuron_monitor(settings: ServerSettings, models: list[str]) -> NeuronMonitor | None:
    if settings.neuron_monitor is None:
        return None
    directory = Path(tempfile.mkdtemp(prefix="inferstack-neuron-monitor-"))
    return NeuronMonitor(settings.neuron_monitor, service=settings.metrics_service, models=models,
                         interval_s=settings.metrics_interval_s, directory=directory).start()


def start(groups: list[WorkerGroup], argv: list[str]) -> dict[int, Child]:
    children: dict[int, Child] = {}
    shared_fds: list[int] = []
    try:
        for group in groups:
            port = group.port
            fds: tuple[int, ...] = (group.sock.fileno(),)
            share_args: tuple[str, ...] = ()
            if len(group.slices) > 1:
                share = ConnectionShare.create(len(group.slices))
                shared_fds += share
                fds += tuple(share)
                share_args = ("--worker-share", ",".join(map(str, share)))
            for index, cores in enumerate(group.slices):
                # The Neuron runtime reports the tag to neuron-monitor, which reports per model from it.
                env = dict(os.environ, SERVER_WORKER_INDEX=str(index), NEURON_PROCESS_TAG=f"{group.served}/{index}")
                # Tokenization runs on the worker's inference thread; the tokenizers library's own
                # thread pool would only compete with the event loop for the same cores.
                env.setdefault("TOKENIZERS_PARALLELISM", "false")
                env.pop(MULTIPROC_ENV, None)
                if group.metrics_dir is not None:
                    env[MULTIPROC_ENV] = group.metrics_dir
                if cores is not None:
                    env["NEURON_RT_VISIBLE_CORES"] = cores
                command = [sys.executable, SERVE_SCRIPT, *argv, *group.args, "--worker-fd", str(group.sock.fileno()),
                           *share_args]
                process = subprocess.Popen(command, env=env, pass_fds=fds)
                children[process.pid] = Child(process, group, index)
                extra = {"worker": index, "worker_pid": process.pid, "visible_cores": cores, "port": port}
                if group.model is not None:
                    extra["model"] = group.model
                log.info("worker started", extra=extra)
    finally:
        # Workers hold the sockets now; keeping a copy here would let connections queue
        # unanswered after the workers stop listening during a drain.
        for group in groups:
            group.sock.close()
        for fd in shared_fds:
            os.close(fd)
    return children


def supervise(children: dict[int, Child], groups: list[WorkerGroup], *, ready_dir: str | None,
              monitor: NeuronMonitor | None = None) -> int:
    stopping = {"signal": None}

    def forward(signum, frame) -> None:
        if stopping["signal"] is None:
            stopping["signal"] = signum
            log.info("stopping workers", extra={"signal": signal.Signals(signum).name})
        if monitor is not None:
            monitor.signal_stop()
        for child in children.values():
            # os.kill, not Popen.send_signal: that polls, and a worker reaped here would never reach the loop
            # below. An exited worker not yet reaped keeps its pid, so the signal cannot reach another process.
            if child.process.returncode is None:
                try:
                    os.kill(child.process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    exit_code = 0
    leave_alone = monitor.owns if monitor is not None else (lambda pid: False)
    try:
        while children:
            pid, code = wait_for_child(children, leave_alone)
            child = children.pop(pid, None)
            if child is None:
                continue
            child.process.returncode = code
            if child.group.metrics_dir is not None:
                _forget_metrics(pid, child.group.metrics_dir)
            if ready_dir is not None:  # a worker that died cannot remove its own marker
                marker_path(ready_dir, child.group.model, child.index).unlink(missing_ok=True)
            if stopping["signal"] is None:
                log.error("worker exited unexpectedly; stopping the others", extra={"worker_pid": pid, "exit_code": code})
                exit_code = 1
                forward(signal.SIGTERM, None)
            elif code != 0:
                log.error("worker failed while stopping", extra={"worker_pid": pid, "exit_code": code})
                exit_code = 1
    finally:
        if monitor is not None:
            monitor.stop()
        monitor_dir = str(monitor.config_path.parent) if monitor is not None else None
        for directory in [group.metrics_dir for group in groups] + [ready_dir, monitor_dir]:
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)
    log.info("supervisor exiting", extra={"exit_code": exit_code})
    return exit_code


def wait_for_child(children: dict[int, Child], leave_alone: Callable[[int], bool]) -> tuple[int, int]:
    """The next child to exit, reaped: (pid, exit code). A child `leave_alone` claims (neuron-monitor, which
    its own thread reaps to learn its exit code) is only looked at; the workers are polled beside it."""
    while True:
        info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
        if info is not None and (info.si_pid in children or not leave_alone(info.si_pid)):
            pid, status = os.waitpid(info.si_pid, 0)
            return pid, os.waitstatus_to_exitcode(status)
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return done, os.waitstatus_to_exitcode(status)
        time.sleep(0.05)


def _forget_metrics(pid: int, metrics_dir: str) -> None:
    """Drop a dead worker's live gauge files so queue depth stops counting it."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, metrics_dir)
