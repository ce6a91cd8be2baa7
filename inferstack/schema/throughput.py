"""A model's throughput_profile: what one instance sustains within a p99, and where a measured figure comes from."""

from __future__ import annotations

import datetime
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from inferstack.schema.base import Frozen, Name, PositiveFloat, PositiveInt

# measured.method of an entry read from an Inference Recommender job, before the job's name.
RECOMMENDER_METHOD = "inference-recommender job"


class Measurement(Frozen):
    """Where a measured profile entry comes from (`inferstack profile` writes it). An entry without one is an
    estimate: plan --compare does not rank it and validate warns when production is sized from it."""

    date: datetime.date = Field(description="day the load test ran (ISO 8601, e.g. 2025-06-01)")
    method: str = Field(
        min_length=1,
        max_length=200,
        pattern=r"^[^\r\n]+$",
        description='what measured it: "inferstack profile" (Locust) or "inference-recommender job <job name>"',
    )
    environment: Name | None = Field(
        None,
        description="the environment whose instances served the test; "
        "omitted: a run against a target outside the environments (e.g. local)",
    )
    release: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        pattern=r"^[^\r\n]+$",
        description="the release (commit, manifest) the measured instances ran",
    )
    instances: PositiveInt = Field(
        description="instances behind the target during the test; "
        "throughput_per_second is the highest rate held divided by this"
    )
    # One percentile per entry, named by its key: a figure is never read as a percentile it was not taken at.
    p99_latency_ms: PositiveFloat | None = Field(
        None,
        description="the p99 measured at that rate (a load test: `inferstack profile`); set this or p95_latency_ms",
    )
    p95_latency_ms: PositiveFloat | None = Field(
        None,
        description="the p95 measured at that rate: an Inference Recommender job's model latency (in the "
        "container, not end to end). The Advanced job `inferstack profile --recommender` builds is a custom load "
        "test, which the API judges at P95 "
        "(https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ModelLatencyThreshold.html): the entry "
        "has no measured p99, so plan --compare does not rank it and validate warns when production is sized "
        "from it",
    )
    results: str = Field(
        min_length=1,
        max_length=2048,
        pattern=r"^\S+$",
        description="where the full results are: s3://bucket/key, or a file path",
    )

    @field_validator("date")
    @classmethod
    def _not_in_future(cls, value: datetime.date) -> datetime.date:
        # UTC, as the results' timestamps: a measurement dated tomorrow was typed, not measured.
        if value > datetime.datetime.now(datetime.UTC).date():
            raise ValueError(f"{value} is in the future")
        return value

    @field_validator("p95_latency_ms")
    @classmethod
    def _one_percentile(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is not None and info.data.get("p99_latency_ms") is not None:
            raise ValueError(
                "set with p99_latency_ms: a measurement records its latency at one percentile, "
                "p99_latency_ms or p95_latency_ms"
            )
        return value

    @model_validator(mode="after")
    def _a_percentile(self) -> Measurement:
        if self.p99_latency_ms is None and self.p95_latency_ms is None:
            raise ValueError(
                "set p99_latency_ms (a load test's p99) or p95_latency_ms (an Inference Recommender "
                "job's P95 model latency)"
            )
        return self

    @property
    def latency_percentile(self) -> Literal["p99", "p95"]:
        return "p99" if self.p99_latency_ms is not None else "p95"

    @property
    def latency_ms(self) -> float:
        return self.p95_latency_ms if self.p99_latency_ms is None else self.p99_latency_ms  # type: ignore[return-value]  # one is required


class ProfilePoint(Frozen):
    """An operating point of one instance: the most it sustains while meeting p99_latency_ms."""

    throughput_per_second: PositiveFloat = Field(description="inferences per second one instance sustains")
    p99_latency_ms: PositiveFloat = Field(
        description="end-to-end p99 at that throughput (server and network "
        "included), the one the plan uses; where nothing measured a p99 (an "
        "estimate, or measured.p95_latency_ms) it is assumed, and source says so"
    )
    source: str = Field(min_length=1, description="where the figure comes from (benchmark run, publication)")
    measured: Measurement | None = Field(
        None, description="provenance of a measured entry; omitted: the entry is an estimate"
    )

    @model_validator(mode="after")
    def _no_better_than_measured(self) -> ProfilePoint:
        # A p99 is never below the p95 of the same requests: an entry planning with one would promise more.
        measured = self.measured
        if measured is not None and self.p99_latency_ms < measured.latency_ms:
            percentile = measured.latency_percentile
            raise ValueError(
                f"p99_latency_ms {self.p99_latency_ms:g} is below the measured {percentile} "
                f"{measured.latency_ms:g} (measured.{percentile}_latency_ms): plan with what was measured"
            )
        return self
