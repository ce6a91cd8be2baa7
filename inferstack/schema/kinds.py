"""The kinds of model (a model file's `kind:`) and of fleet (environments.yaml `fleets.<name>.kind`), each
registered once, at the end of this file, with the facts the layers above dispatch on. Nothing above the schema
asks a model or a fleet for its class: it asks `model_kind(model)` or `fleet_kind(fleet)` for a fact, or looks
the descriptor up in a table of its own where a kind needs code of its own (its checks, its planner, its
constructs). tests/schema/test_kinds.py fails while a registered kind is missing from such a table.

A new kind: its schema class in a module of its own (added to the ModelConfig union in model_config.py, or
the Fleet union in fleets.py), its registration here (and in Model below), and an entry in each table
tests/schema/test_kinds.py names."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal, TypeVar

from pydantic import BaseModel

from inferstack.schema import instances
from inferstack.schema.fleets import InferenceComponentFleet, NeuronCoreFleet
from inferstack.schema.neuron_ecs import NeuronEcsModel
from inferstack.schema.triton_sagemaker import TritonSageMakerModel

# How a model is served, and so where its callers and the delivery tools find it: "ecs", a service behind a
# load balancer (stack outputs Url, ClusterName, ServiceName; the model has public_load_balancer()); "sagemaker",
# a SageMaker endpoint (stack output EndpointName, and InferenceComponentName on a fleet's shared endpoint).
Hosting = Literal["ecs", "sagemaker"]
# What an off-hours window at min 0 means (config/checks/off_hours.py): "closed", the window must close the service (max
# 0: ECS scales on requests per target, which no request can raise from zero tasks); "on-demand", a request
# scales it out again (inference components); None, not allowed (a dedicated real-time SageMaker endpoint keeps
# at least one instance).
AtZero = Literal["closed", "on-demand"] | None


@dataclass(frozen=True, eq=False)
class ModelKind:
    name: str  # the model file's `kind:`, the Literal of `schema`'s kind field
    schema: type[BaseModel]
    accelerator: instances.Accelerator  # the instance types it runs on
    hosting: Hosting
    at_zero: AtZero  # on its own instances or endpoint

    def __repr__(self) -> str:
        return f"ModelKind({self.name!r})"


@dataclass(frozen=True, eq=False)
class FleetKind:
    name: str  # environments.yaml's `kind:` of the fleet
    schema: type[BaseModel]
    member: ModelKind  # the kind of model it carries
    # True: the fleet's one stack and one image serve every member; the fleet is an image unit of its own
    # (built, promoted and pinned by the fleet's name, so deployed in every environment). False: each member
    # keeps its own stack and image and joins the fleet's shared endpoint.
    serves_members: bool
    at_zero: AtZero

    def __repr__(self) -> str:
        return f"FleetKind({self.name!r})"


MODEL_KINDS: dict[str, ModelKind] = {}
FLEET_KINDS: dict[str, FleetKind] = {}
Kind = TypeVar("Kind", ModelKind, FleetKind)


def register(kind: Kind) -> Kind:
    registry: dict = MODEL_KINDS if isinstance(kind, ModelKind) else FLEET_KINDS
    tag = typing.get_args(kind.schema.model_fields["kind"].annotation)
    if tag != (kind.name,):
        raise ValueError(f"kind {kind.name!r}: {kind.schema.__name__}.kind is Literal{list(tag)}")
    if kind.name in MODEL_KINDS or kind.name in FLEET_KINDS:
        raise ValueError(f"kind {kind.name!r} is registered twice")
    registry[kind.name] = kind
    return kind


def model_kind(model: BaseModel) -> ModelKind:
    return MODEL_KINDS[model.kind]  # type: ignore[attr-defined]  # every registered schema has `kind`


def fleet_kind(fleet: BaseModel) -> FleetKind:
    return FLEET_KINDS[fleet.kind]  # type: ignore[attr-defined]  # every registered schema has `kind`


# ---------------------------------------------------------------- the kinds

NEURON_ECS = register(
    ModelKind("neuron-ecs", NeuronEcsModel, accelerator=instances.INFERENTIA_EC2, hosting="ecs", at_zero="closed")
)
TRITON_SAGEMAKER = register(
    ModelKind(
        "triton-sagemaker", TritonSageMakerModel, accelerator=instances.SAGEMAKER_GPU, hosting="sagemaker", at_zero=None
    )
)

NEURON_CORES = register(
    FleetKind("neuron-cores", NeuronCoreFleet, member=NEURON_ECS, serves_members=True, at_zero="closed")
)
SAGEMAKER_INFERENCE_COMPONENTS = register(
    FleetKind(
        "sagemaker-inference-components",
        InferenceComponentFleet,
        member=TRITON_SAGEMAKER,
        serves_members=False,
        at_zero="on-demand",
    )
)

# Any model, as the layers above annotate it: the registered model kinds' classes (tests/schema/test_kinds.py).
Model = NeuronEcsModel | TritonSageMakerModel
