"""One stack per model: what every model needs (log group, alarm wiring) plus its serving construct, per kind
(SERVES; a neuron-cores fleet's members: stacks/fleet_stack.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_logs as logs
from constructs import Construct

from inferstack.aws import stack_outputs
from inferstack.capacity import planning
from inferstack.config import Environment, TritonSageMakerModel
from inferstack.config.loader import Model
from inferstack.config.release_pin import PinnedImage
from inferstack.constructs.neuron_service import ImageBuild, NeuronEcsService
from inferstack.constructs.shared_endpoint import SharedEndpoint
from inferstack.constructs.triton_component import TritonComponent
from inferstack.constructs.triton_endpoint import TritonEndpoint
from inferstack.neuron import deployment as neuron_deployment
from inferstack.neuron import image as neuron_image
from inferstack.schema import kinds
from inferstack.schema.neuron_ecs import NeuronEcsModel
from inferstack.triton import config as triton_config
from inferstack.triton import image as triton_image
from stacks.base import EnvironmentStack
from stacks.foundation_stack import SharedResources

ROOT = Path(__file__).resolve().parent.parent  # the Triton image builds from here (inferstack/triton/image.py)


class ServingStack(EnvironmentStack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model: Model,
        environment: Environment,
        env_name: str,
        shared: SharedResources,
        pinned_image: PinnedImage | None = None,
        shared_endpoint: SharedEndpoint | None = None,
        **kwargs,
    ) -> None:
        """`pinned_image`: deploy this promoted image (by digest) instead of building one. `shared_endpoint`:
        the endpoint of the inference-components fleet that carries this model, in the fleet's stack, with the
        fleet's plan (None: its own endpoint)."""
        super().__init__(scope, construct_id, environment=environment, **kwargs)
        self.model = model
        self.pinned_image = pinned_image
        self.shared_endpoint = shared_endpoint
        # The registry image its image build starts from, where it has one (the pipeline logs in to its registry).
        self.base_image: str | None = None
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            encryption_key=shared.key,
            retention=shared.log_retention,
            removal_policy=shared.removal_policy,
        )
        # Alarms notify the topic when they fire and when they clear.
        self.alarm_topic_arn = shared.alarm_topic.topic_arn
        cdk.CfnOutput(
            self, "LogGroupName", value=self.log_group.log_group_name, description=f"{model.name}: serving logs"
        )
        SERVES[kinds.model_kind(model)](self, model, environment, env_name, shared)

    def _triton(
        self, model: TritonSageMakerModel, environment: Environment, env_name: str, shared: SharedResources
    ) -> None:
        self.triton = (
            self._triton_endpoint(model, environment, env_name, shared)
            if self.shared_endpoint is None
            else self._triton_component(model, environment, shared)
        )

    def _triton_endpoint(
        self, model: TritonSageMakerModel, environment: Environment, env_name: str, shared: SharedResources
    ) -> TritonEndpoint:
        plan = planning.plan(model, env_name, environment)
        image_uri, repository = self._triton_image(model, environment, plan.instance_type)
        endpoint = TritonEndpoint(
            self,
            "Triton",
            model=model,
            plan=plan,
            off_hours=model.off_hours_for(env_name),
            image_uri=image_uri,
            image_repository=repository,
            vpc=shared.vpc,
            vpc_owner_account=shared.vpc_owner_account,
            subnets=shared.private_subnets,
            key=shared.key,
            alarm_topic_arn=self.alarm_topic_arn,
            removal_policy=shared.removal_policy,
            log_group=self.log_group,
        )
        cdk.CfnOutput(
            self, "EndpointName", value=endpoint.endpoint_name, description=f"{model.name}: SageMaker endpoint (Triton)"
        )
        cdk.CfnOutput(
            self, "DashboardName", value=endpoint.dashboard.ref, description=f"{model.name}: CloudWatch dashboard"
        )
        return endpoint

    def _triton_component(
        self, model: TritonSageMakerModel, environment: Environment, shared: SharedResources
    ) -> TritonComponent:
        """The model as an inference component on its fleet's shared endpoint. Its own off_hours do not
        apply there (they count a dedicated endpoint's instances): the fleet's windows do."""
        endpoint = self.shared_endpoint
        assert endpoint is not None
        plan = endpoint.plan
        image_uri, repository = self._triton_image(model, environment, plan.instance_type)
        component = TritonComponent(
            self,
            "Triton",
            model=model,
            plan=plan,
            shared=endpoint,
            image_uri=image_uri,
            image_repository=repository,
            vpc=shared.vpc,
            vpc_owner_account=shared.vpc_owner_account,
            alarm_topic_arn=self.alarm_topic_arn,
            log_group=self.log_group,
        )
        # inferstack smoke invokes the component: InvokeEndpoint(EndpointName=..., InferenceComponentName=...).
        cdk.CfnOutput(
            self,
            stack_outputs.ENDPOINT_NAME,
            value=component.endpoint_name,
            description=f"{model.name}: the shared SageMaker endpoint of fleet {plan.fleet}",
        )
        cdk.CfnOutput(
            self,
            stack_outputs.INFERENCE_COMPONENT_NAME,
            value=component.component_name,
            description=f"{model.name}: its inference component on that endpoint",
        )
        cdk.CfnOutput(
            self, "DashboardName", value=component.dashboard.ref, description=f"{model.name}: CloudWatch dashboard"
        )
        return component

    def _triton_image(
        self, model: TritonSageMakerModel, environment: Environment, instance_type: str
    ) -> tuple[str, ecr.IRepository]:
        """The serving image: built from container/triton/ for the instance type, or the promoted one."""
        self.base_image = triton_image.base_image_uri(
            region=environment.region, version=model.serving.image_version, instance_type=instance_type
        )
        if self.pinned_image is None:
            build_args = {
                "TRITON_BASE_IMAGE": self.base_image,
                "TRITON_REPOSITORY_SPEC": triton_config.RepositorySpec.of(model).model_dump_json(),
            }
            if model.serving.backend == "tensorrt":
                # A plan only runs on the GPU it was built for: the export checks the build host against it.
                build_args["TRITON_TARGET_INSTANCE_TYPE"] = instance_type
            image = ecr_assets.DockerImageAsset(
                self,
                "TritonImage",
                directory=str(ROOT),
                file=triton_image.DOCKERFILE,
                exclude=list(triton_image.BUILD_CONTEXT),
                ignore_mode=cdk.IgnoreMode.DOCKER,
                platform=ecr_assets.Platform.LINUX_AMD64,
                build_args=build_args,
            )
            return image.image_uri, image.repository
        pinned = self.pinned_image
        # The execution roles may pull from this repository only (the constructs scope them to it).
        repository = ecr.Repository.from_repository_attributes(
            self,
            "TritonImageRepository",
            repository_name=pinned.repository_name,
            repository_arn=self.format_arn(
                service="ecr",
                resource="repository",
                resource_name=pinned.repository_name,
                account=pinned.account,
                region=pinned.region,
            ),
        )
        return pinned.uri, repository

    def _neuron_service(
        self, model: NeuronEcsModel, environment: Environment, env_name: str, shared: SharedResources
    ) -> None:
        self.neuron = service = NeuronEcsService(
            self,
            "Neuron",
            models=[model],
            capacity=planning.plan(model, env_name, environment),
            off_hours=model.off_hours_for(env_name),
            vpc=shared.vpc,
            vpc_cidr=environment.network.cidr,
            subnets=shared.private_subnets,
            log_group=self.log_group,
            alarm_topic_arn=self.alarm_topic_arn,
            public=model.public_load_balancer(environment),
            certificate_arn=environment.defaults.certificate_arn,
            image=self.pinned_image or ImageBuild(str(neuron_image.DIRECTORY)),
            access_log_retention=cdk.Duration.days(environment.defaults.log_retention_days),
            removal_policy=shared.removal_policy,
            rollout=neuron_deployment.rollout(model.deployment_for(env_name)),
            metrics_service=self.stack_name,
        )
        cdk.CfnOutput(
            self,
            "LoadBalancerDnsName",
            value=service.load_balancer.load_balancer_dns_name,
            description=f"{model.name}: load balancer DNS name",
        )
        cdk.CfnOutput(self, "Url", value=service.url, description=f"{model.name}: base URL of the model server")
        cdk.CfnOutput(self, "ClusterName", value=service.cluster.cluster_name, description=f"{model.name}: ECS cluster")
        cdk.CfnOutput(self, "ServiceName", value=service.service.service_name, description=f"{model.name}: ECS service")


# How a serving stack serves each model kind: its constructs and outputs.
SERVES: dict[kinds.ModelKind, Callable[..., None]] = {
    kinds.NEURON_ECS: ServingStack._neuron_service,
    kinds.TRITON_SAGEMAKER: ServingStack._triton,
}
