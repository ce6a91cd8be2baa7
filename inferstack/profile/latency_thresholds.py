"""The percentile an Inference Recommender job judges model latency at (ModelLatencyThresholds[].Percentile), per
job type: what recommender.py sends and what recommendations.py reads a finished job's figures as."""

from __future__ import annotations

API_REFERENCE = "https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ModelLatencyThreshold.html"
# The API reference: "Acceptable values are P95 and P99. For custom load tests, specify the value as P95." An
# Advanced job (a TrafficPattern of its own) is a custom load test. botocore models Percentile as a free string,
# so validating a request against botocore's service model cannot catch a wrong one: this table does.
PERCENTILES: dict[str, tuple[str, ...]] = {"Advanced": ("P95",), "Default": ("P95", "P99")}
ADVANCED = "Advanced"  # the job type inferstack builds (recommender.build)


def problem(job_type: str, percentile: str) -> str | None:
    """Why a job of `job_type` (one of PERCENTILES) cannot be judged at `percentile` (one line), or None."""
    allowed = PERCENTILES[job_type]
    if percentile in allowed:
        return None
    shown = repr(percentile if len(percentile) <= 20 else percentile[:17] + "...")
    if job_type == ADVANCED and percentile in PERCENTILES["Default"]:
        return f"{shown} on an {ADVANCED} job: a custom load test takes {' or '.join(allowed)} only ({API_REFERENCE})"
    return f"{shown} is not a percentile the API takes for JobType {job_type} ({' or '.join(allowed)}: {API_REFERENCE})"
