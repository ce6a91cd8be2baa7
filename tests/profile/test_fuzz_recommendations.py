"""Property-based fuzzing of the Inference Recommender reader (inferstack/profile/recommendations.py):
whatever a describe-inference-recommendations-job file holds, `read` either returns entries the schema accepts
(finite, positive, per instance type of the catalog, the latency under the key of the percentile the job judged
it at) or raises RecommendationsError whose message is one printable line naming the file, in bounded time.

Files are the sample job with one mutation (values swapped for hostile ones, keys deleted or added, deep
nesting: tests/support/fuzz.py), raw JSON values, and raw bytes. Derandomized (tests/conftest.py)."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferstack.profile import recommendations
from inferstack.profile.recommendations import RecommendationsError
from inferstack.schema import instances
from tests.support import recommendations_sample
from tests.support.fuzz import fuzz_examples, mutate_once, values
from tests.support.hang_guard import hang_guard

pytestmark = pytest.mark.fuzz


def sample() -> dict:
    """The support sample, as `--recommender` builds the job: Advanced, judged at P95."""
    return recommendations_sample.sample()


@st.composite
def mutated_jobs(draw) -> dict:
    """Half the mutations land in the recommendations list, where most of the reading happens."""
    data = sample()
    for _ in range(draw(st.integers(1, 3))):
        where = data["InferenceRecommendations"] if draw(st.booleans()) else data
        if where:
            mutate_once(draw, where, ["replace", "replace", "delete", "add", "nest"])
    return data


def assert_reads_or_reports(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.json"
        path.write_bytes(content)
        with hang_guard("recommendations.read"):
            try:
                found = recommendations.read(path, env_name="staging", slo_p99_ms=300.0)
            except RecommendationsError as exc:
                message = str(exc)
                assert message.startswith(f"{path}: "), message
                assert message.isprintable() and "\n" not in message and len(message) < 600, message
                return
    for made in found.entries:
        point = made.point
        assert made.instance_type in instances.INSTANCES
        assert math.isfinite(point.throughput_per_second) and point.throughput_per_second > 0
        assert 0 < point.p99_latency_ms <= 300 and point.measured is not None
        # An Advanced job is judged at P95: its figure is a p95, never a p99; the p99 planned with is assumed
        # (the limit), never below it.
        assert point.measured.latency_percentile == "p95" and point.measured.p99_latency_ms is None
        assert point.measured.p95_latency_ms <= point.p99_latency_ms
    for note in found.notes:
        assert "\n" not in note


@settings(max_examples=fuzz_examples(300), deadline=None)
@given(mutated_jobs())
def test_mutated_jobs_read_or_report(data):
    assert_reads_or_reports(json.dumps(data, default=str).encode())


def test_the_unmutated_job_reads_as_p95_entries():
    """The fuzzed files start from a job that reads: entries, each a p95 (before, the figure was written as a
    p99)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = recommendations_sample.write(Path(tmp) / "job.json", sample())
        found = recommendations.read(path, env_name="staging", slo_p99_ms=300.0)
    assert found.entries and {e.point.measured.latency_percentile for e in found.entries} == {"p95"}


@settings(max_examples=fuzz_examples(100), deadline=None)
@given(values)
def test_any_json_value_reads_or_reports(value):
    try:
        text = json.dumps(value, allow_nan=True)
    except (ValueError, OverflowError):
        return
    assert_reads_or_reports(text.encode())


@settings(max_examples=fuzz_examples(100), deadline=None)
@given(st.binary(max_size=200))
def test_raw_bytes_read_or_report(content):
    assert_reads_or_reports(content)
