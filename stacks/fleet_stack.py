"""One stack per fleet (environments.yaml `fleets:`): accelerators several models share, per kind (SERVES).

- `neuron-cores`: one ECS service on Inferentia whose task serves every member model, each on its own
  NeuronCore range and port (inferstack.capacity.packing plans the split). The members get no stack of
  their own.
- `sagemaker-inference-components`: the shared SageMaker endpoint (its instances under managed instance
  scaling). Each member keeps its own serving stack, holding its Model and inference component, scaling,
  alarms and dashboard; those stacks depend on this one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import aws_cdk as cdk
from aws_cdk import aws_logs as logs
from constructs import Construct

from inferstack.aws import stack_outputs
from inferstack.capacity import packing
from inferstack.config import Environment
from inferstack.config.loader import Model
from inferstack.config.release_pin import PinnedImage
from inferstack.constructs.neuron_service import ImageBuild, NeuronEcsService
from inferstack.constructs.shared_endpoint import SharedEndpoint
from inferstack.neuron import deployment as neuron_deployment
from inferstack.neuron import image as neuron_image
from inferstack.schema import kinds
from inferstack.schema.fleets import Fleet
from stacks.base import EnvironmentStack
from stacks.foundation_stack import SharedResources


class FleetStack(EnvironmentStack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        fleet_name: str,
        fleet: Fleet,
        members: Sequence[Model],
        environment: Environment,
        env_name: str,
        shared: SharedResources,
        pinned_image: PinnedImage | None = None,
        **kwargs,
    ) -> None:
        """`pinned_image`: a neuron-cores fleet's promoted image (one image holds every member)."""
        super().__init__(scope, construct_id, environment=environment, **kwargs)
        kind = kinds.fleet_kind(fleet)
        if any(kinds.model_kind(m) is not kind.member for m in members):
            raise ValueError(f"fleet {fleet_name}: a {kind.name} fleet carries {kind.member.name} models only")
        self.fleet_name = fleet_name
        self.fleet = fleet
        self.members = tuple(members)
        self.plan = packing.plan_fleet(fleet_name, fleet, members, env_name, environment)
        # What the members' serving stacks take from this one (inference components: the endpoint they join).
        self.shared_endpoint: SharedEndpoint | None = None
        # neuron-cores: this stack serves the members; inference components: their own stacks do.
        self.serves_members = kind.serves_members
        SERVES[kind](self, environment, env_name, shared, pinned_image)

    def _neuron_fleet(
        self, environment: Environment, env_name: str, shared: SharedResources, pinned_image: PinnedImage | None
    ) -> None:
        """One NeuronEcsService whose task serves every member on the plan's core ranges and ports, from one
        image: built from container/neuron/ with every member's compile settings (MODELS), or the fleet's
        promoted image (pins name the fleet, not its members)."""
        plan, fleet, members = self.plan, self.fleet, self.members
        assert isinstance(plan, packing.NeuronFleetPlan)
        public = {m.name: m.public_load_balancer(environment) for m in members}
        if len(set(public.values())) != 1:
            raise ValueError(
                f"fleet {self.fleet_name}: its models share one load balancer but disagree on "
                f"load_balancer.public ({', '.join(f'{k}: {v}' for k, v in public.items())})"
            )
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            encryption_key=shared.key,
            retention=shared.log_retention,
            removal_policy=shared.removal_policy,
        )
        self.neuron = NeuronEcsService(
            self,
            "Neuron",
            models=members,
            capacity=plan,
            vpc=shared.vpc,
            vpc_cidr=environment.network.cidr,
            subnets=shared.private_subnets,
            log_group=self.log_group,
            alarm_topic_arn=shared.alarm_topic.topic_arn,
            public=next(iter(public.values())),
            certificate_arn=environment.defaults.certificate_arn,
            image=pinned_image or ImageBuild(str(neuron_image.DIRECTORY)),
            access_log_retention=cdk.Duration.days(environment.defaults.log_retention_days),
            removal_policy=shared.removal_policy,
            rollout=neuron_deployment.rollout(fleet.deployment_for(env_name)),
            metrics_service=self.stack_name,
        )
        name, service = self.fleet_name, self.neuron
        cdk.CfnOutput(self, "LogGroupName", value=self.log_group.log_group_name, description=f"{name}: serving logs")
        cdk.CfnOutput(
            self,
            "LoadBalancerDnsName",
            value=service.load_balancer.load_balancer_dns_name,
            description=f"{name}: load balancer DNS name",
        )
        cdk.CfnOutput(self, "Url", value=service.url, description=f"{name}: base URL of every model's server")
        cdk.CfnOutput(self, "ClusterName", value=service.cluster.cluster_name, description=f"{name}: ECS cluster")
        cdk.CfnOutput(self, "ServiceName", value=service.service.service_name, description=f"{name}: ECS service")
        cdk.CfnOutput(
            self,
            stack_outputs.MODEL_PATHS,
            value=stack_outputs.model_paths_value({served.name: served.path for served in service.served}),
            description=f"{name}: each model's path under Url (JSON: model -> path)",
        )

    def _shared_endpoint(
        self, environment: Environment, env_name: str, shared: SharedResources, pinned_image: PinnedImage | None
    ) -> None:
        """The endpoint the members' inference components run on (their stacks hold the components and their
        images: a release pins no image for this fleet, `pinned_image` is None)."""
        assert isinstance(self.plan, packing.ComponentFleetPlan)
        # One variant runs every member's container, so they must need the same AMI.
        versions = {m.serving.inference_ami_version for m in self.members}
        if len(versions) != 1:
            raise ValueError(
                f"fleet {self.fleet_name}: its members need different serving.inference_ami_version "
                f"({', '.join(sorted(str(v) for v in versions))}); one endpoint runs one AMI"
            )
        self.shared_endpoint = SharedEndpoint(
            self,
            "Endpoint",
            plan=self.plan,
            inference_ami_version=versions.pop(),
            vpc=shared.vpc,
            subnets=shared.private_subnets,
            key=shared.key,
            alarm_topic_arn=shared.alarm_topic.topic_arn,
            vpc_owner_account=shared.vpc_owner_account,
        )
        cdk.CfnOutput(
            self,
            "EndpointName",
            value=self.shared_endpoint.endpoint_name,
            description=f"fleet {self.fleet_name}: the shared SageMaker endpoint",
        )
        cdk.CfnOutput(
            self,
            "DashboardName",
            value=self.shared_endpoint.dashboard.ref,
            description=f"fleet {self.fleet_name}: CloudWatch dashboard",
        )


# How a fleet's stack serves each fleet kind: its constructs and outputs.
SERVES: dict[kinds.FleetKind, Callable[..., None]] = {
    kinds.NEURON_CORES: FleetStack._neuron_fleet,
    kinds.SAGEMAKER_INFERENCE_COMPONENTS: FleetStack._shared_endpoint,
}
