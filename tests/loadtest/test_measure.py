"""What a generator records and how the master adds it up (inferstack/loadtest/measure.py), with a clock the
test moves: requests count in the step they were due in, after its settle time, with their latency from the due
time; late sends, rejections, timeouts and requests never answered are counted, not skipped; each step's
percentiles come from every generator's merged HdrHistogram; a saturated or late generator makes the run
invalid; steps above the full rate are judged on what was admitted and the goodput held."""

from __future__ import annotations

import json

import botocore.exceptions
import pytest

from inferstack.loadtest import measure
from inferstack.loadtest.results import FAIL, INVALID, PASS, Generator, ResultError, RunResult, StepResult
from inferstack.loadtest.spec import ExpectedOutput, LoadTestSpec, Step, Target

SLO_MS = 50.0
LOCAL_GENERATORS = (Generator("local", 30.0, 20.0),)  # run_of's default (frozen: shared safely)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def spec(*steps: Step, slo_ms: float = SLO_MS, **changes) -> LoadTestSpec:
    return LoadTestSpec(
        model="m",
        target=Target(kind="http", url="http://127.0.0.1:1/v2/models/m/infer"),
        bodies=({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["hi"]}]},),
        outputs=(ExpectedOutput("logits", "FP32", (1, 2)),),
        steps=steps or (Step(rate=10, seconds=10), Step(rate=20, seconds=10)),
        p99_slo_ms=slo_ms,
        **changes,
    )


def recorder(name: str, clock: Clock) -> measure.Recorder:
    return measure.Recorder(name, slo_ms=SLO_MS, late_after_ms=5.0, clock=clock)


def send(
    recorder: measure.Recorder,
    clock: Clock,
    latency_ms: float,
    kind: str | None = None,
    *,
    status: int = 200,
    late_ms: float = 0.0,
    held: bool = False,
) -> None:
    """One request due now, leaving `late_ms` after it (before it if negative; `held`: waiting for a slot), ended
    `latency_ms` after it was due."""
    due = clock.now
    recorder.left(due, due + late_ms / 1000.0, held)
    clock.now = due + latency_ms / 1000.0
    recorder.ended(due, kind, status, sent=due + late_ms / 1000.0)
    clock.now = due


def run_steps(
    recorder: measure.Recorder,
    clock: Clock,
    *latencies_ms: float,
    rate: float = 10,
    seconds: float = 10,
    settle_s: float = 1.0,
) -> None:
    origin = clock.now
    for index, ms in enumerate(latencies_ms):
        clock.now = origin + index * seconds
        recorder.begin_step(index, t0=index * seconds, settle_s=settle_s)
        for i in range(int(rate * seconds)):  # due half an interval off the step's boundaries
            clock.now = origin + index * seconds + (i + 0.5) / rate
            send(recorder, clock, ms)
    clock.now = origin + len(latencies_ms) * seconds
    recorder.stop()


def result_of(*recorders: measure.Recorder, the_spec: LoadTestSpec, workers: int = 0) -> RunResult:
    aggregator = measure.Aggregator()
    for each in recorders:
        aggregator.add(each.report(final=True))
    return aggregator.result(the_spec, started="s", finished="f", workers=workers)


def test_each_step_holds_the_requests_due_after_its_settle_time_with_latency_from_the_due_time():
    clock = Clock()
    one = recorder("local", clock)
    run_steps(one, clock, 5.0, 40.0)
    first, second = result_of(one, the_spec=spec(Step(rate=10, seconds=10), Step(rate=10, seconds=10))).steps
    # 1 s of each 10 s step is settle time: 90 requests measured over 9 s, none of the other step's.
    assert (first.offered, second.offered) == (90, 90)
    assert (first.answered, first.good, first.late, first.failures) == (90, 90, 0, 0)
    assert first.seconds == pytest.approx(9.0) and first.goodput_rps == pytest.approx(10.0, rel=0.02)
    # HdrHistogram's 3 significant digits: the top of the value's bucket, at most 0.1 % above it.
    assert first.p99_ms == pytest.approx(5.0, rel=1e-3) and first.p99_ms >= 5.0
    assert second.p50_ms == pytest.approx(40.0, rel=1e-3) and second.max_ms == pytest.approx(40.0, rel=1e-3)
    assert (first.started_s, second.started_s) == (0.0, 10.0)


def test_a_request_counts_in_the_step_it_was_due_in_not_the_one_it_ended_in():
    clock = Clock()
    one = recorder("local", clock)
    one.begin_step(0, t0=0.0, settle_s=0.0)
    clock.now += 5.0
    one.begin_step(1, t0=5.0, settle_s=0.5)
    clock.now += 1.0
    for due_ago in (2.0, 0.8, 0.1):  # due in step 1; during step 2's settle time (not measured); in step 2
        one.ended(clock.now - due_ago, None, 200)
    one.stop()
    steps = dict(one.report()["steps"])
    firsts = measure.StepTally.from_wire(steps[0])
    seconds = measure.StepTally.from_wire(steps[1])
    assert firsts.answered == 1 and measure.histogram_ms(firsts.histogram, 100) == pytest.approx(2000.0, rel=1e-3)
    assert seconds.answered == 1 and measure.histogram_ms(seconds.histogram, 100) == pytest.approx(100.0, rel=1e-3)


def one_step(clock: Clock) -> measure.Recorder:
    """A local generator whose first step began now and is measured at once."""
    one = recorder("local", clock)
    one.begin_step(0, t0=0.0, settle_s=0.0)
    return one


def late_run(late_latency_ms: float, *, held: bool = False) -> RunResult:
    """100 requests in a second; every tenth left 30 ms late (waiting for a slot when `held`) and was answered
    `late_latency_ms` after it was due; the others took 2 ms."""
    clock = Clock()
    one = one_step(clock)
    for i in range(100):
        clock.now += 0.01
        if i % 10 == 0:
            send(one, clock, late_latency_ms, late_ms=30.0, held=held)
        else:
            send(one, clock, 2.0, late_ms=0.2)
    one.stop()
    return result_of(one, the_spec=spec(Step(rate=100, seconds=1)))


def test_late_sends_are_counted_with_their_lateness_and_their_wait_is_in_the_latency():
    run = late_run(32.0)
    (step,) = run.steps
    assert (step.offered, step.late, step.late_max_ms, step.held) == (100, 10, 30.0, 0)
    assert step.p99_ms == pytest.approx(32.0, rel=1e-3)
    # Lateness only adds to a latency counted from the due time: within the SLO despite it, the step stands.
    assert run.verdict == PASS


def test_a_request_woken_early_counts_its_latency_from_when_it_left_and_a_late_one_from_when_it_was_due():
    # The locustfile wakes each request a timer tick early (pacing.TIMER_LEAD_S): one that left 0.8 ms before it
    # was due and was answered 5 ms after it was due took 5.8 ms; one that left 3 ms late, 5 ms from its due time.
    clock = Clock()
    one = one_step(clock)
    for i in range(100):
        clock.now += 0.01
        send(one, clock, 5.0, late_ms=-0.8 if i < 50 else 3.0)
    one.stop()
    (step,) = result_of(one, the_spec=spec(Step(rate=100, seconds=1))).steps
    assert (step.offered, step.late) == (100, 0)
    assert step.p50_ms == pytest.approx(5.0, rel=1e-3) and step.p99_ms == pytest.approx(5.8, rel=1e-3)


def test_a_latency_ends_when_the_reply_arrived_not_when_the_generator_finished_checking_it():
    # The locustfile stamps each reply's arrival before it checks the answer and fires Locust's event: 4 ms after
    # the due time, recorded 2 ms later still (the generator's own work), is a latency of 4 ms.
    clock = Clock()
    one = one_step(clock)
    for _ in range(100):
        clock.now += 0.01
        due = clock.now
        one.left(due, due)
        clock.now = due + 0.006
        one.ended(due, None, 200, sent=due, at=due + 0.004)
        clock.now = due
    one.stop()
    (step,) = result_of(one, the_spec=spec(Step(rate=100, seconds=1))).steps
    assert step.p50_ms == pytest.approx(4.0, rel=1e-3) and step.p99_ms == pytest.approx(4.0, rel=1e-3)


def test_late_sends_that_could_account_for_a_miss_make_the_step_invalid_not_a_fail():
    # 60 ms from the due time, 30 of them spent late in the generator: the server may have taken 30 (SLO 50).
    run = late_run(60.0)
    assert run.verdict == INVALID and run.highest_rate_within_slo is None
    assert run.reasons == [
        "step 1 (100 req/s, 100 %): 10 late sends (10.0 % of 100, up to 30 ms after they were "
        "due) account for its p99 above the SLO: the generators fell behind (CPU); add workers"
    ]
    # 200 ms from the due time: even less the 30 ms late, the server took 170, far above the SLO. A fail.
    assert late_run(200.0).verdict == FAIL


def test_a_send_held_back_by_the_in_flight_bound_makes_the_step_invalid_never_a_pass():
    run = late_run(32.0, held=True)
    assert run.steps[0].held == 10
    assert run.verdict == INVALID
    assert run.reasons == [
        "step 1 (100 req/s, 100 %): the in-flight bound held back 10 sends (the generators could "
        "not keep up); add workers"
    ]


def test_a_generator_that_sent_fewer_than_were_due_is_not_a_measurement():
    clock = Clock()
    one = one_step(clock)
    for _ in range(50):  # half of what 100 req/s makes due in a second
        clock.now += 0.02
        send(one, clock, 2.0)
    one.stop()
    run = result_of(one, the_spec=spec(Step(rate=100, seconds=1)))
    assert run.verdict == INVALID
    assert run.reasons == ["step 1 (100 req/s, 100 %): the generators sent 50 of the 100 requests due"]


def test_failures_count_by_kind_against_the_budget_and_not_in_the_latencies():
    clock = Clock()
    one = one_step(clock)
    for i in range(200):
        clock.now += 0.01
        if i % 50 == 0:
            send(one, clock, 0.1, "HTTP 503", status=503)
        elif i % 40 == 1:
            send(one, clock, 20.0, "invalid answer: output logits missing (got none)")
        elif i == 7:
            send(one, clock, 10_000.0, measure.TIMEOUT, status=0)
        else:
            send(one, clock, 20.0)
    one.stop()
    run = result_of(one, the_spec=spec(Step(rate=100, seconds=2)))
    (step,) = run.steps
    assert step.errors == {"HTTP 503": 4, "invalid answer: output logits missing (got none)": 5, "timeout": 1}
    assert (step.offered, step.answered, step.failures, step.rejected, step.timeouts) == (200, 190, 10, 4, 1)
    # A refused request's 0.1 ms does not flatter the latencies, and the timeout counts as an error instead.
    assert step.p50_ms == pytest.approx(20.0, rel=1e-3) and step.p99_ms == pytest.approx(20.0, rel=1e-3)
    assert run.verdict == FAIL
    assert run.reasons == [
        "step 1 (100 req/s, 100 %): errors 5.00 % above the budget's 0.1 % (invalid answer: "
        "output logits missing (got none): 5, HTTP 503: 4, timeout: 1)"
    ]


def test_requests_still_unanswered_when_the_run_ends_are_failures_not_forgotten():
    clock = Clock()
    one = one_step(clock)
    for i in range(100):
        clock.now += 0.01
        if i < 97:
            send(one, clock, 2.0)
        else:
            one.left(clock.now, clock.now)  # sent, never answered
    one.stop()
    (step,) = result_of(one, the_spec=spec(Step(rate=100, seconds=1))).steps
    assert (step.offered, step.answered, step.failures) == (100, 97, 3)
    assert step.errors == {measure.UNANSWERED: 3}


def test_a_request_sent_just_before_the_run_stops_but_due_after_it_counts_answered_where_it_left():
    # The locustfile wakes pacing.TIMER_LEAD_S before a request is due and sends it then: one that left before the
    # drain closed the window, due just after the close, was counted offered; its answer counts there too.
    clock = Clock()
    one = one_step(clock)
    for _ in range(99):
        clock.now += 0.01
        send(one, clock, 2.0)
    clock.now += 0.01
    due, sent = clock.now, clock.now - 0.0008
    one.left(due, sent)
    clock.now = due - 0.0003
    one.stop()  # the drain: nothing more is sent from here
    one.ended(due, None, 200, sent=sent, at=due + 0.002)
    (step,) = result_of(one, the_spec=spec(Step(rate=100, seconds=1))).steps
    assert (step.offered, step.answered, step.failures) == (100, 100, 0) and step.errors == {}


def test_distinct_error_kinds_are_bounded():
    tally = measure.StepTally()
    for i in range(measure.MAX_ERROR_KINDS + 5):
        tally.ended(1.0, f"invalid answer: reply is not JSON: b'{i}'", 200, SLO_MS)
    assert len(tally.errors) == measure.MAX_ERROR_KINDS + 1
    assert tally.errors[measure.OTHER_ERRORS] == 5 and tally.failures == measure.MAX_ERROR_KINDS + 5


def test_the_master_merges_every_generators_histogram_and_keeps_only_each_ones_latest_report():
    clocks = [Clock(), Clock()]
    recorders = [recorder(f"worker-{n}", c) for n, c in zip((1, 2), clocks, strict=True)]
    aggregator = measure.Aggregator()
    for each, clock, ms in zip(recorders, clocks, (5.0, 30.0), strict=True):
        each.begin_step(0, t0=0.0, settle_s=0.0)
        for _ in range(50):
            clock.now += 0.125  # 8 a second (exact in binary: whole seconds stay whole)
            send(each, clock, ms)
        aggregator.add(each.report())  # a report midway...
        for _ in range(50):
            clock.now += 0.125
            send(each, clock, ms)
        each.stop()
        aggregator.add(each.report())  # ...is replaced by the later one, not added to it
    run = aggregator.result(spec(Step(rate=16, seconds=12.5)), started="s", finished="f", workers=2)
    (step,) = run.steps
    assert step.offered == step.answered == 200
    assert step.answered_rps == pytest.approx(16.0)  # 8 a second from each
    # The percentiles of the merged histogram: half the requests at 5 ms (worker-1), half at 30 ms (worker-2).
    assert step.p50_ms == pytest.approx(5.0, rel=1e-3) and step.p99_ms == pytest.approx(30.0, rel=1e-3)
    # The timeline: every second once (reports send each second once), both generators' requests in it.
    assert [s.rps for s in run.timeline] == [14.0] + [16.0] * 11 + [10.0]
    assert [g.name for g in run.generators] == ["worker-1", "worker-2"]
    assert run.resolution == measure.RESOLUTION and "3 significant digits" in run.resolution


def test_cpu_is_sampled_while_steps_are_measured():
    clock = Clock()
    one = recorder("worker-1", clock)
    one.sample_cpu(99.0)  # before the first step: starting up, not generating load
    one.begin_step(0, t0=0.0, settle_s=1.0)
    one.sample_cpu(95.0)  # during the settle time
    clock.now += 2.0
    for percent in (20.0, 40.0):
        one.sample_cpu(percent)
    aggregator = measure.Aggregator()
    aggregator.add(one.report())
    (generator,) = aggregator.result(spec(), started="s", finished="f", workers=1).generators
    assert (generator.max_cpu_percent, generator.mean_cpu_percent) == (40.0, 30.0)


def step(
    rate: float,
    p99: float,
    *,
    answered: int | None = None,
    good: int | None = None,
    rejected: int = 0,
    failures: int = 0,
    late: int = 0,
    seconds: float = 30.0,
) -> StepResult:
    offered = round(rate * seconds)
    answered = offered - failures if answered is None else answered
    return StepResult(
        offered_rps=rate,
        seconds=seconds,
        offered=offered,
        late=late,
        late_max_ms=9.0 if late else 0.0,
        answered=answered,
        good=answered if good is None else good,
        rejected=rejected,
        timeouts=0,
        failures=failures,
        errors={"HTTP 503": rejected} if rejected else {},
        p50_ms=p99 / 2,
        p90_ms=p99 * 0.8,
        p99_ms=p99,
        max_ms=p99 * 1.5,
    )


def run_of(*steps: StepResult, generators=LOCAL_GENERATORS, **changes) -> RunResult:
    return RunResult(
        model="m",
        target="t",
        started="s",
        finished="f",
        p99_slo_ms=SLO_MS,
        error_budget_percent=0.1,
        steps=steps,
        generators=tuple(generators),
        **changes,
    )


def test_a_saturated_generator_makes_the_run_invalid_whatever_its_latencies():
    calm = Generator(name="worker-1", max_cpu_percent=45.0, mean_cpu_percent=30.0)
    busy = Generator(name="worker-2", max_cpu_percent=97.0, mean_cpu_percent=88.0)
    assert run_of(step(10, 10.0), generators=[calm]).verdict == PASS
    invalid = run_of(step(10, 10.0), generators=[calm, busy])
    assert invalid.verdict == INVALID
    assert invalid.reasons == [
        "generator worker-2 saturated: CPU 97 % (>= 90 %); its latencies are its own, add workers"
    ]
    assert invalid.highest_rate_within_slo is None
    assert RunResult.from_json(invalid.to_json()).verdict == INVALID


def test_every_step_up_to_the_full_rate_is_judged_not_only_the_last():
    run = run_of(step(25, 10.0), step(50, 400.0), step(100, 20.0))
    assert run.verdict == FAIL
    assert run.reasons == ["step 2 (50 req/s, 50 %): p99 400.0 ms above the SLO's 50 ms"]
    assert run.highest_rate_within_slo == pytest.approx(100.0)


def test_above_the_full_rate_a_step_is_judged_on_what_was_admitted_and_the_goodput_held():
    full = step(100, 20.0)
    # Twice the full rate, shed: half rejected at once, what was admitted answered within the SLO.
    shed = step(200, 30.0, answered=3000, rejected=3000, failures=3000)
    held = run_of(full, shed, full_rate=100.0)
    assert held.verdict == PASS, held.reasons
    assert held.highest_rate_within_slo == pytest.approx(100.0)  # the shed step did not serve its rate
    # Twice the full rate, queued: everything answered, late; goodput collapses.
    drowned = step(200, 4000.0, good=600)
    run = run_of(full, drowned, full_rate=100.0)
    assert run.verdict == FAIL
    assert run.reasons == [
        "step 2 (200 req/s, 200 %): admitted requests' p99 4000.0 ms above the SLO's 50 ms",
        "step 2 (200 req/s, 200 %): goodput 20.0 req/s within the SLO, below the full rate's 100",
    ]
    # Errors other than rejections still count above the full rate.
    broken = step(200, 30.0, answered=5000, rejected=0, failures=1000)
    assert run_of(full, broken, full_rate=100.0).verdict == FAIL


def test_a_run_below_the_planned_rate_says_so():
    run = run_of(step(10, 10.0), full_rate=10.0, planned_rate=100.0, plan_basis="1 x inf1.6xlarge in staging")
    assert run.verdict == PASS
    assert run.below_plan == (
        "the full rate 10 req/s is 10 % of the planned 100 req/s (1 x inf1.6xlarge in "
        "staging): a pass here does not show the plan holds"
    )
    assert run_of(step(100, 10.0), full_rate=100.0, planned_rate=100.0).below_plan is None
    assert RunResult.from_json(run.to_json()).to_dict()["below_plan"] == run.below_plan


def test_a_closed_loop_result_is_refused_not_read():
    old = run_of(step(10, 10.0)).to_dict()
    old["schema_version"] = 1
    with pytest.raises(
        ResultError,
        match=r"^r\.json: schema_version 1, this tool reads 2 \(version 1 came from "
        r"closed-loop users that a stalling server could fool",
    ):
        RunResult.from_json(json.dumps(old), "r.json")


def test_error_kinds_name_the_aws_error_code_or_a_timeout():
    model_error = botocore.exceptions.ClientError(
        {"Error": {"Code": "ModelError", "Message": "Received server error (500)"}}, "InvokeEndpoint"
    )
    throttled = botocore.exceptions.ClientError({"Error": {"Code": "ThrottlingException"}}, "InvokeEndpoint")
    read_timeout = botocore.exceptions.ReadTimeoutError(endpoint_url="http://x")
    assert [
        measure.error_kind(e) for e in (model_error, throttled, read_timeout, TimeoutError(), ConnectionRefusedError())
    ] == ["ModelError", "ThrottlingException", "timeout", "timeout", "ConnectionRefusedError"]


def test_the_timelines_percentiles_are_nearest_rank_over_three_significant_digits():
    histogram: dict[float, int] = {}
    for ms in [1.0] * 98 + [12.345, 250.04]:
        key = measure.latency_key(ms)
        histogram[key] = histogram.get(key, 0) + 1
    assert measure.percentile(histogram, 50) == 1.0
    assert measure.percentile(histogram, 99) == 12.3
    assert measure.percentile(histogram, 100) == 250.0
    assert measure.percentile({}, 99) is None
