"""The load-test image's build step: import and run what its entrypoint will, so a module or distribution
missing from the image fails `docker build` instead of a load test. Prints one line; writes nothing.

- the entrypoint (inferstack.loadtest.task) and the locustfile both roles hand to Locust, imported as Locust
  imports it (with a spec in INFERSTACK_LOADTEST_SPEC; importing it imports Locust and patches for gevent);
- the HdrHistogram a worker sends its latencies in, encoded and decoded;
- the master's picture (matplotlib, drawn for a small result) and its upload client (boto3), and what the
  SageMaker users build and sign their requests with (botocore's serializer, SigV4 signer, error parser and CA
  bundle)."""

from __future__ import annotations

import os

from inferstack.loadtest import measure, report, runner, task
from inferstack.loadtest.results import Generator, RunResult, Sample, StepResult
from inferstack.loadtest.spec import ExpectedOutput, LoadTestSpec, Step, Target

spec = LoadTestSpec(
    model="check",
    target=Target(kind="http", url="http://127.0.0.1:8080/v2/models/check/infer"),
    bodies=({"inputs": []},),
    outputs=(ExpectedOutput("logits", "FP32", (1, 2)),),
    steps=(Step(rate=10, seconds=30),),
    p99_slo_ms=100,
)
os.environ[runner.SPEC_ENV] = spec.to_json()
# Import statements, not importlib: the image build rehearsal reads what a step imported from -X importtime,
# which reports only these. The locustfile first: importing it patches the process for gevent, before boto3's
# imports (isort would put it last).
# isort: off
import inferstack.loadtest.locustfile  # noqa: E402,F401 - after the spec is set; the import is the check
import boto3  # noqa: E402,F401 - after the spec is set; the import is the check
import botocore.auth  # noqa: E402 - after the spec is set
import botocore.awsrequest  # noqa: E402 - after the spec is set
import botocore.httpsession  # noqa: E402 - after the spec is set
import botocore.parsers  # noqa: E402 - after the spec is set
import botocore.serialize  # noqa: E402,F401 - after the spec is set; the import is the check
# isort: on

# A step's latencies travel from worker to master as an HdrHistogram (measure.StepTally): its C part must load.
tally = measure.StepTally()
tally.ended(5.0, None, 200, slo_ms=100)
assert measure.StepTally.from_wire(tally.to_wire()).answered == 1, "the HdrHistogram round trip failed"
result = RunResult(
    model="check",
    target=spec.target.describe(),
    started="2026-01-01T00:00:00+00:00",
    finished="2026-01-01T00:00:30+00:00",
    p99_slo_ms=100,
    error_budget_percent=0.1,
    steps=(
        StepResult(
            offered_rps=10,
            seconds=30,
            offered=300,
            late=0,
            late_max_ms=0.0,
            answered=300,
            good=300,
            rejected=0,
            timeouts=0,
            failures=0,
            errors={},
            p50_ms=5.0,
            p90_ms=8.0,
            p99_ms=12.0,
            max_ms=20.0,
            started_s=0.0,
        ),
    ),
    generators=(Generator("master", 5, 3), Generator("worker-1", 40, 30)),
    timeline=(Sample(1, 10, 5.0, 12.0, 0), Sample(2, 10, 5.0, 11.0, 0)),
    workers=1,
)
png = report.picture(result)
assert png.startswith(b"\x89PNG"), "the report's picture is not a PNG"
print(f"load-test image: {task.__name__} and the locustfile import, a {len(png)}-byte picture renders")
