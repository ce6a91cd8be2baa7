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

import aws_cdk as cdk
from constructs import Construct

from inferstack.capacity import packing
from inferstack.constructs.shared_endpoint import SharedEndpoint
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
        """The endpoint the members' inference components run on (their stacks hold the components)."""
        assert isinstance(self.plan, packing.ComponentFleetPlan)
        # One variant runs every member's container, so they must need the same AMI.
        versions = {m.serving.inference_ami_version for m in self.members}
        if len(versions) != 1:
            raise ValueError(f"fleet {self.fleet_name}: its members need different serving.inference_ami_version "
                             f"({', '.join(sorted(str(v) for v in versions))}); one endpoint runs one AMI")
        self.shared_endpoint = SharedEndpoint(
            self, "Endpoint", plan=self.plan, inference_ami_version=versions.pop(), vpc=shared.vpc,
            subnets=shared.private_subnets, key=shared.key, alarm_topic_arn=shared.alarm_topic.topic_arn,
            vpc_owner_account=shared.vpc_owner_account)
        cdk.CfnOutput(self, "EndpointName", value=self.shared_endpoint.endpoint_name,
                      description=f"fleet {self.fleet_name}: the shared SageMaker endpoint")
        cdk.CfnOutput(self, "DashboardName", value=self.shared_endpoint.dashboard.ref,
                      description=f"fleet {self.fleet_name}: CloudWatch dashboard")
