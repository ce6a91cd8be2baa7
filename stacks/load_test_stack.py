"""An environment's load-test stack (`<env>-LoadTest`, only where environments.yaml sets `load_test:`): the
Locust generators on Fargate, their image and their results bucket. Its outputs are read by name
(inferstack.aws.stack_outputs): by `inferstack loadtest --env` to start a run, by promotion's gate to
read a release's results."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from constructs import Construct

from inferstack.aws import stack_outputs
from inferstack.config import Environment
from inferstack.constructs.load_test import LoadTestGenerators
from inferstack.constructs.load_test_access import LoadTestAccess
from stacks.base import EnvironmentStack
from stacks.foundation_stack import SharedResources, ToolRole

ROOT = Path(__file__).resolve().parent.parent
LOAD_TEST_DOCKERFILE = "container/loadtest/Dockerfile"
# The image builds from the repository root so it runs inferstack's own load-test modules (shared code, not a
# copy). Only what its entrypoint imports is in the context (the image build rehearsal fails on one module more or
# less), so the image changes only when they or container/loadtest/ do, never with the CLI-side fargate.py,
# command.py or the config. Kept identical to container/loadtest/Dockerfile.dockerignore (a test checks).
LOAD_TEST_BUILD_CONTEXT = (
    "*",
    "!inferstack/__init__.py",
    "!inferstack/atomic_write.py",
    *(
        f"!inferstack/loadtest/{name}.py"
        for name in (
            "__init__",
            "answer",
            "locustfile",
            "measure",
            "pacing",
            "report",
            "results",
            "runner",
            "spec",
            "task",
            "wire",
        )
    ),
    "!container/loadtest",
    "**/__pycache__",
    "**/*.pyc",
)


class LoadTestStack(EnvironmentStack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment: Environment,
        env_name: str,
        shared: SharedResources,
        runner_role: ToolRole,
        **kwargs,
    ) -> None:
        """`runner_role`: the role `inferstack loadtest --env` assumes from outside (the pipeline's step)."""
        super().__init__(scope, construct_id, environment=environment, **kwargs)
        settings = environment.load_test
        if settings is None:
            raise ValueError(f"{env_name}: environments.yaml sets no load_test, so it has no load-test stack")
        # Built from the commit being deployed, not promoted with the serving images: it is the measuring
        # instrument, and its tag is the hash of this context, recorded per stack in the release manifest.
        image = ecr_assets.DockerImageAsset(
            self,
            "Image",
            directory=str(ROOT),
            file=LOAD_TEST_DOCKERFILE,
            exclude=list(LOAD_TEST_BUILD_CONTEXT),
            ignore_mode=cdk.IgnoreMode.DOCKER,
            platform=ecr_assets.Platform.LINUX_AMD64,
        )
        generators = LoadTestGenerators(
            self,
            "Generators",
            vpc=shared.vpc,
            vpc_cidr=environment.network.cidr,
            key=shared.key,
            image=ecs.ContainerImage.from_docker_image_asset(image),
            cpu=settings.worker_cpu,
            memory_mib=settings.worker_memory_mib,
            results_retention=cdk.Duration.days(settings.results_retention_days),
            access_log_retention=cdk.Duration.days(environment.defaults.log_retention_days),
            log_retention=shared.log_retention,
            removal_policy=shared.removal_policy,
            endpoint_name_prefix=stack_outputs.stack_name(env_name, ""),
        )
        self.image = image
        self.generators = generators
        self.access = LoadTestAccess(
            self,
            "Access",
            role_name=runner_role.name,
            trusted_account=runner_role.trusted_account,
            trusted_role_prefix=runner_role.trusted_role_prefix,
            stack_name_prefix=stack_outputs.stack_name(env_name, ""),
            cluster=generators.cluster,
            task_definitions=[generators.master_task_definition, generators.worker_task_definition],
            pass_roles=[generators.execution_role, generators.master_role, generators.worker_role],
            bucket=generators.results_bucket,
            key=shared.key,
        )
        outputs = {
            stack_outputs.RESULTS_BUCKET: (
                generators.results_bucket.bucket_name,
                "load-test results (result.json, report.txt, latency.png under <release>/<model>/<run id>/)",
            ),
            stack_outputs.CLUSTER: (generators.cluster.cluster_name, "ECS cluster the generators run in"),
            stack_outputs.MASTER_TASK_DEFINITION: (
                generators.master_task_definition.task_definition_arn,
                "Locust master (Fargate)",
            ),
            stack_outputs.WORKER_TASK_DEFINITION: (
                generators.worker_task_definition.task_definition_arn,
                "Locust worker (Fargate)",
            ),
            stack_outputs.MASTER_CONTAINER: (
                generators.master_task_definition.default_container.container_name,
                "the master's container (RunTask overrides name it)",
            ),
            stack_outputs.WORKER_CONTAINER: (
                generators.worker_task_definition.default_container.container_name,
                "the workers' container (RunTask overrides name it)",
            ),
            stack_outputs.MASTER_SECURITY_GROUP: (
                generators.master_security_group.security_group_id,
                "the master's security group",
            ),
            stack_outputs.WORKER_SECURITY_GROUP: (
                generators.worker_security_group.security_group_id,
                "the workers' security group",
            ),
        }
        for name, (value, description) in outputs.items():
            cdk.CfnOutput(self, name, value=value, description=description)
