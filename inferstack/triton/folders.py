"""The model folders of a model's Triton repository and their interfaces.

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

from tritonclient.grpc import model_config_pb2 as pb

from inferstack.schema import pipeline as pipeline_schema
from inferstack.triton.spec import (
    GENERATED,
    LABEL,
    MAX_TEXT_CHARS,
    RAW_LOGITS,
    TEXT,
    FolderSpec,
    Model,
    RepositorySpec,
    Step,
    Tensor,
    default_model_name,
    ids_model_name,
    postprocess_model_name,
    step_model_name,
    tokenize_model_name,
)


def folders(model: Model) -> tuple[FolderSpec, ...]:
    """Every model folder of the repository, the default model (the text ensemble) first, then its
    tokenizer step, the token-id model(s) and the postprocessing step."""
    model = RepositorySpec.of(model)
    ids = ids_folders(model)
    if model.pipeline:
        return (
            pipeline_ensemble(model, ids[0]),
            tokenize_folder(model, ids[0]),
            *ids,
            postprocess_folder(model, ids[0]),
            *step_folders(model),
        )
    return (text_ensemble(model, ids[0]), tokenize_folder(model, ids[0]), *ids, postprocess_folder(model, ids[0]))


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
        f"{model.name}-encoder",
        backend,
        tuple(ids),
        (Tensor("last_hidden_state", pb.TYPE_FP32, (seq, hidden)),),
        model_file,
        gpu,
    )
    decoder = FolderSpec(
        f"{model.name}-decoder",
        backend,
        (
            Tensor("decoder_input_ids", pb.TYPE_INT64, (out_len,)),
            Tensor("encoder_hidden_states", pb.TYPE_FP32, (seq, hidden)),
            Tensor("encoder_attention_mask", pb.TYPE_INT64, (seq,)),
        ),
        (Tensor("next_token_ids", pb.TYPE_INT64, (out_len,)),),
        model_file,
        gpu,
    )
    generate = FolderSpec(
        model.name,
        "python",
        tuple(ids),
        (Tensor("output_ids", pb.TYPE_INT64, (out_len,)),),
        "model.py",
        on_gpu=False,
        parameters=(
            ("encoder_model", encoder.name),
            ("decoder_model", decoder.name),
            ("max_output_length", str(out_len)),
        ),
    )
    return (generate, encoder, decoder)


def text_ensemble(model: RepositorySpec, ids: FolderSpec) -> FolderSpec:
    tokenize, postprocess = tokenize_model_name(model), postprocess_model_name(model)
    text = Tensor(TEXT, pb.TYPE_STRING, (-1,))
    feed = tuple((t.name, t.name) for t in ids.inputs)
    steps = [Step(tokenize, ((TEXT, TEXT),), feed)]
    outputs: tuple[Tensor, ...]
    if model.source.task == "text-classification":
        (logits,) = ids.outputs
        outputs = (unbatched(logits), Tensor(LABEL, pb.TYPE_STRING, (-1,)))
        # The postprocessing step passes the logits on: with `logits` both an ensemble output and the step's
        # input, Triton 2.51 answers a request for `label` alone with "unexpected deadlock" (observed here).
        steps += [
            Step(ids.name, feed, ((logits.name, RAW_LOGITS),)),
            Step(postprocess, ((logits.name, RAW_LOGITS),), ((LABEL, LABEL), (logits.name, logits.name))),
        ]
    else:
        (generated,) = ids.outputs
        outputs = (Tensor(GENERATED, pb.TYPE_STRING, (-1,)),)
        steps += [
            Step(ids.name, feed, ((generated.name, generated.name),)),
            Step(postprocess, ((generated.name, generated.name),), ((GENERATED, GENERATED),)),
        ]
    return FolderSpec(
        default_model_name(model), "ensemble", (text,), outputs, "", on_gpu=False, steps=tuple(steps), batching=False
    )


def unbatched(tensor: Tensor) -> Tensor:
    """A batching model's tensor as a max_batch_size-0 model declares it: the batch as dim -1."""
    return Tensor(tensor.name, tensor.data_type, (-1, *tensor.dims))


def tokenize_folder(model: RepositorySpec, ids: FolderSpec) -> FolderSpec:
    return FolderSpec(
        tokenize_model_name(model),
        "python",
        (Tensor(TEXT, pb.TYPE_STRING, (-1,)),),
        tuple(unbatched(t) for t in ids.inputs),
        "model.py",
        on_gpu=False,
        instances=model.serving.tokenizer_instances,
        batching=False,
        parameters=(
            ("sequence_length", str(model.export.sequence_length)),
            ("max_text_chars", str(MAX_TEXT_CHARS)),
            ("max_batch_size", str(model.serving.max_batch_size)),
        ),
    )


def postprocess_folder(model: RepositorySpec, ids: FolderSpec) -> FolderSpec:
    (produced,) = ids.outputs
    outputs: tuple[Tensor, ...]
    parameters: tuple[tuple[str, str], ...]
    if model.source.task == "text-classification":
        outputs = (Tensor(LABEL, pb.TYPE_STRING, (-1,)), unbatched(produced))
        parameters = (("labels", json.dumps(list(model.source.labels))),)
    else:
        outputs = (Tensor(GENERATED, pb.TYPE_STRING, (-1,)),)
        parameters = ()
    return FolderSpec(
        postprocess_model_name(model),
        "python",
        (unbatched(produced),),
        outputs,
        "model.py",
        on_gpu=False,
        instances=model.serving.tokenizer_instances,
        batching=False,
        parameters=parameters,
    )


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
        found.append(
            FolderSpec(
                step_model_name(model, index),
                "python",
                tuple(_tensor(t) for t in step.inputs),
                tuple(_tensor(t) for t in step.outputs),
                "model.py",
                on_gpu=False,
                instances=model.serving.tokenizer_instances,
                batching=False,
                parameters=tuple(parameters),
            )
        )
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
            steps.append(
                Step(
                    step_model_name(model, index),
                    tuple((t.name, t.name) for t in step.inputs),
                    tuple((t.name, t.name) for t in step.outputs),
                )
            )
            continue
        text_in = step.input_map.get(TEXT, TEXT)
        keep = {
            own.name: name
            for name, own in pipeline_schema.step_outputs(step, task, labels)
            if name in taken or (step is final and name in answered)
        }
        for inner in base.steps:
            inputs = tuple((k, text_in if v == TEXT else v) for k, v in inner.inputs)
            renamed = inner.outputs
            if inner.model == postprocess_model_name(model):
                renamed = tuple((k, keep[k]) for k, _ in inner.outputs if k in keep)
            steps.append(Step(inner.model, inputs, renamed))
    outputs = tuple(_tensor(t, name) for name, t in pipeline_schema.step_outputs(final, task, labels))
    return FolderSpec(
        default_model_name(model),
        "ensemble",
        (Tensor(TEXT, pb.TYPE_STRING, (-1,)),),
        outputs,
        "",
        on_gpu=False,
        steps=tuple(steps),
        batching=False,
    )
