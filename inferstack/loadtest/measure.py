"""What each load generator records and how they add up to a RunResult. Plain Python, no Locust: the
locustfile feeds a Recorder from Locust's request events; a worker ships `Recorder.report()` to the master
with every stats report, and the master (or the one local process) adds them up in an Aggregator.

Each request counts in the step during which it was sent, after the step's settle time: by the generator's own
clock, so a step's figures hold that step's requests only, whenever the master hears of them. The first
seconds of a step are left out (pacing.settle_s): its users start, and take up their pace, then."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from inferstack.loadtest.results import Generator, RunResult, Sample, StepResult
from inferstack.loadtest.spec import LoadTestSpec

# A step counts at most this many distinct error kinds; the rest are summed as OTHER_ERRORS (an answer check's
# reason can quote the reply, and a flood of distinct replies must not grow every report without bound).
MAX_ERROR_KINDS = 20
OTHER_ERRORS = "other errors"


def latency_key(ms: float) -> float:
    """Latencies are counted in buckets of 3 significant digits (at most 0.5 % off the measured value), so a
    step's histogram holds hundreds of entries however many requests it counts."""
    return float(f"{ms:.3g}") if ms > 0 else 0.0


def percentile(histogram: dict[float, int], q: float) -> float | None:
    """Nearest rank over a histogram of latency buckets; None when it is empty."""
    total = sum(histogram.values())
    if not total:
        return None
    rank, seen = max(1, math.ceil(q / 100.0 * total)), 0
    for key in sorted(histogram):
        seen += histogram[key]
        if seen >= rank:
            return key
    return max(histogram)


def error_kind(exc: BaseException) -> str:
    """What went wrong, as a kind to count: the AWS error code of a botocore ClientError ("ModelError",
    "ThrottlingException"), "timeout", or the exception's type."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and isinstance(response.get("Error"), dict) and response["Error"].get("Code"):
        return str(response["Error"]["Code"])
    name = type(exc).__name__
    if isinstance(exc, TimeoutError) or "timeout" in name.lower():
        return "timeout"
    return name


@dataclass
class StepTally:
    """One generator's requests of one step; latencies of answered requests only (a refused connection in no
    time must not flatter the p99, and a failure counts against the error budget instead)."""

    requests: int = 0
    failures: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    latencies: dict[float, int] = field(default_factory=dict)
    max_ms: float | None = None
    window_s: float = 0.0  # how long the step was measured (sent requests counted) on this generator

    def add(self, response_time_ms: float, kind: str | None) -> None:
        self.requests += 1
        if kind is not None:
            self.failures += 1
            if kind not in self.errors and len(self.errors) >= MAX_ERROR_KINDS:
                kind = OTHER_ERRORS
            self.errors[kind] = self.errors.get(kind, 0) + 1
            return
        key = latency_key(response_time_ms)
        self.latencies[key] = self.latencies.get(key, 0) + 1
        self.max_ms = response_time_ms if self.max_ms is None else max(self.max_ms, response_time_ms)

    def merge(self, other: "StepTally") -> None:
        self.requests += other.requests
        self.failures += other.failures
        for kind, count in other.errors.items():
            self.errors[kind] = self.errors.get(kind, 0) + count
        for key, count in other.latencies.items():
            self.latencies[key] = self.latencies.get(key, 0) + count
        if other.max_ms is not None:
            self.max_ms = other.max_ms if self.max_ms is None else max(self.max_ms, other.max_ms)

    def to_wire(self) -> dict:
        # Latencies as [key, count] pairs: Locust's messages (msgpack) and JSON both keep them as numbers.
        return {"requests": self.requests, "failures": self.failures, "errors": dict(self.errors),
                "latencies": [[k, n] for k, n in self.latencies.items()], "max_ms": self.max_ms,
                "window_s": self.window_s}

    @classmethod
    def from_wire(cls, data: dict) -> "StepTally":
        return cls(requests=int(data["requests"]), failures=int(data["failures"]), errors=dict(data["errors"]),
                   latencies={float(k): int(n) for k, n in data["latencies"]}, max_ms=data["max_ms"],
                   window_s=float(data["window_s"]))


@dataclass
class _Window:
    index: int
    t0: float  # when the step began, in seconds since the run began (the master's shape clock)
    began: float  # the same moment on this generator's clock
    opens: float  # began + settle: requests sent from here on count
    closes: float | None = None


@dataclass
class _CpuStats:
    max: float = 0.0
    total: float = 0.0
    count: int = 0

    def add(self, percent: float) -> None:
        self.max, self.total, self.count = max(self.max, percent), self.total + percent, self.count + 1


class Recorder:
    """One generator's record: per step (cumulative, small), per second of the run (sent once, then dropped),
    and its CPU while steps were measured."""

    def __init__(self, name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._clock = clock
        self._windows: list[_Window] = []
        self._tallies: dict[int, StepTally] = {}
        self._seconds: dict[int, StepTally] = {}  # timeline: completions per second of the run
        self._cpu_measured, self._cpu_other = _CpuStats(), _CpuStats()

    def begin_step(self, index: int, t0: float, settle_s: float) -> None:
        """Step `index` begins now, `t0` seconds into the run; its requests count from `settle_s` on."""
        now = self._clock()
        self._close(now)
        self._windows.append(_Window(index, t0, now, now + settle_s))
        self._tallies.setdefault(index, StepTally())

    def stop(self) -> None:
        self._close(self._clock())

    def _close(self, now: float) -> None:
        if self._windows and self._windows[-1].closes is None:
            self._windows[-1].closes = now

    def run_time(self, now: float | None = None) -> float | None:
        """Seconds since the run began on the master's clock, or None before the first step."""
        if not self._windows:
            return None
        window = self._windows[-1]
        return window.t0 + ((self._clock() if now is None else now) - window.began)

    def _measured_step(self, sent: float) -> int | None:
        for window in reversed(self._windows):
            if sent >= window.began:
                inside = sent >= window.opens and (window.closes is None or sent < window.closes)
                return window.index if inside else None
        return None

    def record(self, response_time_ms: float, kind: str | None) -> None:
        """One request, answered (kind None) or failed (its error kind), that took `response_time_ms`."""
        now = self._clock()
        step = self._measured_step(now - response_time_ms / 1000.0)
        if step is not None:
            self._tallies[step].add(response_time_ms, kind)
        run_time = self.run_time(now)
        if run_time is not None:
            self._seconds.setdefault(int(run_time), StepTally()).add(response_time_ms, kind)

    def measuring(self) -> bool:
        now = self._clock()
        return bool(self._windows) and self._windows[-1].closes is None and now >= self._windows[-1].opens

    def sample_cpu(self, percent: float) -> None:
        (self._cpu_measured if self.measuring() else self._cpu_other).add(percent)

    def report(self, *, final: bool = False) -> dict:
        """What the master needs: every step so far (cumulative: a lost report costs nothing), the completed
        seconds of the timeline not sent yet (every second when `final`), the CPU figures."""
        now = self._clock()
        final = final or bool(self._windows and self._windows[-1].closes is not None)  # stopped: nothing to come
        for window in self._windows:
            tally = self._tallies[window.index]
            tally.window_s = max(0.0, (window.closes if window.closes is not None else now) - window.opens)
        run_time = self.run_time(now)
        done = [s for s in self._seconds if final or run_time is None or s < int(run_time)]
        seconds = [[s, self._seconds.pop(s).to_wire()] for s in sorted(done)]
        cpu = self._cpu_measured if self._cpu_measured.count else self._cpu_other
        return {"name": self.name, "steps": [[i, t.to_wire()] for i, t in sorted(self._tallies.items())],
                "seconds": seconds, "cpu": [cpu.max, cpu.total, cpu.count],
                "step_starts": [[w.index, w.t0] for w in self._windows]}


class Aggregator:
    """The master's sum of its generators' reports (the latest of each, plus every timeline second sent)."""

    def __init__(self) -> None:
        self._latest: dict[str, dict] = {}
        self._seconds: dict[int, StepTally] = {}

    def add(self, report: dict) -> None:
        self._latest[report["name"]] = report
        for second, wire in report["seconds"]:
            self._seconds.setdefault(int(second), StepTally()).merge(StepTally.from_wire(wire))

    def result(self, spec: LoadTestSpec, *, started: str, finished: str, workers: int) -> RunResult:
        steps = []
        starts: dict[int, float] = {}
        for report in self._latest.values():
            for index, t0 in report["step_starts"]:
                starts.setdefault(int(index), float(t0))
        for index, step in enumerate(spec.steps):
            total, achieved, seconds = StepTally(), 0.0, 0.0
            for report in self._latest.values():
                wire = dict(report["steps"]).get(index)
                if wire is None:
                    continue
                tally = StepTally.from_wire(wire)
                total.merge(tally)
                seconds = max(seconds, tally.window_s)
                if tally.window_s > 0:
                    achieved += tally.requests / tally.window_s  # each generator's own measured time
            steps.append(StepResult(
                offered_rps=step.rate, achieved_rps=round(achieved, 3), seconds=round(seconds, 3),
                requests=total.requests, failures=total.failures, errors=dict(total.errors),
                p50_ms=percentile(total.latencies, 50), p90_ms=percentile(total.latencies, 90),
                p99_ms=percentile(total.latencies, 99), max_ms=total.max_ms, started_s=starts.get(index)))
        generators = []
        for name, report in sorted(self._latest.items(), key=lambda kv: _generator_order(kv[0])):
            peak, total, count = report["cpu"]
            generators.append(Generator(name=name, max_cpu_percent=round(peak, 1),
                                        mean_cpu_percent=round(total / count, 1) if count else 0.0))
        last = max(self._seconds, default=-1)
        timeline = tuple(_sample(second, self._seconds.get(second, StepTally())) for second in range(last + 1))
        return RunResult(model=spec.model, target=spec.target.describe(), started=started, finished=finished,
                         p99_slo_ms=spec.p99_slo_ms, error_budget_percent=spec.error_budget_percent,
                         steps=tuple(steps), generators=tuple(generators), timeline=timeline, workers=workers,
                         environment=spec.environment, release=spec.release, instance_type=spec.instance_type,
                         instances=spec.instances)


def _generator_order(name: str) -> tuple[int, int, str]:
    """local, master, then worker-1, worker-2, ... worker-10 in number order."""
    head, _, number = name.partition("-")
    return ({"local": 0, "master": 1}.get(head, 2), int(number) if number.isdigit() else 0, name)


def _sample(second: int, tally: StepTally) -> Sample:
    return Sample(t=float(second), rps=float(tally.requests), p50_ms=percentile(tally.latencies, 50),
                  p99_ms=percentile(tally.latencies, 99), failures_per_s=float(tally.failures))
