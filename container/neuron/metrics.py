"""Prometheus metrics shared by all worker processes (GET /metrics, text exposition format).

With several workers (separate processes) prometheus_client runs in multiprocess mode: the
supervisor points PROMETHEUS_MULTIPROC_DIR at a fresh directory and any worker's /metrics
aggregates all of them. A single worker keeps its metrics in memory.
"""

from __future__ import annotations

import os

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import multiprocess

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

REQUEST_LATENCY = Histogram(
    "inference_request_duration_seconds", "Time from request received to response ready.", ["route"], buckets=LATENCY_BUCKETS
)
REQUESTS = Counter("inference_requests", "Inference requests by route and HTTP status.", ["route", "status"])
BATCH_SIZE = Histogram("inference_batch_size", "Rows per model execution (after dynamic batching).", buckets=BATCH_BUCKETS)
BATCH_LATENCY = Histogram(
    "inference_batch_duration_seconds", "Tokenize + model time per executed batch.", buckets=LATENCY_BUCKETS
)
QUEUE_DEPTH = Gauge("inference_queue_depth", "Requests waiting for the model.", multiprocess_mode="livesum")

CONTENT_TYPE = CONTENT_TYPE_LATEST


def render() -> bytes:
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest(REGISTRY)

