"""environments.yaml: the environments (account, region, network, defaults, load-test generators), the
optional CDK pipeline, and the file that holds them with the fleets (inferstack/schema/fleets.py).

Field-level rules live here; rules that need several fields, files or the instance catalog live in
inferstack/config/checks/ so every problem can be reported at once with its key path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from inferstack.schema import fargate
from inferstack.schema.base import Frozen, InstanceType, Name, PositiveFloat
from inferstack.schema.fleets import Fleet

REGION_PATTERN = r"^[a-z]{2}(-gov)?-[a-z]+-\d$"
ACM_CERTIFICATE_PATTERN = r"^arn:aws[a-z-]*:acm:([a-z0-9-]+):(\d{12}):certificate/[0-9a-f-]{36}$"
# A CodeStar Connections or (renamed service) CodeConnections connection: region, account, UUID.
CONNECTION_ARN_PATTERN = (
    r"^arn:aws[a-z-]*:(?:codestar-connections|codeconnections):([a-z0-9-]+):(\d{12}):"
    r"connection/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
)
ACCOUNT_PATTERN = r"^\d{12}$"
# CloudWatch Logs accepts only these retention periods.
LOG_RETENTION_DAYS = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)


class CreateVpc(Frozen):
    cidr: str = Field(pattern=r"^\d{1,3}(\.\d{1,3}){3}/(1[6-9]|2[0-4])$", description="VPC CIDR, /16 to /24")
    nat_gateways: int = Field(1, ge=1, le=6, description="NAT gateways for private-subnet egress")


class ImportVpc(Frozen):
    vpc_id: str = Field(pattern=r"^vpc-[0-9a-f]{8,17}$", description="the existing VPC's id")
    vpc_cidr: str = Field(
        pattern=r"^\d{1,3}(\.\d{1,3}){3}/\d{1,2}$",
        description="the VPC's primary CIDR block: internal listeners admit this range",
    )
    private_subnet_ids: tuple[Annotated[str, Field(pattern=r"^subnet-[0-9a-f]{8,17}$")], ...] = Field(
        min_length=2,
        description="subnets the workloads run in (instances, tasks, endpoints, the smoke probe), "
        "at least two, in the environment's availability_zones order",
    )
    private_subnet_route_table_ids: tuple[Annotated[str, Field(pattern=r"^rtb-[0-9a-f]{8,17}$")], ...] = Field(
        min_length=2,
        description="route tables of the private subnets, in the same order (the S3 gateway "
        "endpoint's routes go there when create_endpoints is set)",
    )
    public_subnet_ids: tuple[Annotated[str, Field(pattern=r"^subnet-[0-9a-f]{8,17}$")], ...] = Field(
        (), description="subnets for internet-facing load balancers; needed only with defaults.public_load_balancer"
    )
    create_endpoints: bool = Field(
        False,
        description="add the VPC endpoints inferstack needs to this VPC "
        "(and the S3 gateway route to its route tables); only the VPC's owner can",
    )
    owner_account: str | None = Field(
        None,
        pattern=ACCOUNT_PATTERN,
        description="account that owns the VPC when it is shared with this environment's account (VPC "
        "sharing through AWS RAM); its ARN carries this account; omitted: the environment's own",
    )


class Network(Frozen):
    create: CreateVpc | None = Field(None, description="a new VPC for this environment (set this or import)")
    import_: ImportVpc | None = Field(None, alias="import", description="an existing VPC by ids (set this or create)")

    @model_validator(mode="after")
    def _exactly_one(self) -> Network:
        if (self.create is None) == (self.import_ is None):
            raise ValueError("set exactly one of 'create' (a new VPC) or 'import' (an existing VPC by ids)")
        return self

    @property
    def cidr(self) -> str:
        return self.create.cidr if self.create is not None else self.import_.vpc_cidr  # type: ignore[union-attr]  # _exactly_one: one is set

    def vpc_owner(self, account: str) -> str:
        """The account that owns the VPC, for an environment in `account`."""
        owner = self.import_.owner_account if self.import_ is not None else None
        return owner or account


class Alarms(Frozen):
    topic_arn: str | None = Field(
        None,
        pattern=r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}$",
        description="existing SNS topic for alarms; omitted: the foundation stack creates an encrypted one",
    )
    emails: tuple[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")], ...] = Field(
        (), description="addresses subscribed to the alarm topic by email (each confirms its subscription)"
    )


class EnvironmentDefaults(Frozen):
    log_retention_days: int = Field(30, description=f"one of {LOG_RETENTION_DAYS}")
    retain_stateful_resources: bool = Field(
        True, description="keep KMS keys, log groups and buckets when a stack is deleted"
    )
    public_load_balancer: bool = Field(False, description="internet-facing load balancers (TLS required)")
    certificate_arn: str | None = Field(
        None,
        pattern=ACM_CERTIFICATE_PATTERN,
        description="ACM certificate (this account and region) for the HTTPS listener of the load balancers: "
        "required by public ones; internal ones serve HTTPS with it, plain HTTP inside the VPC without",
    )
    safety_factor: float = Field(
        0.5,
        gt=0,
        le=1,
        description="default share of measured throughput an instance is asked to carry; the rest is headroom",
    )

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        if value not in LOG_RETENTION_DAYS:
            raise ValueError(f"must be one of {', '.join(map(str, LOG_RETENTION_DAYS))}")
        return value

    @model_validator(mode="after")
    def _public_needs_tls(self) -> EnvironmentDefaults:
        if self.public_load_balancer and self.certificate_arn is None:
            raise ValueError(
                "public_load_balancer needs certificate_arn: an internet-facing load balancer serves HTTPS only"
            )
        return self


class ReleaseRef(Frozen):
    manifest: str = Field(
        min_length=1,
        pattern=r"^[^/].*\.json$",
        description="pin file written by `inferstack promote`, relative to this config directory "
        "(e.g. releases/staging.json): the environment deploys exactly these image digests",
    )


# The most workers one Locust master takes in this project (inferstack.loadtest.runner.MAX_WORKERS, whose task
# entrypoint refuses more): a run on Fargate never asks for more.
MAX_LOAD_TEST_WORKERS = 64


class LoadTest(Frozen):
    """The environment's load-test generators: Locust on Fargate in its private subnets (stacks/load_test_stack.py),
    started by `inferstack loadtest --env`; nothing runs, and nothing costs, between runs."""

    worker_cpu: int = Field(
        1024,
        description="Fargate CPU units of each generator task, master and workers (1024 = 1 vCPU): one of "
        f"{', '.join(map(str, fargate.MEMORY_MIB))}. One Locust process keeps one vCPU busy, "
        "so 1024 fits the one process a worker runs",
        json_schema_extra={"enum": list(fargate.MEMORY_MIB)},
    )
    worker_memory_mib: int = Field(
        2048,
        description="memory of each generator task in MiB; Fargate accepts only some values per CPU size "
        "(inferstack/schema/fargate.py)",
    )
    max_workers: int = Field(
        20,
        ge=2,
        le=MAX_LOAD_TEST_WORKERS,
        description="the most worker tasks one run may start; a run whose rate needs more is refused rather than "
        f"run on saturated generators (at most {MAX_LOAD_TEST_WORKERS}: one Locust master's limit here)",
    )
    per_worker_rps: PositiveFloat = Field(
        description="requests per second one worker task of this size sustains below Locust's 90 % CPU warning: "
        "measured with benchmarks/loadtest_worker.py, not guessed. A run starts ceil(rate / "
        "per_worker_rps) workers, at least 2"
    )
    results_retention_days: int = Field(
        90,
        ge=1,
        le=3650,
        description="days each run's result.json, report.txt and latency.png stay in the "
        "environment's results bucket; promotion's gate reads them from there",
    )

    @field_validator("worker_memory_mib")
    @classmethod
    def _fargate_size(cls, value: int, info) -> int:
        cpu = info.data.get("worker_cpu")
        if cpu is not None:  # a bad worker_cpu is reported on its own key
            problem = fargate.size_problem(cpu, value)
            if problem is not None:
                raise ValueError(problem)
        return value

    @field_validator("worker_cpu")
    @classmethod
    def _fargate_cpu(cls, value: int) -> int:
        if value not in fargate.MEMORY_MIB:
            raise ValueError(f"must be a Fargate CPU value: one of {', '.join(map(str, fargate.MEMORY_MIB))}")
        return value


class Environment(Frozen):
    account: str = Field(pattern=ACCOUNT_PATTERN, description="12-digit AWS account id")
    region: str = Field(pattern=REGION_PATTERN, description="AWS region the environment deploys to")
    availability_zones: tuple[str, ...] = Field(
        min_length=2, max_length=6, description="zones of the region, written down so synth never looks them up"
    )
    network: Network = Field(description="the VPC: create a new one, or import an existing one by ids")
    alarms: Alarms = Field(
        Alarms(), description="where alarms notify: an existing SNS topic or a new one, with email subscriptions"
    )
    defaults: EnvironmentDefaults = Field(
        EnvironmentDefaults(),
        description="settings every stack of the environment takes unless a model or fleet overrides them",
    )
    prices: dict[InstanceType, PositiveFloat] = Field(
        default_factory=dict, description="USD per instance hour, overriding inferstack.capacity.pricing's table"
    )
    release: ReleaseRef | None = Field(
        None, description="deploy a promoted release (pinned image digests) instead of building images"
    )
    deploy_role_arn: str | None = Field(
        None,
        pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/[A-Za-z0-9+=,.@_/-]+$",
        description="role the promote/smoke tools assume for this environment (default: the ambient AWS credentials)",
    )
    production: bool | None = Field(
        None,
        description="serves production traffic: validate warns when a model or fleet here is sized from an "
        "estimated throughput_profile entry; omitted: true for the pipeline's last stage, false elsewhere",
    )
    load_test: LoadTest | None = Field(
        None,
        description="Locust generators on Fargate inside this environment's VPC, and a bucket for their "
        "results (a LoadTest stack); omitted: none",
    )

    @model_validator(mode="after")
    def _zones_in_region(self) -> Environment:
        bad = [z for z in self.availability_zones if not re.fullmatch(re.escape(self.region) + r"[a-z]", z)]
        if bad:
            raise ValueError(f"availability_zones {bad} are not zones of region {self.region}")
        if len(set(self.availability_zones)) != len(self.availability_zones):
            raise ValueError("availability_zones repeats a zone")
        certificate = self.defaults.certificate_arn
        if certificate is not None:
            region, account = re.fullmatch(ACM_CERTIFICATE_PATTERN, certificate).groups()  # type: ignore[union-attr]  # the field's pattern
            if (region, account) != (self.region, self.account):
                raise ValueError(
                    f"defaults.certificate_arn is in {account}/{region}; a load balancer can only "
                    f"use a certificate of its own account and region ({self.account}/{self.region})"
                )
        if self.deploy_role_arn is not None and self.deploy_role_arn.split(":")[4] != self.account:
            raise ValueError(
                f"deploy_role_arn is in account {self.deploy_role_arn.split(':')[4]}, not this "
                f"environment's account {self.account}"
            )
        if self.defaults.public_load_balancer and not self.has_public_subnets:
            raise ValueError("defaults.public_load_balancer needs public subnets: set network.import.public_subnet_ids")
        return self

    @property
    def has_public_subnets(self) -> bool:
        return self.network.create is not None or bool(self.network.import_ and self.network.import_.public_subnet_ids)


DEFAULT_SMOKE_ROLE_NAME = "inferstack-smoke"
DEFAULT_LOAD_TEST_ROLE_NAME = "inferstack-loadtest"
# The pipeline stack's CloudFormation name. Roles CloudFormation names for it (the smoke steps' CodeBuild
# roles among them) start with it, which is what the environments' smoke roles trust.
PIPELINE_STACK_NAME = "inferstack-pipeline"


class PipelineSettings(Frozen):
    """The CDK Pipelines stack: where it runs, what it builds, and the order it deploys environments in.
    Rules spanning the environments (known names, approvals among the stages) live in config/checks/pipeline.py."""

    account: str = Field(pattern=ACCOUNT_PATTERN, description="tooling account the pipeline runs in")
    region: str = Field(pattern=REGION_PATTERN, description="region the pipeline runs in")
    connection_arn: str = Field(
        pattern=CONNECTION_ARN_PATTERN,
        description="CodeConnections (or CodeStar Connections) connection of the tooling account to the repository",
    )
    repository: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$", description="owner/name")
    branch: str = Field(
        "main",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$",
        max_length=255,
        description="branch whose pushes run the pipeline",
    )
    stages: tuple[Name, ...] = Field(
        min_length=1,
        description="environments the pipeline deploys, in this order (each after the previous "
        "one's smoke test passed)",
    )
    approval_before: tuple[Name, ...] = Field(
        (), description="environments whose deployment waits for a manual approval"
    )
    smoke_role_name: str = Field(
        DEFAULT_SMOKE_ROLE_NAME,
        pattern=r"^[\w+=,.@-]{1,64}$",
        description="IAM role (in each environment's account, trusting the tooling account) the smoke test "
        "assumes to reach that environment",
    )
    load_test_role_name: str = Field(
        DEFAULT_LOAD_TEST_ROLE_NAME,
        pattern=r"^[\w+=,.@-]{1,64}$",
        description="IAM role (in the account of each environment with load_test, trusting the tooling account) "
        "the load test step after that environment's smoke test assumes to start it and read its results",
    )


class EnvironmentsFile(Frozen):
    default_environment: Name = Field(
        description="the environment synthesized when none is chosen; it must synthesize on a fresh clone (dev)"
    )
    environments: dict[Name, Environment] = Field(
        min_length=1, description="every environment by name (dev, staging, prod): account, region, network"
    )
    pipeline: PipelineSettings | None = Field(
        None, description="CDK Pipelines deployment of the environments; omitted: no pipeline stack"
    )
    fleets: dict[Name, Fleet] = Field(
        default_factory=dict,
        description="models sharing accelerators: several models on one SageMaker "
        "endpoint (inference components) or on one Inferentia instance's NeuronCores",
    )

    @model_validator(mode="after")
    def _default_exists(self) -> EnvironmentsFile:
        if self.default_environment not in self.environments:
            raise ValueError(f"default_environment {self.default_environment!r} is not one of the environments")
        return self

    def is_production(self, env_name: str) -> bool:
        return is_production(self.environments, self.pipeline, env_name)


def is_production(environments: Mapping[str, Environment], pipeline: PipelineSettings | None, env_name: str) -> bool:
    """An environment's own `production` setting, else whether the pipeline deploys it last (promotion
    moves a release there after every other stage: what it serves is what users get)."""
    setting = environments[env_name].production
    if setting is not None:
        return setting
    return pipeline is not None and pipeline.stages[-1] == env_name
