"""metrics.RequestTally: per-request Prometheus updates gathered per batch come out exactly as one
observe()/inc() per request would have, and land at the batch's flush, or shortly after when no batch comes."""

from __future__ import annotations

import asyncio
import random

from prometheus_client import CollectorRegistry, Histogram

# serving/ and build/'s flat modules, on the path from conftest.py (ruff would count them third-party).
# isort: split
import emf
import metrics


def test_observe_many_is_observe_for_each_value():
    rng = random.Random(3)
    values = [rng.choice([0.0, 0.001, 0.0011, 0.004, 0.3, 7.0, 99.0]) for _ in range(200)] + [
        rng.random() for _ in range(50)
    ]
    one, many = CollectorRegistry(), CollectorRegistry()
    a = Histogram("lat_seconds", "x", ["route"], buckets=metrics.LATENCY_BUCKETS, registry=one).labels("infer")
    b = Histogram("lat_seconds", "x", ["route"], buckets=metrics.LATENCY_BUCKETS, registry=many).labels("infer")
    for value in values:
        a.observe(value)
    metrics.observe_many(b, values)
    assert samples(one) == samples(many)


def samples(registry: CollectorRegistry) -> list:
    return [
        (s.name, s.labels, s.value)
        for metric in registry.collect()
        for s in metric.samples
        if not s.name.endswith("_created")
    ]


def sample(name: str, labels: dict) -> float:
    value = metrics.REGISTRY.get_sample_value(name, labels)
    return value or 0.0


def test_requests_are_written_at_the_flush_or_when_none_comes_soon_after():
    async def scenario():
        depth = [3]
        tally = metrics.RequestTally(asyncio.get_running_loop(), lambda: depth[0], idle_s=0.001)
        labels = {"route": "tally-test", "status": "200"}
        before = sample("inference_requests_total", labels)
        count_before = sample("inference_request_duration_seconds_count", {"route": "tally-test"})
        for _ in range(5):
            tally.request("tally-test", 200, 0.002)
        assert sample("inference_requests_total", labels) == before  # not yet
        tally.flush()  # as a batch's replies are out
        assert sample("inference_requests_total", labels) == before + 5
        assert sample("inference_request_duration_seconds_count", {"route": "tally-test"}) == count_before + 5
        assert sample("inference_queue_depth", {}) == 3
        tally.request("tally-test", 413, 0.0)  # refused: no batch will flush it
        depth[0] = 0
        while sample("inference_requests_total", {"route": "tally-test", "status": "413"}) != 1:
            await asyncio.sleep(0.001)  # the idle flush; the test waits for it, whatever it takes
        assert sample("inference_queue_depth", {}) == 0

    asyncio.run(scenario())


def test_the_flush_hands_each_request_to_the_emf_recorder_with_its_5xx_and_refusals():
    async def scenario():
        recorder = emf.Recorder({"Service": "s", "Model": "m", "Worker": "0"}, always_counted=(emf.REQUESTS,))
        tally = metrics.RequestTally(asyncio.get_running_loop(), lambda: 0, idle_s=60, recorder=recorder)
        tally.request("infer", 200, 0.002)
        tally.request("invocations", 200, 0.004)
        tally.request("infer", 500, 0.010)
        tally.request("infer", 503, 0.00003, "admission")
        tally.request("infer", 503, 0.050, "expired")
        tally.request("infer", 400, 0.0001)
        assert recorder.drain(1)[emf.REQUESTS] == 0  # gathered until the flush
        tally.flush()
        data = recorder.drain(2)
        assert (data[emf.REQUESTS], data[emf.ERRORS], data[emf.REJECTED]) == (6, 3, 2)
        assert sorted(data[emf.REQUEST_LATENCY]) == [0.03, 0.1, 2, 4, 10, 50]
        tally.flush()  # nothing since: nothing more
        assert recorder.drain(3)[emf.REQUESTS] == 0

    asyncio.run(scenario())
