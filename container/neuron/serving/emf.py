"""CloudWatch metrics from the serving app as embedded metric format (EMF) lines on stdout.

The awslogs driver ships every stdout line to CloudWatch Logs, which turns a line that is one JSON object
with an `_aws` block into metrics: no agent, no PutMetricData calls, no credentials in the task.

Cost per request is bounded: an observation takes a lock and updates fixed-size state (a count, a sum, a
reservoir of at most MAX_VALUES samples); each worker writes one line per metric group per interval,
whatever the traffic. CloudWatch computes percentiles (the p99 the latency alarm uses) over the reservoir
of each line: uniform samples of the interval's requests.

Every process of a container (the supervisor, each worker) writes to the same stdout pipe. A line is
written with one os.write and is at most PIPE_BUF bytes (a record too large is split over several lines),
so the kernel never interleaves it with another process's write; a lock keeps the threads of one process
from interleaving theirs. Logs go to stderr, never to this stream.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import select
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO

log = logging.getLogger("emf")

NAMESPACE = "inferstack/Serving"
MAX_VALUES = 100  # EMF: at most 100 values per metric in one line
MAX_DIMENSIONS = 30  # EMF: at most 30 keys per dimension set
# Writes of at most PIPE_BUF bytes to a pipe are atomic (POSIX): several processes' lines never mix.
MAX_LINE_BYTES = select.PIPE_BUF

# Metric name -> unit. The stacks alarm and scale on these names (inferstack/neuron/metrics.py mirrors them,
# and a test holds the two equal).
REQUEST_LATENCY = "RequestLatency"  # received to response ready, in the server (ms)
INFERENCE_LATENCY = "InferenceLatency"  # one batch's tokenize + model time (ms)
BATCH_SIZE = "BatchSize"  # rows per model execution
QUEUE_DEPTH = "QueueDepth"  # requests waiting for the model, sampled every second
IN_FLIGHT = "InFlight"  # requests in the worker (queued or executing), sampled every second
REQUESTS = "Requests"
ERRORS = "ServerErrors"  # 5xx answers
REJECTED = "Rejected"  # of those, 503s of admission: the request would not have been answered within the SLO
UNITS = {
    REQUEST_LATENCY: "Milliseconds",
    INFERENCE_LATENCY: "Milliseconds",
    BATCH_SIZE: "Count",
    QUEUE_DEPTH: "Count",
    IN_FLIGHT: "Count",
    REQUESTS: "Count",
    ERRORS: "Count",
}
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
            slot = int(self._rng.random() * self.count)  # uniform in [0, count): a third of randrange's cost
            if slot < self.size:
                self.values[slot] = value

    def add_many(self, values: list[float]) -> None:
        """add(v) for every v, in order."""
        if len(self.values) + len(values) <= self.size:  # the sample is not full: every value is kept
            self.values.extend(values)
            self.count += len(values)
            return
        for value in values:
            self.add(value)


@dataclass
class _Window:
    samples: dict[str, Reservoir] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


class Recorder:
    """Thread-safe accumulation of one worker's observations for the current interval.

    `always_counted` names counts written in every record, 0 when nothing happened: an idle worker then
    reports zero requests and zero errors instead of no data, which alarms would treat as missing.
    """

    def __init__(
        self,
        dimensions: Mapping[str, str],
        *,
        namespace: str = NAMESPACE,
        rng: random.Random | None = None,
        always_counted: Iterable[str] = (),
    ) -> None:
        missing = [key for keys in DIMENSION_SETS for key in keys if key not in dimensions]
        if missing:
            raise ValueError(f"EMF dimensions missing: {', '.join(sorted(set(missing)))}")
        self.dimensions = {key: str(value)[:1024] for key, value in dimensions.items()}
        self.namespace = namespace
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._always_counted = tuple(always_counted)
        self._window = self._fresh()

    def _fresh(self) -> _Window:
        return _Window(counts=dict.fromkeys(self._always_counted, 0))

    def _reservoir(self, name: str) -> Reservoir:  # the caller holds the lock
        reservoir = self._window.samples.get(name)
        if reservoir is None:
            reservoir = self._window.samples[name] = Reservoir(rng=self._rng)
        return reservoir

    def _sample(self, name: str, value: float) -> None:  # the caller holds the lock
        self._reservoir(name).add(value)

    def observe(self, name: str, value: float) -> None:
        with self._lock:
            self._sample(name, float(value))

    def count(self, name: str, increment: int = 1) -> None:
        with self._lock:
            self._window.counts[name] = self._window.counts.get(name, 0) + increment

    def request(self, latency_ms: float, server_error: bool = False, rejected: bool = False) -> None:
        """One answered inference request: its latency, the request count, a 5xx and a refusal; one lock for all."""
        with self._lock:
            self._sample(REQUEST_LATENCY, latency_ms)
            counts = self._window.counts
            counts[REQUESTS] = counts.get(REQUESTS, 0) + 1
            if server_error:
                counts[ERRORS] = counts.get(ERRORS, 0) + 1
            if rejected:
                counts[REJECTED] = counts.get(REJECTED, 0) + 1

    def requests(self, latencies_ms: list[float], server_errors: int = 0, rejected: int = 0) -> None:
        """``request`` for many answered requests at once (metrics.RequestTally gathers them per batch): their
        latencies, how many were 5xx and how many refused; one lock for all."""
        if not latencies_ms:
            return
        with self._lock:
            self._reservoir(REQUEST_LATENCY).add_many(latencies_ms)
            counts = self._window.counts
            counts[REQUESTS] = counts.get(REQUESTS, 0) + len(latencies_ms)
            if server_errors:
                counts[ERRORS] = counts.get(ERRORS, 0) + server_errors
            if rejected:
                counts[REJECTED] = counts.get(REJECTED, 0) + rejected

    def batch(self, rows: int, latency_ms: float) -> None:
        """One executed batch: its rows and its tokenize + model time."""
        with self._lock:
            self._sample(BATCH_SIZE, rows)
            self._sample(INFERENCE_LATENCY, latency_ms)

    def drain(self, timestamp_ms: int) -> dict | None:
        """The interval's EMF record (None when nothing was observed), and a fresh interval."""
        with self._lock:
            window, self._window = self._window, self._fresh()
        values: dict[str, float | list[float]] = {
            name: [_compact(v) for v in r.values] for name, r in window.samples.items() if r.values
        }
        values.update({name: n for name, n in window.counts.items()})
        if not values:
            return None
        return record(self.namespace, self.dimensions, values, timestamp_ms, units=RECORDED_UNITS)


# UNITS is what the stacks read (inferstack/neuron/metrics.py mirrors it, a test holds them equal); Rejected is
# written beside it, with its unit, until the stacks alarm on it.
RECORDED_UNITS = {**UNITS, REJECTED: "Count"}


def _compact(value: float) -> float | int:
    """Microsecond precision is plenty for milliseconds, and `16` is shorter than `16.0`: shorter lines."""
    rounded = round(float(value), 3)
    return int(rounded) if rounded.is_integer() else rounded


def record(
    namespace: str,
    dimensions: Mapping[str, str],
    values: Mapping[str, float | list[float]],
    timestamp_ms: int,
    dimension_sets=DIMENSION_SETS,
    units: Mapping[str, str] = UNITS,
) -> dict:
    """One EMF object: the dimension values and metric values at the root, the directive under `_aws`."""
    names = sorted(values)
    if len(names) > MAX_VALUES:  # a directive holds at most 100 metrics
        raise ValueError(f"{len(names)} metrics in one record; EMF allows {MAX_VALUES}")
    body: dict = dict(dimensions)
    body.update({name: values[name] for name in names})
    body["_aws"] = {
        "Timestamp": int(timestamp_ms),
        "CloudWatchMetrics": [
            {
                "Namespace": namespace,
                "Dimensions": [list(keys) for keys in dimension_sets],
                "Metrics": [{"Name": name, "Unit": units.get(name, "None")} for name in names],
            }
        ],
    }
    return body


def line(emf_record: Mapping) -> str:
    """One log event: compact JSON on one line (a newline inside would split the event)."""
    return json.dumps(emf_record, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def lines(emf_record: Mapping, max_bytes: int = MAX_LINE_BYTES) -> list[str]:
    """The record as lines of at most `max_bytes` bytes each, newline included: itself when it fits, else its
    metrics split in halves, and a metric's values in halves, until every part fits. CloudWatch takes the parts
    as the same metrics at the same time, so a split changes no statistic."""
    text = line(emf_record)
    if len(text) < max_bytes:  # ASCII: one byte per character, plus the newline
        return [text]
    directive = emf_record["_aws"]["CloudWatchMetrics"][0]
    metrics = directive["Metrics"]
    if len(metrics) > 1:
        half = len(metrics) // 2
        return [
            part
            for group in (metrics[:half], metrics[half:])
            for part in lines(_with_metrics(emf_record, group), max_bytes)
        ]
    name = metrics[0]["Name"]
    values = emf_record[name]
    if isinstance(values, list) and len(values) > 1:
        half = len(values) // 2
        return [
            part for chunk in (values[:half], values[half:]) for part in lines({**emf_record, name: chunk}, max_bytes)
        ]
    raise ValueError(f"EMF record of {len(text)} bytes cannot be split under {max_bytes} bytes: {text[:200]}")


def _with_metrics(emf_record: Mapping, metrics: list[dict]) -> dict:
    directive = emf_record["_aws"]["CloudWatchMetrics"][0]
    names = {m["Name"] for m in directive["Metrics"]}
    keep = {m["Name"] for m in metrics}
    out = {key: value for key, value in emf_record.items() if key not in names or key in keep}
    out["_aws"] = {**emf_record["_aws"], "CloudWatchMetrics": [{**directive, "Metrics": metrics}]}
    return out


_WRITE_LOCK = threading.Lock()


class LineOutput:
    """Where EMF lines go: the process's stdout file descriptor, one os.write per line (atomic against the other
    processes writing to the same pipe), or a text stream (tests). Thread-safe; a failed write loses the line
    and is logged once, never raised: metrics must not stop the server."""

    def __init__(self, stream: IO[str] | None = None, fd: int = 1) -> None:
        self._stream = stream
        self._fd = fd
        self._failed = False

    def write(self, emf_records: Iterable[Mapping]) -> int:
        """Writes every record; returns the number of lines written."""
        texts = [text for emf_record in emf_records for text in lines(emf_record)]
        if not texts:
            return 0
        with _WRITE_LOCK:
            try:
                if self._stream is not None:
                    self._stream.write("".join(text + "\n" for text in texts))
                    self._stream.flush()
                else:
                    for text in texts:
                        data = (text + "\n").encode("ascii")
                        while data:
                            data = data[os.write(self._fd, data) :]
            except (OSError, ValueError) as exc:  # stdout closed, or a closed stream
                if not self._failed:
                    self._failed = True
                    log.error("cannot write EMF metrics", extra={"error": str(exc)})
                return 0
        return len(texts)


class Publisher:
    """Samples the gauges every second and writes the recorder's record every `interval_s`, from a daemon
    thread; `stop()` writes what is left (a draining worker's last requests count)."""

    def __init__(
        self,
        recorder: Recorder,
        gauges: Mapping[str, Callable[[], float]],
        *,
        interval_s: float = 60.0,
        stream: IO[str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.recorder = recorder
        self.gauges = dict(gauges)
        self.interval_s = interval_s
        self._output = LineOutput(stream)
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="emf-publisher", daemon=True)

    def start(self) -> Publisher:
        self._thread.start()
        return self

    def _run(self) -> None:
        # Flushes fall on the wall clock's interval boundaries and each record carries its interval's start:
        # a minute's requests land in the same CloudWatch minute as the load balancer's count of them, which
        # the 5xx alarm subtracts the rejections from (stamped at the flush, they landed a minute late).
        interval = self.interval_s
        next_flush = (math.floor(self._clock() / interval) + 1) * interval
        every = min(1.0, interval)  # gauges: once a second, or once an interval if that is shorter
        next_sample = time.monotonic() + every
        sampled = False
        while not self._stop.wait(max(0.0, min(next_sample - time.monotonic(), next_flush - self._clock()))):
            now = self._clock()
            if time.monotonic() >= next_sample or (now >= next_flush and not sampled):
                self.sample()  # every record has its gauges, even a first interval shorter than a second
                sampled = True
                next_sample = time.monotonic() + every
            if now >= next_flush:
                self.flush(next_flush - interval)
                sampled = False
                next_flush = (math.floor(now / interval) + 1) * interval

    def sample(self) -> None:
        for name, gauge in self.gauges.items():
            try:
                self.recorder.observe(name, gauge())
            except Exception:  # a gauge must never take the publisher down
                continue

    def flush(self, interval_start_s: float | None = None) -> None:
        """Write the interval's record, stamped with its start (default: the start of the interval now in)."""
        if interval_start_s is None:
            interval_start_s = math.floor(self._clock() / self.interval_s) * self.interval_s
        emf_record = self.recorder.drain(int(round(interval_start_s * 1000)))
        if emf_record is not None:
            self._output.write([emf_record])

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.sample()  # the last, partial interval has its gauges too
        self.flush()
