"""The neuron-ecs model kind: compiled for Inferentia, served by an ECS service behind a load balancer."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from inferstack.schema.base import Frozen, PositiveInt
from inferstack.schema.deployment import Deployment
from inferstack.schema.environments import Environment
from inferstack.schema.model_file import ModelBase


def _compiler_flag(arg: str) -> str:
    # Flags reach a shell-free argv, but reject anything that is not plainly a flag.
    if not re.fullmatch(r"--?[A-Za-z0-9][\w-]*(=[\w.,:-]+)?", arg):
        raise ValueError(f"{arg!r} is not a compiler flag like --name or --name=value")
    return arg


CompilerFlag = Annotated[str, AfterValidator(_compiler_flag)]


class NeuronCompile(Frozen):
    neuron_generation: Literal["inf1", "inf2"] = Field(description="compile target: torch-neuron or torch-neuronx")
    batch_size: int = Field(1, ge=1, le=64, description="fixed batch dimension traced per NeuronCore")
    sequence_length: int = Field(128, ge=8, le=4096, description="inputs are padded to this many tokens")
    neuron_cores_per_model: PositiveInt = Field(1, description="NeuronCores one compiled copy occupies")
    parallelism: Literal["data-parallel", "pipeline"] = Field(
        "data-parallel",
        description="data-parallel: one core per copy, copies on every core; "
        "pipeline: one copy sharded over neuron_cores_per_model cores",
    )
    cast: Literal["none", "matmult", "all"] = Field(
        "none", description="down-cast FP32 ops (inf1 --fp32-cast, inf2 --auto-cast)"
    )
    cast_type: Literal["bf16", "fp16"] = Field(
        "bf16", description="inf2: the type --auto-cast casts to (--auto-cast-type)"
    )
    extra_compiler_args: tuple[CompilerFlag, ...] = Field((), description="further compiler flags, appended as given")

    def compiler_args(self) -> tuple[str, ...]:
        """The flags handed to torch.neuron.trace / torch_neuronx.trace."""
        args: list[str] = []
        if self.neuron_generation == "inf1":
            if self.cast != "none":
                args.append(f"--fp32-cast={self.cast}")
            if self.parallelism == "pipeline":
                args += ["--neuroncore-pipeline-cores", str(self.neuron_cores_per_model)]
        else:
            if self.cast != "none":
                args += ["--auto-cast", self.cast, "--auto-cast-type", self.cast_type]
        return tuple(args) + self.extra_compiler_args


class NeuronServing(Frozen):
    data_parallel: bool = Field(True, description="wrap the model in DataParallel over the worker's cores")
    max_batch_size: int = Field(16, ge=1, le=1024, description="server-side dynamic batch cap")
    max_queue_delay_ms: float = Field(2.0, ge=0, le=1000, description="longest a request waits for a batch")
    workers: PositiveInt = Field(1, description="server processes; each owns a disjoint NeuronCore range")
    warmup_requests: int = Field(
        8, ge=1, le=10000, description="inferences each worker runs at start, before it reports ready"
    )
    health_check_grace_seconds: int = Field(300, ge=30, le=7200, description="model load plus warm-up")
    port: int = Field(8080, ge=1024, le=65535, description="container port the server listens on")
    root_volume_gib: int = Field(
        100,
        ge=30,
        le=16384,
        description="encrypted root volume of each instance: it "
        "holds the image with its compiled model; at least the AMI's own root size",
    )


class NeuronLoadBalancer(Frozen):
    public: bool | None = Field(
        None, description="internet-facing, HTTPS only; omitted: the environment's defaults.public_load_balancer"
    )
    deregistration_delay_seconds: int = Field(
        15, ge=0, le=3600, description="how long a stopping task keeps serving in-flight requests; requests are short"
    )


class NeuronScaling(Frozen):
    scale_out_cooldown_seconds: int = Field(60, ge=0, le=3600, description="wait after adding tasks")
    scale_in_cooldown_seconds: int = Field(300, ge=0, le=3600, description="wait after removing tasks")


class NeuronAlarms(Frozen):
    error_rate_percent: float = Field(1.0, gt=0, le=100, description="target 5xx responses as a share of requests")
    cpu_percent: float = Field(90, gt=0, le=100, description="service CPU utilization, of the task's reservation")
    memory_percent: float = Field(90, gt=0, le=100, description="service memory utilization, of the task's limit")
    evaluation_minutes: int = Field(3, ge=1, le=60, description="consecutive breaching minutes before an alarm fires")


class NeuronEcsModel(ModelBase):
    kind: Literal["neuron-ecs"] = Field(description="served on Inferentia by an ECS service behind a load balancer")
    compile: NeuronCompile = Field(description="how `docker build` compiles the model for the Neuron target")
    serving: NeuronServing = Field(
        NeuronServing(), description="the server in the task: batching, workers, warm-up, health check"
    )
    deployment: Deployment | None = Field(
        None,
        description="ECS native rollout (canary, linear, all-at-once blue/green, or rolling), rolled back "
        "on the SLO alarms; omitted: rolling, starting the whole new fleet before stopping the old one",
    )
    load_balancer: NeuronLoadBalancer = Field(
        NeuronLoadBalancer(), description="the service's Application Load Balancer"
    )
    scaling: NeuronScaling = Field(
        NeuronScaling(), description="cooldowns of the scaling policies (their targets come from the plan)"
    )
    alarms: NeuronAlarms = Field(NeuronAlarms(), description="alarm thresholds besides the SLO's p99")

    def public_load_balancer(self, environment: Environment) -> bool:
        """The model's own setting wins over the environment default."""
        if self.load_balancer.public is not None:
            return self.load_balancer.public
        return environment.defaults.public_load_balancer
