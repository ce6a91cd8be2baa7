"""Render a Triton model repository (config.pbtxt per model folder, version dirs) from a model's YAML,
with Triton's own ModelConfig proto, and check it against the rules of SageMaker's Triton serve script.

Pure functions of the config: the stacks use them for the container environment, the `render-triton`
CLI writes a repository skeleton, and the image's export script (container/triton/) imports the same
code to write the repository it fills with model files.

Every repository's default model (what SageMaker routes /invocations to) is the text ensemble
`<name>-text`: text in, a label or text out, the same contract as the Neuron app:

- `<name>-tokenize` (Python backend, KIND_CPU, serving.tokenizer_instances, dynamic batching): TEXT
  BYTES [n] -> the token-id model's inputs, padded and truncated to sequence_length as
  inferstack.triton.client.TextCodec does; rejects an empty text or one over MAX_TEXT_CHARS characters
  (INVALID_ARG, HTTP 400).
- `<name>`: the token-id model below, unchanged, still loaded and callable by name.
- `<name>-postprocess` (Python backend, KIND_CPU): classifier logits -> `label` BYTES [n] (argmax, the
  model file's labels, and the logits passed on); generated ids -> `text` BYTES [n] (detokenized).
  The ensemble answers `logits` FP32 [n, labels] and `label` for text-classification, `text` BYTES [n]
  for text2text-generation (not `TEXT`: see GENERATED).
  The ensemble and its two Python steps have max_batch_size 0 and TEXT dims [-1], so callers send TEXT
  as [n], as the Neuron app takes it: with a batching ensemble (dims [1]) Triton 2.51 demands [n, 1] and
  ignores an input `reshape` when it checks a request's shape, and an ensemble tensor must have the same
  shape in every step. So the text steps take a request's n texts as they come (no dynamic batching of
  their own, each request one execute() call), and the token-id model's dynamic batcher, unchanged,
  batches the requests of many callers; the tokenizer step refuses n above its max_batch_size.

Token-id interfaces (the tensors a client sends, batch dimension implicit, dims padded to fixed sizes so
TensorRT builds one engine range):

- text-classification: one model folder named after the model.
  inputs `input_ids`, `attention_mask` (+ `token_type_ids` when export.token_type_ids) INT64
  [sequence_length]; output `logits` FP32 [number of labels].
- text2text-generation: three folders. `<name>` (the default model, Python backend) runs greedy
  decoding with BLS calls to `<name>-encoder` and `<name>-decoder` (ONNX, TensorRT-accelerated).
  Clients send `input_ids`, `attention_mask` INT64 [sequence_length] and get `output_ids` INT64
  [max_output_length] (padded with the pad token after end-of-sequence). The decoder takes the
  decoder ids padded to max_output_length (T5's decoder is causal, so padding after position t
  cannot change the token at t) and returns the argmax id at every position, so only ids, not a
  [max_output_length, vocab] logits tensor, cross the Python backend's shared memory.
  Why not one ONNX graph with ORT's BeamSearch op: TensorRT cannot take that op, so the decoder, where
  the time goes, would lose TensorRT; an ensemble cannot loop.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from google.protobuf import text_format
from pydantic import Field, StringConstraints, model_serializer, model_validator
from tritonclient.grpc import model_config_pb2 as pb

from inferstack.schema import pipeline as pipeline_schema
from inferstack.schema.models import Frozen, ModelSource, TritonExport, TritonSageMakerModel, TritonServing
from inferstack.schema.pipeline import PipelineStep

CONFIG_FILE = "config.pbtxt"
VERSION = "1"
# TensorRT engines built at load are cached so the second model instance (and warm-up) reuses them.
TRT_ENGINE_CACHE = "/tmp/triton-trt-cache"
# Triton's local response cache, when a model enables it.
RESPONSE_CACHE_BYTES = 256 * 1024 * 1024
# The Python backend's default shared-memory region in SageMaker's serve script.
SAGEMAKER_DEFAULT_SHM_BYTES = 16 * 1024 * 1024
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
# A BYTES element: a 4-byte length and at most 4 UTF-8 bytes a character.
_BYTES = {pb.TYPE_INT64: 8, pb.TYPE_FP32: 4, pb.TYPE_STRING: 4 + 4 * MAX_TEXT_CHARS,
          # a pipeline's Python steps may exchange these too (inferstack/schema/pipeline.py)
          pb.TYPE_BOOL: 1, pb.TYPE_UINT8: 1, pb.TYPE_INT8: 1, pb.TYPE_INT16: 2, pb.TYPE_INT32: 4, pb.TYPE_FP16: 2,
          pb.TYPE_FP64: 8}


class RepositoryError(ValueError):
    """A model repository SageMaker's Triton serve script (or Triton) would refuse; one line per problem."""

    def __init__(self, problems: Sequence[str]):
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


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


class QueuePolicy(Frozen):
    """The token-id model's overload shedding: Triton's `dynamic_batching.default_queue_policy` with
    timeout_action REJECT. Derived by `queue_policy()` from the SLO and the throughput profile."""

    timeout_microseconds: int = Field(ge=1)
    max_queue_size: int = Field(ge=1)


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
    def _generation_shapes(self) -> "RepositorySpec":
        if self.source.task == "text2text-generation" and (
                self.export.max_output_length is None or self.export.hidden_size is None):
            raise ValueError("text2text-generation needs export.max_output_length and export.hidden_size")
        return self

    @classmethod
    def of(cls, model: "TritonSageMakerModel | RepositorySpec") -> "RepositorySpec":
        if isinstance(model, RepositorySpec):
            return model
        steps = model.pipeline or ()
        return cls(name=model.name, source=model.source, export=model.export, serving=model.serving,
                   queue_policy=queue_policy(model), pipeline=model.pipeline,
                   step_code={s.python: s.code for s in steps if s.python is not None and s.code is not None})


Model = TritonSageMakerModel | RepositorySpec


# The queue bound sits this many times the profiled rate x the timeout above what the timeout leaves queued,
# so that up to that overload the timeout sheds and the bound is never reached (see queue_policy).
QUEUE_BOUND_OVERLOAD = 4


def queue_policy(model: TritonSageMakerModel) -> QueuePolicy | None:
    """Overload shedding for the token-id model, so that above capacity Triton answers the excess with 503
    instead of queueing it without bound (None without a dynamic batcher: the policy is one of its fields).
    The token-id model is where requests queue: the text ensemble's tokenizer step ahead of it is fast and
    the ensemble itself has no queue, so a timeout there would measure nothing; the ensemble hands the
    step's rejection to its caller unchanged (503, tests/container/triton/test_overload_shedding.py).

    With S the SLO's p99 (`slo.p99_latency_ms`), L the p99 and R the throughput of the model's instances at
    the profiled operating point (`throughput_profile[capacity.instance_type]`: batching delay, execution
    and network included in L), B `serving.max_batch_size`, D `dynamic_batching.max_queue_delay`:

    - timeout T = max(S - L, D + 1 ms), REJECT. Triton starts it when the request enters the queue; a
      request that waited longer than S - L still needs up to L more, so it would miss the SLO: rejecting
      it is what keeps the admitted p99 within S. Never shorter than the batcher's own wait plus a
      millisecond, so holding a request to fill a batch alone never times it out. This is the shedder.
    - max_queue_size Q = max(ceil(4 x R x T), B): a backstop, not the shedder. Under the timeout the queue
      holds about what arrives in T (rate x T; expired requests leave when the batcher next looks at the
      head), so Q is reached only above about 4x the profiled rate; at least one full batch.

    Why the bound is not the shedder (measured with the real tritonserver 2.51, a one-instance model that
    sleeps 50 ms a request, 20 req/s, offered 40 req/s open-loop for 2.5 s, T 350 ms): with the earlier
    Q = ceil(R x T) = 7 plus the timeout it served 21-28 of the ~50 it could (42-56 % goodput); Q = 7
    alone served 38 with an admitted p99 of 1.3 s; the timeout alone, or with Q = 28 (never reached),
    served 47-50 (94-100 %) with an admitted p99 of about 400 ms. The cause is in Triton's dynamic batcher
    (core r24.09, dynamic_batch_scheduler.cc): any queue policy turns off payload prefetching, and the
    batcher then waits for a free instance, woken by the instance's completion callback, which fires before
    the instance is ready to take work again, or by a request that is enqueued. A request refused by a full
    queue wakes nothing, so with the queue full the batcher sleeps its 500 ms default wait while the instance
    idles, and with a timeout below 500 ms everything queued expires meanwhile. Under the timeout alone every
    arrival is enqueued and wakes it, so an instance idles at most one inter-arrival time after a batch.
    The same wake-up race means a burst queued behind a busy instance with nothing arriving after it can
    wait up to 500 ms (and be rejected if T is shorter): measured in `benchmarks/triton_overload.py`.

    bert-large-classifier: S 300 ms, L 150 ms, R 53.2/s, B 16 -> T 150 ms, Q max(ceil(31.9), 16) = 32.
    t5-spelling: S 50 ms, L 40 ms, R 120/s, B 32 -> T 10 ms, Q max(ceil(4.8), 32) = 32. T5's 10 ms is what
    its profile leaves of the SLO: a request that queued longer would need its p99 execution on top, so it
    is shed even in a burst below capacity; the profile is an estimate, and a measured one (a lower L)
    widens T.

    The model-level SLO and capacity.instance_type, not an environment's overrides: the policy is baked
    into the image, which is promoted unchanged from dev to prod. A profile without that instance type
    falls back to its slowest entry. Triton reports either rejection as UNAVAILABLE, which its SageMaker
    front end answers with 503 (and InvokeEndpoint hands the caller as a ModelError, HTTP 424, with
    OriginalStatusCode 503). Semantics: ModelQueuePolicy in
    https://github.com/triton-inference-server/common/blob/main/protobuf/model_config.proto.
    """
    batching = model.serving.dynamic_batching
    if batching is None:
        return None
    point = model.throughput_profile.get(model.capacity.instance_type) or min(
        model.throughput_profile.values(), key=lambda p: p.throughput_per_second)
    slack_us = (model.slo.p99_latency_ms - point.p99_latency_ms) * 1000
    timeout_us = max(math.floor(slack_us), batching.max_queue_delay_microseconds + 1000)
    bound = math.ceil(QUEUE_BOUND_OVERLOAD * point.throughput_per_second * timeout_us / 1e6)
    return QueuePolicy(timeout_microseconds=timeout_us, max_queue_size=max(bound, model.serving.max_batch_size))


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


def folders(model: Model) -> tuple[FolderSpec, ...]:
    """Every model folder of the repository, the default model (the text ensemble) first, then its
    tokenizer step, the token-id model(s) and the postprocessing step."""
    model = RepositorySpec.of(model)
    ids = ids_folders(model)
    if model.pipeline:
        return (pipeline_ensemble(model, ids[0]), tokenize_folder(model, ids[0]), *ids,
                postprocess_folder(model, ids[0]), *step_folders(model))
    return (text_ensemble(model, ids[0]), tokenize_folder(model, ids[0]), *ids, postprocess_folder(model, ids[0]))


# ---------------------------------------------------------------- a model file's pipeline

def step_model_name(model: Model, index: int) -> str:
    """The folder of the pipeline's Python step at `index` (its position in `pipeline:`)."""
    return f"{model.name}-step{index}"


def _tensor(tensor: pipeline_schema.PipelineTensor, name: str | None = None) -> Tensor:
    return Tensor(name or tensor.name, pb.DataType.Value(tensor.triton_type), tuple(tensor.dims))


def step_folders(model: Model) -> tuple[FolderSpec, ...]:
    """One Python backend folder per `python:` step: the user's file as <folder>/1/model.py, the declared
    tensors with the batch as their first dim (max_batch_size 0, as the text steps), on the CPU, with
    serving.tokenizer_instances instances; `calls` (self: the token-id model) as the JSON parameter `calls`."""
    model = RepositorySpec.of(model)
    found = []
    for index, step in enumerate(model.pipeline or ()):
        if step.python is None:
            continue
        calls = [ids_model_name(model) if c == pipeline_schema.SELF else c for c in step.calls]
        parameters = [("step_file", step.python)] + ([("calls", json.dumps(calls))] if calls else [])
        found.append(FolderSpec(
            step_model_name(model, index), "python", tuple(_tensor(t) for t in step.inputs),
            tuple(_tensor(t) for t in step.outputs), "model.py", on_gpu=False,
            instances=model.serving.tokenizer_instances, batching=False, parameters=tuple(parameters)))
    return tuple(found)


def pipeline_ensemble(model: RepositorySpec, ids: FolderSpec) -> FolderSpec:
    """The text ensemble of a model with a pipeline: its steps in order, `model: self` standing for the text
    model's own three steps (tokenizer -> token-id model -> postprocessing) with TEXT and its outputs renamed as
    input_map/output_map say; an output of the model nobody takes is left out of the postprocessing step's
    output_map. The ensemble answers the last step's outputs. The wiring was checked by validate
    (inferstack/config/pipeline_checks.py); Triton checks it again when it loads the ensemble."""
    steps_in = model.pipeline or ()
    task, labels = model.source.task, model.source.labels
    base = text_ensemble(model, ids)
    final = steps_in[-1]
    answered = {name for name, _ in pipeline_schema.step_outputs(final, task, labels)}
    taken = {name for step in steps_in for name, _ in pipeline_schema.step_inputs(step)}
    steps: list[Step] = []
    for index, step in enumerate(steps_in):
        if step.python is not None:
            steps.append(Step(step_model_name(model, index), tuple((t.name, t.name) for t in step.inputs),
                              tuple((t.name, t.name) for t in step.outputs)))
            continue
        text_in = step.input_map.get(TEXT, TEXT)
        keep = {own.name: name for name, own in pipeline_schema.step_outputs(step, task, labels)
                if name in taken or (step is final and name in answered)}
        for inner in base.steps:
            inputs = tuple((k, text_in if v == TEXT else v) for k, v in inner.inputs)
            outputs = inner.outputs
            if inner.model == postprocess_model_name(model):
                outputs = tuple((k, keep[k]) for k, _ in inner.outputs if k in keep)
            steps.append(Step(inner.model, inputs, outputs))
    outputs = tuple(_tensor(t, name) for name, t in pipeline_schema.step_outputs(final, task, labels))
    return FolderSpec(default_model_name(model), "ensemble", (Tensor(TEXT, pb.TYPE_STRING, (-1,)),), outputs, "",
                      on_gpu=False, steps=tuple(steps), batching=False)


def text_ensemble(model: RepositorySpec, ids: FolderSpec) -> FolderSpec:
    tokenize, postprocess = tokenize_model_name(model), postprocess_model_name(model)
    text = Tensor(TEXT, pb.TYPE_STRING, (-1,))
    feed = tuple((t.name, t.name) for t in ids.inputs)
    steps = [Step(tokenize, ((TEXT, TEXT),), feed)]
    if model.source.task == "text-classification":
        (logits,) = ids.outputs
        outputs = (unbatched(logits), Tensor(LABEL, pb.TYPE_STRING, (-1,)))
        # The postprocessing step passes the logits on: with `logits` both an ensemble output and the step's
        # input, Triton 2.51 answers a request for `label` alone with "unexpected deadlock" (observed here).
        steps += [Step(ids.name, feed, ((logits.name, RAW_LOGITS),)),
                  Step(postprocess, ((logits.name, RAW_LOGITS),), ((LABEL, LABEL), (logits.name, logits.name)))]
    else:
        (generated,) = ids.outputs
        outputs = (Tensor(GENERATED, pb.TYPE_STRING, (-1,)),)
        steps += [Step(ids.name, feed, ((generated.name, generated.name),)),
                  Step(postprocess, ((generated.name, generated.name),), ((GENERATED, GENERATED),))]
    return FolderSpec(default_model_name(model), "ensemble", (text,), outputs, "", on_gpu=False,
                      steps=tuple(steps), batching=False)


def unbatched(tensor: Tensor) -> Tensor:
    """A batching model's tensor as a max_batch_size-0 model declares it: the batch as dim -1."""
    return Tensor(tensor.name, tensor.data_type, (-1, *tensor.dims))


def tokenize_folder(model: RepositorySpec, ids: FolderSpec) -> FolderSpec:
    return FolderSpec(
        tokenize_model_name(model), "python", (Tensor(TEXT, pb.TYPE_STRING, (-1,)),),
        tuple(unbatched(t) for t in ids.inputs), "model.py", on_gpu=False,
        instances=model.serving.tokenizer_instances, batching=False,
        parameters=(("sequence_length", str(model.export.sequence_length)),
                    ("max_text_chars", str(MAX_TEXT_CHARS)),
                    ("max_batch_size", str(model.serving.max_batch_size))))


def postprocess_folder(model: RepositorySpec, ids: FolderSpec) -> FolderSpec:
    (produced,) = ids.outputs
    if model.source.task == "text-classification":
        outputs = (Tensor(LABEL, pb.TYPE_STRING, (-1,)), unbatched(produced))
        parameters = (("labels", json.dumps(list(model.source.labels))),)
    else:
        outputs = (Tensor(GENERATED, pb.TYPE_STRING, (-1,)),)
        parameters = ()
    return FolderSpec(postprocess_model_name(model), "python", (unbatched(produced),), outputs, "model.py",
                      on_gpu=False, instances=model.serving.tokenizer_instances, batching=False,
                      parameters=parameters)


def ids_folders(model: Model) -> tuple[FolderSpec, ...]:
    """The token-id model's folders, its entry first: what a caller who tokenizes calls, by name."""
    model = RepositorySpec.of(model)
    seq = model.export.sequence_length
    backend = model.serving.backend
    gpu = model.serving.instance_group.kind == "KIND_GPU"
    model_file = "model.onnx" if backend == "onnx" else "model.plan"
    ids = [Tensor("input_ids", pb.TYPE_INT64, (seq,)), Tensor("attention_mask", pb.TYPE_INT64, (seq,))]
    if model.source.task == "text-classification":
        if model.export.token_type_ids:
            ids.append(Tensor("token_type_ids", pb.TYPE_INT64, (seq,)))
        logits = Tensor("logits", pb.TYPE_FP32, (len(model.source.labels),))
        return (FolderSpec(model.name, backend, tuple(ids), (logits,), model_file, gpu),)

    out_len, hidden = model.export.max_output_length, model.export.hidden_size
    assert out_len is not None and hidden is not None  # the schema requires both for generation
    encoder = FolderSpec(
        f"{model.name}-encoder", backend, tuple(ids),
        (Tensor("last_hidden_state", pb.TYPE_FP32, (seq, hidden)),), model_file, gpu)
    decoder = FolderSpec(
        f"{model.name}-decoder", backend,
        (Tensor("decoder_input_ids", pb.TYPE_INT64, (out_len,)),
         Tensor("encoder_hidden_states", pb.TYPE_FP32, (seq, hidden)),
         Tensor("encoder_attention_mask", pb.TYPE_INT64, (seq,))),
        (Tensor("next_token_ids", pb.TYPE_INT64, (out_len,)),), model_file, gpu)
    generate = FolderSpec(
        model.name, "python", tuple(ids), (Tensor("output_ids", pb.TYPE_INT64, (out_len,)),), "model.py",
        on_gpu=False,
        parameters=(("encoder_model", encoder.name), ("decoder_model", decoder.name),
                    ("max_output_length", str(out_len))))
    return (generate, encoder, decoder)


def build_config(model: Model, folder: FolderSpec) -> pb.ModelConfig:
    model = RepositorySpec.of(model)
    serving = model.serving
    config = pb.ModelConfig(name=folder.name, max_batch_size=serving.max_batch_size if folder.batching else 0)
    if folder.kind == "onnx":
        config.backend = "onnxruntime"
    elif folder.kind == "tensorrt":
        config.platform = "tensorrt_plan"
    elif folder.kind == "ensemble":
        config.platform = "ensemble"
    else:
        config.backend = "python"
    if folder.model_file:
        config.default_model_filename = folder.model_file
    for tensor in folder.inputs:
        config.input.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    for tensor in folder.outputs:
        config.output.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)

    if folder.kind == "ensemble":
        # No instances and no batcher of its own: each step queues in its own model.
        for step in folder.steps:
            added = config.ensemble_scheduling.step.add(model_name=step.model, model_version=-1)
            added.input_map.update(dict(step.inputs))
            added.output_map.update(dict(step.outputs))
        return config

    group = serving.instance_group
    kind = pb.ModelInstanceGroup.KIND_GPU if folder.on_gpu else pb.ModelInstanceGroup.KIND_CPU
    config.instance_group.add(count=folder.instances or group.count, kind=kind)

    if folder.batching and serving.dynamic_batching is not None:
        batching = serving.dynamic_batching
        config.dynamic_batching.max_queue_delay_microseconds = batching.max_queue_delay_microseconds
        config.dynamic_batching.preferred_batch_size.extend(batching.preferred_batch_sizes)
        # Shed at the token-id model: it is the bottleneck, so its queue is where requests wait (the
        # tokenizer step ahead of it is fast and the ensemble has no queue), and it is the entry for callers
        # who send ids. Not in the models its BLS Python model calls (T5): they run requests it already
        # admitted, and rejecting one of those mid-generation would waste the work done for it.
        if model.queue_policy is not None and folder.name == ids_model_name(model):
            policy = config.dynamic_batching.default_queue_policy
            policy.timeout_action = pb.ModelQueuePolicy.REJECT
            policy.default_timeout_microseconds = model.queue_policy.timeout_microseconds
            policy.max_queue_size = model.queue_policy.max_queue_size

    accel = serving.tensorrt_acceleration
    if accel is not None and folder.kind == "onnx" and folder.on_gpu:
        trt = config.optimization.execution_accelerators.gpu_execution_accelerator.add(name="tensorrt")
        trt.parameters["precision_mode"] = accel.precision
        trt.parameters["max_workspace_size_bytes"] = str(accel.max_workspace_size_bytes)
        trt.parameters["trt_engine_cache_enable"] = "1"
        trt.parameters["trt_engine_cache_path"] = f"{TRT_ENGINE_CACHE}/{folder.name}"
        # Explicit profile shapes (ONNX Runtime TensorRT options trt_profile_{min,opt,max}_shapes, passed
        # through by Triton's onnxruntime backend: https://github.com/triton-inference-server/onnxruntime_backend):
        # one engine covers batch 1 to max_batch_size. Without them the provider builds for the shapes it
        # has seen and rebuilds when a larger batch arrives: warm-up at batch 1 and then at the largest
        # batch would build twice, per model instance.
        for bound, batch in profile_batches(serving).items():
            trt.parameters[f"trt_profile_{bound}_shapes"] = profile_shapes(folder, batch)

    # The Python model only orchestrates calls to models that warm up themselves.
    if serving.warmup and folder.kind != "python":
        _add_warmup(config, folder, serving.max_batch_size)

    if serving.response_cache and folder.name == ids_model_name(model):
        config.response_cache.enable = True
    for key, value in folder.parameters:
        config.parameters[key].string_value = value
    return config


def profile_batches(serving: TritonServing) -> dict[str, int]:
    """Batch sizes of the TensorRT profile: the range the dynamic batcher can send, tuned for full batches."""
    return {"min": 1, "opt": serving.max_batch_size, "max": serving.max_batch_size}


def profile_shapes(folder: FolderSpec, batch: int) -> str:
    """`name:BxD1x...` for every input, comma-separated: the format of trt_profile_*_shapes."""
    return ",".join(f"{t.name}:{'x'.join(str(d) for d in (batch, *t.dims))}" for t in folder.inputs)


def _add_warmup(config: pb.ModelConfig, folder: FolderSpec, max_batch_size: int) -> None:
    """Warm up at batch 1 and at the largest batch: the TensorRT engine (one, for the whole profile) is
    built or loaded before /ping answers, not on the first requests. Zero data rather than random: a
    random INT64 is not a valid token id."""
    for batch in sorted({1, max_batch_size}):
        sample = config.model_warmup.add(name=f"zeros-batch-{batch}", batch_size=batch)
        for tensor in folder.inputs:
            data = sample.inputs[tensor.name]
            data.data_type = tensor.data_type
            data.dims.extend(tensor.dims)
            data.zero_data = True


def render_config(model: Model, *, folder: str | None = None) -> str:
    """config.pbtxt text of one folder (default: the default model)."""
    wanted = folder or default_model_name(model)
    for spec in folders(model):
        if spec.name == wanted:
            return config_text(build_config(model, spec))
    raise KeyError(f"{model.name} has no folder {wanted!r}; folders: {', '.join(f.name for f in folders(model))}")


def render_repository(model: Model) -> dict[str, str]:
    """Folder name -> config.pbtxt text, for every folder."""
    return {spec.name: config_text(build_config(model, spec)) for spec in folders(model)}


_QUEUE_POLICY_OPEN = "  default_queue_policy {\n"


def config_text(config: pb.ModelConfig) -> str:
    """config.pbtxt text. Proto3's text format leaves out fields at their default, so REJECT (0, the
    default action) would not appear; it is written out for whoever reads the file."""
    text = text_format.MessageToString(config)
    if config.dynamic_batching.HasField("default_queue_policy"):
        assert config.dynamic_batching.default_queue_policy.timeout_action == pb.ModelQueuePolicy.REJECT
        text = text.replace(_QUEUE_POLICY_OPEN, _QUEUE_POLICY_OPEN + "    timeout_action: REJECT\n", 1)
    return text


def parse_config(text: str) -> pb.ModelConfig:
    """Parse config.pbtxt with Triton's proto. The proto itself rejects two scheduling choices
    (dynamic_batching / sequence_batching / ensemble_scheduling are one oneof)."""
    try:
        return text_format.Parse(text, pb.ModelConfig())
    except text_format.ParseError as exc:
        raise RepositoryError([f"{CONFIG_FILE}: {exc}"]) from None


def server_environment(model: Model) -> dict[str, str]:
    """Container environment for SageMaker's Triton serve script."""
    env = {
        "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": default_model_name(model),
        # The serve script defaults to verbose logging: every request lands in CloudWatch.
        "SAGEMAKER_TRITON_LOG_VERBOSE": "0",
    }
    extra: list[str] = []
    specs = folders(model)
    # The serve script starts Triton in explicit mode and loads only the default model; models the
    # default one calls through BLS must be named too.
    extra += [f"--load-model={spec.name}" for spec in specs if spec.name != default_model_name(model)]
    if model.serving.response_cache:
        extra.append(f"--cache-config=local,size={RESPONSE_CACHE_BYTES}")
    if extra:
        env["SAGEMAKER_TRITON_ADDITIONAL_ARGS"] = " ".join(extra)
    if any(spec.kind == "python" for spec in specs):
        # Room for the largest batch of the largest tensor a Python model exchanges, twice over.
        largest = max(_tensor_bytes(t, model.serving.max_batch_size) for spec in specs
                      for t in (*spec.inputs, *spec.outputs))
        env["SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE"] = str(max(SAGEMAKER_DEFAULT_SHM_BYTES, 2 * largest))
    return env


def _tensor_bytes(tensor: Tensor, batch: int) -> int:
    size = _BYTES[tensor.data_type] * (1 if tensor.dims[:1] == (-1,) else batch)
    for dim in tensor.dims:
        size *= batch if dim == -1 else dim
    return size


# ---------------------------------------------------------------- repository on disk

def check_repository(root: Path, *, default_model: str | None) -> None:
    """Raise RepositoryError unless SageMaker's serve script and Triton would start on `root`:
    no config.pbtxt at the root, the default model names an existing folder (required when there is
    more than one), and every folder has a parseable config.pbtxt naming it and a numeric version dir."""
    root = Path(root)
    problems: list[str] = []
    if (root / CONFIG_FILE).exists():
        problems.append(f"{CONFIG_FILE} at the repository root: put it in <root>/<model>/{CONFIG_FILE}")
    model_dirs = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    if not model_dirs:
        problems.append("no model folder in the repository")
    if default_model is None:
        if len(model_dirs) > 1:
            problems.append(f"{len(model_dirs)} model folders ({', '.join(model_dirs)}) but "
                            "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME is not set")
    elif default_model not in model_dirs:
        problems.append(f"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME {default_model!r} names no folder "
                        f"(folders: {', '.join(model_dirs) or 'none'})")
    for name in model_dirs:
        folder = root / name
        if not any(p.is_dir() and p.name.isdigit() for p in folder.iterdir()):
            problems.append(f"{name}/ has no version directory (e.g. {name}/{VERSION}/)")
        config_path = folder / CONFIG_FILE
        if not config_path.is_file():
            problems.append(f"{name}/{CONFIG_FILE} is missing")
            continue
        try:
            config = parse_config(config_path.read_text(encoding="utf-8"))
        except RepositoryError as exc:
            problems.append(f"{name}/{exc}")
            continue
        if config.name and config.name != name:
            problems.append(f"{name}/{CONFIG_FILE} names model {config.name!r}, not its folder {name!r}")
    if problems:
        raise RepositoryError(problems)


def write_repository(model: Model, out_dir: Path | str, *,
                     model_files: Mapping[str, Path] | None = None) -> Path:
    """Write the repository into `out_dir` (absent or empty) all at once: rendered and checked in a
    temporary sibling, then renamed, so a failure never leaves a half-written repository.

    `model_files` maps a folder name to the file the export produced for it (copied to
    `<folder>/1/<model_file>`); without it the version dirs stay empty (a skeleton)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise RepositoryError([f"{out_dir} exists and is not an empty directory"])
    specs = {spec.name: spec for spec in folders(model)}
    unknown = sorted(set(model_files or {}) - set(specs))
    if unknown:
        raise RepositoryError([f"model_files names unknown folder(s) {', '.join(unknown)}; "
                               f"folders: {', '.join(specs)}"])
    parent = out_dir.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=parent))
    try:
        for name, text in render_repository(model).items():
            version_dir = staging / name / VERSION
            version_dir.mkdir(parents=True)
            (staging / name / CONFIG_FILE).write_text(text, encoding="utf-8")
            source = (model_files or {}).get(name)
            if source is not None:
                shutil.copy2(source, version_dir / specs[name].model_file)
        check_repository(staging, default_model=default_model_name(model))
        os.chmod(staging, 0o755)  # mkdtemp makes it 0700
        if out_dir.exists():
            out_dir.rmdir()  # empty, checked above
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out_dir
