"""Render a Triton model repository (config.pbtxt per model folder, version dirs) from a model's YAML,
with Triton's own ModelConfig proto, and check it against the rules of SageMaker's Triton serve script.

Pure functions of the config: the stacks use them for the container environment, the `render-triton`
CLI writes a repository skeleton, and the image's export script (container/triton/) imports the same
code to write the repository it fills with model files.

This module renders config.pbtxt and the server's environment, and writes and checks the repository on disk;
which folders a model gets, and their interfaces, are in folders.py, what they are made of in spec.py, the
overload shedding in queue_policy.py. Callers import all of it from here: this is the renderer's one entry point."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from inferstack.schema.triton_sagemaker import TritonServing
from inferstack.triton.folders import folders, ids_folders, pipeline_ensemble, step_folders, text_ensemble
from inferstack.triton.queue_policy import QUEUE_BOUND_OVERLOAD, QueuePolicy, queue_policy
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

__all__ = [
    "CONFIG_FILE",
    "GENERATED",
    "LABEL",
    "MAX_TEXT_CHARS",
    "QUEUE_BOUND_OVERLOAD",
    "RAW_LOGITS",
    "TEXT",
    "VERSION",
    "FolderSpec",
    "Model",
    "QueuePolicy",
    "RepositoryError",
    "RepositorySpec",
    "Step",
    "Tensor",
    "build_config",
    "check_repository",
    "config_text",
    "default_model_name",
    "folders",
    "ids_folders",
    "ids_model_name",
    "parse_config",
    "pipeline_ensemble",
    "postprocess_model_name",
    "profile_batches",
    "profile_shapes",
    "queue_policy",
    "render_config",
    "render_repository",
    "server_environment",
    "step_folders",
    "step_model_name",
    "text_ensemble",
    "tokenize_model_name",
    "write_repository",
]

CONFIG_FILE = "config.pbtxt"
VERSION = "1"
# TensorRT engines built at load are cached so the second model instance (and warm-up) reuses them.
TRT_ENGINE_CACHE = "/tmp/triton-trt-cache"
# Triton's local response cache, when a model enables it.
RESPONSE_CACHE_BYTES = 256 * 1024 * 1024
# The Python backend's default shared-memory region in SageMaker's serve script.
SAGEMAKER_DEFAULT_SHM_BYTES = 16 * 1024 * 1024
# A BYTES element: a 4-byte length and at most 4 UTF-8 bytes a character.
_BYTES = {
    pb.TYPE_INT64: 8,
    pb.TYPE_FP32: 4,
    pb.TYPE_STRING: 4 + 4 * MAX_TEXT_CHARS,
    # a pipeline's Python steps may exchange these too (inferstack/schema/pipeline.py)
    pb.TYPE_BOOL: 1,
    pb.TYPE_UINT8: 1,
    pb.TYPE_INT8: 1,
    pb.TYPE_INT16: 2,
    pb.TYPE_INT32: 4,
    pb.TYPE_FP16: 2,
    pb.TYPE_FP64: 8,
}


class RepositoryError(ValueError):
    """A model repository SageMaker's Triton serve script (or Triton) would refuse; one line per problem."""

    def __init__(self, problems: Sequence[str]):
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


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
        largest = max(
            _tensor_bytes(t, model.serving.max_batch_size) for spec in specs for t in (*spec.inputs, *spec.outputs)
        )
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
            problems.append(
                f"{len(model_dirs)} model folders ({', '.join(model_dirs)}) but "
                "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME is not set"
            )
    elif default_model not in model_dirs:
        problems.append(
            f"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME {default_model!r} names no folder "
            f"(folders: {', '.join(model_dirs) or 'none'})"
        )
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


def write_repository(model: Model, out_dir: Path | str, *, model_files: Mapping[str, Path] | None = None) -> Path:
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
        raise RepositoryError(
            [f"model_files names unknown folder(s) {', '.join(unknown)}; folders: {', '.join(specs)}"]
        )
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
