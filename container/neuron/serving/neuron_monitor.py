"""neuron-monitor beside the workers: the supervisor starts it with the image's configuration
(neuron-monitor.json, its period set to SERVER_METRICS_INTERVAL_S), turns its reports into EMF lines on
stdout (neuron_monitor_emf.py), restarts it with a growing delay when it exits and stops it with the
container. Serving never waits for it or stops because of it.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import threading
import time
from collections.abc import Collection
from pathlib import Path

import emf
import neuron_monitor_emf

log = logging.getLogger("neuron-monitor")
CONFIG_TEMPLATE = Path(__file__).with_name("neuron-monitor.json")
FIRST_RESTART_DELAY_S = 1.0
MAX_RESTART_DELAY_S = 60.0
# A run at least this long was healthy: the next exit restarts it after the first delay again.
HEALTHY_RUN_S = 60.0


def render_config(interval_s: int, template: Path = CONFIG_TEMPLATE) -> dict:
    """The image's configuration with every report period equal to the metrics interval."""
    config = json.loads(template.read_text())
    config["period"] = f"{interval_s}s"
    return config


class NeuronMonitor:
    """One neuron-monitor process at a time, read by a daemon thread."""

    def __init__(
        self,
        executable: Path,
        *,
        service: str,
        models: Collection[str],
        interval_s: int,
        directory: Path,
        output: emf.LineOutput | None = None,
    ) -> None:
        self.executable = executable
        self.service = service
        self.models = frozenset(models)
        self.config_path = Path(directory) / "neuron-monitor.json"
        self.config_path.write_text(json.dumps(render_config(interval_s), indent=2))
        self._output = output or emf.LineOutput()
        self._stopping = threading.Event()
        # Reentrant: stop() may be interrupted by the SIGTERM handler, which calls signal_stop() on the same thread.
        self._lock = threading.RLock()
        self._process: subprocess.Popen | None = None
        self._thread = threading.Thread(target=self._run, name="neuron-monitor", daemon=True)

    def start(self) -> NeuronMonitor:
        self._thread.start()
        return self

    def owns(self, pid: int) -> bool:
        """Whether `pid` is the neuron-monitor process, which this object's thread reaps (not the supervisor)."""
        process = self._process
        return process is not None and process.pid == pid

    def _spawn(self) -> subprocess.Popen | None:
        with self._lock:
            if self._stopping.is_set():
                return None
            self._process = subprocess.Popen(
                [str(self.executable), "-c", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                text=True,
                errors="replace",
            )
            return self._process

    def _run(self) -> None:
        delay = FIRST_RESTART_DELAY_S
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                process = self._spawn()
            except OSError as exc:
                outcome: dict = {"error": f"cannot start {self.executable}: {exc.strerror or exc}"}
            else:
                if process is None:
                    return
                log.info(
                    "neuron-monitor started", extra={"monitor_pid": process.pid, "executable": str(self.executable)}
                )
                for _ in neuron_monitor_emf.convert(process.stdout, self.service, self._output, models=self.models):
                    pass
                outcome = {"monitor_pid": process.pid, "exit_code": process.wait()}
            if self._stopping.is_set():
                return
            if time.monotonic() - started >= HEALTHY_RUN_S:
                delay = FIRST_RESTART_DELAY_S
            log.warning(
                "neuron-monitor exited; serving goes on, restarting it", extra={**outcome, "restart_in_s": delay}
            )
            if self._stopping.wait(delay):
                return
            delay = min(delay * 2, MAX_RESTART_DELAY_S)

    def signal_stop(self) -> None:
        """Stop restarting it and send it SIGTERM; never blocks long (safe in a signal handler)."""
        self._stopping.set()
        with self._lock:
            process = self._process
        if process is not None and process.returncode is None:
            try:
                process.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass

    def stop(self, timeout: float = 5.0) -> None:
        """signal_stop(), then wait for it to exit (SIGKILL after `timeout`) and for the reader thread."""
        self.signal_stop()
        with self._lock:
            process = self._process
        if process is not None:
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        if self._thread.is_alive():
            self._thread.join(timeout)
