"""A throughput_profile entry from a measurement: the highest rate a load test held within the SLO, per instance,
with the p99 it held it at and where the results are; or a refusal saying why the run cannot be profiled."""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass

from pydantic import ValidationError

from inferstack.command_line import Failure
from inferstack.loadtest.results import INVALID, RunResult, StepResult, ms_text
from inferstack.schema.throughput import ProfilePoint

METHOD = "inferstack profile"


class ProfileRefused(Failure):
    """The measurement cannot become a profile entry (one line: why, and what to do)."""


@dataclass(frozen=True)
class ProfileEntry:
    instance_type: str
    point: ProfilePoint  # validated by the schema as it is built

    def data(self) -> dict:
        """The entry as the YAML holds it, in the order it is written; unset provenance fields left out."""
        out = {
            "throughput_per_second": self.point.throughput_per_second,
            "p99_latency_ms": self.point.p99_latency_ms,
            "source": self.point.source,
        }
        if self.point.measured is not None:
            out["measured"] = self.point.measured.model_dump(exclude_none=True)
        return out


def floor_to(value: float, places: int = 2) -> float:
    """Throughput is rounded down and latency up: a written figure never promises more than was measured."""
    return math.floor(value * 10**places) / 10**places


def ceil_to(value: float, places: int = 2) -> float:
    return math.ceil(value * 10**places) / 10**places


def build(instance_type: str, *, throughput: float, p99_ms: float, source: str, measured: dict) -> ProfileEntry:
    try:
        point = ProfilePoint(throughput_per_second=throughput, p99_latency_ms=p99_ms, source=source, measured=measured)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])  # empty: a rule of the whole entry
        raise ProfileRefused(
            f"the measurement is not a valid profile entry: {where + ': ' if where else ''}"
            f"{first['msg'].removeprefix('Value error, ')}"
        ) from None
    return ProfileEntry(instance_type, point)


def _no_step_held(result: RunResult, p99_slo_ms: float) -> str:
    steps = "; ".join(
        f"{s.offered_rps:g} req/s: answered {s.answered_rps:.1f}/s, p99 {ms_text(s.p99_ms)} from the "
        f"due time, errors {s.error_percent:.2f} %"
        for s in result.steps
    )
    return (
        f"no step held p99 <= {p99_slo_ms:g} ms with errors <= {result.error_budget_percent:g} % at its "
        f"rate ({steps}): nothing to write; start lower (--rate) or look at the errors"
    )


def best_step(result: RunResult, p99_slo_ms: float | None = None) -> StepResult:
    """The step behind `highest_rate_within_slo`: the held step with the highest rate served. `p99_slo_ms`: a
    stricter SLO than the run was judged by (the model's where the entry is written), if any."""
    if result.verdict == INVALID:
        raise ProfileRefused(f"the run is invalid, nothing written: {'; '.join(result.invalid_reasons)}")
    slo = min(result.p99_slo_ms, p99_slo_ms) if p99_slo_ms is not None else result.p99_slo_ms
    held = [s for s in result.steps if s.within(slo, result.error_budget_percent)]
    if not held:
        raise ProfileRefused(_no_step_held(result, slo))
    return max(held, key=lambda s: s.held_rps)


def _run_date(result: RunResult, today: datetime.date) -> datetime.date:
    try:
        return datetime.datetime.fromisoformat(result.finished.replace("Z", "+00:00")).astimezone(datetime.UTC).date()
    except (ValueError, AttributeError):
        return today


def from_run(
    result: RunResult,
    *,
    instance_type: str,
    results: str,
    environment: str | None,
    instances: int | None = None,
    release: str | None = None,
    p99_slo_ms: float | None = None,
    today: datetime.date | None = None,
) -> ProfileEntry:
    """`environment`: where the measured instances ran (None: a target outside the environments, e.g. local);
    `instances`: how many served the test (default: the run's own record); `p99_slo_ms`: the SLO the entry must
    meet where it is written, when stricter than the run's."""
    if result.instance_type and result.instance_type != instance_type:
        raise ProfileRefused(
            f"the run measured {result.instance_type}, not {instance_type}: write it with "
            f"--instance-type {result.instance_type}"
        )
    step = best_step(result, p99_slo_ms)
    count = instances if instances is not None else result.instances
    if not count or count < 1:
        raise ProfileRefused("the run does not say how many instances served it: pass --instances N")
    # A step that held showed the server answering its offered rate (sent on schedule, latency from the due
    # time): held_rps is what it answered, never more than was offered.
    held_rate = step.held_rps
    per_instance = floor_to(held_rate / count)
    if per_instance <= 0:
        raise ProfileRefused(f"{held_rate:.3f} req/s over {count} instances rounds to 0/s per instance")
    p99 = ceil_to(step.p99_ms)  # type: ignore[arg-type]  # a held step has a p99
    release = release or result.release
    where = f"in {environment}" if environment else f"against {result.target}"
    source = (
        f"{METHOD} {_run_date(result, today or datetime.date.today()).isoformat()}: "
        f"{held_rate:.1f} req/s held on {count} x {instance_type} {where}"
        f"{f' (release {release})' if release else ''}, p99 {p99:g} ms within the SLO's "
        f"{min(result.p99_slo_ms, p99_slo_ms or result.p99_slo_ms):g} ms, errors {step.error_percent:.2f} %"
    )
    measured = {
        "date": _run_date(result, today or datetime.date.today()),
        "method": METHOD,
        "environment": environment,
        "release": release,
        "instances": count,
        "p99_latency_ms": p99,
        "results": results,
    }
    return build(instance_type, throughput=per_instance, p99_ms=p99, source=source, measured=measured)
