"""A SageMaker Inference Recommender load test (CreateInferenceRecommendationsJob, JobType Advanced) of a
Triton model already deployed in an environment, on the instance types to compare, judged by the model's SLO;
checked against botocore's own model of the SageMaker API, and the rules it leaves out, before it is printed or
sent.

The job names the deployed SageMaker Model (InputConfig.ModelName, read from the endpoint that serves it:
deployed.model_name); a model package would need a model registry the stacks do not keep."""

from __future__ import annotations

import datetime
import gzip
import io
import json
import math
import re
import tarfile
from collections.abc import Sequence

from inferstack.profile import latency_thresholds
from inferstack.schema.triton_sagemaker import TritonSageMakerModel

OPERATION = "CreateInferenceRecommendationsJob"
# The published BERT-large Triton table was measured with 2 initial users, 2 more a minute, for 1,500 s.
INITIAL_USERS = 2
PHASE_SECONDS = 1500
# Endpoint creation, the image pull and TensorRT's engine build at load come on top of the traffic itself.
SETUP_SECONDS = 3600
MAX_JOB_SECONDS = 18_000  # the API's limit for JobDurationInSeconds
CONTENT_TYPE = "application/json"  # the KServe v2 JSON body SageMaker's Triton takes at /invocations
PAYLOAD_MEMBER = "payload-1.json"
JOB_TYPE = latency_thresholds.ADVANCED  # our own traffic pattern: a custom load test
# A custom load test is judged at P95 only (latency_thresholds.API_REFERENCE): the SLO's p99 is its threshold.
LATENCY_PERCENTILE = latency_thresholds.PERCENTILES[JOB_TYPE][0]


class RequestInvalid(ValueError):
    """The request breaks the SageMaker API's own rules (one line per rule broken, joined)."""


def _operation():
    import botocore.session

    return botocore.session.get_session().get_service_model("sagemaker").operation_model(OPERATION)


def validate(request: dict) -> None:
    """botocore's ParamValidator (what a client runs before sending: types, required members, minimums), then
    the rules it leaves to the service, read from the same service model (enums, patterns, maximums), and those
    only the API reference states (the latency threshold's percentile per job type)."""
    import botocore.validate

    shape = _operation().input_shape
    try:
        botocore.validate.validate_parameters(request, shape)
    except botocore.validate.ParamValidationError as exc:
        raise RequestInvalid(" ".join(str(exc).split())) from None
    problems = [*_service_rules(request, shape, "request"), *_percentile_rules(request)]
    if problems:
        raise RequestInvalid("; ".join(problems))


def _service_rules(value, shape, where: str):
    if shape.type_name == "structure" and isinstance(value, dict):
        for key, member in shape.members.items():
            if key in value:
                yield from _service_rules(value[key], member, f"{where}.{key}")
    elif shape.type_name == "list" and isinstance(value, list):
        if "max" in shape.metadata and len(value) > shape.metadata["max"]:
            yield f"{where}: {len(value)} items, at most {shape.metadata['max']}"
        for index, item in enumerate(value):
            yield from _service_rules(item, shape.member, f"{where}[{index}]")
    elif shape.type_name == "string" and isinstance(value, str):
        enum = shape.metadata.get("enum")
        if enum and value not in enum:
            yield f"{where}: {value!r} is not one of the API's values"
        if "max" in shape.metadata and len(value) > shape.metadata["max"]:
            yield f"{where}: {len(value)} characters, at most {shape.metadata['max']}"
        pattern = _pattern(shape.metadata.get("pattern"))
        if pattern is not None and not pattern.fullmatch(value):
            yield f"{where}: {value!r} does not match the API's pattern {shape.metadata['pattern']}"
    elif shape.type_name in ("integer", "long") and isinstance(value, int):
        if "max" in shape.metadata and value > shape.metadata["max"]:
            yield f"{where}: {value} is above the API's maximum {shape.metadata['max']}"


def _percentile_rules(request: dict):
    job_type = request.get("JobType")
    if job_type not in latency_thresholds.PERCENTILES:
        return  # an unknown JobType is the enum's problem, reported above
    thresholds = request.get("StoppingConditions", {}).get("ModelLatencyThresholds", [])
    for index, threshold in enumerate(thresholds):
        if "Percentile" in threshold:
            problem = latency_thresholds.problem(job_type, threshold["Percentile"])
            if problem is not None:
                yield f"request.StoppingConditions.ModelLatencyThresholds[{index}].Percentile: {problem}"


def _pattern(text: str | None) -> re.Pattern | None:
    """The service model's patterns are Java regular expressions; the few Python cannot compile are skipped."""
    if not text:
        return None
    try:
        return re.compile(text.removeprefix("^").removesuffix("$"))
    except re.error:
        return None


def job_name(model: str, env_name: str, now: datetime.datetime) -> str:
    stamp = now.astimezone(datetime.UTC).strftime("%Y%m%d%H%M%S")
    suffix = f"-{env_name}-{stamp}"
    return (model[: 64 - len(suffix)].rstrip("-") + suffix)[:64]


def users_for(rate_per_second: float, p99_ms: float) -> int:
    """Closed-loop users needed to offer `rate_per_second` when each answer takes up to `p99_ms` (Little's law)."""
    return max(1, math.ceil(rate_per_second * p99_ms / 1000.0))


def build(
    model: TritonSageMakerModel,
    env_name: str,
    *,
    model_name: str,
    role_arn: str,
    instance_types: Sequence[str],
    payload_url: str,
    name: str,
    phase_seconds: int = PHASE_SECONDS,
) -> dict:
    """The request. Every traffic figure comes from the SLO in `env_name`: the job stops once one instance
    answers the whole peak (MaxInvocations, per minute: nothing above it changes the plan), or once P95 model
    latency (the only percentile a custom load test takes) passes the SLO's p99; the users grow to what the peak
    needs at the SLO's latency."""
    slo = model.slo_for(env_name)
    users = users_for(slo.peak_tps, slo.p99_latency_ms)
    initial = min(INITIAL_USERS, users)
    spawn_per_minute = max(1, math.ceil((users - initial) / max(1, phase_seconds / 60)))
    tests = len(instance_types)
    request = {
        "JobName": name,
        "JobType": JOB_TYPE,
        "RoleArn": role_arn,
        "JobDescription": f"inferstack profile {model.name} in {env_name}: SLO p99 {slo.p99_latency_ms:g} ms, "
        f"peak {slo.peak_tps:g}/s"[:128],
        "InputConfig": {
            "ModelName": model_name,
            "JobDurationInSeconds": min(MAX_JOB_SECONDS, phase_seconds + SETUP_SECONDS),
            "TrafficPattern": {
                "TrafficType": "PHASES",
                "Phases": [
                    {"InitialNumberOfUsers": initial, "SpawnRate": spawn_per_minute, "DurationInSeconds": phase_seconds}
                ],
            },
            "ResourceLimit": {"MaxNumberOfTests": tests, "MaxParallelOfTests": tests},
            "EndpointConfigurations": [{"InstanceType": itype} for itype in instance_types],
            "ContainerConfig": {
                "Domain": "NATURAL_LANGUAGE_PROCESSING",
                "PayloadConfig": {"SamplePayloadUrl": payload_url, "SupportedContentTypes": [CONTENT_TYPE]},
                "SupportedEndpointType": "RealTime",
                "SupportedInstanceTypes": list(instance_types),
            },
        },
        "StoppingConditions": {
            "MaxInvocations": math.ceil(slo.peak_tps * 60),
            # The API takes whole milliseconds: round down, never loosen the SLO. P95, not P99: an Advanced job
            # is a custom load test, which the API reference says to judge at P95 (latency_thresholds); the
            # profile entries read from it record a p95, never a p99.
            "ModelLatencyThresholds": [
                {"Percentile": LATENCY_PERCENTILE, "ValueInMilliseconds": max(1, math.floor(slo.p99_latency_ms))}
            ],
        },
    }
    validate(request)
    return request


def payload_archive(body: dict) -> bytes:
    """The sample payload archive SamplePayloadUrl points at: one JSON request, as tar.gz (the format the
    recommender reads). Deterministic bytes: one body gives one archive."""
    data = json.dumps(body, sort_keys=True).encode("utf-8")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(PAYLOAD_MEMBER)
        info.size, info.mtime, info.mode = len(data), 0, 0o644
        tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)
