"""An environment's load-test generators: Locust's master and workers as Fargate task definitions in an ECS
cluster of their own, in the private subnets, plus the bucket their results go to. Nothing runs until a test
starts tasks (inferstack/loadtest/fargate.py, RunTask): no service, no capacity, no idle cost.

The master runs no users: it only takes its workers' connections on Locust's port and writes the results to
the bucket. The workers call the model, through the SageMaker runtime API or an internal load balancer, and
connect to the master. Each side gets its own security group and task role, so a worker cannot write results
and the master cannot call a model."""

from __future__ import annotations

from typing import cast

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from inferstack.constructs import checkov, nag

MASTER_CONTAINER = "Master"
WORKER_CONTAINER = "Worker"
# The image's ENTRYPOINT is `python -m inferstack.loadtest.task`; the task definition names the role.
MASTER_COMMAND = ("master",)
WORKER_COMMAND = ("worker",)
# Locust's master takes its workers' connections here (--master-bind-port, Locust's default).
LOCUST_PORT = 5557
HTTPS_PORT = 443
# Internal load balancers listen on HTTP inside the VPC, or on HTTPS where the environment has a certificate
# (inferstack/constructs/neuron_service/load_balancer.py): HTTPS is open anyway for the AWS APIs.
HTTP_PORT = 80
# Locust writes its CSV statistics and the report under the working directory; the root file system is
# read-only, so this is the one writable path (a task-local volume, gone with the task).
SCRATCH_PATH = "/tmp"
RESULTS_ACCESS_LOG_PREFIX = "results/"
# A new object version exists only when a run id is reused; the older copy is kept this long.
NONCURRENT_RESULT_DAYS = 7


class LoadTestGenerators(Construct):
    """Exposes `cluster`, `master_task_definition`, `worker_task_definition`, `master_security_group`,
    `worker_security_group`, `master_role`, `worker_role`, `execution_role`, `log_group` and `results_bucket`.
    A run places its tasks in the environment's private subnets (RunTask's network configuration, with no public IP).

    `image`: the load-test image (ENTRYPOINT `python -m inferstack.loadtest.task`). `cpu`/`memory_mib`: one
    valid Fargate size (inferstack/schema/fargate.py), for master and workers alike: the master aggregates
    every worker's statistics each second and renders the report, so it is never made the smaller one.
    `endpoint_name_prefix`: every SageMaker endpoint (and inference component) of this environment starts with
    it; the workers may invoke those only. `vpc_cidr`: the VPC's range, where internal load balancers listen."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        vpc_cidr: str,
        key: kms.IKey,
        image: ecs.ContainerImage,
        cpu: int,
        memory_mib: int,
        results_retention: cdk.Duration,
        access_log_retention: cdk.Duration,
        log_retention: logs.RetentionDays,
        removal_policy: cdk.RemovalPolicy,
        endpoint_name_prefix: str,
    ) -> None:
        super().__init__(scope, construct_id)
        if not endpoint_name_prefix:
            raise ValueError("endpoint_name_prefix must not be empty (it scopes what the workers may invoke)")
        self.results_bucket = self._results_bucket(key, results_retention, access_log_retention, removal_policy)
        self.log_group = logs.LogGroup(
            self, "Logs", encryption_key=key, retention=log_retention, removal_policy=removal_policy
        )
        self.cluster = ecs.Cluster(self, "Cluster", vpc=vpc, container_insights_v2=ecs.ContainerInsights.ENABLED)
        self._add_security_groups(vpc, vpc_cidr)
        self._add_roles(key, endpoint_name_prefix)
        self.master_task_definition = self._task_definition(
            "Master", MASTER_CONTAINER, MASTER_COMMAND, self.master_role, image, cpu, memory_mib, port=LOCUST_PORT
        )
        self.worker_task_definition = self._task_definition(
            "Worker", WORKER_CONTAINER, WORKER_COMMAND, self.worker_role, image, cpu, memory_mib
        )
        execution_policy = self.execution_role.node.find_child("DefaultPolicy")
        nag.acknowledge(
            execution_policy,
            "IAM5[Resource::*]",
            "ecr:GetAuthorizationToken supports no resource-level permission; image pulls are limited "
            "to the load-test image's repository and logs to this construct's log group",
        )

    # ------------------------------------------------------------------ results

    def _results_bucket(
        self,
        key: kms.IKey,
        retention: cdk.Duration,
        access_log_retention: cdk.Duration,
        removal_policy: cdk.RemovalPolicy,
    ) -> s3.Bucket:
        access_logs = s3.Bucket(
            self,
            "ResultsAccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,  # log delivery needs SSE-S3
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(expiration=access_log_retention, noncurrent_version_expiration=cdk.Duration.days(1))
            ],
            removal_policy=removal_policy,
        )
        checkov.skip(
            access_logs,
            "CKV_AWS_18",
            "this bucket receives the results bucket's server access logs; logging it to itself would loop",
        )
        return s3.Bucket(
            self,
            "Results",
            encryption=s3.BucketEncryption.KMS,
            encryption_key=key,
            bucket_key_enabled=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix=RESULTS_ACCESS_LOG_PREFIX,
            lifecycle_rules=[
                s3.LifecycleRule(
                    expiration=retention,
                    noncurrent_version_expiration=cdk.Duration.days(NONCURRENT_RESULT_DAYS),
                    abort_incomplete_multipart_upload_after=cdk.Duration.days(1),
                )
            ],
            removal_policy=removal_policy,
        )

    # ------------------------------------------------------------------ network

    def _add_security_groups(self, vpc: ec2.IVpc, vpc_cidr: str) -> None:
        self.master_security_group = ec2.SecurityGroup(
            self,
            "MasterSecurityGroup",
            vpc=vpc,
            allow_all_outbound=False,
            description=f"load-test master: TCP {LOCUST_PORT} from its workers only; HTTPS out to S3, ECR and logs",
        )
        self.worker_security_group = ec2.SecurityGroup(
            self,
            "WorkerSecurityGroup",
            vpc=vpc,
            allow_all_outbound=False,
            description="load-test workers: no inbound; out to the models and to their master",
        )
        self.master_security_group.add_ingress_rule(
            self.worker_security_group, ec2.Port.tcp(LOCUST_PORT), "Locust workers connect to their master"
        )
        self.master_security_group.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(HTTPS_PORT), "S3 (results), ECR (image) and CloudWatch Logs APIs"
        )
        self.worker_security_group.add_egress_rule(
            self.master_security_group, ec2.Port.tcp(LOCUST_PORT), "to the Locust master"
        )
        self.worker_security_group.add_egress_rule(
            ec2.Peer.any_ipv4(),
            ec2.Port.tcp(HTTPS_PORT),
            "SageMaker runtime, HTTPS load balancers, ECR and CloudWatch Logs",
        )
        self.worker_security_group.add_egress_rule(
            ec2.Peer.ipv4(vpc_cidr), ec2.Port.tcp(HTTP_PORT), "internal load balancers' HTTP listeners in the VPC"
        )

    # ------------------------------------------------------------------ IAM

    def _add_roles(self, key: kms.IKey, endpoint_name_prefix: str) -> None:
        stack = cdk.Stack.of(self)
        # Only ECS tasks of this account and region may assume the roles (the confused-deputy guard ECS documents).
        principal = iam.ServicePrincipal("ecs-tasks.amazonaws.com").with_conditions(
            {
                "StringEquals": {"aws:SourceAccount": stack.account},
                "ArnLike": {"aws:SourceArn": stack.format_arn(service="ecs", resource="*")},
            }
        )
        self.execution_role = iam.Role(
            self, "ExecutionRole", assumed_by=principal, description="load-test tasks: pull the image, write the logs"
        )
        self.master_role = iam.Role(
            self,
            "MasterRole",
            assumed_by=principal,
            description="load-test master: write a run's results to the results bucket",
            inline_policies={
                "Results": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            sid="WriteResults",
                            actions=["s3:PutObject"],
                            resources=[self.results_bucket.arn_for_objects("*")],
                        ),
                        # SSE-KMS: GenerateDataKey for each object, Decrypt to complete a multipart upload.
                        iam.PolicyStatement(
                            sid="EncryptResults",
                            actions=["kms:GenerateDataKey", "kms:Decrypt"],
                            resources=[key.key_arn],
                            conditions={"StringEquals": {"kms:ViaService": f"s3.{stack.region}.amazonaws.com"}},
                        ),
                    ]
                )
            },
        )
        bucket_id = stack.resolve(stack.get_logical_id(cast(s3.CfnBucket, self.results_bucket.node.default_child)))
        nag.acknowledge(
            self.master_role,
            f"IAM5[Resource::<{bucket_id}.Arn>/*]",
            "a run writes result.json, report.txt and latency.png under <release>/<model>/<run id>/, "
            "a key chosen per run; the bucket holds nothing but load-test results",
        )
        # SageMaker writes endpoint and component names into ARNs in lower case.
        endpoints = stack.format_arn(
            service="sagemaker", resource="endpoint", resource_name=f"{endpoint_name_prefix.lower()}*"
        )
        components = stack.format_arn(
            service="sagemaker", resource="inference-component", resource_name=f"{endpoint_name_prefix.lower()}*"
        )
        self.worker_role = iam.Role(
            self,
            "WorkerRole",
            assumed_by=principal,
            description="load-test workers: invoke this environment's SageMaker endpoints",
            inline_policies={
                "Invoke": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            sid="InvokeThisEnvironmentsEndpoints",
                            actions=["sagemaker:InvokeEndpoint"],
                            resources=[endpoints, components],
                        ),
                    ]
                )
            },
        )
        for arn, what in ((endpoints, "endpoints"), (components, "inference components")):
            nag.acknowledge(
                self.worker_role,
                f"IAM5[Resource::{nag.rendered(stack, arn)}]",
                f"{what} of this environment only, named after its stacks, which start with the "
                f"environment's name; listing them would change this stack whenever a model is added",
            )

    # ------------------------------------------------------------------ tasks

    def _task_definition(
        self,
        construct_id: str,
        container_name: str,
        command: tuple[str, ...],
        role: iam.IRole,
        image: ecs.ContainerImage,
        cpu: int,
        memory_mib: int,
        port: int | None = None,
    ) -> ecs.FargateTaskDefinition:
        definition = ecs.FargateTaskDefinition(
            self,
            construct_id,
            cpu=cpu,
            memory_limit_mib=memory_mib,
            task_role=role,
            execution_role=self.execution_role,
            runtime_platform=ecs.RuntimePlatform(
                cpu_architecture=ecs.CpuArchitecture.X86_64, operating_system_family=ecs.OperatingSystemFamily.LINUX
            ),
            volumes=[ecs.Volume(name="scratch")],
        )
        container = definition.add_container(
            container_name,
            image=image,
            command=list(command),
            essential=True,
            readonly_root_filesystem=True,
            port_mappings=[ecs.PortMapping(container_port=port)] if port else None,
            logging=ecs.LogDrivers.aws_logs(
                stream_prefix=container_name.lower(),
                log_group=self.log_group,
                mode=ecs.AwsLogDriverMode.NON_BLOCKING,
                max_buffer_size=cdk.Size.mebibytes(25),
            ),
            # What a run sets (the spec, the results location, the master's address) comes as RunTask overrides.
            stop_timeout=cdk.Duration.seconds(30),
        )
        container.add_mount_points(
            ecs.MountPoint(container_path=SCRATCH_PATH, source_volume="scratch", read_only=False)
        )
        return definition
