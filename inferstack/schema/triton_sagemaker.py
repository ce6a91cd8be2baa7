"""The triton-sagemaker model kind: exported to ONNX (or a TensorRT plan), served by NVIDIA Triton on a
SageMaker real-time endpoint or as an inference component of a shared one. Part of the Triton image's build
context (inferstack/triton/image.py BUILD_CONTEXT): import nothing here that the image's export does not need."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from inferstack.schema.base import Frozen, InstanceType, PositiveInt
from inferstack.schema.deployment import Deployment
from inferstack.schema.model_file import ModelBase
from inferstack.schema.pipeline import MAX_STEPS, PipelineStep


class TritonExport(Frozen):
    sequence_length: int = Field(128, ge=8, le=4096, description="inputs are padded to this many tokens")
    max_output_length: int | None = Field(None, ge=1, le=4096, description="generation models: output tokens")
    hidden_size: int | None = Field(
        None,
        ge=8,
        le=65536,
        description="generation models: d_model of the checkpoint; it shapes the "
        "encoder-to-decoder tensor and its warm-up data (the export checks it against the checkpoint)",
    )
    token_type_ids: bool = Field(
        False, description="the tokenizer emits token_type_ids (BERT does; RoBERTa and DistilBERT do not)"
    )
    onnx_opset: int = Field(17, ge=11, le=21, description="ONNX opset of the exported graph")
    parameters_millions: float | None = Field(
        None,
        gt=0,
        le=100_000,
        description="size of the checkpoint in millions of parameters (bert-base 110, "
        "bert-large 335, t5-small 60); sizes the start-up health-check timeout (TensorRT builds its engines at "
        "load); omitted: 350, a BERT-large-sized model",
    )


class TensorRtAcceleration(Frozen):
    precision: Literal["FP16", "FP32"] = Field("FP16", description="precision of the TensorRT engines")
    max_workspace_size_bytes: int = Field(
        1 << 30, ge=1 << 20, le=1 << 34, description="GPU memory TensorRT may use while it builds an engine"
    )


class DynamicBatching(Frozen):
    max_queue_delay_microseconds: int = Field(
        100, ge=0, le=1_000_000, description="longest Triton holds a request to fill a batch"
    )
    preferred_batch_sizes: tuple[PositiveInt, ...] = Field(
        (), description="only where they help: e.g. the batch sizes a TensorRT plan was built for"
    )


class InstanceGroup(Frozen):
    count: int = Field(1, ge=1, le=16, description="model instances per GPU")
    kind: Literal["KIND_GPU", "KIND_CPU"] = Field(
        "KIND_GPU", description="where the instances run: the GPU, or the CPU (no TensorRT there)"
    )


# Values CloudFormation accepts for ProductionVariant.InferenceAmiVersion on GPU instances. The default
# AMI of ml.g4dn/ml.g5 ships NVIDIA driver 470 (CUDA 11.4); Triton images since 23.xx need CUDA 12.
InferenceAmiVersion = Literal[
    "al2-ami-sagemaker-inference-gpu-2",
    "al2-ami-sagemaker-inference-gpu-2-1",
    "al2-ami-sagemaker-inference-gpu-3-1",
    "al2023-ami-sagemaker-inference-gpu-4-1",
]


class TritonServing(Frozen):
    backend: Literal["onnx", "tensorrt"] = Field(
        description="onnx: ONNX Runtime (optionally with the TensorRT accelerator); tensorrt: a TensorRT plan"
    )
    tensorrt_acceleration: TensorRtAcceleration | None = Field(
        None, description="onnx backend only: TensorRT execution accelerator"
    )
    max_batch_size: int = Field(
        8, ge=1, le=1024, description="largest batch Triton sends the model (config.pbtxt max_batch_size)"
    )
    dynamic_batching: DynamicBatching | None = Field(None, description="Triton's dynamic batcher; omitted: none")
    instance_group: InstanceGroup = Field(InstanceGroup(), description="model instances Triton runs side by side")
    warmup: bool = Field(
        True,
        description="Triton runs warm-up requests at load (at batch 1 and the largest "
        "batch), before the endpoint takes traffic",
    )
    response_cache: bool = Field(False, description="Triton's response cache, for models that see repeated inputs")
    tokenizer_instances: int = Field(
        2,
        ge=1,
        le=64,
        description="CPU instances (Python backend) of the text "
        "ensemble's tokenizer step, and of its postprocessing step",
    )
    image_version: str = Field("24.09", pattern=r"^\d{2}\.\d{2}$", description="Triton release, YY.MM")
    container_startup_health_check_timeout_seconds: int | None = Field(
        None,
        ge=60,
        le=3600,
        description="model load, TensorRT engine build and warm-up must fit in it; "
        "omitted: estimated from export.parameters_millions, the TensorRT engines and instance_group.count "
        "(inferstack/triton/startup.py)",
    )
    model_data_download_timeout_seconds: int = Field(
        600, ge=60, le=3600, description="SageMaker's ModelDataDownloadTimeoutInSeconds"
    )
    inference_ami_version: InferenceAmiVersion | None = Field(
        None, description="SageMaker inference AMI (GPU driver); set it for Triton images that need CUDA 12"
    )

    @model_validator(mode="after")
    def _consistent(self) -> TritonServing:
        if self.tensorrt_acceleration is not None and self.backend != "onnx":
            raise ValueError("tensorrt_acceleration applies to the onnx backend only")
        if self.dynamic_batching and any(s > self.max_batch_size for s in self.dynamic_batching.preferred_batch_sizes):
            raise ValueError("dynamic_batching.preferred_batch_sizes exceed max_batch_size")
        if self.instance_group.kind == "KIND_CPU" and (self.backend == "tensorrt" or self.tensorrt_acceleration):
            raise ValueError("TensorRT needs a GPU: use instance_group.kind KIND_GPU")
        return self


TritonDeployment = Deployment  # the name the SageMaker side grew up with


class TritonScaling(Frozen):
    scale_out_cooldown_seconds: int = Field(
        120, ge=0, le=3600, description="a new g4dn instance takes minutes to serve; shorter cooldowns overshoot"
    )
    scale_in_cooldown_seconds: int = Field(600, ge=0, le=3600, description="wait after removing instances")


class DataCapture(Frozen):
    sampling_percentage: int = Field(ge=1, le=100, description="share of requests captured")
    capture: tuple[Literal["input", "output"], ...] = Field(
        ("input", "output"), min_length=1, description="what is captured of each sampled request"
    )

    @field_validator("capture")
    @classmethod
    def _unique(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError("capture repeats a mode")
        return value


class InferenceComponentSpec(Frozen):
    """What one copy of the model holds on a shared endpoint (an AWS::SageMaker::InferenceComponent's
    ComputeResourceRequirements). Used where an inference-components fleet in environments.yaml carries
    the model; elsewhere the model keeps its own endpoint."""

    accelerators: int = Field(1, ge=1, le=8, description="GPUs one copy holds (NumberOfAcceleratorDevicesRequired)")
    cpu_cores: float = Field(1.0, ge=0.25, le=192, description="vCPUs one copy reserves (NumberOfCpuCoresRequired)")
    memory_mib: int = Field(ge=128, le=786_432, description="host memory one copy reserves (MinMemoryRequiredInMb)")
    profiled_on: InstanceType | None = Field(
        None,
        description="throughput_profile entry a copy's throughput comes from, scaled by accelerators over "
        "that instance's GPUs; omitted: capacity.instance_type",
    )


class TritonSageMakerModel(ModelBase):
    kind: Literal["triton-sagemaker"] = Field(description="served by NVIDIA Triton on a SageMaker real-time endpoint")
    export: TritonExport = Field(TritonExport(), description="how `docker build` exports the checkpoint to ONNX")
    serving: TritonServing = Field(description="Triton's configuration and the SageMaker variant's start-up")
    deployment: TritonDeployment = Field(
        TritonDeployment(strategy="canary", size_percent=10),
        description="how an update replaces the running fleet, rolled back on the SLO alarms",
    )
    scaling: TritonScaling = Field(
        TritonScaling(), description="cooldowns of the scaling policy (its target comes from the plan)"
    )
    data_capture: DataCapture | None = Field(None, description="log sampled requests/responses to an encrypted bucket")
    inference_component: InferenceComponentSpec | None = Field(
        None,
        description="resources of one copy on a shared endpoint; required where a fleet of kind "
        "sagemaker-inference-components in environments.yaml carries this model",
    )
    pipeline: tuple[PipelineStep, ...] | None = Field(
        None,
        min_length=1,
        max_length=MAX_STEPS,
        description="serial steps on the endpoint: the model itself "
        "(model: self) and the user's Python steps from the model's folder, run in order as the text ensemble's "
        "steps (inferstack/schema/pipeline.py, docs/how-to/build-a-pipeline.md); omitted: the model alone",
    )

    @model_validator(mode="after")
    def _generation_shapes(self) -> TritonSageMakerModel:
        if self.source.task == "text2text-generation":
            missing = [f for f in ("max_output_length", "hidden_size") if getattr(self.export, f) is None]
            if missing:
                raise ValueError(f"text2text-generation needs export.{' and export.'.join(missing)}")
        return self
