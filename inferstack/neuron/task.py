"""What a Neuron serving task looks like on one Inferentia instance type: its devices and NeuronCores, its
cpu/memory share of the host, and the image's build arguments and runtime environment (the container
contract of container/neuron/). One model per task (`for_instance`), or several packed on disjoint
NeuronCore ranges and ports of one task (`for_fleet`, from a neuron-cores fleet's plan). Pure functions, so
the construct and the tests derive the same values."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from inferstack.schema import instances
from inferstack.schema.neuron_ecs import NeuronEcsModel

# The image's Dockerfile inside container/neuron/, per Neuron generation (the one place that names it).
DOCKERFILE = "Dockerfile.{neuron_target}"
# The serving container's name in the task definition: the construct names it, and promote finds the running
# image by it.
CONTAINER_NAME = "Server"

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


def runtime_environment(model: NeuronEcsModel, neuron_cores: int, slo_p99_ms: float | None = None) -> dict[str, str]:
    """``slo_p99_ms``: the environment's SLO (the capacity plan's); the model's own when not given. The server
    admits only what it can answer within it (SERVER_SLO_MS) and answers the rest 503 at once."""
    serving = model.serving
    return {
        "MODEL_NAME": model.name,
        "PORT": str(serving.port),
        "NEURON_RT_VISIBLE_CORES": visible_cores(neuron_cores),
        "SERVER_WORKERS": str(serving.workers),
        "SERVER_MAX_BATCH_SIZE": str(serving.max_batch_size),
        "SERVER_MAX_QUEUE_DELAY_MS": f"{serving.max_queue_delay_ms:g}",
        "SERVER_WARMUP_ITERATIONS": str(serving.warmup_requests),
        "SERVER_SLO_MS": f"{model.slo.p99_latency_ms if slo_p99_ms is None else slo_p99_ms:g}",
    }


def _inferentia(instance_type: str, models: Sequence[NeuronEcsModel]) -> instances.InstanceSpec:
    """The instance's facts, once every model is known to run there: compiled for its Neuron generation."""
    spec = instances.get(instance_type)
    target = spec.neuron_generation
    if target is None or spec.is_sagemaker:
        raise IncompatibleInstance(f"{instance_type} is not an Inferentia EC2 type")
    for model in models:
        if model.compile.neuron_generation != target:
            raise IncompatibleInstance(
                f"{model.name} is compiled for {model.compile.neuron_generation}, {instance_type} runs {target}"
            )
    return spec


def _task(spec: instances.InstanceSpec, args: dict[str, str], environment: dict[str, str]) -> NeuronTask:
    target = spec.neuron_generation
    assert target is not None  # _inferentia checked it
    return NeuronTask(
        instance_type=spec.name,
        neuron_target=target,
        device_paths=spec.device_paths,
        neuron_cores=spec.neuron_cores,
        cpu_units=spec.vcpus * CPU_UNITS_PER_VCPU - reserved_cpu_units(spec.vcpus),
        memory_mib=spec.memory_gib * 1024 - reserved_memory_mib(spec.memory_gib),
        dockerfile=DOCKERFILE.format(neuron_target=target),
        build_args=MappingProxyType(args),
        environment=MappingProxyType(environment),
    )


def for_instance(model: NeuronEcsModel, instance_type: str, *, slo_p99_ms: float | None = None) -> NeuronTask:
    spec = _inferentia(instance_type, [model])
    target = spec.neuron_generation
    assert target is not None
    return _task(spec, build_args(model, target), runtime_environment(model, spec.neuron_cores, slo_p99_ms))


# ---------------------------------------------------------------- several models in one task


class CoreShare(Protocol):
    """One packed model's part of the task, as inferstack.capacity.packing plans it (this layer sits below
    the planner, so it names only what it reads)."""

    @property
    def model(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def visible_cores(self) -> str: ...
    @property
    def workers(self) -> int: ...
    @property
    def slo_p99_ms(self) -> float: ...


class PackedLayout(Protocol):
    """A neuron-cores fleet's plan (inferstack.capacity.packing.NeuronFleetPlan), as far as the task needs it."""

    @property
    def fleet(self) -> str: ...
    @property
    def instance_type(self) -> str: ...
    @property
    def neuron_cores(self) -> int: ...
    @property
    def shares(self) -> Sequence[CoreShare]: ...


def _json(value: object) -> str:
    """Deterministic and compact: the same config gives the same build arg (so the same image asset hash)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def compile_entry(model: NeuronEcsModel) -> dict[str, object]:
    """One model's object in the MODELS build arg: the single-model build args, typed, under the names of
    the container contract (container/neuron/README.md). The model compiles into
    /opt/inferstack/artifact/model/<name>/."""
    source, comp = model.source, model.compile
    return {
        "name": model.name,
        "model": source.huggingface_id or source.local_path or "",
        "revision": source.revision,  # null: the hub's default branch
        "task": source.task,
        "labels": list(source.labels),
        "batch_size": comp.batch_size,
        "sequence_length": comp.sequence_length,
        "neuron_cores": comp.neuron_cores_per_model,
        "parallelism": comp.parallelism,
        "compiler_args": list(comp.compiler_args()),
    }


def packed_build_args(models: Sequence[NeuronEcsModel], neuron_target: str) -> dict[str, str]:
    """MODELS (every model, in the fleet's order) and NEURON_TARGET, nothing else: MODEL_SOURCE must stay empty
    when MODELS is set, and the other single-model args do not apply."""
    return {"MODELS": _json([compile_entry(m) for m in models]), "NEURON_TARGET": neuron_target}


def packed_environment(plan: PackedLayout, models: Sequence[NeuronEcsModel]) -> dict[str, str]:
    """SERVER_MODELS from the plan's shares: each model's port, host-global NeuronCore range and workers, with
    its own batching (the keys the serving app takes per model). Warm-up applies to every packed model: the
    most any member asks for. MODEL_NAME and PORT are left out (the contract forbids them beside
    SERVER_MODELS); NEURON_RT_VISIBLE_CORES names the whole instance, which the one task owns (the app checks
    every model's range lies inside it)."""
    by_name = {m.name: m for m in models}
    served = []
    for share in plan.shares:
        serving = by_name[share.model].serving
        served.append(
            {
                "name": share.model,
                "port": share.port,
                "visible_cores": share.visible_cores,
                "workers": share.workers,
                "max_batch_size": serving.max_batch_size,
                "max_queue_delay_ms": serving.max_queue_delay_ms,
                "slo_ms": share.slo_p99_ms,  # admission answers 503 at once to what it could not serve within it
            }
        )
    return {
        "SERVER_MODELS": _json(served),
        "NEURON_RT_VISIBLE_CORES": visible_cores(plan.neuron_cores),
        "SERVER_WARMUP_ITERATIONS": str(max(m.serving.warmup_requests for m in models)),
    }


def for_fleet(plan: PackedLayout, models: Sequence[NeuronEcsModel]) -> NeuronTask:
    """The one task of a neuron-cores fleet: every member compiled into one image for the instance's
    generation, each served on the plan's core range and port. `models` are the fleet's members."""
    names = [share.model for share in plan.shares]
    if sorted(names) != sorted(m.name for m in models):
        raise ValueError(
            f"fleet {plan.fleet}: the plan shares {', '.join(names)}, the models given are "
            f"{', '.join(m.name for m in models)}"
        )
    ordered = sorted(models, key=lambda m: names.index(m.name))
    spec = _inferentia(plan.instance_type, ordered)
    target = spec.neuron_generation
    assert target is not None
    if spec.neuron_cores != plan.neuron_cores:
        raise ValueError(
            f"fleet {plan.fleet}: planned for {plan.neuron_cores} NeuronCores, {spec.name} has {spec.neuron_cores}"
        )
    return _task(spec, packed_build_args(ordered, target), packed_environment(plan, ordered))
