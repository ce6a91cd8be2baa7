"""Runs a load test with the real Locust: one local process, or a master and N workers on 127.0.0.1 (each
Locust process uses one core). Locust runs only in subprocesses (it patches its process for gevent), each
in its own process group, stopped however the run ends; the wait is bounded."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from inferstack.loadtest.results import PICTURE_FILE, REPORT_FILE, RESULT_FILE, ResultError, RunResult
from inferstack.loadtest.spec import LoadTestSpec

# The locustfile's inputs (set by this module and by the container's task.py).
SPEC_ENV = "INFERSTACK_LOADTEST_SPEC"
SPEC_FILE_ENV = "INFERSTACK_LOADTEST_SPEC_FILE"
OUT_ENV = "INFERSTACK_LOADTEST_OUT"
LOCUSTFILE = Path(__file__).with_name("locustfile.py")
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding `inferstack/`
LOOPBACK = "127.0.0.1"
PROGRESS = "inferstack-progress:"  # the locustfile's prefix for a line to pass on as the run goes
# Locust's imports, the workers' connection and the results at the end, on a loaded machine.
STARTUP_S = 60.0
STOP_S = 20.0
POLL_S = 0.2
LOG_TAIL_LINES = 6
MAX_WORKERS = 64


class LoadTestError(RuntimeError):
    """The run did not produce a result (Locust failed, or ran past its time); one line, with Locust's last words."""


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def locust_args(
    role: str,
    *,
    port: int | None = None,
    host: str = LOOPBACK,
    workers: int = 0,
    worker_wait_s: float = STARTUP_S,
    request_timeout_s: float = 10.0,
) -> list[str]:
    """The Locust command line of one process: role "local", "master" (binds `host`:`port`) or "worker"
    (connects to `host`:`port`). Headless: no web UI; failed requests are results, not Locust's exit code.
    At the end a user finishes the request it is sending (--stop-timeout: up to the request timeout), so
    the last step counts every request it sent."""
    args = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--exit-code-on-error", "0"]
    if role == "worker":
        return args + ["--worker", "--master-host", host, "--master-port", str(port)]
    args += ["--headless", "--only-summary", "--stop-timeout", str(math.ceil(request_timeout_s) + 1)]
    if role == "master":
        args += [
            "--master",
            "--master-bind-host",
            host,
            "--master-bind-port",
            str(port),
            "--expect-workers",
            str(workers),
            "--expect-workers-max-wait",
            f"{worker_wait_s:g}",
        ]
    return args


def locust_environment(
    spec: LoadTestSpec, out_dir: Path | None = None, *, spec_file: Path | None = None
) -> dict[str, str]:
    """The environment of a Locust process: the spec inline, or in `spec_file` (written here: a payload can
    pass the kernel's 128 KiB limit on one environment string)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}  # no stray Locust settings
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    env.pop(SPEC_ENV, None)
    env.pop(SPEC_FILE_ENV, None)
    if spec_file is None:
        env[SPEC_ENV] = spec.to_json()
    else:
        spec_file.write_text(spec.to_json())
        env[SPEC_FILE_ENV] = str(spec_file)
    if out_dir is not None:
        env[OUT_ENV] = str(out_dir)
    return env


class Processes:
    """Locust processes, each leading its own process group, logging to a file; `stop` ends every group."""

    def __init__(self, log_dir: Path, on_progress: Callable[[str], None] | None = None) -> None:
        self.log_dir = log_dir
        self.started: list[tuple[str, subprocess.Popen, Path]] = []
        self.on_progress = on_progress
        self._read = 0  # how far the main process's log has been scanned for progress lines

    def start(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = self.log_dir / f"{name}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                args,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=self.log_dir,
                start_new_session=True,
            )
        self.started.append((name, process, log))
        return process

    def wait(self, main: subprocess.Popen, deadline: float) -> int:
        """`main`'s exit code once it ends; LoadTestError past the deadline, or when a helper (a worker)
        fails first."""
        while True:
            code = main.poll()
            self.pass_progress()
            if code is not None:
                return code
            for name, process, _ in self.started:
                if process is not main and process.poll() not in (None, 0):
                    raise LoadTestError(f"{name} exited {process.returncode} before the run ended: {self.tail(name)}")
            if time.monotonic() > deadline:
                raise LoadTestError(
                    f"no result in the time allowed; every Locust process was stopped: {self.tail(self.started[0][0])}"
                )
            time.sleep(POLL_S)

    def pass_progress(self) -> None:
        """Hand the main process's new progress lines (the locustfile's PROGRESS prefix) to `on_progress`."""
        if self.on_progress is None or not self.started:
            return
        try:
            with open(self.started[0][2], "rb") as log:
                log.seek(self._read)
                chunk = log.read()
        except OSError:
            return
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits for the next poll
        self._read += len(complete)
        for line in complete.decode(errors="replace").splitlines():
            if line.startswith(PROGRESS):
                self.on_progress(line.removeprefix(PROGRESS).strip())

    def wait_all(self, seconds: float) -> None:
        """Give the others (workers leave when their master quits) `seconds` to exit by themselves."""
        deadline = time.monotonic() + seconds
        for _, process, _ in self.started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.0, deadline - time.monotonic()))

    def stop(self) -> None:
        # SIGTERM ends a headless Locust running a shape at once (it installs its own handler only after the
        # shape's run): a stopped run leaves no result, which is all a stop needs.
        stop_groups([process for _, process, _ in self.started], grace_s=5)

    def tail(self, name: str) -> str:
        log = next(path for n, _, path in self.started if n == name)
        try:
            lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return "(no log)"
        return " | ".join(lines[-LOG_TAIL_LINES:]) or "(no output)"


def default_timeout(spec: LoadTestSpec, workers: int = 0) -> float:
    return spec.seconds + STARTUP_S + STOP_S + 2.0 * workers


def run_processes(
    spec: LoadTestSpec,
    out_dir: Path,
    *,
    workers: int,
    timeout: float,
    log_dir: Path,
    bind_host: str = LOOPBACK,
    port: int | None = None,
    start_workers: bool = True,
    worker_wait_s: float = STARTUP_S,
    on_progress: Callable[[str], None] | None = None,
) -> RunResult:
    """Locust (local, or a master with `workers` workers, started here when `start_workers`) writing into
    `out_dir`; the result it wrote. `on_progress` gets a line as each step starts and ends. Every process is
    stopped before this returns or raises, SIGTERM included (see stopped_on_sigterm)."""
    processes = Processes(log_dir, on_progress)
    deadline = time.monotonic() + timeout
    spec_file = log_dir / "spec.json"
    try:
        if workers == 0:
            main = processes.start(
                "local",
                locust_args("local", request_timeout_s=spec.timeout_s),
                locust_environment(spec, out_dir, spec_file=spec_file),
            )
        else:
            port = port or free_port(bind_host)
            main = processes.start(
                "master",
                locust_args(
                    "master",
                    port=port,
                    host=bind_host,
                    workers=workers,
                    worker_wait_s=worker_wait_s,
                    request_timeout_s=spec.timeout_s,
                ),
                locust_environment(spec, out_dir, spec_file=spec_file),
            )
            if start_workers:
                for number in range(1, workers + 1):
                    processes.start(
                        f"worker-{number}",
                        locust_args("worker", port=port, host=bind_host),
                        locust_environment(spec, spec_file=spec_file),
                    )
        code = processes.wait(main, deadline)
        processes.wait_all(min(STOP_S, max(0.0, deadline - time.monotonic())))
        name = processes.started[0][0]
        if code != 0:
            raise LoadTestError(f"Locust {name} exited {code}: {processes.tail(name)}")
        try:
            return RunResult.from_json((out_dir / RESULT_FILE).read_text(), where=str(out_dir / RESULT_FILE))
        except OSError:
            raise LoadTestError(f"Locust {name} ended without writing {RESULT_FILE}: {processes.tail(name)}") from None
        except ResultError as exc:
            raise LoadTestError(str(exc)) from None
    finally:
        processes.stop()


def run_local(
    spec: LoadTestSpec,
    out_dir: Path,
    *,
    workers: int = 0,
    timeout: float | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> RunResult:
    """Run `spec` on this machine: one Locust process (`workers` 0), or a master and `workers` worker processes,
    all on 127.0.0.1 with a free port. Writes result.json, report.txt and latency.png into `out_dir` (created;
    existing files of those names are replaced only by a complete run) and returns the result. LoadTestError
    when Locust fails or runs past `timeout` seconds (default: the steps plus start-up and shut-down time)."""
    if not 0 <= workers <= MAX_WORKERS:
        raise ValueError(f"workers: {workers} is not within 0..{MAX_WORKERS}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".loadtest-", dir=out_dir))
    try:
        with tempfile.TemporaryDirectory(prefix="inferstack-locust-") as logs:
            result = run_processes(
                spec,
                staging,
                workers=workers,
                log_dir=Path(logs),
                on_progress=on_progress,
                timeout=timeout if timeout is not None else default_timeout(spec, workers),
            )
        for name in (REPORT_FILE, PICTURE_FILE, RESULT_FILE):  # result.json last: it marks a complete set
            os.replace(staging / name, out_dir / name)
        return result
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class Terminated(BaseException):
    """SIGTERM arrived (a BaseException, as KeyboardInterrupt is: no `except Exception` on the way swallows it)."""


@contextlib.contextmanager
def stopped_on_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM raises Terminated instead of ending the process at once, so every `finally` on
    the way out runs: the Locust processes (or Fargate tasks) it started are stopped, not left sending load.
    Ctrl-C (KeyboardInterrupt) already unwinds that way. Only in the main thread, where Python delivers signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(_signum, _frame) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop_groups(processes: list[subprocess.Popen], *, grace_s: float) -> None:
    """Stop processes that each lead their own process group (start_new_session=True): SIGTERM to every group
    at once, `grace_s` for each leader to exit, SIGKILL for a group that did not, then SIGKILL once more for
    what may outlive its leader (a child it started), so nothing of any group is left."""
    for process in processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=grace_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
