"""The accelerator instance types inferstack can deploy to, with the facts the stacks derive from them.

Figures come from the AWS instance pages (see shared REFERENCE.md); devices and NeuronCores drive the
ECS task's device list and core ranges, vCPU and memory size the task.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

NeuronGeneration = Literal["inf1", "inf2"]

# NeuronCores per Inferentia chip: Inferentia (v1) has 4, Inferentia2 has 2.
CORES_PER_DEVICE: dict[str, int] = {"inf1": 4, "inf2": 2}


@dataclass(frozen=True)
class InstanceSpec:
    name: str
    vcpus: int
    memory_gib: int
    neuron_devices: int = 0
    gpus: int = 0
    gpu_model: str | None = None
    gpu_memory_gib: int = 0
    compute_capability: str | None = None
    # NVMe instance store (g4dn, g5): SageMaker rejects a volume KmsKeyId for these types; the local
    # disks are encrypted by the instance's hardware module instead.
    instance_storage: bool = False

    @property
    def family(self) -> str:
        """`inf1`, `inf2`, `g4dn`, ... (the `ml.` prefix of SageMaker types dropped)."""
        return self.name.removeprefix("ml.").split(".")[0]

    @property
    def is_sagemaker(self) -> bool:
        return self.name.startswith("ml.")

    @property
    def neuron_generation(self) -> NeuronGeneration | None:
        return self.family if self.family in CORES_PER_DEVICE else None  # type: ignore[return-value]  # its keys are the generations

    @property
    def neuron_cores(self) -> int:
        gen = self.neuron_generation
        return self.neuron_devices * CORES_PER_DEVICE[gen] if gen else 0

    @property
    def device_paths(self) -> tuple[str, ...]:
        return tuple(f"/dev/neuron{i}" for i in range(self.neuron_devices))


def _neuron(name: str, vcpus: int, memory_gib: int, devices: int) -> InstanceSpec:
    return InstanceSpec(name, vcpus, memory_gib, neuron_devices=devices)


def _gpu(name: str, vcpus: int, memory_gib: int, gpus: int, model: str, gpu_mem: int, cc: str) -> InstanceSpec:
    # Every GPU type in the catalog (g4dn, g5) comes with NVMe instance storage.
    return InstanceSpec(
        name,
        vcpus,
        memory_gib,
        gpus=gpus,
        gpu_model=model,
        gpu_memory_gib=gpu_mem,
        compute_capability=cc,
        instance_storage=True,
    )


_CATALOG = [
    _neuron("inf1.xlarge", 4, 8, 1),
    _neuron("inf1.2xlarge", 8, 16, 1),
    _neuron("inf1.6xlarge", 24, 48, 4),
    _neuron("inf1.24xlarge", 96, 192, 16),
    _neuron("inf2.xlarge", 4, 16, 1),
    _neuron("inf2.8xlarge", 32, 128, 1),
    _neuron("inf2.24xlarge", 96, 384, 6),
    _neuron("inf2.48xlarge", 192, 768, 12),
    _gpu("ml.g4dn.xlarge", 4, 16, 1, "T4", 16, "7.5"),
    _gpu("ml.g4dn.2xlarge", 8, 32, 1, "T4", 16, "7.5"),
    _gpu("ml.g4dn.4xlarge", 16, 64, 1, "T4", 16, "7.5"),
    _gpu("ml.g4dn.8xlarge", 32, 128, 1, "T4", 16, "7.5"),
    _gpu("ml.g4dn.12xlarge", 48, 192, 4, "T4", 16, "7.5"),
    _gpu("ml.g4dn.16xlarge", 64, 256, 1, "T4", 16, "7.5"),
    _gpu("ml.g5.xlarge", 4, 16, 1, "A10G", 24, "8.6"),
    _gpu("ml.g5.2xlarge", 8, 32, 1, "A10G", 24, "8.6"),
    _gpu("ml.g5.4xlarge", 16, 64, 1, "A10G", 24, "8.6"),
    _gpu("ml.g5.12xlarge", 48, 192, 4, "A10G", 24, "8.6"),
]

INSTANCES: dict[str, InstanceSpec] = {spec.name: spec for spec in _CATALOG}


class UnknownInstanceType(ValueError):
    pass


@dataclass(frozen=True)
class Accelerator:
    """The instance types one kind of model runs on (inferstack.schema.kinds), as validate names them:
    "<type> is not <description>; <kind> needs <types>"."""

    description: str
    types: str
    runs: Callable[[InstanceSpec], bool]


INFERENTIA_EC2 = Accelerator(
    "an Inferentia EC2 type",
    "inf1.* or inf2.*",
    lambda spec: not spec.is_sagemaker and spec.neuron_generation is not None,
)
SAGEMAKER_GPU = Accelerator(
    "a SageMaker GPU type", "ml.g4dn.* or ml.g5.*", lambda spec: spec.is_sagemaker and spec.gpus > 0
)


def unknown_message(name: str, kind: str | None = None, accelerator: Accelerator | None = None) -> str:
    """One line for an instance type the catalog does not hold: the `ml.` prefix missing or where it does not
    belong, else the closest type, then the types a `kind` model runs on (its `accelerator`'s; every type
    without one)."""
    candidates = [n for n, spec in INSTANCES.items() if accelerator is None or accelerator.runs(spec)]
    toggled = name[3:] if name.startswith("ml.") else f"ml.{name}"
    hint = ""
    if toggled in candidates:
        hint = (
            f" (SageMaker instance types take the ml. prefix: did you mean {toggled!r}?)"
            if toggled.startswith("ml.")
            else f" ({INSTANCES[toggled].family} instances are EC2 instances for ECS, named without SageMaker's "
            f"ml. prefix: did you mean {toggled!r}?)"
        )
    elif toggled in INSTANCES:
        hint = f" ({toggled} exists, but {kind} does not run on it)"
    else:
        close = difflib.get_close_matches(name.lower(), candidates, n=1)
        if close:
            hint = f" (did you mean {close[0]!r}?)"
    where = f"{kind} runs on" if kind else "known"
    return f"unknown instance type {name!r}{hint}; {where}: {', '.join(candidates)}"


def get(name: str) -> InstanceSpec:
    try:
        return INSTANCES[name]
    except KeyError:
        raise UnknownInstanceType(unknown_message(name)) from None
