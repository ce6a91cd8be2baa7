"""What decides a model's Triton repository (RepositorySpec), the parts it is made of (folders, tensors, ensemble
steps) and the folders' names. The interfaces themselves: inferstack/triton/folders.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import Field, StringConstraints, model_serializer, model_validator
from tritonclient.grpc import model_config_pb2 as pb

from inferstack.schema.base import Frozen
from inferstack.schema.model_file import ModelSource
from inferstack.schema.pipeline import PipelineStep
from inferstack.schema.triton_sagemaker import TritonExport, TritonSageMakerModel, TritonServing
from inferstack.triton.queue_policy import QueuePolicy, queue_policy

# The longest text the tokenizer step takes, in characters (the Neuron app's limit too).
MAX_TEXT_CHARS = 8192
TEXT = "TEXT"
LABEL = "label"
# text2text-generation's output. Not "TEXT": an ensemble's input and output are both ensemble tensors, and
# with one tensor named TEXT as both, Triton 2.51 loads the ensemble but never answers a request (observed
# here); names are case-sensitive, and outputs are lower case like logits and label.
GENERATED = "text"
# The classifier's logits inside the ensemble, before the postprocessing step passes them on as `logits`.
RAW_LOGITS = "raw_logits"


@dataclass(frozen=True)
class Tensor:
    name: str
    data_type: int  # a model_config_pb2.DataType value
    dims: tuple[int, ...]  # without the batch dimension of a batching model; -1: any size

    @property
    def type_name(self) -> str:
        return pb.DataType.Name(self.data_type)


@dataclass(frozen=True)
class Step:
    """One step of an ensemble: the model it calls and (model tensor, ensemble tensor) pairs."""

    model: str
    inputs: tuple[tuple[str, str], ...]
    outputs: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class FolderSpec:
    """One model folder of the repository: its interface and what runs it."""

    name: str
    kind: str  # "onnx", "tensorrt", "python" or "ensemble"
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    model_file: str  # what the export puts in <name>/1/ ("" for an ensemble: nothing)
    on_gpu: bool
    parameters: tuple[tuple[str, str], ...] = ()
    steps: tuple[Step, ...] = ()  # ensemble only
    instances: int | None = None  # None: serving.instance_group.count
    batching: bool = True  # False: max_batch_size 0, the batch is the first of the dims (-1)


class RepositorySpec(Frozen):
    """The part of a model's config that decides its repository. The image build receives it as JSON
    (a capacity or SLO change must not rebuild the image and redeploy the endpoint: of the SLO and the
    profile only the derived queue policy is carried, so only a change of that policy rebuilds)."""

    name: str
    source: ModelSource
    export: TritonExport
    serving: TritonServing
    queue_policy: QueuePolicy | None = None
    # The model file's pipeline (steps in the text ensemble) and the text of its Python steps' files (step.python
    # -> code, read by validate from the model's folder): the image build has no model_configs/ in its context,
    # and a step's code in the build arg rebuilds the image when it changes. Left out of the JSON when empty, so
    # a model without a pipeline keeps the spec (and the image) it had.
    pipeline: tuple[PipelineStep, ...] | None = None
    step_code: dict[str, Annotated[str, StringConstraints(strip_whitespace=False)]] = Field(default_factory=dict)

    @model_serializer(mode="wrap")
    def _without_empty_pipeline(self, handler):
        data = handler(self)
        if isinstance(data, dict):
            for key in ("pipeline", "step_code"):
                if not data.get(key):
                    data.pop(key, None)
        return data

    @model_validator(mode="after")
    def _generation_shapes(self) -> RepositorySpec:
        if self.source.task == "text2text-generation" and (
            self.export.max_output_length is None or self.export.hidden_size is None
        ):
            raise ValueError("text2text-generation needs export.max_output_length and export.hidden_size")
        return self

    @classmethod
    def of(cls, model: TritonSageMakerModel | RepositorySpec) -> RepositorySpec:
        if isinstance(model, RepositorySpec):
            return model
        steps = model.pipeline or ()
        return cls(
            name=model.name,
            source=model.source,
            export=model.export,
            serving=model.serving,
            queue_policy=queue_policy(model),
            pipeline=model.pipeline,
            step_code={s.python: s.code for s in steps if s.python is not None and s.code is not None},
        )


Model = TritonSageMakerModel | RepositorySpec


def default_model_name(model: Model) -> str:
    """The folder SageMaker loads and routes /invocations to (SAGEMAKER_TRITON_DEFAULT_MODEL_NAME): the
    text ensemble. SageMaker's /invocations reaches only this model on a single-model endpoint."""
    return f"{model.name}-text"


def ids_model_name(model: Model) -> str:
    """The token-id model: the entry of the GPU part, and where overload is shed (see build_config)."""
    return model.name


def tokenize_model_name(model: Model) -> str:
    return f"{model.name}-tokenize"


def postprocess_model_name(model: Model) -> str:
    return f"{model.name}-postprocess"


def step_model_name(model: Model, index: int) -> str:
    """The folder of the pipeline's Python step at `index` (its position in `pipeline:`)."""
    return f"{model.name}-step{index}"
