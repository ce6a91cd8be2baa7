"""A load test's result: per step what was offered and achieved, the latency percentiles and the errors by
kind; each generator's CPU; and a verdict against the SLO. One JSON format for every reader: `loadtest`
prints and stores it, `profile` finds the highest rate within the SLO in it, promotion's gate reads a
release's verdicts from the environment's results bucket (key layout: `results_key`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from inferstack.loadtest.spec import CPU_SATURATED_PERCENT, RATE_SHORTFALL

SCHEMA_VERSION = 1
PASS, FAIL, INVALID = "pass", "fail", "invalid"
RESULT_FILE, REPORT_FILE, PICTURE_FILE = "result.json", "report.txt", "latency.png"


class ResultError(ValueError):
    pass


def results_prefix(release: str, model: str) -> str:
    """Where an environment's runs of one model in one release are stored: `<release>/<model>/<run id>/`."""
    return f"{release}/{model}/"


def results_key(release: str, model: str, run_id: str, name: str = RESULT_FILE) -> str:
    return f"{results_prefix(release, model)}{run_id}/{name}"


@dataclass(frozen=True)
class StepResult:
    offered_rps: float
    achieved_rps: float
    seconds: float  # how long it was measured: its hold less the settle time at its start
    requests: int
    failures: int
    errors: dict[str, int]  # kind ("HTTP 503", "invalid answer: output logits missing", "timeout") -> count
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    started_s: float | None = None  # when it began, seconds into the run (not measured: its first pacing.settle_s)

    @property
    def error_percent(self) -> float:
        return 100.0 * self.failures / self.requests if self.requests else 0.0

    def within(self, p99_slo_ms: float, error_budget_percent: float) -> bool:
        """Held its rate with p99 and errors within the SLO."""
        return (self.requests > 0 and self.p99_ms is not None and self.p99_ms <= p99_slo_ms
                and self.error_percent <= error_budget_percent
                and self.achieved_rps >= self.offered_rps * (1 - RATE_SHORTFALL))


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
    environment: str | None = None
    release: str | None = None
    instance_type: str | None = None
    instances: int | None = None
    results_location: str | None = None  # s3://bucket/key of this result, once stored
    schema_version: int = field(default=SCHEMA_VERSION)

    @property
    def invalid_reasons(self) -> list[str]:
        reasons = [f"generator {g.name} saturated: CPU {g.max_cpu_percent:.0f} % (>= {CPU_SATURATED_PERCENT:.0f} %); "
                   f"its latencies are its own, add workers" for g in self.generators if g.saturated]
        if not self.steps or all(s.requests == 0 for s in self.steps):
            reasons.append("no request was answered or failed: nothing was measured")
        return reasons

    @property
    def verdict(self) -> str:
        """invalid (the generators cannot be trusted), pass (the last, full-rate step held the SLO), or fail."""
        if self.invalid_reasons:
            return INVALID
        return PASS if self.steps[-1].within(self.p99_slo_ms, self.error_budget_percent) else FAIL

    @property
    def reasons(self) -> list[str]:
        """Why the verdict is what it is, one line each."""
        if self.invalid_reasons:
            return self.invalid_reasons
        last = self.steps[-1]
        out = []
        if last.p99_ms is None or last.p99_ms > self.p99_slo_ms:
            out.append(f"p99 {_ms(last.p99_ms)} above the SLO's {self.p99_slo_ms:g} ms at {last.offered_rps:g} req/s")
        if last.error_percent > self.error_budget_percent:
            kinds = ", ".join(f"{k}: {n}" for k, n in sorted(last.errors.items(), key=lambda kv: -kv[1]))
            out.append(f"errors {last.error_percent:.2f} % above the budget's {self.error_budget_percent:g} % ({kinds})")
        if last.achieved_rps < last.offered_rps * (1 - RATE_SHORTFALL):
            out.append(f"achieved {last.achieved_rps:.1f} req/s of the {last.offered_rps:g} offered")
        return out or [f"p99 {_ms(last.p99_ms)} within {self.p99_slo_ms:g} ms, errors {last.error_percent:.2f} % "
                       f"within {self.error_budget_percent:g} %, at {last.achieved_rps:.1f} req/s"]

    @property
    def highest_rate_within_slo(self) -> float | None:
        """The highest achieved rate of a step that held the SLO; None when the run is invalid or none did."""
        if self.verdict == INVALID:
            return None
        held = [s for s in self.steps if s.within(self.p99_slo_ms, self.error_budget_percent)]
        return max(s.achieved_rps for s in held) if held else None

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(verdict=self.verdict, reasons=self.reasons, invalid_reasons=self.invalid_reasons,
                    highest_rate_within_slo=self.highest_rate_within_slo)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str = "result") -> "RunResult":
        """Reads what to_json wrote (derived fields are recomputed, never trusted); ResultError naming `where`."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
                raise ResultError(f"{where}: schema_version {data.get('schema_version') if isinstance(data, dict) else None!r}, "
                                  f"this tool reads {SCHEMA_VERSION}")
            for derived in ("verdict", "reasons", "invalid_reasons", "highest_rate_within_slo"):
                data.pop(derived, None)
            data["steps"] = tuple(StepResult(**s) for s in data["steps"])
            data["generators"] = tuple(Generator(**g) for g in data["generators"])
            data["timeline"] = tuple(Sample(**s) for s in data.get("timeline", ()))
            return cls(**data)
        except ResultError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ResultError(f"{where}: not a load test result: {type(exc).__name__}: {exc}") from None


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} ms"
