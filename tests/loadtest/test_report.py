"""The report a person reads and the picture they look at: per step what was offered and achieved, latencies,
errors, the generators' CPU, the verdict with its reasons; a PNG that opens, drawn without a display."""

from __future__ import annotations

import io

from PIL import Image

from inferstack.loadtest import report
from inferstack.loadtest.results import PICTURE_FILE, REPORT_FILE, RESULT_FILE, Generator, RunResult, Sample, StepResult


def result(**changes) -> RunResult:
    steps = (
        StepResult(
            offered_rps=50,
            seconds=28.0,
            offered=1400,
            late=0,
            late_max_ms=0.0,
            answered=1400,
            good=1400,
            rejected=0,
            timeouts=0,
            failures=0,
            errors={},
            p50_ms=4.2,
            p90_ms=6.0,
            p99_ms=9.1,
            max_ms=15.5,
            started_s=0.0,
        ),
        StepResult(
            offered_rps=100,
            seconds=28.0,
            offered=2800,
            late=3,
            late_max_ms=7.5,
            answered=2769,
            good=2556,
            rejected=25,
            timeouts=0,
            failures=31,
            errors={"HTTP 503": 25, "invalid answer: output logits missing (got none)": 6},
            p50_ms=38.0,
            p90_ms=70.0,
            p99_ms=140.0,
            max_ms=410.0,
            started_s=30.0,
        ),
    )
    timeline = tuple(
        Sample(
            t=float(t),
            rps=50.0 if t < 30 else 91.0,
            p50_ms=4.0 if t < 30 else 38.0,
            p99_ms=9.0 if t < 30 else 140.0,
            failures_per_s=0.0 if t < 30 else 1.1,
        )
        for t in range(60)
    )
    fields = dict(
        model="intent-bert",
        target="http://10.0.1.5/v2/models/intent-bert/infer",
        started="2026-01-01T00:00:00+00:00",
        finished="2026-01-01T00:01:02+00:00",
        p99_slo_ms=50.0,
        error_budget_percent=0.1,
        steps=steps,
        generators=(Generator("master", 3.0, 1.0), Generator("worker-1", 61.0, 40.2)),
        timeline=timeline,
        workers=1,
        full_rate=100.0,
        planned_rate=100.0,
        plan_basis="2 x inf1.xlarge in staging",
        late_after_ms=5.0,
        resolution="HdrHistogram, 3 significant digits",
        environment="staging",
        release="r42",
        instance_type="inf1.xlarge",
        instances=2,
    )
    return RunResult(**{**fields, **changes})


def test_the_text_report_shows_every_step_the_errors_the_cpu_and_the_verdict_with_its_reasons():
    text = report.text(result())
    lines = text.splitlines()
    assert lines[0] == (
        "load test of intent-bert at http://10.0.1.5/v2/models/intent-bert/infer "
        "(env staging, release r42, 2 x inf1.xlarge)"
    )
    assert lines[1].startswith(
        "SLO: p99 <= 50 ms, errors <= 0.1 %; full rate 100 req/s (planned 100 req/s for 2 x "
        "inf1.xlarge in staging); 1 worker"
    )
    assert lines[2] == (
        "open system: requests sent on schedule whatever the server does; latency counts from when "
        "each was due; a send more than 5 ms after it was due is late"
    )
    assert lines[3] == "percentiles: HdrHistogram, 3 significant digits"
    header = next(line for line in lines if line.lstrip().startswith("step"))
    assert header.split() == [
        "step",
        "offered/s",
        "%",
        "sent",
        "late",
        "answered",
        "goodput/s",
        "rejected",
        "timeouts",
        "errors",
        "p50",
        "ms",
        "p90",
        "ms",
        "p99",
        "ms",
        "max",
        "ms",
    ]
    first = lines[lines.index(header) + 1].split()
    second = lines[lines.index(header) + 2].split()
    assert first == [
        "1",
        "50",
        "50",
        "1400",
        "0",
        "1400",
        "50.0",
        "0",
        "0",
        "0",
        "(0.00",
        "%)",
        "4.2",
        "6.0",
        "9.1",
        "15.5",
        "ok",
    ]
    assert second[:9] == ["2", "100", "100", "2800", "3", "2769", "91.3", "25", "0"]
    assert second[-2:] == ["outside", "SLO"]
    assert "step 2 errors: HTTP 503: 25, invalid answer: output logits missing (got none): 6" in lines
    assert "generators' CPU (max / mean): master 3 % / 1 %; worker-1 61 % / 40 %" in lines
    assert "verdict: FAIL" in lines
    assert "  - step 2 (100 req/s, 100 %): p99 140.0 ms above the SLO's 50 ms" in lines
    assert lines[-1] == "highest rate within the SLO: 50.0 req/s"
    assert not any(line.startswith(("WARNING", "instance type")) for line in lines)


def test_the_report_says_what_it_does_not_know_and_flags_a_run_below_the_plan():
    lines = report.text(result(instance_type=None, full_rate=10.0, planned_rate=100.0)).splitlines()
    assert lines[0] == (
        "load test of intent-bert at http://10.0.1.5/v2/models/intent-bert/infer (env staging, release r42)"
    )
    assert "instance type: not known (a run against a URL: whatever serves it)" in lines
    assert (
        "WARNING: the full rate 10 req/s is 10 % of the planned 100 req/s (2 x inf1.xlarge in staging): a pass "
        "here does not show the plan holds"
    ) in lines


def test_a_progress_line_per_step():
    run = result()
    assert report.progress(run, 2, run.steps[1]) == (
        "step 2 (100 req/s, 100 %) of 2: sent 2800 (3 late), answered 2769, goodput 91.3/s, rejected 25, timeouts 0, "
        "errors 31, p99 140.0 ms (SLO 50): outside SLO"
    )


def test_the_picture_is_a_png_that_opens(tmp_path):
    png = report.picture(result())
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(io.BytesIO(png)) as image:
        image.verify()
    with Image.open(io.BytesIO(png)) as image:
        assert image.size == (1000, 600) and image.format == "PNG"


def test_write_stores_the_three_files_and_the_result_reads_back(tmp_path):
    report.write(result(), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([PICTURE_FILE, REPORT_FILE, RESULT_FILE])
    assert RunResult.from_json((tmp_path / RESULT_FILE).read_text()) == result()
    assert (tmp_path / REPORT_FILE).read_text() == report.text(result())
