"""The SageMaker user: a signed InvokeEndpoint (boto3, pointed at moto's server by AWS_ENDPOINT_URL) of an endpoint
and inference component, every reply checked like smoke's. moto answers with canned replies (its
endpoint-results queue): a right one proves the call (endpoint, component, body) and the answer check; a wrong
one is counted, every time, as an error of kind "invalid answer: ...". An emulator's latency says nothing about a
model: the verdict's latency part is not asserted, the counts are."""

from __future__ import annotations

import dataclasses

import boto3
import pytest

from inferstack import config
from inferstack.loadtest import runner, shape
from inferstack.loadtest.spec import Target
from tests.support.emulator import REGION, seed_reply
from tests.support.paths import CONFIG_DIR

pytestmark = pytest.mark.loadtest
MODEL = "bert-large-classifier"
PROJECT = config.load(CONFIG_DIR)


def spec_for(endpoint: str, component: str | None):
    spec = shape.spec_for(PROJECT.model(MODEL), "dev", PROJECT.environments["dev"],
                          target=Target(kind="sagemaker", endpoint=endpoint, component=component, region=REGION),
                          rate=10.0, hold=4.0, fractions=(1.0,), timeout_s=5.0)
    return dataclasses.replace(spec, p99_slo_ms=1000.0)


def bind_reply(aws, spec, outputs: list[dict]) -> None:
    """Seed a reply and hand it to this spec's request (same endpoint, component and body as Locust's)."""
    seed_reply(aws, {"model_name": MODEL, "outputs": outputs})
    extra = {"InferenceComponentName": spec.target.component} if spec.target.component else {}
    boto3.client("sagemaker-runtime", region_name=REGION).invoke_endpoint(
        EndpointName=spec.target.endpoint, ContentType="application/json", Accept="application/json",
        Body=spec.body_bytes(), **extra)


def outputs_of(spec, change=None) -> list[dict]:
    outputs = []
    for o in spec.outputs:
        shape_ = list(change(o) if change else o.shape)
        count = 1
        for n in shape_:
            count *= n
        outputs.append({"name": o.name, "datatype": o.datatype, "shape": shape_, "data": [0] * count})
    return outputs


def test_signed_invocations_of_a_component_with_right_answers_count_no_errors(emulator, tmp_path):
    spec = spec_for("dev-shared", "bert-large-ic")
    bind_reply(emulator, spec, outputs_of(spec))
    result = runner.run_local(spec, tmp_path)
    (step,) = result.steps
    # A request without the component (or with another body) would have got moto's default reply, not JSON.
    assert step.errors == {} and step.failures == 0
    assert step.requests >= 0.9 * step.offered_rps * step.seconds
    assert result.target == "endpoint dev-shared component bert-large-ic"
    assert [g.name for g in result.generators] == ["local"]


def test_a_wrong_answer_is_an_error_of_kind_invalid_answer(emulator, tmp_path):
    spec = spec_for("dev-bert-large", None)
    bind_reply(emulator, spec, outputs_of(spec, change=lambda o: (*o.shape[:-1], o.shape[-1] + 1)))
    result = runner.run_local(spec, tmp_path)
    (step,) = result.steps
    name, expected = spec.outputs[0].name, list(spec.outputs[0].shape)
    wrong = [*expected[:-1], expected[-1] + 1]
    assert step.errors == {f"invalid answer: output {name}: shape {wrong}, expected {expected}": step.requests}
    assert step.requests > 0 and step.failures == step.requests and step.p99_ms is None
    assert result.verdict == "fail"
