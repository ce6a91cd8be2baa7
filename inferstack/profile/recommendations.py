"""Profile entries from a finished Inference Recommender job: the JSON `aws sagemaker
describe-inference-recommendations-job` prints. Per instance type, the recommendation with the most invocations
per instance whose model latency meets the job's latency threshold (and the model's SLO); its MaxInvocations
(per minute) over 60 is the throughput, its ModelLatency the latency at the percentile the job's threshold names
(model latency as the API reports it: time inside the container, not end to end, which the source line says).
An Advanced job (a custom load test, what `--recommender` builds) is judged at P95: its entry records a p95
(measured.p95_latency_ms), and its p99 is the limit it was judged within, assumed until a load test measures it.

The file is untrusted input: anything unexpected is one RecommendationsError line naming the file and key path."""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import dataclass
from pathlib import Path

from inferstack.profile import latency_thresholds
from inferstack.profile.entry import ProfileEntry, ProfileRefused, build, ceil_to, floor_to
from inferstack.schema import instances
from inferstack.schema.throughput import RECOMMENDER_METHOD as METHOD

MAX_FILE_BYTES = 16 * 1024 * 1024  # a job lists at most 10 endpoint configurations; real files are a few KB
# Bounds that keep every figure finite as a float: a million invocations a second, a latency over an hour.
MAX_INVOCATIONS_PER_MINUTE = 60 * 10**6
MAX_LATENCY_MS = 3_600_000
JOB_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,63}")  # RecommendationJobName in the SageMaker API
COMPLETED = "COMPLETED"
THRESHOLDS = "StoppingConditions.ModelLatencyThresholds"


class RecommendationsError(ValueError):
    pass


@dataclass(frozen=True)
class Recommendations:
    job: str
    entries: tuple[ProfileEntry, ...]
    notes: tuple[str, ...]  # what was left out, and why (one line each)


class _Reader:
    def __init__(self, label: str):
        self.label = label

    def fail(self, where: str, message: str) -> RecommendationsError:
        where = f"{self.label}: {where}: " if where else f"{self.label}: "
        return RecommendationsError(where + " ".join(message.split()))

    def get(self, obj: dict, key: str, where: str, kind, *, required: bool = True):
        path = f"{where}.{key}" if where else key
        if key not in obj:
            if required:
                raise self.fail(path, "missing")
            return None
        value = obj[key]
        if kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            ok = isinstance(value, kind)
        if not ok:
            raise self.fail(path, f"expected {_KIND_NAMES[kind]}, got {_brief(value)}")
        return value

    def number(self, obj: dict, key: str, where: str, kind, low: float, high: float, *, required: bool = True):
        value = self.get(obj, key, where, kind, required=required)
        if value is not None and not low <= value <= high:
            raise self.fail(f"{where}.{key}", f"{_brief(value)} is out of range ({low:g} to {high:g})")
        return value

    def timestamp(self, value: object, where: str) -> datetime.date:
        """The CLI prints ISO 8601; a boto3 response dumped with default=str has a space instead of the T; some
        tools write epoch seconds."""
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 10**11:
            return datetime.datetime.fromtimestamp(value, datetime.UTC).date()
        if isinstance(value, str) and len(value) <= 64:
            try:
                parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                pass
            else:
                if parsed.tzinfo is not None:
                    parsed = parsed.astimezone(datetime.UTC)
                return parsed.date()
        raise self.fail(where, f"expected a timestamp (ISO 8601 or epoch seconds), got {_brief(value)}")


_KIND_NAMES = {int: "an integer", float: "a number", str: "a string", dict: "an object", list: "a list"}


def _brief(value: object) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def parse(text: bytes, label: str) -> dict:
    reader = _Reader(label)
    if len(text) > MAX_FILE_BYTES:
        raise reader.fail(
            "", f"larger than {MAX_FILE_BYTES} bytes: not a describe-inference-recommendations-job answer"
        )
    try:
        data = json.loads(text.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise reader.fail("", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise reader.fail("", "not JSON a job prints: nested too deeply") from None
    except ValueError as exc:
        raise reader.fail("", f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise reader.fail(
            "",
            f"expected a JSON object (describe-inference-recommendations-job's answer), got "
            f"{_KIND_NAMES.get(type(data), type(data).__name__)}",
        )
    return data


def read(path: Path, *, env_name: str, slo_p99_ms: float, only: set[str] | None = None) -> Recommendations:
    """`only`: instance types to keep (default: every one the job measured that the catalog knows)."""
    label = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RecommendationsError(f"{label}: cannot read: {exc.strerror or exc}") from None
    return from_data(parse(raw, label), label, env_name=env_name, slo_p99_ms=slo_p99_ms, only=only)


def from_data(
    data: dict, label: str, *, env_name: str, slo_p99_ms: float, only: set[str] | None = None
) -> Recommendations:
    r = _Reader(label)
    job = r.get(data, "JobName", "", str)
    if not JOB_NAME.fullmatch(job):
        raise r.fail("JobName", f"{_brief(job)} is not a recommendation job name")
    status = r.get(data, "Status", "", str)
    if status != COMPLETED:
        raise r.fail("Status", f"{_brief(status)}: a job's recommendations are final once it is {COMPLETED}")
    percentile, threshold = _threshold(r, data)
    limit = min(threshold, slo_p99_ms)
    completed = data.get("CompletionTime")
    job_date = r.timestamp(completed, "CompletionTime") if completed is not None else None

    recommendations = r.get(data, "InferenceRecommendations", "", list)
    if not recommendations:
        raise r.fail("InferenceRecommendations", "empty: the job recommended nothing")
    best: dict[str, tuple[float, int, float, int, datetime.date]] = {}
    notes: list[str] = []
    measured_types: set[str] = set()
    for index, item in enumerate(recommendations):
        where = f"InferenceRecommendations[{index}]"
        if not isinstance(item, dict):
            raise r.fail(where, f"expected an object, got {_brief(item)}")
        metrics = r.get(item, "Metrics", where, dict)
        endpoint = r.get(item, "EndpointConfiguration", where, dict)
        itype = r.get(endpoint, "InstanceType", f"{where}.EndpointConfiguration", str, required=False)
        if itype is None:
            notes.append(f"{where}: serverless (no InstanceType): not an instance profile, left out")
            continue
        count = (
            r.number(endpoint, "InitialInstanceCount", f"{where}.EndpointConfiguration", int, 1, 10**4, required=False)
            or 1
        )
        per_minute = r.number(metrics, "MaxInvocations", f"{where}.Metrics", int, 0, MAX_INVOCATIONS_PER_MINUTE)
        latency = r.number(metrics, "ModelLatency", f"{where}.Metrics", float, 0, MAX_LATENCY_MS)
        ended = item.get("InvocationEndTime")
        when = r.timestamp(ended, f"{where}.InvocationEndTime") if ended is not None else job_date
        if when is None:
            raise r.fail("CompletionTime", "missing, and so is InvocationEndTime: the date of the measurement")
        measured_types.add(itype)
        if only is not None and itype not in only:
            continue
        if latency > limit or per_minute == 0:
            continue
        per_instance = per_minute / count
        if itype not in best or per_instance > best[itype][0]:
            best[itype] = (per_instance, per_minute, latency, count, when)

    entries = []
    for itype in sorted(measured_types if only is None else measured_types & only):
        if itype not in best:
            notes.append(
                f"{itype}: no recommendation with {percentile.lower()} model latency within {limit:g} ms: "
                f"nothing to write"
            )
            continue
        if itype not in instances.INSTANCES:
            notes.append(f"{itype}: not in inferstack's instance catalog (inferstack/schema/instances.py): left out")
            continue
        per_instance, per_minute, latency, count, when = best[itype]
        throughput = floor_to(per_instance / 60)
        figure = max(1.0, ceil_to(latency))  # the API counts whole milliseconds: 0 means below one
        if throughput <= 0:
            notes.append(f"{itype}: {per_minute} invocations a minute rounds to 0/s: nothing to write")
            continue
        key = percentile.lower()  # "p95" or "p99": the measured key says which
        source = (
            f"{METHOD} {job} {when.isoformat()}: {per_minute:,} invocations/min on {count} x {itype}, {key} "
            f"model latency {latency:g} ms (as the API reports it: in the container, not end to end) within "
            f"{limit:g} ms"
        )
        p99 = figure
        if key != "p99":
            # Nothing measured a p99: plan with the limit the figure was judged within, and say so.
            p99 = max(ceil_to(limit), figure)
            source += f"; p99 not measured, {p99:g} ms assumed until a load test measures it"
        measured = {
            "date": when,
            "method": f"{METHOD} {job}",
            "environment": env_name,
            "instances": count,
            f"{key}_latency_ms": figure,
            "results": label,
        }
        try:
            entries.append(build(itype, throughput=throughput, p99_ms=p99, source=source, measured=measured))
        except ProfileRefused as exc:
            raise r.fail(f"InferenceRecommendations ({itype})", str(exc)) from None
    for missing in sorted((only or set()) - measured_types):
        notes.append(f"{missing}: the job measured no such instance type")
    return Recommendations(job, tuple(entries), tuple(notes))


def _threshold(r: _Reader, data: dict) -> tuple[str, float]:
    """(the percentile the job judged model latency at, its lowest threshold there). A job that names none, or
    several, or one its type does not take, says nothing a profile entry can label its figures with."""
    job_type = r.get(data, "JobType", "", str)
    if job_type not in latency_thresholds.PERCENTILES:
        raise r.fail(
            "JobType",
            f"{_brief(job_type)} is not one of the API's job types ({', '.join(latency_thresholds.PERCENTILES)})",
        )
    conditions = r.get(data, "StoppingConditions", "", dict, required=False) or {}
    thresholds = r.get(conditions, "ModelLatencyThresholds", "StoppingConditions", list, required=False) or []
    if not thresholds:
        raise r.fail(
            THRESHOLDS,
            "none: the job names no percentile to read its ModelLatency at; profile from "
            "a job with one (`inferstack profile --recommender` builds it)",
        )
    values: dict[str, list[int]] = {}
    for index, item in enumerate(thresholds):
        where = f"{THRESHOLDS}[{index}]"
        if not isinstance(item, dict):
            raise r.fail(where, f"expected an object, got {_brief(item)}")
        percentile = r.get(item, "Percentile", where, str)
        problem = latency_thresholds.problem(job_type, percentile)
        if problem is not None:
            raise r.fail(f"{where}.Percentile", problem)
        values.setdefault(percentile, []).append(r.number(item, "ValueInMilliseconds", where, int, 1, MAX_LATENCY_MS))
    if len(values) > 1:
        raise r.fail(
            THRESHOLDS,
            f"at {' and '.join(sorted(values))}: which one a recommendation's ModelLatency "
            f"is cannot be told; profile from a job with one percentile",
        )
    ((percentile, limits),) = values.items()
    return percentile, min(limits)
