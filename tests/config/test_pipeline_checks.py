"""A triton-sagemaker model's `pipeline:` (inferstack/schema/pipeline.py, inferstack/config/pipeline_checks.py): the
example of docs/how-to/build-a-pipeline.md (tests/support/pipeline_example/) loads, and every way its wiring, its keys
or its step files can be wrong is one line naming the file, the step (pipeline.<i>) and the tensor."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from inferstack import config
from inferstack.config import pipeline_checks
from inferstack.triton import config as triton_config
from tests.support.config_edits import edit_yaml, problems_of
from tests.support.fuzz import fuzz_examples
from tests.support.hang_guard import hang_guard
from tests.support.paths import CONFIG_DIR, ROOT

NAME = "bert-large-classifier"
FILE = f"{NAME}.yaml"
EXAMPLE = ROOT / "tests" / "support" / "pipeline_example"
PIPELINE = yaml.safe_load((EXAMPLE / "pipeline.yaml").read_text())["pipeline"]


def with_pipeline(config_dir: Path, steps) -> None:
    shutil.copytree(EXAMPLE / "steps", config_dir / NAME / "steps", dirs_exist_ok=True)
    edit_yaml(config_dir / FILE, lambda d: d.update(pipeline=steps))


def example() -> list[dict]:
    return yaml.safe_load(yaml.safe_dump(PIPELINE))  # a deep copy


def test_the_example_loads_and_carries_its_step_files(config_copy):
    with_pipeline(config_copy, example())
    model = config.load(config_copy).model(NAME)
    spec = triton_config.RepositorySpec.of(model)
    assert spec.step_code == {
        "steps/normalize.py": (EXAMPLE / "steps" / "normalize.py").read_text(),
        "steps/reply.py": (EXAMPLE / "steps" / "reply.py").read_text(),
    }
    assert [t.datatype for t in model.pipeline[2].inputs] == ["BYTES", "FP32"]


def test_a_model_without_a_pipeline_keeps_its_spec():
    """No pipeline, no new keys in the build arg: the shipped images (and endpoints) do not change."""
    for model in config.load(CONFIG_DIR).models:
        if model.kind == "triton-sagemaker":
            dumped = triton_config.RepositorySpec.of(model).model_dump_json()
            assert "pipeline" not in dumped and "step_code" not in dumped


def _edit(index, **changes):
    def change(steps):
        steps[index].update(changes)

    return change


def _tensor(index, side, position, **changes):
    def change(steps):
        steps[index][side][position].update(changes)

    return change


def _drop(index):
    def change(steps):
        del steps[index]

    return change


def _add_output(index, tensor):
    def change(steps):
        steps[index]["outputs"].append(tensor)

    return change


CASES = {
    "an input nobody produces": (
        _tensor(2, "inputs", 0, name="mood"),
        "pipeline.2.inputs.0.name: mood: produced by no earlier step; there: TEXT, clean_text, sentiment, "
        "sentiment_logits",
    ),
    "a datatype that differs from the producer's": (
        _tensor(2, "inputs", 1, datatype="INT64"),
        "pipeline.2.inputs.1.datatype: sentiment_logits: INT64 here, but pipeline.1 gives it as FP32 [-1, 2]",
    ),
    "Triton's type names work too": (
        _tensor(2, "inputs", 1, datatype="TYPE_INT64"),
        "pipeline.2.inputs.1.datatype: sentiment_logits: INT64 here, but pipeline.1 gives it as FP32 [-1, 2]",
    ),
    "dims that differ from the producer's": (
        _tensor(2, "inputs", 1, dims=[-1, 3]),
        "pipeline.2.inputs.1.dims: sentiment_logits: dims [-1, 3] here, but pipeline.1 gives it as FP32 [-1, 2]",
    ),
    "a rank that differs": (
        _tensor(2, "inputs", 0, dims=[-1, 1]),
        "pipeline.2.inputs.0.dims: sentiment: dims [-1, 1] here, but pipeline.1 gives it as BYTES [-1]",
    ),
    "an input taken from a later step (a cycle)": (
        lambda s: s[0]["inputs"][0].update(name="sentiment"),
        "pipeline.0.inputs.0.name: sentiment: produced only by pipeline.1, not by an earlier step: steps run in "
        "the order written and an ensemble has no cycles",
    ),
    "a step that takes its own output": (
        lambda s: s[0]["inputs"].append({"name": "clean_text", "datatype": "BYTES", "dims": [-1]}),
        "pipeline.0.inputs.1.name: clean_text: produced only by pipeline.0",
    ),
    "an input taken twice": (
        lambda s: s[2]["inputs"].append(dict(s[2]["inputs"][0])),
        "pipeline.2.inputs.2.name: sentiment: taken twice by pipeline.2",
    ),
    "two producers of a tensor": (
        lambda s: s[1].pop("output_map"),
        "pipeline.2.outputs.0.name: label: also produced by pipeline.1: each tensor has one producer",
    ),
    "an output produced twice by one step": (
        _add_output(2, {"name": "reply", "datatype": "BYTES", "dims": [-1]}),
        "pipeline.2.outputs.3.name: reply: produced twice by pipeline.2",
    ),
    "an output nobody takes": (
        _add_output(0, {"name": "length", "datatype": "INT64", "dims": [-1]}),
        "pipeline.0.outputs.1.name: length: taken by no later step and not answered by the last one",
    ),
    "a renamed model output nobody takes": (
        lambda s: s[2]["inputs"].pop(1),
        "pipeline.1.output_map.logits: sentiment_logits: taken by no later step",
    ),
    "a step producing TEXT": (
        _tensor(0, "outputs", 0, name="TEXT"),
        "pipeline.0.outputs.0.name: TEXT: the request's input; no step may produce it",
    ),
    "a step producing a tensor of the text model": (
        _tensor(0, "outputs", 0, name="input_ids"),
        "pipeline.0.outputs.0.name: input_ids: a tensor of the text model's own steps; give it another name",
    ),
    "no model: self": (lambda s: s.pop(1), "pipeline: no step runs this file's model: add `- model: self`"),
    "model: self twice": (
        lambda s: s.insert(
            2, {"model": "self", "input_map": {"TEXT": "clean_text"}, "output_map": {"label": "l2", "logits": "g2"}}
        ),
        "pipeline.2.model: model: self again (also pipeline.1): the model runs once in an ensemble",
    ),
    "a model output nobody takes": (
        lambda s: s.insert(1, {"model": "self", "output_map": {"label": "unused_label", "logits": "unused_logits"}}),
        "pipeline.1.model: no later step takes any of its outputs (unused_label, unused_logits)",
    ),
    "an unknown input of model: self": (
        lambda s: s[1]["input_map"].update(text="clean_text"),
        "pipeline.1.input_map.text: text is not an input of model: self (it takes TEXT)",
    ),
    "an unknown output of model: self": (
        lambda s: s[1]["output_map"].update(scores="x"),
        "pipeline.1.output_map.scores: scores is not an output of model: self (it answers label, logits)",
    ),
    "the contract's output missing": (
        lambda s: s[2]["outputs"].pop(1),
        "pipeline.2.outputs: logits: the last step must answer logits FP32 [-1, 2], the text-classification contract",
    ),
    "the contract's output with another type": (
        _tensor(2, "outputs", 0, datatype="INT32"),
        "pipeline.2.outputs.0.name: label: INT32 [-1], but the text-classification contract",
    ),
    "the contract's output with other dims": (
        _tensor(2, "outputs", 1, dims=[-1, 3]),
        "pipeline.2.outputs.1.name: logits: FP32 [-1, 3], but the text-classification contract that smoke "
        "tests, load tests and `inferstack invoke` read (inferstack/loadtest/text_contract.py) is FP32 [-1, 2]",
    ),
    "calls naming no model of the repository": (
        _edit(2, calls=["other-model"]),
        "pipeline.2.calls.0: other-model: no such model in this repository; it has self, bert-large-classifier, "
        "bert-large-classifier-tokenize, bert-large-classifier-postprocess, bert-large-classifier-step0",
    ),
    "calls naming the step itself": (
        _edit(2, calls=["bert-large-classifier-step2"]),
        "pipeline.2.calls.0: bert-large-classifier-step2: the step itself",
    ),
    # ---- refused by the schema, one line each
    "a step with no inputs": (
        _edit(0, inputs=[]),
        "pipeline.0: a python step needs inputs (at least one tensor): a step with no inputs cannot run in an ensemble",
    ),
    "a step with no outputs": (_edit(2, outputs=[]), "pipeline.2: a python step needs outputs (at least one tensor)"),
    "a branch": (
        _edit(2, branch={"negative": "model-a", "positive": "model-b"}),
        "pipeline.2: branch: not supported: an ensemble runs its steps in order, each once: a step that "
        "branches or loops is a Python step that calls the models itself through BLS",
    ),
    "a loop": (_edit(2, loop={"until": "done"}), "pipeline.2: loop: not supported"),
    "parallel steps": (_edit(0, parallel=True), "pipeline.0: parallel: not supported"),
    "another model as a step": (
        _edit(1, model="t5-spelling"),
        "pipeline.1: model: 't5-spelling': only 'self' (this file's model) is a step; another model is called "
        "from a Python step through BLS",
    ),
    "a step that is both": (
        _edit(1, python="steps/reply.py"),
        "pipeline.1: set exactly one of 'model' (model: self) or 'python' (a step file)",
    ),
    "tensors declared on model: self": (
        _edit(1, inputs=[{"name": "TEXT", "datatype": "BYTES", "dims": [-1]}]),
        "pipeline.1: inputs: model: self takes TEXT and answers the task's outputs; rename them with input_map "
        "and output_map",
    ),
    "a map on a python step": (
        _edit(0, output_map={"clean_text": "x"}),
        "pipeline.0: output_map: only for model: self",
    ),
    "an unknown datatype": (
        _tensor(0, "outputs", 0, datatype="STRING"),
        "pipeline.0.outputs.0.datatype: Input should be",
    ),
    "a zero dim": (
        _tensor(0, "outputs", 0, dims=[-1, 0]),
        "pipeline.0.outputs.0.dims: dims are sizes of at least 1, or -1 for any size (got [-1, 0])",
    ),
    "a bad tensor name": (
        _tensor(0, "outputs", 0, name="clean text"),
        "pipeline.0.outputs.0.name: String should match pattern",
    ),
    "a step file outside the model's folder": (
        _edit(0, python="steps/../../t5-spelling/x.py"),
        "pipeline.0.python: 'steps/../../t5-spelling/x.py': a path inside the model's folder, without '.', '..' "
        "or '//'",
    ),
    "an unknown key": (_edit(0, colour="red"), "pipeline.0.colour: unknown key"),
    "an empty pipeline": (lambda s: s.clear(), "pipeline: Tuple should have at least 1 item"),
}


@pytest.mark.parametrize("change, expected", CASES.values(), ids=list(CASES))
def test_a_bad_pipeline_is_one_line_naming_file_step_and_tensor(config_copy, change, expected):
    steps = example()
    change(steps)
    with_pipeline(config_copy, steps)
    problems = problems_of(config_copy)
    matching = [p for p in problems if expected in p]
    assert matching, f"expected {expected!r} in {problems}"
    assert matching[0].startswith(f"model_configs/{FILE}:")
    assert all("\n" not in p for p in problems)


def _step_file(text: bytes | None):
    def change(config_dir: Path) -> None:
        path = config_dir / NAME / "steps" / "reply.py"
        if text is None:
            path.unlink()
        else:
            path.write_bytes(text)

    return change


FILE_CASES = {
    "a missing step file": (
        _step_file(None),
        "pipeline.2.python: model_configs/bert-large-classifier/steps/reply.py: no such file (a step's file lives "
        "in the model's folder, model_configs/bert-large-classifier/)",
    ),
    "a syntax error": (
        _step_file(b"class TritonPythonModel:\n    def execute(self, requests)\n"),
        "pipeline.2.python: model_configs/bert-large-classifier/steps/reply.py:2: expected ':'",
    ),
    "no TritonPythonModel": (
        _step_file(b"def execute(requests):\n    return []\n"),
        "pipeline.2.python: model_configs/bert-large-classifier/steps/reply.py: defines no class "
        "TritonPythonModel with an execute() method",
    ),
    "not UTF-8": (
        _step_file(b"# \xff\xfe\n"),
        "pipeline.2.python: model_configs/bert-large-classifier/steps/reply.py: not UTF-8 text",
    ),
    "too large for the build arg": (
        _step_file(
            b"class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
            + b"#" * pipeline_checks.MAX_CODE_BYTES
            + b"\n"
        ),
        "pipeline: the step files hold",
    ),
    "a link out of the model's folder": (
        lambda d: (
            (d / NAME / "steps" / "reply.py").unlink(),
            (d / NAME / "steps" / "reply.py").symlink_to(d / "environments.yaml"),
        ),
        "pipeline.2.python: model_configs/bert-large-classifier/steps/reply.py: leads outside the model's folder",
    ),
}


@pytest.mark.parametrize("change, expected", FILE_CASES.values(), ids=list(FILE_CASES))
def test_a_bad_step_file_is_one_line(config_copy, change, expected):
    with_pipeline(config_copy, example())
    change(config_copy)
    problems = problems_of(config_copy)
    matching = [p for p in problems if expected in p]
    assert matching, f"expected {expected!r} in {problems}"
    assert matching[0].startswith(f"model_configs/{FILE}:")


def test_t5_answers_text_and_maps_its_output(config_copy):
    """text2text-generation: model: self answers text; a post-step must keep `text` BYTES [-1]."""
    shutil.copytree(EXAMPLE / "steps", config_copy / "t5-spelling" / "steps")
    steps = [
        {"model": "self", "output_map": {"text": "corrected"}},
        {
            "python": "steps/reply.py",
            "inputs": [{"name": "corrected", "datatype": "BYTES", "dims": [-1]}],
            "outputs": [{"name": "text", "datatype": "BYTES", "dims": [-1]}],
        },
    ]
    edit_yaml(config_copy / "t5-spelling.yaml", lambda d: d.update(pipeline=steps))
    model = config.load(config_copy).model("t5-spelling")
    ensemble = triton_config.folders(model)[0]
    assert [t.name for t in ensemble.outputs] == ["text"]
    steps[1]["outputs"][0]["name"] = "answer"
    edit_yaml(config_copy / "t5-spelling.yaml", lambda d: d.update(pipeline=steps))
    assert any(
        "pipeline.1.outputs: text: the last step must answer text BYTES [-1], the text2text-generation contract" in p
        for p in problems_of(config_copy)
    )


# ---------------------------------------------------------------- fuzz: any pipeline loads or is reported

NAMES = st.sampled_from(
    [
        "TEXT",
        "clean_text",
        "sentiment",
        "sentiment_logits",
        "label",
        "logits",
        "reply",
        "x",
        "input_ids",
        "",
        "a b",
        7,
        None,
    ]
)
TENSOR = st.fixed_dictionaries(
    {
        "name": NAMES,
        "datatype": st.sampled_from(["BYTES", "FP32", "TYPE_INT64", "X", 3]),
        "dims": st.one_of(st.lists(st.sampled_from([-1, 0, 1, 2, 3, -5]), max_size=3), st.just("x")),
    }
)
STEP = st.one_of(
    st.fixed_dictionaries(
        {"model": st.sampled_from(["self", "other", None, 1])},
        optional={
            "input_map": st.dictionaries(NAMES.filter(lambda v: isinstance(v, str)), NAMES, max_size=2),
            "output_map": st.dictionaries(st.sampled_from(["label", "logits", "text", "x"]), NAMES, max_size=2),
            "calls": st.lists(st.sampled_from(["self", "nope", 5]), max_size=2),
        },
    ),
    st.fixed_dictionaries(
        {
            "python": st.sampled_from(
                ["steps/reply.py", "steps/normalize.py", "steps/none.py", "../x.py", "/abs.py", "steps//x.py", 5]
            )
        },
        optional={
            "inputs": st.lists(TENSOR, max_size=3),
            "outputs": st.lists(TENSOR, max_size=3),
            "calls": st.lists(st.sampled_from(["self", "nope"]), max_size=2),
            "branch": st.just({"a": "b"}),
        },
    ),
    st.sampled_from([None, "self", [], 3]),
)


@settings(max_examples=fuzz_examples(60), deadline=None)
@given(st.one_of(st.lists(STEP, max_size=5), st.sampled_from([None, {}, "self", 1])))
@pytest.mark.fuzz
def test_any_pipeline_loads_or_is_reported_one_line_each(tmp_path_factory, steps):
    config_dir = tmp_path_factory.mktemp("fuzz") / "model_configs"
    shutil.copytree(CONFIG_DIR, config_dir)
    with_pipeline(config_dir, steps)
    try:
        with hang_guard("config.load of a generated pipeline"):
            config.load(config_dir)
    except config.ConfigError as exc:
        for problem in exc.problems:
            line = str(problem)
            assert len(line.splitlines()) == 1 and line.isprintable(), line
            assert problem.file.startswith("model_configs/"), line
