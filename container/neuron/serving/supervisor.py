"""The container's main process: binds the port, starts the workers, relays signals, reaps them.

It never imports torch or a Neuron package: each worker is a fresh interpreter that inherits the
port's listening socket and its own NEURON_RT_VISIBLE_CORES slice, and loads the model itself. The
workers of one model take turns accepting connections, least-connections first (connection_share.py).
The supervisor exits 0 after a SIGTERM/SIGINT once every worker drained and exited 0. A worker that
dies on its own is restarted in place (same model, cores, index and tag): its connections are lost, its
slot in the connection share is marked away so its siblings take every new connection, and the
replacement joins them only once warm. More than SERVER_MAX_RESTARTS restarts of one worker within
SERVER_RESTART_WINDOW_S is a crash loop: the supervisor stops the others and exits 1 so the
orchestrator replaces the task, as it does when a model fails to load at start-up. Nothing is
restarted once a SIGTERM/SIGINT arrived.
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
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from compile_settings import SettingsError
from connection_share import ShareTable
from core_ranges import partition
from neuron_monitor import NeuronMonitor
from packing import PackedPlan
from readiness import LOAD_FAILED, marker_path, restarting_path
from server_settings import ServerSettings

log = logging.getLogger("supervisor")
SERVE_SCRIPT = str(Path(__file__).with_name("serve.py"))
# prometheus_client's multiprocess mode: every worker writes its samples under this directory.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# How often the supervisor restarted a worker's slot: the worker reports it (metrics.WORKER_RESTARTS).
RESTARTS_ENV = "SERVER_WORKER_RESTARTS"


@dataclass
class WorkerGroup:
    """The workers serving one model on one port."""

    model: str | None  # the packed model's name; None in a single-model container
    slices: list[str | None]  # NEURON_RT_VISIBLE_CORES of each worker
    sock: socket.socket  # the port's listening socket, shared by the group's workers
    metrics_dir: str | None  # shared by the group's workers when there are several
    args: tuple[str, ...] = ()  # added to each worker's command line
    served: str = "model"  # the served model's name: its workers' NEURON_PROCESS_TAG is "<served>/<index>"
    share: ShareTable | None = None  # the workers' connection share, when there are several

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]


@dataclass(frozen=True)
class RestartPolicy:
    """At most ``max_restarts`` restarts of one worker within ``window_s``; 0 restarts none."""

    max_restarts: int = 3
    window_s: float = 300.0

    @classmethod
    def of(cls, settings: ServerSettings) -> RestartPolicy:
        return cls(settings.max_restarts, settings.restart_window_s)


@dataclass
class Slot:
    """One worker's place: what it is started with, kept so that a restart starts the same worker."""

    group: WorkerGroup
    index: int
    command: list[str]
    env: dict[str, str]
    fds: tuple[int, ...]
    port: int
    restarted_at: deque[float] = field(default_factory=deque)  # monotonic times, within the window
    restarts: int = 0  # since the container started

    def describe(self) -> dict:
        extra = {"worker": self.index, "visible_cores": self.group.slices[self.index], "port": self.port}
        if self.group.model is not None:
            extra["model"] = self.group.model
        return extra


@dataclass
class Child:
    process: subprocess.Popen
    slot: Slot
    replacement: bool = False  # started in place of a dead worker

    @property
    def group(self) -> WorkerGroup:
        return self.slot.group

    @property
    def index(self) -> int:
        return self.slot.index


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
    return supervise(
        children,
        [group],
        ready_dir=None,
        monitor=start_neuron_monitor(settings, [group.served]),
        policy=RestartPolicy.of(settings),
    )


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
                raise SettingsError(
                    f"{model.label('port')}: cannot listen on {settings.host}:{model.port}: {reason}"
                ) from None
            groups.append(
                WorkerGroup(
                    model.name, list(plan.slices), sock, None, ("--worker-model", model.name), served=model.name
                )
            )
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
    return supervise(children, groups, ready_dir=ready_dir, monitor=monitor, policy=RestartPolicy.of(settings))


def start_neuron_monitor(settings: ServerSettings, models: list[str]) -> NeuronMonitor | None:
    if settings.neuron_monitor is None:
        return None
    directory = Path(tempfile.mkdtemp(prefix="inferstack-neuron-monitor-"))
    return NeuronMonitor(
        settings.neuron_monitor,
        service=settings.metrics_service,
        models=models,
        interval_s=settings.metrics_interval_s,
        directory=directory,
    ).start()


def start(groups: list[WorkerGroup], argv: list[str]) -> dict[int, Child]:
    """Every worker of every group. The supervisor keeps the listening sockets and the connection shares'
    fds for the workers it may restart; it closes them when it stops (``Supervisor.close_sockets``)."""
    children: dict[int, Child] = {}
    for group in groups:
        fds: tuple[int, ...] = (group.sock.fileno(),)
        share_args: tuple[str, ...] = ()
        if len(group.slices) > 1:
            group.share = ShareTable(len(group.slices))
            fds += tuple(group.share.fds)
            share_args = ("--worker-share", ",".join(map(str, group.share.fds)))
        for index, cores in enumerate(group.slices):
            # The Neuron runtime reports the tag to neuron-monitor, which reports per model from it.
            env = dict(os.environ, SERVER_WORKER_INDEX=str(index), NEURON_PROCESS_TAG=f"{group.served}/{index}")
            # Tokenization runs on the worker's inference thread; the tokenizers library's own
            # thread pool would only compete with the event loop for the same cores.
            env.setdefault("TOKENIZERS_PARALLELISM", "false")
            env.pop(MULTIPROC_ENV, None)
            env.pop(RESTARTS_ENV, None)
            if group.metrics_dir is not None:
                env[MULTIPROC_ENV] = group.metrics_dir
            if cores is not None:
                env["NEURON_RT_VISIBLE_CORES"] = cores
            command = [
                sys.executable,
                SERVE_SCRIPT,
                *argv,
                *group.args,
                "--worker-fd",
                str(group.sock.fileno()),
                *share_args,
            ]
            slot = Slot(group, index, command, env, fds, group.port)
            process = spawn(slot)
            children[process.pid] = Child(process, slot)
            log.info("worker started", extra={"worker_pid": process.pid, **slot.describe()})
    return children


def spawn(slot: Slot) -> subprocess.Popen:
    env = dict(slot.env, **{RESTARTS_ENV: str(slot.restarts)}) if slot.restarts else slot.env
    return subprocess.Popen(slot.command, env=env, pass_fds=slot.fds)


def supervise(
    children: dict[int, Child],
    groups: list[WorkerGroup],
    *,
    ready_dir: str | None,
    monitor: NeuronMonitor | None = None,
    policy: RestartPolicy = RestartPolicy(),
) -> int:
    return Supervisor(children, groups, ready_dir, monitor, policy).run()


class Supervisor:
    def __init__(
        self,
        children: dict[int, Child],
        groups: list[WorkerGroup],
        ready_dir: str | None,
        monitor: NeuronMonitor | None,
        policy: RestartPolicy,
    ) -> None:
        self.children, self.groups, self.ready_dir, self.monitor, self.policy = (
            children,
            groups,
            ready_dir,
            monitor,
            policy,
        )
        self.stopping: int | None = None  # the signal that began the stop
        self.spawning = False  # a restart is between fork and bookkeeping: its socket must stay open
        self.exit_code = 0

    def forward(self, signum, frame) -> None:
        if self.stopping is None:
            self.stopping = signum
            log.info("stopping workers", extra={"signal": signal.Signals(signum).name})
        if self.monitor is not None:
            self.monitor.signal_stop()
        for child in self.children.values():
            # os.kill, not Popen.send_signal: that polls, and a worker reaped here would never reach the loop
            # below. An exited worker not yet reaped keeps its pid, so the signal cannot reach another process.
            if child.process.returncode is None:
                try:
                    os.kill(child.process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        if not self.spawning:
            self.close_sockets()

    def close_sockets(self) -> None:
        # Once the workers stop listening, a copy kept here would let connections queue unanswered.
        for group in self.groups:
            group.sock.close()

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.forward)
        signal.signal(signal.SIGINT, self.forward)
        leave_alone = self.monitor.owns if self.monitor is not None else (lambda pid: False)
        try:
            while self.children:
                pid, code = wait_for_child(self.children, leave_alone)
                child = self.children.pop(pid, None)
                if child is not None:
                    child.process.returncode = code
                    self.reaped(child, code)
        finally:
            self.close_sockets()
            for group in self.groups:
                if group.share is not None:
                    group.share.close()
            if self.monitor is not None:
                self.monitor.stop()
            monitor_dir = str(self.monitor.config_path.parent) if self.monitor is not None else None
            for directory in [group.metrics_dir for group in self.groups] + [self.ready_dir, monitor_dir]:
                if directory is not None:
                    shutil.rmtree(directory, ignore_errors=True)
        log.info("supervisor exiting", extra={"exit_code": self.exit_code})
        return self.exit_code

    def reaped(self, child: Child, code: int) -> None:
        slot, pid = child.slot, child.process.pid
        if slot.group.metrics_dir is not None:
            _forget_metrics(pid, slot.group.metrics_dir)
        status = _exit_status(code)
        if self.stopping is not None:
            self._clear_markers(slot)
            # -SIGTERM: the signal sent here came before the worker's handler, so before it listened (worker.py).
            if code not in (0, -signal.SIGTERM):
                log.error("worker failed while stopping", extra={"worker_pid": pid, **status})
                self.exit_code = 1
            return
        now = time.monotonic()
        while slot.restarted_at and now - slot.restarted_at[0] > self.policy.window_s:
            slot.restarted_at.popleft()
        if code == LOAD_FAILED and not child.replacement:
            # At start-up a model that does not load is the configuration's fault: another try fails alike.
            reason = {"reason": "model failed to load"}
            message = "worker exited unexpectedly; stopping the others"
        elif len(slot.restarted_at) >= self.policy.max_restarts:
            reason = {"reason": "crash loop", "restarts": len(slot.restarted_at), "window_s": self.policy.window_s}
            message = "worker crash loop; stopping the others"
        else:
            self.restart(slot, pid, status, now)
            return
        self._clear_markers(slot)
        log.error(message, extra={"worker_pid": pid, **slot.describe(), **status, **reason})
        self.exit_code = 1
        self.forward(signal.SIGTERM, None)

    def restart(self, slot: Slot, dead_pid: int, status: dict, now: float) -> None:
        """The same worker again, on the same cores; it takes connections once warm (worker.py)."""
        if self.ready_dir is not None:  # restarting before unready: its model stays ready throughout
            restarting_path(self.ready_dir, slot.group.model, slot.index).touch()
            marker_path(self.ready_dir, slot.group.model, slot.index).unlink(missing_ok=True)
        if slot.group.share is not None:
            slot.group.share.vacate(slot.index)
        slot.restarted_at.append(now)
        slot.restarts += 1
        self.spawning = True
        try:
            process = spawn(slot)
        except OSError as exc:  # e.g. out of memory or pids: the task cannot heal itself
            self.spawning = False
            log.error(
                "worker could not be restarted; stopping the others",
                extra={"dead_pid": dead_pid, **slot.describe(), "error": str(exc)},
            )
            self.exit_code = 1
            self.forward(signal.SIGTERM, None)
            return
        self.children[process.pid] = Child(process, slot, replacement=True)
        self.spawning = False
        log.warning(
            "worker restarted",
            extra={
                "worker_pid": process.pid,
                "dead_pid": dead_pid,
                **slot.describe(),
                **status,
                "restarts": len(slot.restarted_at),
                "restarts_total": slot.restarts,
            },
        )
        if self.stopping is not None:  # a signal came while it started: stop it with the others
            self.forward(self.stopping, None)

    def _clear_markers(self, slot: Slot) -> None:
        if self.ready_dir is not None:  # a worker that died cannot remove its own marker
            marker_path(self.ready_dir, slot.group.model, slot.index).unlink(missing_ok=True)
            restarting_path(self.ready_dir, slot.group.model, slot.index).unlink(missing_ok=True)


def _exit_status(code: int) -> dict:
    if code >= 0:
        return {"exit_code": code}
    try:
        return {"exit_code": code, "signal": signal.Signals(-code).name}
    except ValueError:  # a signal Python has no name for
        return {"exit_code": code, "signal": str(-code)}


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
