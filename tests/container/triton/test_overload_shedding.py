"""Overload with the real tritonserver, started as SageMaker's serve script starts it: a model whose config.pbtxt
the renderer wrote with the queue policy it derives from the SLO (inferstack/triton/config.py, queue_policy) is
offered twice what it can serve. Triton serves at capacity, within the SLO, and answers the excess with 503; the
same model without the policy queues everything and its latency grows with the backlog; with the earlier
derivation (the queue bound as the shedder) Triton's batcher stalls and goodput falls far below capacity.

The model (benchmarks/triton_overload.py, which prints the same figures) is a Python-backend model that sleeps a
fixed time per request, so its capacity is known exactly and costs no CPU (the machine is shared). The load is an
open system: each request is sent when it is due, whatever the server did with earlier ones, and its latency
counts from then. Asserted: counts, statuses and bounds with wide margins that the behaviour decides (goodput
measured 80-94 % with the policy, mostly 34-56 % with the earlier bound; served p99 about 400 ms against 2.6 s without
a policy)."""

from __future__ import annotations

import math

import pytest

from benchmarks import triton_overload as bench
from inferstack.triton import config as triton_config
from inferstack.triton.config import QueuePolicy, RepositorySpec

pytestmark = pytest.mark.real_triton

BATCH_SECONDS = 0.05  # capacity 20 req/s
CAPACITY = 1 / BATCH_SECONDS
SLO_MS = 600.0
PROFILE_P99_MS = 250.0
OFFERED = 2 * CAPACITY
LOAD_SECONDS = 2.5
COUNT = int(OFFERED * LOAD_SECONDS)
# Goodput floor: measured 0.80-0.94 with the policy on this shared 2-core machine (0.80 with a test run beside it),
# mostly 0.34-0.56 with the earlier derivation (its queue bound stalls the batcher).
GOODPUT_FLOOR = 0.75


def spec(policy: QueuePolicy | None | str = "derived") -> RepositorySpec:
    derived = RepositorySpec.of(bench.sleepy_model(CAPACITY, SLO_MS, PROFILE_P99_MS))
    return derived if policy == "derived" else derived.model_copy(update={"queue_policy": policy})


def overload(tmp_path, install, served_spec: RepositorySpec) -> dict:
    outcomes = bench.serve(
        install, served_spec, BATCH_SECONDS, tmp_path, lambda port: bench.offer(port, OFFERED, COUNT)
    )
    return bench.summary(outcomes, CAPACITY, OFFERED, SLO_MS / 1000)


def test_the_derived_policy_is_what_the_model_needs():
    # T = SLO - profiled p99 = 350 ms; Q = ceil(4 x 20/s x 0.35 s) = 28, above what 2x leaves queued (~16)
    assert spec().queue_policy == QueuePolicy(timeout_microseconds=350_000, max_queue_size=28)
    text = triton_config.config_text(triton_config.build_config(spec(), bench.FOLDER))
    assert "timeout_action: REJECT" in text and "max_queue_size: 28" in text


def test_at_twice_capacity_triton_serves_at_capacity_within_the_slo_and_rejects_the_rest(tmp_path, triton_install):
    seen = overload(tmp_path, triton_install, spec())
    print("with the queue policy:", seen)
    assert seen["goodput"] >= GOODPUT_FLOOR, seen
    # What is admitted meets the SLO (no margin needed: the timeout caps queueing at 350 ms, a request then
    # takes 50 ms; measured ~400 ms).
    assert seen["served_p99"] * 1000 <= SLO_MS, seen
    # The excess is rejected with Triton's UNAVAILABLE, which the SageMaker front end answers 503; at 2x the
    # timeout sheds (the bound is not reached), so a rejection comes once the request waited 350 ms: well within
    # the SLO while the load lasts (the last ones, after it, may wait for Triton's 500 ms batcher wake-up).
    assert seen["rejected"] >= COUNT * 0.3 and seen["statuses"] == [503], seen
    assert seen["messages"] == ["Request timeout expired"], seen
    assert seen["rejected_p50"] * 1000 <= SLO_MS and seen["rejected_max"] <= 1.5, seen


def test_the_earlier_derivation_sheds_below_capacity(tmp_path, triton_install):
    """Q = ceil(rate x T) = 7 is reached at 2x: a request refused at a full queue does not wake Triton's batcher,
    which then sleeps up to 500 ms with the instance idle (see queue_policy). Its goodput was 34-56 % in most runs
    here (the floor above fails for it) but 81 % in one: a race, so only the cause is asserted, the goodput printed."""
    seen = overload(
        tmp_path,
        triton_install,
        spec(QueuePolicy(timeout_microseconds=350_000, max_queue_size=math.ceil(CAPACITY * 0.35))),
    )
    print("with the earlier derivation:", seen)
    assert any("Exceeds maximum queue size" in m for m in seen["messages"]), seen


def test_without_the_policy_the_queue_grows_and_so_does_latency(tmp_path, triton_install):
    baseline = spec(None)
    assert "default_queue_policy" not in triton_config.config_text(triton_config.build_config(baseline, bench.FOLDER))
    seen = overload(tmp_path, triton_install, baseline)
    print("without the queue policy:", seen)
    # Nothing is shed: the backlog (half the offered load) is served late, well past the SLO.
    assert seen["rejected"] == 0, seen
    assert seen["served_p99"] * 1000 >= 2 * SLO_MS, seen
