"""What each load generator records and how they add up to a RunResult. Plain Python, no Locust: the
locustfile tells a Recorder when each request was due, when it left and how it ended; a worker ships
`Recorder.report()` to the master with every stats report, and the master (or the one local process) adds
them up in an Aggregator.

Each request counts in the step during which it was due, after the step's settle time, by the generator's own
clock, and its latency counts from when it was due (not from when it left: a request held back by a busy
generator or a full in-flight pool was still waited for by its user). A step's latencies are an HdrHistogram
per generator, merged by the master, so its percentiles rest on every request at one stated resolution."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hdrh.histogram import HdrHistogram

from inferstack.loadtest.results import Generator, RunResult, Sample, StepResult
from inferstack.loadtest.spec import LoadTestSpec

# A step counts at most this many distinct error kinds; the rest are summed as OTHER_ERRORS (an answer check's
# reason can quote the reply, and a flood of distinct replies must not grow every report without bound).
MAX_ERROR_KINDS = 20
OTHER_ERRORS = "other errors"
UNANSWERED = "unanswered when the run ended"
TIMEOUT = "timeout"
# What a server that sheds load answers: counted apart, as rejections (429 Too Many Requests, 503 Unavailable).
REJECTION_STATUSES = (429, 503)
# Latencies from 1 us to an hour, 3 significant digits: a percentile is reported at most 0.1 % above the
# latency it stands for (HdrHistogram reports the top of a value's bucket).
HISTOGRAM_LOWEST_US, HISTOGRAM_HIGHEST_US, HISTOGRAM_DIGITS = 1, 3_600_000_000, 3
RESOLUTION = (
    f"HdrHistogram of every generator merged, {HISTOGRAM_DIGITS} significant digits "
    f"(a percentile at most 0.1 % above the measured latency)"
)


def new_histogram() -> HdrHistogram:
    return HdrHistogram(HISTOGRAM_LOWEST_US, HISTOGRAM_HIGHEST_US, HISTOGRAM_DIGITS)


def histogram_ms(histogram: HdrHistogram, q: float) -> float | None:
    """The q-th percentile in ms (None when empty)."""
    if not histogram.get_total_count():
        return None
    return histogram.get_value_at_percentile(q) / 1000.0


def latency_key(ms: float) -> float:
    """The timeline's (the picture's) buckets: 3 significant digits, at most 0.5 % off the measured value."""
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
        return TIMEOUT
    return name


def _count(errors: dict[str, int], kind: str, count: int = 1) -> None:
    if kind not in errors and len(errors) >= MAX_ERROR_KINDS:
        kind = OTHER_ERRORS
    errors[kind] = errors.get(kind, 0) + count


@dataclass
class StepTally:
    """One generator's requests of one step. `offered`: requests due in the measured window (counted when they
    leave, on time or late); the rest are counted as they end. Latencies of answered requests only (a refused
    connection in no time must not flatter the p99; a failure counts against the error budget instead)."""

    offered: int = 0
    late: int = 0
    late_max_ms: float = 0.0
    held: int = 0  # waited for a slot: the in-flight bound was reached
    answered: int = 0
    good: int = 0  # answered within the SLO
    rejected: int = 0
    timeouts: int = 0
    failures: int = 0  # ended without a valid answer: rejections and timeouts included
    errors: dict[str, int] = field(default_factory=dict)
    histogram: HdrHistogram = field(default_factory=new_histogram)
    window_s: float = 0.0  # how long the step was measured (due requests counted) on this generator

    def left(self, late_ms: float, late_after_ms: float, held: bool = False) -> None:
        self.offered += 1
        self.held += held
        if late_ms > late_after_ms:
            self.late += 1
            self.late_max_ms = max(self.late_max_ms, late_ms)

    def ended(self, latency_ms: float, kind: str | None, status: int, slo_ms: float) -> None:
        if kind is None:
            self.answered += 1
            self.good += latency_ms <= slo_ms
            self.histogram.record_value(min(max(HISTOGRAM_LOWEST_US, round(latency_ms * 1000.0)), HISTOGRAM_HIGHEST_US))
            return
        self.failures += 1
        self.rejected += status in REJECTION_STATUSES
        self.timeouts += kind == TIMEOUT
        _count(self.errors, kind)

    def merge(self, other: StepTally) -> None:
        for name in ("offered", "late", "held", "answered", "good", "rejected", "timeouts", "failures"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.late_max_ms = max(self.late_max_ms, other.late_max_ms)
        for kind, count in other.errors.items():
            _count(self.errors, kind, count)
        self.histogram.add(other.histogram)

    def to_wire(self) -> dict:
        # The histogram in HdrHistogram's own compressed, base64 encoding (what its tools exchange).
        return {
            "offered": self.offered,
            "late": self.late,
            "late_max_ms": self.late_max_ms,
            "held": self.held,
            "answered": self.answered,
            "good": self.good,
            "rejected": self.rejected,
            "timeouts": self.timeouts,
            "failures": self.failures,
            "errors": dict(self.errors),
            "window_s": self.window_s,
            "histogram": self.histogram.encode().decode("ascii"),
        }

    @classmethod
    def from_wire(cls, data: dict) -> StepTally:
        return cls(
            offered=int(data["offered"]),
            late=int(data["late"]),
            late_max_ms=float(data["late_max_ms"]),
            held=int(data["held"]),
            answered=int(data["answered"]),
            good=int(data["good"]),
            rejected=int(data["rejected"]),
            timeouts=int(data["timeouts"]),
            failures=int(data["failures"]),
            errors=dict(data["errors"]),
            histogram=HdrHistogram.decode(data["histogram"]),
            window_s=float(data["window_s"]),
        )

    def step_result(self, step, slo_ms: float, *, final: bool, started_s: float | None) -> StepResult:
        """This tally (every generator's, merged) as a step of the result. `final`: requests that left and never
        ended count as failures (the run is over); before that they are in flight."""
        errors, failures = dict(self.errors), self.failures
        unanswered = max(0, self.offered - self.answered - self.failures)
        if final and unanswered:
            _count(errors, UNANSWERED, unanswered)
            failures += unanswered
        seconds = self.window_s
        return StepResult(
            offered_rps=step.rate,
            seconds=round(seconds, 3),
            offered=self.offered,
            late=self.late,
            late_max_ms=round(self.late_max_ms, 3),
            answered=self.answered,
            good=self.good,
            rejected=self.rejected,
            timeouts=self.timeouts,
            failures=failures,
            errors=errors,
            p50_ms=histogram_ms(self.histogram, 50),
            p90_ms=histogram_ms(self.histogram, 90),
            p99_ms=histogram_ms(self.histogram, 99),
            max_ms=self.histogram.get_max_value() / 1000.0 if self.answered else None,
            started_s=started_s,
            held=self.held,
        )


@dataclass
class _SecondTally:
    """One second of the timeline (the picture): requests that ended in it, their latencies in 3-digit buckets."""

    ended: int = 0
    failures: int = 0
    latencies: dict[float, int] = field(default_factory=dict)

    def add(self, latency_ms: float, failed: bool) -> None:
        self.ended += 1
        if failed:
            self.failures += 1
            return
        key = latency_key(latency_ms)
        self.latencies[key] = self.latencies.get(key, 0) + 1

    def merge(self, other: _SecondTally) -> None:
        self.ended += other.ended
        self.failures += other.failures
        for key, count in other.latencies.items():
            self.latencies[key] = self.latencies.get(key, 0) + count

    def to_wire(self) -> list:
        return [self.ended, self.failures, [[k, n] for k, n in self.latencies.items()]]

    @classmethod
    def from_wire(cls, data: list) -> _SecondTally:
        return cls(int(data[0]), int(data[1]), {float(k): int(n) for k, n in data[2]})


@dataclass
class _Window:
    index: int
    t0: float  # when the step began, in seconds since the run began (the master's shape clock)
    began: float  # the same moment on this generator's clock
    opens: float  # began + settle: requests due from here on count
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
    and its CPU while steps were measured. `slo_ms` decides what is goodput, `late_after_ms` what is late."""

    def __init__(
        self, name: str, *, slo_ms: float, late_after_ms: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.name = name
        self.slo_ms, self.late_after_ms = slo_ms, late_after_ms
        self._clock = clock
        self._windows: list[_Window] = []
        self._tallies: dict[int, StepTally] = {}
        self._seconds: dict[int, _SecondTally] = {}  # timeline: requests ended per second of the run
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

    def _measured(self, due: float, out: float) -> StepTally | None:
        """The tally of the window a request due at `due` counts in. It opens by the due time; it closes (the run
        stops sending) by `out`, when the request went out if that was earlier: the locustfile sends up to
        pacing.TIMER_LEAD_S early, and a request sent before the close but due after it was counted offered when it
        left, so its answer must count there too, or it would be a request never answered."""
        for window in reversed(self._windows):
            if due >= window.began:
                inside = due >= window.opens and (window.closes is None or out < window.closes)
                return self._tallies[window.index] if inside else None
        return None

    def left(self, due: float, sent: float, held: bool = False) -> None:
        """A request due at `due` left at `sent` (this generator's clock); `held`: it waited for a slot."""
        tally = self._measured(due, min(due, sent))
        if tally is not None:
            tally.left((sent - due) * 1000.0, self.late_after_ms, held)

    def ended(
        self, due: float, kind: str | None, status: int = 0, *, sent: float | None = None, at: float | None = None
    ) -> None:
        """The request due at `due` ended at `at` (this generator's clock; default now): answered (kind None) or
        failed (its error kind; `status`, the HTTP status when there was one, tells a rejection). Its latency counts
        from when it was due, or from when it was `sent` if that was earlier (pacing.TIMER_LEAD_S: woken early,
        never measured from a time it was not yet out), to when its reply arrived (`at`: the generator's own checks
        of the reply, after that, are not the server's time)."""
        now = self._clock() if at is None else at
        out = due if sent is None else min(due, sent)
        latency_ms = (now - out) * 1000.0
        tally = self._measured(due, out)
        if tally is not None:
            tally.ended(latency_ms, kind, status, self.slo_ms)
        run_time = self.run_time(now)
        if run_time is not None:
            self._seconds.setdefault(int(run_time), _SecondTally()).add(latency_ms, kind is not None)

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
        return {
            "name": self.name,
            "steps": [[i, t.to_wire()] for i, t in sorted(self._tallies.items())],
            "seconds": seconds,
            "cpu": [cpu.max, cpu.total, cpu.count],
            "step_starts": [[w.index, w.t0] for w in self._windows],
        }


class Aggregator:
    """The master's sum of its generators' reports (the latest of each, plus every timeline second sent)."""

    def __init__(self) -> None:
        self._latest: dict[str, dict] = {}
        self._seconds: dict[int, _SecondTally] = {}

    def add(self, report: dict) -> None:
        self._latest[report["name"]] = report
        for second, wire in report["seconds"]:
            self._seconds.setdefault(int(second), _SecondTally()).merge(_SecondTally.from_wire(wire))

    def drained(self, workers: int) -> bool:
        """Whether `workers` workers have each reported that they send no more and have nothing in flight."""
        reports = [r for name, r in self._latest.items() if name.startswith("worker-")]
        return len(reports) >= workers and all(r.get("drained") for r in reports)

    def step(self, spec: LoadTestSpec, index: int, *, final: bool = True) -> StepResult:
        """Step `index` as every generator reported it so far (`final`: the run is over)."""
        total, seconds, started = StepTally(), 0.0, None
        for report in self._latest.values():
            for number, t0 in report["step_starts"]:
                if int(number) == index and started is None:
                    started = float(t0)
            wire = dict(report["steps"]).get(index)
            if wire is None:
                continue
            tally = StepTally.from_wire(wire)
            total.merge(tally)
            seconds = max(seconds, tally.window_s)
        total.window_s = seconds
        return total.step_result(spec.steps[index], spec.p99_slo_ms, final=final, started_s=started)

    def result(self, spec: LoadTestSpec, *, started: str, finished: str, workers: int) -> RunResult:
        steps = tuple(self.step(spec, index) for index in range(len(spec.steps)))
        generators = []
        for name, report in sorted(self._latest.items(), key=lambda kv: _generator_order(kv[0])):
            peak, total, count = report["cpu"]
            generators.append(
                Generator(
                    name=name,
                    max_cpu_percent=round(peak, 1),
                    mean_cpu_percent=round(total / count, 1) if count else 0.0,
                )
            )
        last = max(self._seconds, default=-1)
        timeline = tuple(_sample(second, self._seconds.get(second, _SecondTally())) for second in range(last + 1))
        return RunResult(
            model=spec.model,
            target=spec.target.describe(),
            started=started,
            finished=finished,
            p99_slo_ms=spec.p99_slo_ms,
            error_budget_percent=spec.error_budget_percent,
            steps=steps,
            generators=tuple(generators),
            timeline=timeline,
            workers=workers,
            full_rate=spec.judged_rate,
            planned_rate=spec.planned_rate,
            plan_basis=spec.plan_basis,
            late_after_ms=spec.late_after_ms,
            resolution=RESOLUTION,
            environment=spec.environment,
            release=spec.release,
            instance_type=spec.instance_type,
            instances=spec.instances,
        )


def _generator_order(name: str) -> tuple[int, int, str]:
    """local, master, then worker-1, worker-2, ... worker-10 in number order."""
    head, _, number = name.partition("-")
    return ({"local": 0, "master": 1}.get(head, 2), int(number) if number.isdigit() else 0, name)


def _sample(second: int, tally: _SecondTally) -> Sample:
    return Sample(
        t=float(second),
        rps=float(tally.ended),
        p50_ms=percentile(tally.latencies, 50),
        p99_ms=percentile(tally.latencies, 99),
        failures_per_s=float(tally.failures),
    )
