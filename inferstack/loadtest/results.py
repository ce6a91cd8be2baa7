"""A load test's result: per step what was offered, sent late, answered and answered within the SLO (goodput),
the latency percentiles from when requests were due, rejections, timeouts and errors by kind; each generator's
CPU; and a verdict against the SLO. One JSON format for every reader: `loadtest`
prints and stores it, `profile` finds the highest rate within the SLO in it, promotion's gate reads a
release's verdicts from the environment's results bucket (key layout: `results_key`)."""

from __future__ import annotations

import datetime
import json
import secrets
from dataclasses import asdict, dataclass, field

from inferstack.loadtest.spec import CPU_SATURATED_PERCENT, LATE_BUDGET_PERCENT, RATE_SHORTFALL

# 2: open-model figures (offered, late, goodput, rejections; latency from the due time; the full and planned
# rates). A version-1 result came from closed-loop users a stalling server could fool: it is refused, not read.
SCHEMA_VERSION = 2
PASS, FAIL, INVALID = "pass", "fail", "invalid"
RESULT_FILE, REPORT_FILE, PICTURE_FILE = "result.json", "report.txt", "latency.png"


class ResultError(ValueError):
    pass


def new_run_id(now: datetime.datetime | None = None) -> str:
    """A run's id: its UTC start time to the second, then random hex; ids sort in time order (the gate takes
    the newest by id, not by S3's one-second LastModified)."""
    now = now or datetime.datetime.now(datetime.UTC)
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


def results_prefix(release: str, model: str) -> str:
    """Where an environment's runs of one model in one release are stored: `<release>/<model>/<run id>/`."""
    return f"{release}/{model}/"


def results_key(release: str, model: str, run_id: str, name: str = RESULT_FILE) -> str:
    return f"{results_prefix(release, model)}{run_id}/{name}"


@dataclass(frozen=True)
class StepResult:
    """One step, every generator's requests merged. Counts are of requests due in the measured window; latencies
    (answered requests only) count from when each request was due."""

    offered_rps: float  # the step's rate
    seconds: float  # how long it was measured: its hold less the settle time at its start
    offered: int  # requests due in the measured window, sent on time or late
    late: int  # of those, sent later than the run's late_after_ms after they were due
    late_max_ms: float
    answered: int  # a 2xx with a valid answer
    good: int  # answered within the SLO: goodput
    rejected: int  # 429 / 503: shed by the server
    timeouts: int
    failures: int  # not answered: rejections, timeouts, other errors, and requests unanswered at the end
    errors: dict[str, int]  # kind ("HTTP 503", "invalid answer: output logits missing", "timeout") -> count
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    started_s: float | None = None  # when it began, seconds into the run (not measured: its first pacing.settle_s)
    held: int = 0  # sends that waited for a slot: the generator's in-flight bound was reached

    @property
    def error_percent(self) -> float:
        return 100.0 * self.failures / self.offered if self.offered else 0.0

    @property
    def late_percent(self) -> float:
        return 100.0 * self.late / self.offered if self.offered else 0.0

    @property
    def admitted_error_percent(self) -> float:
        """Errors other than rejections: what a server that sheds load must still keep within the budget."""
        return 100.0 * (self.failures - self.rejected) / self.offered if self.offered else 0.0

    @property
    def due(self) -> float:
        """Requests the step's rate makes due in its measured window."""
        return self.offered_rps * self.seconds

    @property
    def answered_rps(self) -> float:
        return self.answered / self.seconds if self.seconds else 0.0

    @property
    def goodput_rps(self) -> float:
        return self.good / self.seconds if self.seconds else 0.0

    @property
    def held_rps(self) -> float:
        """What the step showed the server serving: the answered rate, never more than the offered one."""
        return min(self.answered_rps, self.offered_rps)

    def within(self, p99_slo_ms: float, error_budget_percent: float) -> bool:
        """Every request counted: p99 and errors (rejections included) within the SLO."""
        return (
            self.offered > 0
            and self.p99_ms is not None
            and self.p99_ms <= p99_slo_ms
            and self.error_percent <= error_budget_percent
        )

    def held_overload(self, p99_slo_ms: float, error_budget_percent: float, full_rate: float) -> bool:
        """A step above the full rate: what was admitted answered within the SLO, errors other than rejections
        within the budget, and the goodput still at the full rate."""
        return (
            self.offered > 0
            and self.p99_ms is not None
            and self.p99_ms <= p99_slo_ms
            and self.admitted_error_percent <= error_budget_percent
            and self.goodput_rps >= full_rate * (1 - RATE_SHORTFALL)
        )


@dataclass(frozen=True)
class Generator:
    name: str  # "local", "master", "worker-1", ...
    max_cpu_percent: float
    mean_cpu_percent: float

    @property
    def saturated(self) -> bool:
        return self.max_cpu_percent >= CPU_SATURATED_PERCENT


@dataclass(frozen=True)
class Sample:
    """One point of the run's timeline (the picture): seconds since start, current rate, p50/p99, failures/s."""

    t: float
    rps: float
    p50_ms: float | None
    p99_ms: float | None
    failures_per_s: float


@dataclass(frozen=True)
class RunResult:
    model: str
    target: str
    started: str  # ISO 8601, UTC
    finished: str
    p99_slo_ms: float
    error_budget_percent: float
    steps: tuple[StepResult, ...]
    generators: tuple[Generator, ...]
    timeline: tuple[Sample, ...] = ()
    workers: int = 0  # 0: one local process
    full_rate: float | None = None  # the 100 % rate; steps above it are overload steps (default: the last step's)
    planned_rate: float | None = None  # what the plan gives the instances under test, when known
    plan_basis: str | None = None  # what planned_rate is for: "1 x inf1.6xlarge in staging"
    late_after_ms: float | None = None  # a send later than this after it was due is late
    resolution: str | None = None  # how the percentiles were computed
    environment: str | None = None
    release: str | None = None
    instance_type: str | None = None  # what served the target, where known (environment runs)
    instances: int | None = None
    results_location: str | None = None  # s3://bucket/key of this result, once stored
    schema_version: int = field(default=SCHEMA_VERSION)

    @property
    def judged_rate(self) -> float:
        return self.full_rate if self.full_rate is not None else self.steps[-1].offered_rps

    def overload(self, step: StepResult) -> bool:
        return step.offered_rps > self.judged_rate * (1 + 1e-9)

    def step_label(self, number: int, step: StepResult) -> str:
        return f"step {number} ({step.offered_rps:g} req/s, {100 * step.offered_rps / self.judged_rate:.0f} %)"

    def step_held(self, step: StepResult) -> bool:
        """Up to the full rate: every request within the SLO; above it: the overload judgement."""
        if self.overload(step):
            return step.held_overload(self.p99_slo_ms, self.error_budget_percent, self.judged_rate)
        return step.within(self.p99_slo_ms, self.error_budget_percent)

    @property
    def invalid_reasons(self) -> list[str]:
        reasons = [
            f"generator {g.name} saturated: CPU {g.max_cpu_percent:.0f} % (>= {CPU_SATURATED_PERCENT:.0f} %); "
            f"its latencies are its own, add workers"
            for g in self.generators
            if g.saturated
        ]
        if not self.steps or all(s.offered == 0 for s in self.steps):
            reasons.append("no request was sent: nothing was measured")
            return reasons
        for number, step in enumerate(self.steps, 1):
            reasons += self.step_invalid_reasons(number, step)
        return reasons

    def step_invalid_reasons(self, number: int, step: StepResult) -> list[str]:
        """Why a step measured its generators as much as the server: its in-flight bound was reached; it sent
        fewer requests than were due; or its late sends (over the budget) are enough to account for a p99 above
        the SLO. Lateness only adds to a latency counted from the due time, so a step within the SLO stands
        despite it, and one whose p99 less the largest lateness is still above the SLO failed on the server's
        account."""
        label, reasons = self.step_label(number, step), []
        if step.held:
            reasons.append(
                f"{label}: the in-flight bound held back {step.held} sends (the generators could not keep "
                f"up); add workers"
            )
        if step.offered < step.due * (1 - RATE_SHORTFALL):
            reasons.append(f"{label}: the generators sent {step.offered} of the {step.due:.0f} requests due")
        lateness = max(step.late_max_ms, self.late_after_ms or 0.0)
        if (
            step.late_percent > LATE_BUDGET_PERCENT
            and step.p99_ms is not None
            and step.p99_ms > self.p99_slo_ms
            and step.p99_ms - lateness <= self.p99_slo_ms
        ):
            reasons.append(
                f"{label}: {step.late} late sends ({step.late_percent:.1f} % of {step.offered}, up to "
                f"{step.late_max_ms:.0f} ms after they were due) account for its p99 above the SLO: the "
                f"generators fell behind (CPU); add workers"
            )
        return reasons

    @property
    def verdict(self) -> str:
        """invalid (the generators cannot be trusted), pass (every step up to the full rate held the SLO, and every
        step above it held its goodput), or fail."""
        if self.invalid_reasons:
            return INVALID
        return PASS if all(self.step_held(step) for step in self.steps) else FAIL

    @property
    def below_plan(self) -> str | None:
        """Why the run does not show the plan holds (its full rate is below the planned rate), or None."""
        if self.planned_rate is None or self.judged_rate >= self.planned_rate * (1 - RATE_SHORTFALL):
            return None
        return (
            f"the full rate {self.judged_rate:g} req/s is {100 * self.judged_rate / self.planned_rate:.0f} % of "
            f"the planned {self.planned_rate:g} req/s ({self.plan_basis or 'the plan'}): a pass here does not "
            f"show the plan holds"
        )

    @property
    def reasons(self) -> list[str]:
        """Why the verdict is what it is, one line each."""
        if self.invalid_reasons:
            return self.invalid_reasons
        out = []
        for number, step in enumerate(self.steps, 1):
            label = self.step_label(number, step)
            if step.p99_ms is None or step.p99_ms > self.p99_slo_ms:
                what = "admitted requests' p99" if self.overload(step) else "p99"
                out.append(f"{label}: {what} {ms_text(step.p99_ms)} above the SLO's {self.p99_slo_ms:g} ms")
            errors = step.admitted_error_percent if self.overload(step) else step.error_percent
            if errors > self.error_budget_percent:
                kinds = ", ".join(f"{k}: {n}" for k, n in sorted(step.errors.items(), key=lambda kv: -kv[1]))
                what = "errors other than rejections" if self.overload(step) else "errors"
                out.append(
                    f"{label}: {what} {errors:.2f} % above the budget's {self.error_budget_percent:g} % ({kinds})"
                )
            if self.overload(step) and step.goodput_rps < self.judged_rate * (1 - RATE_SHORTFALL):
                out.append(
                    f"{label}: goodput {step.goodput_rps:.1f} req/s within the SLO, below the full rate's "
                    f"{self.judged_rate:g}"
                )
        if out:
            return out
        full = self.full_step
        return [
            f"every step up to {self.judged_rate:g} req/s held p99 <= {self.p99_slo_ms:g} ms with errors <= "
            f"{self.error_budget_percent:g} %"
            + (f" (full rate: p99 {ms_text(full.p99_ms)}, errors {full.error_percent:.2f} %)" if full else "")
        ]

    @property
    def full_step(self) -> StepResult | None:
        """The step at the full rate (the gate's evidence), or None."""
        return next((s for s in self.steps if abs(s.offered_rps - self.judged_rate) <= 1e-6 * self.judged_rate), None)

    @property
    def highest_rate_within_slo(self) -> float | None:
        """The highest rate a step served with every request counted within the SLO (held_rps); None when the
        run is invalid or no step did."""
        if self.verdict == INVALID:
            return None
        held = [s for s in self.steps if s.within(self.p99_slo_ms, self.error_budget_percent)]
        return max(s.held_rps for s in held) if held else None

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(
            verdict=self.verdict,
            reasons=self.reasons,
            invalid_reasons=self.invalid_reasons,
            highest_rate_within_slo=self.highest_rate_within_slo,
            below_plan=self.below_plan,
        )
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str = "result") -> RunResult:
        """Reads what to_json wrote (derived fields are recomputed, never trusted); ResultError naming `where`."""
        try:
            data = json.loads(text)
            version = data.get("schema_version") if isinstance(data, dict) else None
            if version != SCHEMA_VERSION:
                raise ResultError(
                    f"{where}: schema_version {version!r}, this tool reads {SCHEMA_VERSION}"
                    + (
                        " (version 1 came from closed-loop users that a stalling server could fool: run the load test "
                        "again)"
                        if version == 1
                        else ""
                    )
                )
            for derived in ("verdict", "reasons", "invalid_reasons", "highest_rate_within_slo", "below_plan"):
                data.pop(derived, None)
            data["steps"] = tuple(StepResult(**s) for s in data["steps"])
            data["generators"] = tuple(Generator(**g) for g in data["generators"])
            data["timeline"] = tuple(Sample(**s) for s in data.get("timeline", ()))
            return cls(**data)
        except ResultError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ResultError(f"{where}: not a load test result: {type(exc).__name__}: {exc}") from None


def ms_text(value: float | None) -> str:
    """A latency for a line of text: '7.9 ms', or 'n/a' when there is none."""
    return "n/a" if value is None else f"{value:.1f} ms"
