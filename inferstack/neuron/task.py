"""What a Neuron serving task looks like on one Inferentia instance type: its devices and NeuronCores, its
cpu/memory share of the host, and the image's build arguments and runtime environment (the container
contract of container/neuron/). Pure functions, so the construct and the tests derive the same values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from inferstack.schema import instances
from inferstack.schema.models import NeuronEcsModel

# The image's Dockerfile inside container/neuron/, per Neuron generation (the one place that names it).
DOCKERFILE = "Dockerfile.{neuron_target}"

# Left to the OS, the ECS agent and Docker: the task is sized to what the container instance registers,
# not to the instance's nominal size, or it would never be placed.
CPU_UNITS_PER_VCPU = 1024
MIN_RESERVED_CPU_UNITS = 256
MIN_RESERVED_MEMORY_MIB = 1024
# The kernel alone keeps ~2% of RAM (page tables of the memory map) out of what ECS registers.
RESERVED_MEMORY_PERCENT = 8


class IncompatibleInstance(ValueError):
    """The model cannot run on the instance type (wrong family or Neuron generation)."""


@dataclass(frozen=True)
class NeuronTask:
    instance_type: str
    neuron_target: str  # "inf1" | "inf2": drives the Dockerfile and the compiler
    device_paths: tuple[str, ...]
    neuron_cores: int
    cpu_units: int
    memory_mib: int
    dockerfile: str
    build_args: Mapping[str, str]
    environment: Mapping[str, str]

    @property
    def visible_cores(self) -> str:
        return self.environment["NEURON_RT_VISIBLE_CORES"]


def reserved_cpu_units(vcpus: int) -> int:
    return max(MIN_RESERVED_CPU_UNITS, vcpus * CPU_UNITS_PER_VCPU // 16)


def reserved_memory_mib(memory_gib: int) -> int:
    return max(MIN_RESERVED_MEMORY_MIB, memory_gib * 1024 * RESERVED_MEMORY_PERCENT // 100)


def visible_cores(neuron_cores: int) -> str:
    """Host-global NeuronCore numbers of the whole instance: one task per instance owns them all, and the
    server splits them into one contiguous range per worker."""
    return "0" if neuron_cores == 1 else f"0-{neuron_cores - 1}"


def build_args(model: NeuronEcsModel, neuron_target: str) -> dict[str, str]:
    source, comp = model.source, model.compile
    args = {
        "MODEL_SOURCE": source.huggingface_id or source.local_path or "",
        "TASK": source.task,
        "LABELS": ",".join(source.labels),
        "BATCH_SIZE": str(comp.batch_size),
        "SEQUENCE_LENGTH": str(comp.sequence_length),
        "NEURON_CORES_PER_MODEL": str(comp.neuron_cores_per_model),
        "PARALLELISM": comp.parallelism,
        "COMPILER_ARGS": " ".join(comp.compiler_args()),
        "NEURON_TARGET": neuron_target,
    }
    if source.revision:
        args["MODEL_REVISION"] = source.revision
    return args


def runtime_environment(model: NeuronEcsModel, neuron_cores: int) -> dict[str, str]:
    serving = model.serving
    return {
        "MODEL_NAME": model.name,
        "PORT": str(serving.port),
        "NEURON_RT_VISIBLE_CORES": visible_cores(neuron_cores),
        "SERVER_WORKERS": str(serving.workers),
        "SERVER_MAX_BATCH_SIZE": str(serving.max_batch_size),
        "SERVER_MAX_QUEUE_DELAY_MS": f"{serving.max_queue_delay_ms:g}",
        "SERVER_WARMUP_ITERATIONS": str(serving.warmup_requests),
    }


def for_instance(model: NeuronEcsModel, instance_type: str) -> NeuronTask:
    spec = instances.get(instance_type)
    target = spec.neuron_generation
    if target is None or spec.is_sagemaker:
        raise IncompatibleInstance(f"{instance_type} is not an Inferentia EC2 type")
    if model.compile.neuron_generation != target:
        raise IncompatibleInstance(f"{model.name} is compiled for {model.compile.neuron_generation}, "
                                   f"{instance_type} runs {target}")
    return NeuronTask(
        instance_type=spec.name,
        neuron_target=target,
        device_paths=spec.device_paths,
        neuron_cores=spec.neuron_cores,
        cpu_units=spec.vcpus * CPU_UNITS_PER_VCPU - reserved_cpu_units(spec.vcpus),
        memory_mib=spec.memory_gib * 1024 - reserved_memory_mib(spec.memory_gib),
        dockerfile=DOCKERFILE.format(neuron_target=target),
        build_args=MappingProxyType(build_args(model, target)),
        environment=MappingProxyType(runtime_environment(model, spec.neuron_cores)),
    )
