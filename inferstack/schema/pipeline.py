"""A triton-sagemaker model file's `pipeline:`: serial steps on one endpoint, run as the steps of the text
ensemble `<name>-text` (inferstack/triton/config.py renders them; docs/how-to/build-a-pipeline.md).

A step is either the model itself (`model: self`: the text model, TEXT in and the task's outputs out, i.e. the
tokenizer step, the token-id model and the postprocessing step), or the user's own Python code (`python:` a file
in the model's folder, model_configs/<name>/, run by Triton's Python backend) with the tensors it takes and
answers declared. Steps run in the order written, each taking tensors that the ensemble's input TEXT or an
earlier step produced; the last step's outputs are what the endpoint answers.

Only this serial shape is a Triton ensemble: an ensemble cannot choose a step at run time, loop, or call a
step conditionally. A step that must branch (a label picking which model answers) or loop is a Python step that
calls models itself through BLS (Triton's Business Logic Scripting), as the T5 greedy model does
(container/triton/t5_greedy_model.py); `calls:` names the models of the repository it calls, so they are
loaded. Keys for other shapes (`branch`, `when`, `parallel`, `loop`, ...) are refused with that advice.

Field rules live here; the wiring (who produces what, types and dims) is checked across steps by
inferstack/config/pipeline_checks.py, one line per problem.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from inferstack.schema.base import Frozen

# The tensors a step may exchange: Triton's config.pbtxt names (TYPE_*) or KServe v2's (the wire protocol's).
KSERVE_TO_TRITON = {
    "BOOL": "TYPE_BOOL",
    "UINT8": "TYPE_UINT8",
    "INT8": "TYPE_INT8",
    "INT16": "TYPE_INT16",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "FP16": "TYPE_FP16",
    "FP32": "TYPE_FP32",
    "FP64": "TYPE_FP64",
    "BYTES": "TYPE_STRING",
}
TRITON_TO_KSERVE = {triton: kserve for kserve, triton in KSERVE_TO_TRITON.items()}
DataType = Literal[
    "BOOL",
    "UINT8",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",
    "TYPE_BOOL",
    "TYPE_UINT8",
    "TYPE_INT8",
    "TYPE_INT16",
    "TYPE_INT32",
    "TYPE_INT64",
    "TYPE_FP16",
    "TYPE_FP32",
    "TYPE_FP64",
    "TYPE_STRING",
]
SELF = "self"
MAX_STEPS = 16
TENSOR_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
# A path inside the model's folder: relative, a .py file (no '.' or '..' segment: _step_file).
STEP_FILE_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,199}\.py$"
# Keys of DAG shapes an ensemble cannot run, refused with the way to get them (a BLS Python step).
UNSUPPORTED_KEYS = (
    "branch",
    "branches",
    "when",
    "if",
    "condition",
    "switch",
    "case",
    "route",
    "routes",
    "parallel",
    "fan_out",
    "loop",
    "while",
    "repeat",
    "until",
    "next",
    "goto",
    "depends_on",
    "after",
)
HOW_TO = "docs/how-to/build-a-pipeline.md"
BLS_ADVICE = (
    f"an ensemble runs its steps in order, each once: a step that branches or loops is a Python step that "
    f"calls the models itself through BLS, naming them under calls ({HOW_TO})"
)


class PipelineTensor(Frozen):
    name: str = Field(
        pattern=TENSOR_NAME_PATTERN,
        description="the tensor's name in the pipeline (and in the step's Python code): letters, digits, underscores",
    )
    datatype: DataType = Field(description="Triton's TYPE_ name or KServe's (BYTES: strings)")
    dims: tuple[int, ...] = Field(
        min_length=1,
        max_length=8,
        description="shape, the batch first: the text "
        "steps take a request's n texts as they come, so the first dim is -1 (any)",
    )

    @field_validator("dims")
    @classmethod
    def _dims(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        bad = [d for d in value if d != -1 and d < 1]
        if bad:
            raise ValueError(f"dims are sizes of at least 1, or -1 for any size (got {list(value)})")
        return value

    @property
    def triton_type(self) -> str:
        """TYPE_FP32, TYPE_STRING, ...: the config.pbtxt name."""
        return KSERVE_TO_TRITON.get(self.datatype, self.datatype)

    @property
    def kserve_type(self) -> str:
        return TRITON_TO_KSERVE[self.triton_type]

    def describe(self) -> str:
        return f"{self.kserve_type} [{', '.join(map(str, self.dims))}]"


class PipelineStep(Frozen):
    """One step: `model: self` (with optional input_map/output_map renaming its tensors) or `python:` (with
    inputs, outputs and optional calls)."""

    model: str | None = Field(
        None,
        description="'self': this model file's model, TEXT in, the task's outputs out "
        "(text-classification: label BYTES [-1], logits FP32 [-1, labels]; "
        "text2text-generation: text BYTES [-1])",
    )
    input_map: dict[str, str] = Field(
        default_factory=dict,
        description="model: self only: its input (TEXT) -> the pipeline tensor it takes (default: the same name)",
    )
    output_map: dict[str, str] = Field(
        default_factory=dict,
        description="model: self only: its output (label, "
        "logits, text) -> the name later steps take it by (default: the same)",
    )
    python: str | None = Field(
        None,
        pattern=STEP_FILE_PATTERN,
        description="a Python backend model file (class "
        "TritonPythonModel), relative to the model's folder model_configs/<name>/, e.g. "
        "steps/map_labels.py",
    )
    inputs: tuple[PipelineTensor, ...] = Field(
        (),
        description="python steps: the tensors it takes, each "
        "produced by an earlier step (or TEXT, the request's texts)",
    )
    outputs: tuple[PipelineTensor, ...] = Field(
        (), description="python steps: the tensors it answers; the last step's outputs are the endpoint's answer"
    )
    calls: tuple[str, ...] = Field(
        (),
        max_length=16,
        description="python steps: the repository's models it "
        "calls through BLS ('self' for the token-id model, or a model folder of "
        "this repository such as <name>-text); passed to it as the JSON parameter "
        "`calls`",
    )
    # The step file's text, read by the loader (inferstack/config/pipeline_checks.py) from the model's folder;
    # it travels to the image build inside the repository spec. Not a key of the file.
    _code: str | None = PrivateAttr(None)

    @field_validator("python")
    @classmethod
    def _step_file(cls, value: str | None) -> str | None:
        if value is not None and any(part in ("", ".", "..") for part in value.split("/")):
            raise ValueError(f"{value!r}: a path inside the model's folder, without '.', '..' or '//'")
        return value

    @model_validator(mode="before")
    @classmethod
    def _supported_shape(cls, data: object) -> object:
        if isinstance(data, dict):
            unsupported = [k for k in data if isinstance(k, str) and k.lower() in UNSUPPORTED_KEYS]
            if unsupported:
                raise ValueError(f"{unsupported[0]}: not supported: {BLS_ADVICE}")
        return data

    @model_validator(mode="after")
    def _one_kind(self) -> PipelineStep:
        if (self.model is None) == (self.python is None):
            raise ValueError("set exactly one of 'model' (model: self) or 'python' (a step file)")
        if self.model is not None:
            if self.model != SELF:
                raise ValueError(
                    f"model: {self.model!r}: only 'self' (this file's model) is a step; another "
                    f"model is called from a Python step through BLS ({HOW_TO})"
                )
            extra = [k for k in ("inputs", "outputs", "calls") if getattr(self, k)]
            if extra:
                raise ValueError(
                    f"{extra[0]}: model: self takes TEXT and answers the task's outputs; rename "
                    "them with input_map and output_map"
                )
        else:
            extra = [k for k in ("input_map", "output_map") if getattr(self, k)]
            if extra:
                raise ValueError(f"{extra[0]}: only for model: self; a python step declares its own inputs and outputs")
            missing = [k for k in ("inputs", "outputs") if not getattr(self, k)]
            if missing:
                raise ValueError(
                    f"a python step needs {missing[0]} (at least one tensor): a step with no "
                    f"{missing[0]} {'cannot run in an ensemble' if missing[0] == 'inputs' else 'does nothing'}"
                )
        for mapping in (self.input_map, self.output_map):
            for target in mapping.values():
                if not re.match(TENSOR_NAME_PATTERN, target):
                    raise ValueError(f"{target!r} is not a tensor name (letters, digits, underscores)")
        return self

    @property
    def code(self) -> str | None:
        return self._code


# ---------------------------------------------------------------- model: self, as a step sees it

TEXT = "TEXT"  # the ensemble's input: the request's texts, BYTES [n]
# Tensors between the text model's own steps (tokenizer -> token-id model -> postprocessing): taken, so no
# step may produce them.
INTERNAL_TENSORS = ("input_ids", "attention_mask", "token_type_ids", "raw_logits", "output_ids")


def self_inputs() -> tuple[PipelineTensor, ...]:
    return (PipelineTensor(name=TEXT, datatype="BYTES", dims=(-1,)),)


def self_outputs(task: str, labels: tuple[str, ...]) -> tuple[PipelineTensor, ...]:
    """What `model: self` answers: the task's text contract (inferstack/loadtest/text_contract.py), which the
    endpoint's answer must keep (the last step's outputs include it)."""
    if task == "text2text-generation":
        return (PipelineTensor(name="text", datatype="BYTES", dims=(-1,)),)
    return (
        PipelineTensor(name="label", datatype="BYTES", dims=(-1,)),
        PipelineTensor(name="logits", datatype="FP32", dims=(-1, max(len(labels), 1))),
    )


def dims_fit(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Same rank, and each dim equal or -1 (any size) on either side."""
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


def step_inputs(step: PipelineStep) -> tuple[tuple[str, PipelineTensor], ...]:
    """(pipeline tensor, the step's own tensor) for what the step takes."""
    if step.model is not None:
        return tuple((step.input_map.get(t.name, t.name), t) for t in self_inputs())
    return tuple((t.name, t) for t in step.inputs)


def step_outputs(step: PipelineStep, task: str, labels: tuple[str, ...]) -> tuple[tuple[str, PipelineTensor], ...]:
    """(pipeline tensor, the step's own tensor) for what the step answers (model: self: all its outputs)."""
    if step.model is not None:
        return tuple((step.output_map.get(t.name, t.name), t) for t in self_outputs(task, labels))
    return tuple((t.name, t) for t in step.outputs)
