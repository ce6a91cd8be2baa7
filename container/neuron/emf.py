"""CloudWatch metrics from the serving app as embedded metric format (EMF) lines on stdout.

The awslogs driver ships every stdout line to CloudWatch Logs, which turns a line that is one JSON object
with an `_aws` block into metrics: no agent, no PutMetricData calls, no credentials in the task.

Cost per request is bounded: an observation takes a lock and updates fixed-size state (a count, a sum, a
reservoir of at most MAX_VALUES samples); each worker writes one line per metric group per interval,
whatever the traffic. CloudWatch computes percentiles (the p99 the latency alarm uses) over the reservoir
of each line: uniform samples of the interval's requests.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO

NAMESPACE = "inferstack/Serving"
MAX_VALUES = 100  # EMF: at most 100 values per metric in one line
MAX_DIMENSIONS = 30  # EMF: at most 30 keys per dimension set

# Metric name -> unit. The stacks alarm and scale on these names (inferstack/neuron/metrics.py mirrors them,
# and a test holds the two equal).
REQUEST_LATENCY = "RequestLatency"  # received to response ready, in the server (ms)
INFERENCE_LATENCY = "InferenceLatency"  # one batch's tokenize + model time (ms)
BATCH_SIZE = "BatchSize"  # rows per model execution
QUEUE_DEPTH = "QueueDepth"  # requests waiting for the model, sampled every second
IN_FLIGHT = "InFlight"  # requests in the worker (queued or executing), sampled every second
REQUESTS = "Requests"
ERRORS = "ServerErrors"  # 5xx answers
UNITS = {REQUEST_LATENCY: "Milliseconds", INFERENCE_LATENCY: "Milliseconds", BATCH_SIZE: "Count",
         QUEUE_DEPTH: "Count", IN_FLIGHT: "Count", REQUESTS: "Count", ERRORS: "Count"}
# Per model (what alarms and scaling read) and per worker (to find a slow one).
DIMENSION_SETS = (("Service", "Model"), ("Service", "Model", "Worker"))


class Reservoir:
    """A uniform sample of at most `size` of the values observed (Algorithm R), with their exact count."""

    def __init__(self, size: int = MAX_VALUES, rng: random.Random | None = None) -> None:
        self.size = size
        self.values: list[float] = []
        self.count = 0
        self._rng = rng or random.Random()

    def add(self, value: float) -> None:
        self.count += 1
        if len(self.values) < self.size:
            self.values.append(value)
        else:
            slot = self._rng.randrange(self.count)
            if slot < self.size:
                self.values[slot] = value


@dataclass
class _Window:
    samples: dict[str, Reservoir] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


class Recorder:
    """Thread-safe accumulation of one worker's observations for the current interval."""

    def __init__(self, dimensions: Mapping[str, str], *, namespace: str = NAMESPACE,
                 rng: random.Random | None = None) -> None:
        missing = [key for keys in DIMENSION_SETS for key in keys if key not in dimensions]
        if missing:
            raise ValueError(f"EMF dimensions missing: {', '.join(sorted(set(missing)))}")
        self.dimensions = {key: str(value)[:1024] for key, value in dimensions.items()}
        self.namespace = namespace
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._window = _Window()

    def observe(self, name: str, value: float) -> None:
        with self._lock:
            reservoir = self._window.samples.get(name)
            if reservoir is None:
                reservoir = self._window.samples[name] = Reservoir(rng=self._rng)
            reservoir.add(float(value))

    def count(self, name: str, increment: int = 1) -> None:
        with self._lock:
            self._window.counts[name] = self._window.counts.get(name, 0) + increment

    def drain(self, timestamp_ms: int) -> dict | None:
        """The interval's EMF record (None when nothing was observed), and a fresh interval."""
        with self._lock:
            window, self._window = self._window, _Window()
        values: dict[str, float | list[float]] = {name: r.values for name, r in window.samples.items() if r.values}
        values.update({name: float(n) for name, n in window.counts.items()})
        if not values:
            return None
        return record(self.namespace, self.dimensions, values, timestamp_ms)


def record(namespace: str, dimensions: Mapping[str, str], values: Mapping[str, float | list[float]],
           timestamp_ms: int, dimension_sets=DIMENSION_SETS, units: Mapping[str, str] = UNITS) -> dict:
    """One EMF object: the dimension values and metric values at the root, the directive under `_aws`."""
    names = sorted(values)
    if len(names) > MAX_VALUES:  # a directive holds at most 100 metrics
        raise ValueError(f"{len(names)} metrics in one record; EMF allows {MAX_VALUES}")
    body: dict = dict(dimensions)
    body.update({name: values[name] for name in names})
    body["_aws"] = {
        "Timestamp": int(timestamp_ms),
        "CloudWatchMetrics": [{
            "Namespace": namespace,
            "Dimensions": [list(keys) for keys in dimension_sets],
            "Metrics": [{"Name": name, "Unit": units.get(name, "None")} for name in names],
        }],
    }
    return body


def line(emf_record: Mapping) -> str:
    """One log event: compact JSON on one line (a newline inside would split the event)."""
    return json.dumps(emf_record, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


class Publisher:
    """Samples the gauges every second and writes the recorder's record every `interval_s`, from a daemon
    thread; `stop()` writes what is left (a draining worker's last requests count)."""

    def __init__(self, recorder: Recorder, gauges: Mapping[str, Callable[[], float]], *, interval_s: float = 60.0,
                 stream: IO[str] | None = None, clock: Callable[[], float] = time.time) -> None:
        self.recorder = recorder
        self.gauges = dict(gauges)
        self.interval_s = interval_s
        self._stream = stream
        self._clock = clock
        self._stop = threading.Event()
        self._write_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="emf-publisher", daemon=True)

    def start(self) -> "Publisher":
        self._thread.start()
        return self

    def _run(self) -> None:
        next_flush = time.monotonic() + self.interval_s
        while not self._stop.wait(min(1.0, self.interval_s)):
            self.sample()
            if time.monotonic() >= next_flush:
                self.flush()
                next_flush += self.interval_s

    def sample(self) -> None:
        for name, gauge in self.gauges.items():
            try:
                self.recorder.observe(name, gauge())
            except Exception:  # a gauge must never take the publisher down
                continue

    def flush(self) -> None:
        emf_record = self.recorder.drain(int(self._clock() * 1000))
        if emf_record is None:
            return
        stream = self._stream or sys.stdout
        with self._write_lock:
            stream.write(line(emf_record) + "\n")
            stream.flush()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.flush()
