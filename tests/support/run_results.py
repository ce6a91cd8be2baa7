"""Load test results built by hand (a support module: no tests here), for the profile code that reads them."""

from __future__ import annotations

from inferstack.loadtest.results import Generator, RunResult, StepResult


def step(offered: float, p99_ms: float | None, *, achieved: float | None = None, failures: int = 0,
         seconds: float = 30.0, errors: dict | None = None) -> StepResult:
    achieved = offered if achieved is None else achieved
    requests = int(achieved * seconds)
    return StepResult(offered_rps=offered, achieved_rps=achieved, seconds=seconds, requests=requests,
                      failures=failures, errors=errors or ({"HTTP 503": failures} if failures else {}),
                      p50_ms=None if p99_ms is None else p99_ms / 3, p90_ms=None if p99_ms is None else p99_ms / 1.5,
                      p99_ms=p99_ms, max_ms=None if p99_ms is None else p99_ms * 1.5)


def run(*steps: StepResult, slo_ms: float = 10.0, cpu: float = 40.0, instances: int | None = 2,
        environment: str | None = "staging", release: str | None = "r-42", location: str | None = None,
        finished: str = "2025-03-04T10:05:00+00:00", instance_type: str | None = None,
        model: str = "intent-bert") -> RunResult:
    return RunResult(model=model, target="http://10.0.0.1/v2/models/intent-bert/infer",
                     started="2025-03-04T10:00:00+00:00", finished=finished, p99_slo_ms=slo_ms,
                     error_budget_percent=0.1, steps=tuple(steps),
                     generators=(Generator("local", max_cpu_percent=cpu, mean_cpu_percent=cpu / 2),),
                     environment=environment, release=release, instance_type=instance_type, instances=instances,
                     results_location=location)
