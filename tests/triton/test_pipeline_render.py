"""The text ensemble of a model with a `pipeline:` (inferstack/triton/config.py pipeline_ensemble, step_folders): the
example of docs/how-to/build-a-pipeline.md (tests/support/pipeline_example/) on the shipped classifier, and a
pre-step only pipeline on T5."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from inferstack import config
from inferstack.triton import config as triton_config
from tests.support.config_edits import edit_yaml
from tests.support.paths import CONFIG_DIR, ROOT

EXAMPLE = ROOT / "tests" / "support" / "pipeline_example"
NAME = "bert-large-classifier"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    configs = tmp_path_factory.mktemp("pipeline") / "model_configs"
    shutil.copytree(CONFIG_DIR, configs)
    shutil.copytree(EXAMPLE / "steps", configs / NAME / "steps")
    steps = yaml.safe_load((EXAMPLE / "pipeline.yaml").read_text())["pipeline"]
    edit_yaml(configs / f"{NAME}.yaml", lambda d: d.update(pipeline=steps))
    shutil.copytree(EXAMPLE / "steps", configs / "t5-spelling" / "steps")
    edit_yaml(
        configs / "t5-spelling.yaml",
        lambda d: d.update(
            pipeline=[
                {
                    "python": "steps/normalize.py",
                    "inputs": [{"name": "TEXT", "datatype": "BYTES", "dims": [-1]}],
                    "outputs": [{"name": "clean_text", "datatype": "BYTES", "dims": [-1]}],
                },
                {"model": "self", "input_map": {"TEXT": "clean_text"}},
            ]
        ),
    )
    return config.load(configs)


def parsed(text: str) -> pb.ModelConfig:
    return text_format.Parse(text, pb.ModelConfig())


def ensemble_problems(rendered: dict[str, str]) -> list[str]:
    """What Triton would refuse in the default model's ensemble: a step model that is no folder, a tensor taken
    that nobody produces or produced twice, a mapped name the step's model does not declare, an output not made."""
    configs = {name: parsed(text) for name, text in rendered.items()}
    ensemble = next(iter(configs.values()))
    produced = {t.name for t in ensemble.input}
    problems = []
    for step in ensemble.ensemble_scheduling.step:
        inner = configs.get(step.model_name)
        if inner is None:
            problems.append(f"{step.model_name}: no folder")
            continue
        for own, tensor in step.input_map.items():
            if tensor not in produced:
                problems.append(f"{step.model_name} takes {tensor} before anyone produces it")
            if own not in {t.name for t in inner.input}:
                problems.append(f"{step.model_name} has no input {own}")
        for own, tensor in step.output_map.items():
            if tensor in produced:
                problems.append(f"{tensor} produced twice")
            produced.add(tensor)
            if own not in {t.name for t in inner.output}:
                problems.append(f"{step.model_name} has no output {own}")
    problems += [f"output {t.name} is not produced" for t in ensemble.output if t.name not in produced]
    return problems


def test_the_example_runs_the_users_steps_around_the_text_model(model):
    classifier = model.model(NAME)
    rendered = triton_config.render_repository(classifier)
    assert list(rendered) == [
        f"{NAME}-text",
        f"{NAME}-tokenize",
        NAME,
        f"{NAME}-postprocess",
        f"{NAME}-step0",
        f"{NAME}-step2",
    ]
    assert ensemble_problems(rendered) == []
    ensemble = parsed(rendered[f"{NAME}-text"])
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == [
        f"{NAME}-step0",
        f"{NAME}-tokenize",
        NAME,
        f"{NAME}-postprocess",
        f"{NAME}-step2",
    ]
    tokenize, postprocess = ensemble.ensemble_scheduling.step[1], ensemble.ensemble_scheduling.step[3]
    assert dict(tokenize.input_map) == {"TEXT": "clean_text"}
    assert dict(postprocess.output_map) == {"label": "sentiment", "logits": "sentiment_logits"}
    assert [(t.name, pb.DataType.Name(t.data_type), list(t.dims)) for t in ensemble.output] == [
        ("label", "TYPE_STRING", [-1]),
        ("logits", "TYPE_FP32", [-1, 2]),
        ("reply", "TYPE_STRING", [-1]),
    ]
    assert [(t.name, list(t.dims)) for t in ensemble.input] == [("TEXT", [-1])]


def test_a_users_step_is_a_cpu_python_model_taking_the_requests_as_they_come(model):
    classifier = model.model(NAME)
    step = parsed(triton_config.render_config(classifier, folder=f"{NAME}-step2"))
    assert step.backend == "python" and step.default_model_filename == "model.py"
    assert step.max_batch_size == 0 and not step.HasField("dynamic_batching")
    (group,) = step.instance_group
    assert (group.kind, group.count) == (pb.ModelInstanceGroup.KIND_CPU, classifier.serving.tokenizer_instances)
    assert [(t.name, list(t.dims)) for t in step.input] == [("sentiment", [-1]), ("sentiment_logits", [-1, 2])]
    assert step.parameters["step_file"].string_value == "steps/reply.py"
    assert not step.model_warmup


def test_serve_script_loads_every_step(model):
    env = triton_config.server_environment(model.model(NAME))
    loaded = env["SAGEMAKER_TRITON_ADDITIONAL_ARGS"].split()
    assert f"--load-model={NAME}-step0" in loaded and f"--load-model={NAME}-step2" in loaded
    assert env["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"] == f"{NAME}-text"


def test_calls_become_a_parameter_with_self_as_the_token_id_model(model):
    classifier = model.model(NAME)
    steps = list(classifier.pipeline)
    steps[2] = steps[2].model_copy(update={"calls": ("self", f"{NAME}-tokenize")})
    spec = triton_config.RepositorySpec.of(classifier).model_copy(update={"pipeline": tuple(steps)})
    step = parsed(triton_config.render_config(spec, folder=f"{NAME}-step2"))
    assert json.loads(step.parameters["calls"].string_value) == [NAME, f"{NAME}-tokenize"]


def test_t5_with_a_pre_step_answers_its_text(model):
    t5 = model.model("t5-spelling")
    rendered = triton_config.render_repository(t5)
    assert ensemble_problems(rendered) == []
    ensemble = parsed(rendered["t5-spelling-text"])
    assert [t.name for t in ensemble.output] == ["text"]
    assert "t5-spelling-step0" in rendered and "t5-spelling-encoder" in rendered


def test_the_spec_carries_the_pipeline_and_the_code_through_json(model, tmp_path):
    classifier = model.model(NAME)
    spec = triton_config.RepositorySpec.of(classifier)
    again = triton_config.RepositorySpec.model_validate_json(spec.model_dump_json())
    assert again.step_code == spec.step_code and again.step_code["steps/reply.py"].endswith("return responses\n")
    assert triton_config.render_repository(again) == triton_config.render_repository(classifier)
    files = {f"{NAME}-step2": EXAMPLE / "steps" / "reply.py"}
    out = triton_config.write_repository(again, tmp_path / "repo", model_files=files)
    assert (out / f"{NAME}-step2" / "1" / "model.py").read_text() == (EXAMPLE / "steps" / "reply.py").read_text()
    assert (out / f"{NAME}-step0" / "config.pbtxt").is_file()
