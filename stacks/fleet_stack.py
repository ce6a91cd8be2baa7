"""One stack per fleet (environments.yaml `fleets:`): accelerators several models share.

- `neuron-cores`: one ECS service on Inferentia whose task serves every member model, each on its own
  NeuronCore range and port (inferstack.capacity.packing plans the split). The members get no stack of
  their own.
- `sagemaker-inference-components`: the shared SageMaker endpoint (its instances under managed instance
  scaling). Each member keeps its own serving stack, holding its Model and inference component, scaling,
  alarms and dashboard; those stacks depend on this one.
"""

from __future__ import annotations

from collections.abc import Sequence

from constructs import Construct

from inferstack.capacity import packing
from inferstack.config import Environment
from inferstack.config.loader import Model
from inferstack.config.release_pin import PinnedImage
from inferstack.schema.models import Fleet, InferenceComponentFleet, NeuronCoreFleet
from stacks.base import EnvironmentStack
from stacks.foundation_stack import SharedResources


class FleetStack(EnvironmentStack):
    def __init__(self, scope: Construct, construct_id: str, *, fleet_name: str, fleet: Fleet,
                 members: Sequence[Model], environment: Environment, env_name: str, shared: SharedResources,
                 pinned_image: PinnedImage | None = None, **kwargs) -> None:
        """`pinned_image`: a neuron-cores fleet's promoted image (one image holds every member)."""
        super().__init__(scope, construct_id, environment=environment, **kwargs)
        self.fleet_name = fleet_name
        self.fleet = fleet
        self.members = tuple(members)
        self.plan = packing.plan_fleet(fleet_name, fleet, members, env_name, environment)
        # neuron-cores: this stack serves the members; inference components: their own stacks do.
        self.serves_members = isinstance(fleet, NeuronCoreFleet)
        if isinstance(fleet, NeuronCoreFleet):
            self._neuron_fleet(environment, env_name, shared, pinned_image)
        elif isinstance(fleet, InferenceComponentFleet):
            self._shared_endpoint(environment, env_name, shared)

    def _neuron_fleet(self, environment: Environment, env_name: str, shared: SharedResources,
                      pinned_image: PinnedImage | None) -> None:
        raise NotImplementedError("neuron-cores fleets: see the neuron fleet work")

    def _shared_endpoint(self, environment: Environment, env_name: str, shared: SharedResources) -> None:
        raise NotImplementedError("inference-component fleets: see the shared endpoint work")
