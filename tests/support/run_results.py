"""Load test results built by hand (a support module: no tests here), for the profile code that reads them."""

from __future__ import annotations

from inferstack.loadtest.results import Generator, RunResult, StepResult


def step(
    offered: float,
    p99_ms: float | None,
    *,
    achieved: float | None = None,
    failures: int = 0,
    seconds: float = 30.0,
    errors: dict | None = None,
    sent: int | None = None,
) -> StepResult:
    """A step offered `offered` req/s that answered `achieved` req/s (default: all of it) with `failures` more; what
    was sent (default: what the rate makes due, or more) and not answered or failed counts as unanswered."""
    achieved = offered if achieved is None else achieved
    answered = int(round(achieved * seconds))
    sent = max(int(round(offered * seconds)), answered + failures) if sent is None else sent
    unanswered = max(0, sent - answered - failures)
    errors = dict(errors or ({"HTTP 503": failures} if failures else {}))
    if unanswered:
        errors["unanswered when the run ended"] = unanswered
    return StepResult(
        offered_rps=offered,
        seconds=seconds,
        offered=sent,
        late=0,
        late_max_ms=0.0,
        answered=answered,
        good=answered,
        rejected=errors.get("HTTP 503", 0),
        timeouts=0,
        failures=failures + unanswered,
        errors=errors,
        p50_ms=None if p99_ms is None else p99_ms / 3,
        p90_ms=None if p99_ms is None else p99_ms / 1.5,
        p99_ms=p99_ms,
        max_ms=None if p99_ms is None else p99_ms * 1.5,
    )


def run(
    *steps: StepResult,
    slo_ms: float = 10.0,
    cpu: float = 40.0,
    instances: int | None = 2,
    environment: str | None = "staging",
    release: str | None = "r-42",
    location: str | None = None,
    finished: str = "2025-03-04T10:05:00+00:00",
    instance_type: str | None = None,
    model: str = "intent-bert",
) -> RunResult:
    return RunResult(
        model=model,
        target="http://10.0.0.1/v2/models/intent-bert/infer",
        started="2025-03-04T10:00:00+00:00",
        finished=finished,
        p99_slo_ms=slo_ms,
        error_budget_percent=0.1,
        steps=tuple(steps),
        generators=(Generator("local", max_cpu_percent=cpu, mean_cpu_percent=cpu / 2),),
        environment=environment,
        release=release,
        instance_type=instance_type,
        instances=instances,
        results_location=location,
    )
