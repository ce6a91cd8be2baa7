"""A model file's pipeline (inferstack/schema/pipeline.py) on the real tritonserver 2.51, started as SageMaker's serve
script starts it: the shipped classifier's spec (from the synthesized dev app, as the other real-Triton tests) with the
example pipeline of docs/how-to/build-a-pipeline.md (tests/support/pipeline_example/): a user pre-step that cleans the
text -> the classifier (tokenizer step, token-id model, postprocessing step) -> a user post-step that answers the
contract's label and logits and a reply. The repository is written by container/triton/export.py from the spec, the
steps' code carried in it as the image build gets it (loaded by validate from the model's folder)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inferstack.triton import config as triton_config
from rehearsal import triton_server
from tests.support.build_once import build_once
from tests.support.pipeline_models import EXAMPLE, with_example_pipeline
from tests.support.real_triton import EXPORT, _run, exported, without_queue_policy

pytestmark = pytest.mark.real_triton

NAME = "bert-large-classifier"
REPLIES = {"negative": "sorry to hear that: a person will call you", "positive": "thank you!"}


@pytest.fixture(scope="module")
def served(tmp_path_factory, contract, triton_install):
    shipped = exported(tmp_path_factory, contract, NAME)  # the tiny checkpoint and the synthesized spec
    model = with_example_pipeline(tmp_path_factory.mktemp("pipeline-config"))
    spec = triton_config.RepositorySpec.of(model).model_dump(mode="json")
    spec = {**json.loads(shipped.spec.model_dump_json()), "pipeline": spec["pipeline"], "step_code": spec["step_code"]}

    def build(target):
        result = _run(
            str(EXPORT), "--out", str(target / "repository"), env={"TRITON_REPOSITORY_SPEC": json.dumps(spec)}
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr

    repository = build_once(tmp_path_factory, "real-triton-pipeline", build) / "repository"
    work = tmp_path_factory.mktemp("triton-pipeline")
    copy = work / "model"
    triton_server.cpu_copy(repository, copy)
    without_queue_policy(copy)
    environment = {**contract[NAME]["environment"], **triton_config.server_environment(model)}
    server = triton_server.TritonServer(
        copy, environment, work_dir=work / "server", install=triton_install, http_front_end=True
    )
    server.start()
    try:
        yield server, repository, model
    finally:
        server.stop()


def test_the_export_writes_the_users_steps_beside_the_ensemble_and_the_tokenizer(served):
    _, repository, model = served
    folders = sorted(p.name for p in repository.iterdir())
    assert folders == sorted(
        [f"{NAME}-text", f"{NAME}-tokenize", NAME, f"{NAME}-postprocess", f"{NAME}-step0", f"{NAME}-step2"]
    )
    assert (repository / f"{NAME}-step0" / "1" / "model.py").read_text() == (
        EXAMPLE / "steps" / "normalize.py"
    ).read_text()
    assert (repository / f"{NAME}-step2" / "1" / "model.py").read_text() == (EXAMPLE / "steps" / "reply.py").read_text()
    assert (repository / f"{NAME}-tokenize" / "1" / "tokenizer" / "tokenizer.json").is_file()
    assert (repository / f"{NAME}-text" / "config.pbtxt").read_text() == triton_config.render_config(model)


def test_text_in_the_users_answer_out_through_sagemakers_front_end(served):
    server, _, model = served
    texts = ["hello   world", "  the quick brown fox ", "x"]
    status, reply = server.invoke({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [3], "data": texts}]})
    assert status == 200, reply[:500]
    parsed = json.loads(reply)
    assert parsed["model_name"] == f"{NAME}-text"
    outputs = {o["name"]: o for o in parsed["outputs"]}
    assert set(outputs) == {"label", "logits", "reply"}
    labels = outputs["label"]["data"]
    logits = np.array(outputs["logits"]["data"], dtype=np.float32).reshape(outputs["logits"]["shape"])
    assert outputs["logits"]["shape"] == [3, 2]
    assert labels == [model.source.labels[i] for i in logits.argmax(axis=1)]
    assert outputs["reply"]["data"] == [REPLIES[label] for label in labels]
    # The pre-step ran: the same text with other whitespace gets the same logits.
    status, again = server.invoke(
        {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["hello world"]}]}
    )
    assert status == 200
    again_logits = {o["name"]: o for o in json.loads(again)["outputs"]}["logits"]["data"]
    np.testing.assert_array_equal(np.array(again_logits, dtype=np.float32), logits[0])


def test_the_export_refuses_a_spec_without_a_steps_code(tmp_path):
    """A spec whose pipeline names a step file it carries no text for: exit 2 and one line, before any export."""
    model = with_example_pipeline(tmp_path)
    spec = json.loads(triton_config.RepositorySpec.of(model).model_dump_json())
    del spec["step_code"]["steps/reply.py"]
    result = _run(str(EXPORT), "--out", str(tmp_path / "repository"), env={"TRITON_REPOSITORY_SPEC": json.dumps(spec)})
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "export.py: error: TRITON_REPOSITORY_SPEC: step_code has no text for the "
        "pipeline's steps/reply.py (validate reads each step file from the model's "
        "folder into the spec)"
    )
    assert not (tmp_path / "repository").exists()
