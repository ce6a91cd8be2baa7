"""How long a Triton endpoint needs from container start to its first healthy /ping, from what the model
loads: the ContainerStartupHealthCheckTimeoutInSeconds of its production variant (60-3600 s,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ProductionVariant.html).

On a g4dn the ONNX Runtime TensorRT provider builds its engines at load. With the explicit profile shapes
the renderer gives it (batch 1 to max_batch_size, inferstack/triton/config.py) one engine per model folder
covers every batch the server sends, is written to the engine cache, and every further model instance and
warm-up sample loads it from there instead of building again. So start-up is: the server, one build per
TensorRT folder (grows with the model's size), then a load and the warm-up per instance of each folder.
The per-second figures are estimates to be replaced with measured start-up times; the margin covers
their error."""

from __future__ import annotations

import math

from inferstack.schema.triton_sagemaker import TritonSageMakerModel
from inferstack.triton import config as triton_config

MIN_SECONDS, MAX_SECONDS = 60, 3600  # ProductionVariant.ContainerStartupHealthCheckTimeoutInSeconds
DEFAULT_PARAMETERS_MILLIONS = 350.0  # a BERT-large-sized model when the config does not say
SERVER_START_SECONDS = 60  # container start, Triton, repository scan
TRT_BUILD_BASE_SECONDS = 60  # per engine: parsing, tactic selection of a small graph
TRT_BUILD_SECONDS_PER_MILLION = 1.0  # FP16 on a T4, grows with the layers to time
LOAD_BASE_SECONDS = 15  # per model instance of a folder: session and engine from the cache
LOAD_SECONDS_PER_MILLION = 0.1  # reading the weights
WARMUP_SECONDS_PER_SAMPLE = 5
MARGIN = 1.5


def estimated_seconds(model: TritonSageMakerModel) -> int:
    """The unpadded estimate of start-up, in seconds."""
    serving = model.serving
    millions = model.export.parameters_millions or DEFAULT_PARAMETERS_MILLIONS
    accelerated = [
        f
        for f in triton_config.folders(model)
        if f.kind == "onnx" and f.on_gpu and serving.tensorrt_acceleration is not None
    ]
    loaded = [f for f in triton_config.folders(model) if f.kind not in ("python", "ensemble")]
    share = millions / max(len(loaded), 1)  # the checkpoint is split over its exported graphs
    warmups = len({1, serving.max_batch_size}) if serving.warmup else 0
    seconds: float = SERVER_START_SECONDS
    seconds += sum(TRT_BUILD_BASE_SECONDS + TRT_BUILD_SECONDS_PER_MILLION * share for _ in accelerated)
    seconds += (
        len(loaded)
        * serving.instance_group.count
        * (LOAD_BASE_SECONDS + LOAD_SECONDS_PER_MILLION * share + WARMUP_SECONDS_PER_SAMPLE * warmups)
    )
    return math.ceil(seconds)


def padded_seconds(model: TritonSageMakerModel) -> int:
    """The estimate with its margin, rounded up to a minute: what the variant gets unless configured."""
    return max(MIN_SECONDS, 60 * math.ceil(estimated_seconds(model) * MARGIN / 60))


def health_check_timeout_seconds(model: TritonSageMakerModel) -> int:
    """The configured timeout, or the padded estimate (checks.py rejects an estimate above MAX_SECONDS)."""
    configured = model.serving.container_startup_health_check_timeout_seconds
    return configured if configured is not None else min(padded_seconds(model), MAX_SECONDS)
