"""What a load test does, as data: the target, the requests and the answer each must get, the load shape (an
open system: each step's requests leave on a schedule, whatever the server does) and the SLO it is judged by.
A spec travels as JSON (to Locust's processes, to a Fargate task's environment), so everything in it is plain
data; `shape.spec_for` builds one from a model's config."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

from inferstack.loadtest.answer import Output as ExpectedOutput  # smoke's too: one check of an answer

# 2: open-model arrivals (bodies, full_rate, planned_rate, in_flight_per_generator); a version-1 spec was
# closed-loop and is refused rather than run differently from what it meant.
SCHEMA_VERSION = 2
# Locust's own threshold: its master warns when a worker's CPU passes 90 % (locust/runners.py), and a
# generator that busy queues its requests and reads its clocks late: its latencies are its own, not the model's.
CPU_SATURATED_PERCENT = 90.0
# A step holds long enough to read a p99 from at least this many requests (and at least MIN_HOLD_S).
MIN_REQUESTS_FOR_P99 = 500
MIN_HOLD_S = 30.0
# A step above the full rate holds its goodput when what it serves within the SLO stays within this of the full
# rate; a step whose generators sent fewer than this share of its due requests did not run at its rate.
RATE_SHORTFALL = 0.05
DEFAULT_STEPS = (0.25, 0.5, 0.75, 1.0)
DEFAULT_ERROR_BUDGET_PERCENT = 0.1
# Requests one generator keeps in flight at most (each holds a connection). Locust raises a process's open-file
# limit to 10,000 (locust/main.py); 4,000 in flight at 2,000 req/s per worker is 2 s of a server answering
# nothing, by which time every request of that stretch is far outside any SLO this project accepts.
MAX_IN_FLIGHT = 4000
# A send that leaves more than this share of the SLO after it was due (at least LATE_FLOOR_MS) is late; a step
# with more than LATE_BUDGET_PERCENT of its sends late measured its generators as much as the server: invalid.
LATE_SHARE_OF_SLO = 0.1
LATE_FLOOR_MS = 2.0
LATE_BUDGET_PERCENT = 1.0
# What a payload file may hold (the whole spec travels to each Locust process; see fargate.py for Fargate's limit).
MAX_BODIES = 10_000


class SpecError(ValueError):
    pass


@dataclass(frozen=True)
class Target:
    """`http`: POST `url` (a model's /v2/models/<name>/infer). `sagemaker`: a signed InvokeEndpoint of
    `endpoint` (and `component` on a shared endpoint) in `region`."""

    kind: str  # "http" | "sagemaker"
    url: str | None = None
    endpoint: str | None = None
    component: str | None = None
    region: str | None = None

    def describe(self) -> str:
        if self.kind == "http":
            return self.url or ""
        return f"endpoint {self.endpoint}" + (f" component {self.component}" if self.component else "")


@dataclass(frozen=True)
class Step:
    rate: float  # requests per second offered, across every generator
    seconds: float


@dataclass(frozen=True)
class LoadTestSpec:
    model: str
    target: Target
    bodies: tuple[dict, ...]  # the requests, sent in turn (smoke.probe_for's by default, or a --payload file's)
    outputs: tuple[ExpectedOutput, ...]  # what a valid answer holds
    steps: tuple[Step, ...]
    p99_slo_ms: float
    full_rate: float | None = None  # the 100 % rate (steps above it are overload steps); default: the last step's
    planned_rate: float | None = None  # what the plan gives the instances under test, when known
    plan_basis: str | None = None  # what planned_rate is for, e.g. "1 x inf1.6xlarge in staging"
    error_budget_percent: float = DEFAULT_ERROR_BUDGET_PERCENT
    environment: str | None = None
    release: str | None = None
    instance_type: str | None = None
    instances: int | None = None  # instances behind the target while it runs
    timeout_s: float = 10.0
    in_flight_per_generator: int = MAX_IN_FLIGHT
    schema_version: int = field(default=SCHEMA_VERSION)

    def __post_init__(self) -> None:
        if not self.steps:
            raise SpecError("a load test needs at least one step")
        for i, step in enumerate(self.steps):
            if not (math.isfinite(step.rate) and step.rate > 0) or not (
                math.isfinite(step.seconds) and step.seconds > 0
            ):
                raise SpecError(f"steps[{i}]: rate and seconds must be > 0 (got {step.rate}, {step.seconds})")
        if self.target.kind not in ("http", "sagemaker"):
            raise SpecError(f"target.kind: {self.target.kind!r} is neither http nor sagemaker")
        if self.target.kind == "http" and not self.target.url:
            raise SpecError("target.url: an http target needs a URL")
        if self.target.kind == "sagemaker" and not (self.target.endpoint and self.target.region):
            raise SpecError("target.endpoint: a sagemaker target needs an endpoint and a region")
        if not (self.p99_slo_ms > 0) or not (0 <= self.error_budget_percent <= 100):
            raise SpecError("p99_slo_ms must be > 0 and error_budget_percent within 0..100")
        if not self.bodies or len(self.bodies) > MAX_BODIES or not all(isinstance(b, dict) for b in self.bodies):
            raise SpecError(f"bodies: 1 to {MAX_BODIES} JSON objects (the requests), got {len(self.bodies)}")
        for name in ("full_rate", "planned_rate"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise SpecError(f"{name}: must be a number > 0, got {value!r}")
        if not (isinstance(self.in_flight_per_generator, int) and 1 <= self.in_flight_per_generator <= MAX_IN_FLIGHT):
            raise SpecError(
                f"in_flight_per_generator: must be within 1..{MAX_IN_FLIGHT}, got {self.in_flight_per_generator!r}"
            )

    @property
    def judged_rate(self) -> float:
        """The 100 % rate: every step up to it must hold the SLO; steps above it are judged as overload."""
        return self.full_rate if self.full_rate is not None else self.steps[-1].rate

    @property
    def late_after_ms(self) -> float:
        return max(LATE_FLOOR_MS, LATE_SHARE_OF_SLO * self.p99_slo_ms)

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps)

    def body_bytes(self) -> tuple[bytes, ...]:
        """The requests as sent: the same bytes in every process, whatever order the JSON they came in had."""
        return tuple(json.dumps(body, sort_keys=True).encode() for body in self.bodies)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> LoadTestSpec:
        try:
            data = json.loads(text)
            if data.get("schema_version") != SCHEMA_VERSION:
                raise SpecError(f"schema_version: {data.get('schema_version')!r}, this tool reads {SCHEMA_VERSION}")
            data["target"] = Target(**data["target"])
            data["steps"] = tuple(Step(**s) for s in data["steps"])
            data["bodies"] = tuple(data["bodies"])
            data["outputs"] = tuple(
                ExpectedOutput(o["name"], o["datatype"], tuple(o["shape"])) for o in data["outputs"]
            )
            return cls(**data)
        except SpecError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SpecError(f"load test spec: {type(exc).__name__}: {exc}") from None


def stepped(
    target_rate: float, *, fractions: tuple[float, ...] = DEFAULT_STEPS, hold_s: float | None = None
) -> tuple[Step, ...]:
    """Steps at `fractions` of `target_rate` (above 1: overload steps), each held long enough to read a p99
    (MIN_REQUESTS_FOR_P99 requests at its rate, and at least MIN_HOLD_S) unless `hold_s` says otherwise."""
    steps = []
    for fraction in fractions:
        rate = target_rate * fraction
        hold = hold_s if hold_s is not None else max(MIN_HOLD_S, MIN_REQUESTS_FOR_P99 / rate)
        steps.append(Step(rate=round(rate, 3), seconds=hold))
    return tuple(steps)
