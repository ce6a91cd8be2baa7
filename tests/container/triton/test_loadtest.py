"""The real Locust against the real tritonserver, started as SageMaker's serve script starts it (only /ping and
/invocations are up): the HTTP user POSTs the load test's request for the shipped model (smoke's probe_for,
through spec_for) to /invocations, the path SageMaker's InvokeEndpoint takes into the container, and checks
every answer. CPU latencies say nothing about a g4dn: the SLO is made generous, the counts are what is asserted."""

from __future__ import annotations

import dataclasses

import pytest

from inferstack.loadtest import runner, shape
from inferstack.loadtest.results import PASS
from inferstack.loadtest.spec import Target
from tests.support.real_triton import ENV, PROJECT, shipped

pytestmark = [pytest.mark.real_triton, pytest.mark.loadtest]
MODEL = "bert-large-classifier"


def test_locust_measures_the_real_triton_through_invocations(serve, tmp_path):
    served = serve(MODEL)
    spec = shape.spec_for(
        shipped(MODEL),
        ENV,
        PROJECT.environments[ENV],
        target=Target(kind="http", url=served.server.url + "/invocations"),
        rate=20.0,
        hold=3.0,
        fractions=(0.5, 1.0),
    )
    # 500 ms paces each user at 1 req/s: short steps then count many intervals, not a fraction of a 4 s one.
    spec = dataclasses.replace(spec, p99_slo_ms=500.0)
    result = runner.run_local(spec, tmp_path)
    for step in result.steps:
        assert step.errors == {} and step.failures == 0
        assert step.offered >= 0.9 * step.offered_rps * step.seconds
    assert result.verdict == PASS, result.reasons
    # Every request measured reached the model (the stand-in backend logs each execution's requests).
    executed = sum(batch["requests"] for batch in served.batches() if batch["model"] == MODEL)
    assert executed >= sum(s.offered for s in result.steps)
