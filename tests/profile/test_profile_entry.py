"""Which rate a load test's result becomes a profile entry at: the highest step that held p99 and the error
budget at its rate, divided by the instances; refusals for invalid runs and runs where no step held."""

from __future__ import annotations

import datetime

import pytest

from inferstack.loadtest.results import FAIL, INVALID, PASS
from inferstack.profile import entry
from inferstack.profile.entry import ProfileRefused
from tests.support.run_results import run, step

TODAY = datetime.date(2025, 3, 10)


def make(result, **kwargs):
    options = {
        "instance_type": "inf1.xlarge",
        "results": "s3://bucket/r-42/intent-bert/run-1/result.json",
        "environment": "staging",
        "today": TODAY,
        **kwargs,
    }
    return entry.from_run(result, **options)


def test_a_passing_run_is_profiled_at_its_last_step_per_instance():
    result = run(step(100, 4.0), step(200, 6.0), step(400, 9.5, achieved=398.7, sent=11961))
    assert result.verdict == PASS
    made = make(result)
    assert made.instance_type == "inf1.xlarge"
    assert made.point.throughput_per_second == pytest.approx(199.35)  # 398.7 / 2 instances
    assert made.point.p99_latency_ms == 9.5
    measured = made.point.measured
    assert (
        measured.date,
        measured.method,
        measured.environment,
        measured.release,
        measured.instances,
        measured.p99_latency_ms,
        measured.results,
    ) == (
        datetime.date(2025, 3, 4),
        "inferstack profile",
        "staging",
        "r-42",
        2,
        9.5,
        "s3://bucket/r-42/intent-bert/run-1/result.json",
    )
    assert "398.7 req/s held on 2 x inf1.xlarge in staging (release r-42)" in made.point.source
    assert "\n" not in made.point.source


def test_a_failed_run_is_profiled_at_the_highest_step_that_held():
    # 300 req/s broke the p99; 400 req/s broke the error budget: 200 req/s is the most it held.
    result = run(step(100, 4.0), step(200, 7.25), step(300, 14.0), step(400, 9.0, failures=50))
    assert result.verdict == FAIL and result.highest_rate_within_slo == 200
    made = make(result)
    assert made.point.throughput_per_second == 100 and made.point.p99_latency_ms == 7.25


def test_a_step_that_fell_short_of_its_rate_did_not_hold_it():
    result = run(step(100, 4.0), step(200, 5.0, achieved=150))  # the server could not take 200 req/s
    assert make(result).point.throughput_per_second == 50


def test_a_step_that_sent_more_than_offered_counts_at_its_offered_rate():
    # short steps: the generator ran ahead of its pacing; the server was shown to take 40 req/s, not 44.6
    made = make(run(step(20, 4.0, achieved=20.4), step(40, 7.3, achieved=44.6), instances=1))
    assert made.point.throughput_per_second == 40
    assert "40.0 req/s held on 1 x inf1.xlarge" in made.point.source


def test_rounding_never_promises_more_than_measured():
    result = run(step(100, 4.0, achieved=100.0), step(200, 6.001, achieved=199.99), instances=3)
    made = make(result)
    assert made.point.throughput_per_second == 66.66  # 66.663 rounded down
    assert made.point.p99_latency_ms == 6.01  # 6.001 rounded up


def test_an_invalid_run_is_refused_with_its_reason():
    result = run(step(100, 4.0), step(200, 6.0), cpu=97.0)
    assert result.verdict == INVALID
    with pytest.raises(
        ProfileRefused,
        match=r"^the run is invalid, nothing written: generator local saturated: "
        r"CPU 97 %",
    ):
        make(result)


def test_a_run_where_no_step_held_is_refused_naming_each_step():
    result = run(step(100, 12.0), step(200, 30.0))
    assert result.highest_rate_within_slo is None
    with pytest.raises(ProfileRefused) as caught:
        make(result)
    message = str(caught.value)
    assert message.startswith("no step held p99 <= 10 ms with errors <= 0.1 % at its rate")
    assert "100 req/s: answered 100.0/s, p99 12.0 ms from the due time" in message and "200 req/s" in message
    assert "\n" not in message


def test_a_run_that_answered_nothing_is_refused():
    with pytest.raises(ProfileRefused, match=r"no step held .*100 req/s: answered 0\.0/s, p99 n/a"):
        make(run(step(100, None, achieved=0)))
    with pytest.raises(ProfileRefused, match="no request was sent: nothing was measured"):
        make(run(step(100, None, achieved=0, sent=0)))


def test_instances_come_from_the_run_unless_given():
    result = run(step(100, 4.0), instances=None)
    with pytest.raises(ProfileRefused, match="pass --instances N"):
        make(result)
    assert make(result, instances=4).point.throughput_per_second == 25
    assert make(run(step(100, 4.0), instances=5), instances=1).point.measured.instances == 1


def test_a_local_run_names_its_target_and_no_environment():
    made = make(run(step(100, 4.0)), environment=None, release=None)
    assert made.point.measured.environment is None
    assert "against http://10.0.0.1/v2/models/intent-bert/infer" in made.point.source


def test_the_entry_data_is_in_the_written_order_without_unset_fields():
    data = make(run(step(100, 4.0), release=None)).data()
    assert list(data) == ["throughput_per_second", "p99_latency_ms", "source", "measured"]
    assert list(data["measured"]) == ["date", "method", "environment", "instances", "p99_latency_ms", "results"]


def test_a_stricter_slo_where_the_entry_is_written_judges_the_steps_again():
    # judged by 10 ms the run held 200 req/s at 9.5 ms; prod's 8 ms SLO holds only the 100 req/s step
    result = run(step(100, 6.0), step(200, 9.5))
    assert make(result).point.throughput_per_second == 100
    made = make(result, p99_slo_ms=8.0)
    assert made.point.throughput_per_second == 50 and made.point.p99_latency_ms == 6.0
    assert "within the SLO's 8 ms" in made.point.source
    assert make(result, p99_slo_ms=50.0).point.throughput_per_second == 100  # a looser one changes nothing
    with pytest.raises(ProfileRefused, match=r"^no step held p99 <= 5 ms"):
        make(result, p99_slo_ms=5.0)


def test_a_run_of_another_instance_type_is_refused():
    with pytest.raises(
        ProfileRefused,
        match=r"^the run measured inf2.xlarge, not inf1.xlarge: write it with "
        r"--instance-type inf2.xlarge$",
    ):
        make(run(step(100, 4.0), instance_type="inf2.xlarge"))
    assert make(run(step(100, 4.0), instance_type="inf1.xlarge")).instance_type == "inf1.xlarge"


P95_MEASURED = {
    "date": datetime.date(2025, 3, 4),
    "method": "inference-recommender job j-1",
    "environment": "staging",
    "instances": 1,
    "p95_latency_ms": 212.0,
    "results": "job.json",
}


def test_a_p95_measurement_is_written_under_its_own_key():
    """An Inference Recommender job's figure is a p95: the entry says so by its key, and carries no measured p99."""
    made = entry.build("ml.g4dn.xlarge", throughput=53.2, p99_ms=300, source="s", measured=P95_MEASURED)
    assert (made.point.measured.latency_percentile, made.point.measured.latency_ms) == ("p95", 212)
    assert made.data()["measured"] == {**P95_MEASURED}
    assert list(made.data()["measured"]) == ["date", "method", "environment", "instances", "p95_latency_ms", "results"]


@pytest.mark.parametrize(
    "p99_ms,measured,expected",
    [
        (
            200,
            P95_MEASURED,
            "the measurement is not a valid profile entry: p99_latency_ms 200 is below the measured p95 "
            "212 (measured.p95_latency_ms): plan with what was measured",
        ),
        (
            300,
            {**P95_MEASURED, "p99_latency_ms": 250.0},
            "the measurement is not a valid profile entry: "
            "measured.p95_latency_ms: set with p99_latency_ms: a measurement records its latency at one percentile",
        ),
        (
            300,
            {k: v for k, v in P95_MEASURED.items() if k != "p95_latency_ms"},
            "the measurement is not a valid profile "
            "entry: measured: set p99_latency_ms (a load test's p99) or p95_latency_ms",
        ),
    ],
)
def test_a_p95_entry_that_does_not_add_up_is_refused(p99_ms, measured, expected):
    with pytest.raises(ProfileRefused) as caught:
        entry.build("ml.g4dn.xlarge", throughput=53.2, p99_ms=p99_ms, source="s", measured=measured)
    assert str(caught.value).startswith(expected), str(caught.value)
