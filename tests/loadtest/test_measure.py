"""What a generator records and how the master adds it up (inferstack/loadtest/measure.py), with a clock the
test moves: requests count in the step they were sent in, after its settle time; each step's percentiles come
from its own requests; errors are counted by kind; generators' rates add up; a saturated generator makes the
run invalid."""

from __future__ import annotations

import botocore.exceptions
import pytest

from inferstack.loadtest import measure
from inferstack.loadtest.results import FAIL, INVALID, PASS, Generator, RunResult, StepResult
from inferstack.loadtest.spec import ExpectedOutput, LoadTestSpec, Step, Target


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def spec(*steps: Step, slo_ms: float = 50.0) -> LoadTestSpec:
    return LoadTestSpec(model="m", target=Target(kind="http", url="http://127.0.0.1:1/v2/models/m/infer"),
                        body={"inputs": []}, outputs=(ExpectedOutput("logits", "FP32", (1, 2)),),
                        steps=steps or (Step(rate=10, seconds=10), Step(rate=20, seconds=10)), p99_slo_ms=slo_ms)


def run_two_steps(recorder: measure.Recorder, clock: Clock, first_ms: float, second_ms: float) -> None:
    """Step 1 (settle 1 s) then step 2 (settle 1 s), 10 s each; 10 requests a second of first_ms / second_ms."""
    recorder.begin_step(0, t0=0.0, settle_s=1.0)
    for tick in range(100):  # 10 s at 10 a second, each answered `first_ms` after it was sent
        clock.now += 0.1
        recorder.record(first_ms, None)
    recorder.begin_step(1, t0=10.0, settle_s=1.0)
    for tick in range(100):
        clock.now += 0.1
        recorder.record(second_ms, None)
    recorder.stop()


def test_each_step_holds_its_own_requests_sent_after_its_settle_time():
    clock = Clock()
    recorder = measure.Recorder("local", clock=clock)
    run_two_steps(recorder, clock, first_ms=5.0, second_ms=40.0)
    aggregator = measure.Aggregator()
    aggregator.add(recorder.report(final=True))
    result = aggregator.result(spec(Step(rate=10, seconds=10), Step(rate=10, seconds=10)), started="s", finished="f",
                               workers=0)
    first, second = result.steps
    # 1 s of each 10 s step is settle time: 90 requests measured over 9 s, none of the other step's.
    assert (first.requests, second.requests) == (90, 90)
    assert first.seconds == pytest.approx(9.0) and first.achieved_rps == pytest.approx(10.0, rel=0.02)
    assert first.p99_ms == 5.0 and first.max_ms == 5.0
    assert second.p50_ms == 40.0 and second.p99_ms == 40.0
    assert (first.started_s, second.started_s) == (0.0, 10.0)
    assert result.verdict == PASS


def test_a_request_counts_in_the_step_it_was_sent_in_not_the_one_it_was_answered_in():
    clock = Clock()
    recorder = measure.Recorder("local", clock=clock)
    recorder.begin_step(0, t0=0.0, settle_s=0.0)
    clock.now += 5.0
    recorder.begin_step(1, t0=5.0, settle_s=0.5)
    clock.now += 1.0
    recorder.record(2000.0, None)  # sent 2 s ago: in step 1's time
    recorder.record(800.0, None)   # sent 0.8 s ago: during step 2's settle time, not measured
    recorder.record(100.0, None)   # sent in step 2's measured time
    recorder.stop()
    steps = dict(recorder.report()["steps"])
    assert steps[0]["requests"] == 1 and steps[0]["latencies"] == [[2000.0, 1]]
    assert steps[1]["requests"] == 1 and steps[1]["latencies"] == [[100.0, 1]]


def test_failures_count_by_kind_against_the_budget_and_not_in_the_latencies():
    clock = Clock()
    recorder = measure.Recorder("local", clock=clock)
    recorder.begin_step(0, t0=0.0, settle_s=0.0)
    for i in range(200):
        clock.now += 0.01
        kind = ("HTTP 503" if i % 50 == 0 else "invalid answer: output logits missing (got none)" if i % 40 == 1
                else None)
        recorder.record(0.1 if kind == "HTTP 503" else 20.0, kind)
    recorder.stop()
    aggregator = measure.Aggregator()
    aggregator.add(recorder.report())
    result = aggregator.result(spec(Step(rate=100, seconds=2)), started="s", finished="f", workers=0)
    (step,) = result.steps
    assert step.errors == {"HTTP 503": 4, "invalid answer: output logits missing (got none)": 5}
    assert (step.requests, step.failures) == (200, 9)
    assert step.p50_ms == step.p99_ms == 20.0  # a refused request's 0.1 ms does not flatter the latencies
    assert result.verdict == FAIL
    assert any("errors 4.50 % above the budget's 0.1 % (invalid answer: output logits missing (got none): 5, "
               "HTTP 503: 4)" in reason for reason in result.reasons)


def test_distinct_error_kinds_are_bounded():
    tally = measure.StepTally()
    for i in range(measure.MAX_ERROR_KINDS + 5):
        tally.add(1.0, f"invalid answer: reply is not JSON: b'{i}'")
    assert len(tally.errors) == measure.MAX_ERROR_KINDS + 1
    assert tally.errors[measure.OTHER_ERRORS] == 5 and tally.failures == measure.MAX_ERROR_KINDS + 5


def test_the_master_adds_generators_up_and_keeps_only_each_ones_latest_report():
    clocks = [Clock(), Clock()]
    recorders = [measure.Recorder(f"worker-{n}", clock=c) for n, c in zip((1, 2), clocks)]
    aggregator = measure.Aggregator()
    for recorder, clock, ms in zip(recorders, clocks, (5.0, 30.0)):
        recorder.begin_step(0, t0=0.0, settle_s=0.0)
        for _ in range(50):
            clock.now += 0.125  # 8 a second (exact in binary: whole seconds stay whole)
            recorder.record(ms, None)
        aggregator.add(recorder.report())  # a report midway...
        for _ in range(50):
            clock.now += 0.125
            recorder.record(ms, None)
        recorder.stop()
        aggregator.add(recorder.report())  # ...is replaced by the later one, not added to it
    result = aggregator.result(spec(Step(rate=16, seconds=12.5)), started="s", finished="f", workers=2)
    (step,) = result.steps
    assert step.requests == 200
    assert step.achieved_rps == pytest.approx(16.0)  # 8 a second from each
    assert step.p50_ms == 5.0 and step.p99_ms == 30.0 and step.max_ms == 30.0
    # The timeline: every second once (reports send each second once), both generators' requests in it.
    assert [s.rps for s in result.timeline] == [14.0] + [16.0] * 11 + [10.0]
    assert [g.name for g in result.generators] == ["worker-1", "worker-2"]


def test_cpu_is_sampled_while_steps_are_measured():
    clock = Clock()
    recorder = measure.Recorder("worker-1", clock=clock)
    recorder.sample_cpu(99.0)  # before the first step: starting up, not generating load
    recorder.begin_step(0, t0=0.0, settle_s=1.0)
    recorder.sample_cpu(95.0)  # during the settle time
    clock.now += 2.0
    for percent in (20.0, 40.0):
        recorder.sample_cpu(percent)
    aggregator = measure.Aggregator()
    aggregator.add(recorder.report())
    (generator,) = aggregator.result(spec(), started="s", finished="f", workers=1).generators
    assert (generator.max_cpu_percent, generator.mean_cpu_percent) == (40.0, 30.0)


def _result(generators, p99=10.0) -> RunResult:
    step = StepResult(offered_rps=10, achieved_rps=10, seconds=30, requests=300, failures=0, errors={},
                      p50_ms=5.0, p90_ms=8.0, p99_ms=p99, max_ms=12.0)
    return RunResult(model="m", target="t", started="s", finished="f", p99_slo_ms=50.0, error_budget_percent=0.1,
                     steps=(step,), generators=tuple(generators))


def test_a_saturated_generator_makes_the_run_invalid_whatever_its_latencies():
    calm = Generator(name="worker-1", max_cpu_percent=45.0, mean_cpu_percent=30.0)
    busy = Generator(name="worker-2", max_cpu_percent=97.0, mean_cpu_percent=88.0)
    assert _result([calm]).verdict == PASS
    invalid = _result([calm, busy])
    assert invalid.verdict == INVALID
    assert invalid.reasons == ["generator worker-2 saturated: CPU 97 % (>= 90 %); its latencies are its own, "
                               "add workers"]
    assert invalid.highest_rate_within_slo is None
    assert RunResult.from_json(invalid.to_json()).verdict == INVALID


def test_error_kinds_name_the_aws_error_code_or_a_timeout():
    model_error = botocore.exceptions.ClientError(
        {"Error": {"Code": "ModelError", "Message": "Received server error (500)"}}, "InvokeEndpoint")
    throttled = botocore.exceptions.ClientError({"Error": {"Code": "ThrottlingException"}}, "InvokeEndpoint")
    read_timeout = botocore.exceptions.ReadTimeoutError(endpoint_url="http://x")
    assert [measure.error_kind(e) for e in (model_error, throttled, read_timeout, TimeoutError(),
                                            ConnectionRefusedError())] == [
        "ModelError", "ThrottlingException", "timeout", "timeout", "ConnectionRefusedError"]


def test_percentiles_are_nearest_rank_over_three_significant_digits():
    histogram: dict[float, int] = {}
    for ms in [1.0] * 98 + [12.345, 250.04]:
        key = measure.latency_key(ms)
        histogram[key] = histogram.get(key, 0) + 1
    assert measure.percentile(histogram, 50) == 1.0
    assert measure.percentile(histogram, 99) == 12.3
    assert measure.percentile(histogram, 100) == 250.0
    assert measure.percentile({}, 99) is None
