"""Prometheus metrics shared by all worker processes (GET /metrics, text exposition format).

With several workers (separate processes) prometheus_client runs in multiprocess mode: the
supervisor points PROMETHEUS_MULTIPROC_DIR at a fresh directory and any worker's /metrics
aggregates all of them. A single worker keeps its metrics in memory.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

REQUEST_LATENCY = Histogram(
    "inference_request_duration_seconds",
    "Time from request received to response ready.",
    ["route"],
    buckets=LATENCY_BUCKETS,
)
REQUESTS = Counter("inference_requests", "Inference requests by route and HTTP status.", ["route", "status"])
BATCH_SIZE = Histogram(
    "inference_batch_size", "Rows per model execution (after dynamic batching).", buckets=BATCH_BUCKETS
)
BATCH_LATENCY = Histogram(
    "inference_batch_duration_seconds", "Tokenize + model time per executed batch.", buckets=LATENCY_BUCKETS
)
BATCHES = Counter(
    "inference_batches",
    "Executed batches by what sent them: full (max batch size reached), delay (the oldest request waited the "
    "queue delay), drain (shutting down).",
    ["trigger"],
)
REJECTED = Counter(
    "inference_rejected",
    "Inference requests refused with 503 and Retry-After because they would not have been "
    "answered within the SLO (SERVER_SLO_MS), by reason: admission (at once), expired (after waiting in the queue).",
    ["reason"],
)
REJECTION_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.01)
REJECTION_LATENCY = Histogram(
    "inference_rejection_duration_seconds",
    "Time from request received to its refusal ready, refused at admission.",
    buckets=REJECTION_BUCKETS,
)
QUEUE_DEPTH = Gauge("inference_queue_depth", "Requests waiting for the model.", multiprocess_mode="livesum")
# Per worker (a pid label with several): the workers of a model share its port least-connections first.
OPEN_CONNECTIONS = Gauge("inference_open_connections", "Open client connections.", multiprocess_mode="liveall")
# Each worker reports its own slot's count (the supervisor passes it down): summed over the live workers.
WORKER_RESTARTS = Gauge(
    "inference_worker_restarts",
    "Times the supervisor restarted the live workers in place after they died.",
    multiprocess_mode="livesum",
)

CONTENT_TYPE = CONTENT_TYPE_LATEST


def render() -> bytes:
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest(REGISTRY)


class RequestTally:
    """Per-request Prometheus updates, gathered on the event loop and written once per batch.

    In multiprocess mode every update is a write to a shared file behind a pid check: about 7 us per
    request for its latency, its count and the queue depth, as much as tokenizing it. Gathered, a batch's
    requests cost one write per histogram bucket touched. The batcher flushes as a batch leaves the queue
    and once its replies are out (so the counts land before the worker reads another request); requests
    that never reach a batch (refusals) and queue changes in between are flushed within ``idle_s``.
    The same flush hands the requests to the EMF ``recorder``, when there is one, under one lock instead
    of one per request; the worker flushes once more before its last EMF line."""

    def __init__(self, loop, queue_depth, idle_s: float = 0.05, recorder=None) -> None:
        self._loop = loop
        self._queue_depth = queue_depth  # callable: requests waiting now
        self._recorder = recorder  # emf.Recorder: each request's latency, 5xx and refusal
        self._idle_s = idle_s
        self._samples: dict[str, list[float]] = {}
        self._counts: dict[tuple[str, int], int] = {}
        self._rejections: list[float] = []  # seconds of each refusal at admission
        self._expired = 0
        self._timer = None
        self._histograms: dict[str, object] = {}
        self._counters: dict[tuple[str, int], object] = {}

    def request(self, route: str, status: int, seconds: float, rejected: str | None = None) -> None:
        """One answered request; ``rejected``: why it was refused without reaching the model (admission, expired)."""
        if rejected == "admission":
            self._rejections.append(seconds)
        elif rejected is not None:
            self._expired += 1
        samples = self._samples.get(route)
        if samples is None:
            samples = self._samples[route] = []
        samples.append(seconds)
        key = (route, status)
        self._counts[key] = self._counts.get(key, 0) + 1
        self.touch()

    def touch(self) -> None:
        """Something to write (a request answered, the queue depth changed): at the next flush at the latest."""
        if self._timer is None:
            self._timer = self._loop.call_later(self._idle_s, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        samples, self._samples = self._samples, {}
        counts, self._counts = self._counts, {}
        rejected = len(self._rejections) + self._expired
        if self._rejections:
            rejections, self._rejections = self._rejections, []
            REJECTED.labels("admission").inc(len(rejections))
            observe_many(REJECTION_LATENCY, rejections)
        if self._expired:
            REJECTED.labels("expired").inc(self._expired)
            self._expired = 0
        if self._recorder is not None and samples:
            self._recorder.requests(
                [seconds * 1000.0 for values in samples.values() for seconds in values],
                sum(n for (_, status), n in counts.items() if status >= 500),
                rejected,
            )
        for route, values in samples.items():
            child = self._histograms.get(route)
            if child is None:
                child = self._histograms[route] = REQUEST_LATENCY.labels(route)
            observe_many(child, values)
        for key, n in counts.items():
            counter = self._counters.get(key)
            if counter is None:
                counter = self._counters[key] = REQUESTS.labels(key[0], str(key[1]))
            counter.inc(n)
        QUEUE_DEPTH.set(self._queue_depth())


def observe_many(histogram, values: list[float]) -> None:
    """histogram.observe(v) for every v, as one update per bucket touched and one of the sum (through
    prometheus_client's per-bucket values, which every release since 0.4 keeps as _upper_bounds, _buckets
    and _sum); one observe() each if a release ever lays them out otherwise."""
    bounds, buckets, total = (
        getattr(histogram, "_upper_bounds", None),
        getattr(histogram, "_buckets", None),
        getattr(histogram, "_sum", None),
    )
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for value in values:
            histogram.observe(value)
        return
    hits = [0] * len(bounds)
    for value in values:
        for i, bound in enumerate(bounds):
            if value <= bound:
                hits[i] += 1
                break
    total.inc(sum(values))
    for i, n in enumerate(hits):
        if n:
            buckets[i].inc(n)
