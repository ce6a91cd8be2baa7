"""Typed, frozen schema of `model_configs/`: environments.yaml and one YAML file per model.

Field-level rules live here (types, ranges, one-of choices); rules that need several fields or the
instance catalog live in `checks.py` so every problem can be reported at once with its key path.
"""

from __future__ import annotations

import datetime
import math
import re
import zoneinfo
from collections.abc import Mapping
from typing import Annotated, Literal, Union

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator,
                      model_validator)

from inferstack.schema import families, fargate, instances
from inferstack.schema.pipeline import MAX_STEPS, PipelineStep

NAME_PATTERN = r"^[a-z][a-z0-9-]{0,38}[a-z0-9]$"
REGION_PATTERN = r"^[a-z]{2}(-gov)?-[a-z]+-\d$"
ACM_CERTIFICATE_PATTERN = r"^arn:aws[a-z-]*:acm:([a-z0-9-]+):(\d{12}):certificate/[0-9a-f-]{36}$"
# A CodeStar Connections or (renamed service) CodeConnections connection: region, account, UUID.
CONNECTION_ARN_PATTERN = (r"^arn:aws[a-z-]*:(?:codestar-connections|codeconnections):([a-z0-9-]+):(\d{12}):"
                          r"connection/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
ACCOUNT_PATTERN = r"^\d{12}$"
# CloudWatch Logs accepts only these retention periods.
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827,
                      2192, 2557, 2922, 3288, 3653)


class Frozen(BaseModel):
    # allow_inf_nan=False: no number in a config may be nan or infinite (YAML's .nan/.inf, 1.0e400, or a
    # string such as "1e400" that parses to infinity); every capacity formula assumes finite inputs.
    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True, allow_inf_nan=False)


Name = Annotated[str, Field(pattern=NAME_PATTERN, description="lower-case letters, digits and dashes")]
PositiveInt = Annotated[int, Field(ge=1)]
PositiveFloat = Annotated[float, Field(gt=0)]


def _known_instance(value: str) -> str:
    instances.get(value)  # raises UnknownInstanceType (a ValueError) with the known list
    return value


InstanceType = Annotated[str, AfterValidator(_known_instance),
                         Field(description="an instance type from inferstack.schema.instances",
                               json_schema_extra={"enum": sorted(instances.INSTANCES)})]


# ---------------------------------------------------------------- environments.yaml

class CreateVpc(Frozen):
    cidr: str = Field(pattern=r"^\d{1,3}(\.\d{1,3}){3}/(1[6-9]|2[0-4])$", description="VPC CIDR, /16 to /24")
    nat_gateways: int = Field(1, ge=1, le=6, description="NAT gateways for private-subnet egress")


class ImportVpc(Frozen):
    vpc_id: str = Field(pattern=r"^vpc-[0-9a-f]{8,17}$", description="the existing VPC's id")
    vpc_cidr: str = Field(pattern=r"^\d{1,3}(\.\d{1,3}){3}/\d{1,2}$",
                          description="the VPC's primary CIDR block: internal listeners admit this range")
    private_subnet_ids: tuple[Annotated[str, Field(pattern=r"^subnet-[0-9a-f]{8,17}$")], ...] = Field(
        min_length=2, description="subnets the workloads run in (instances, tasks, endpoints, the smoke probe), "
        "at least two, in the environment's availability_zones order")
    private_subnet_route_table_ids: tuple[Annotated[str, Field(pattern=r"^rtb-[0-9a-f]{8,17}$")], ...] = Field(
        min_length=2, description="route tables of the private subnets, in the same order (the S3 gateway "
        "endpoint's routes go there when create_endpoints is set)")
    public_subnet_ids: tuple[Annotated[str, Field(pattern=r"^subnet-[0-9a-f]{8,17}$")], ...] = Field(
        (), description="subnets for internet-facing load balancers; needed only with "
        "defaults.public_load_balancer")
    create_endpoints: bool = Field(False, description="add the VPC endpoints inferstack needs to this VPC "
                                   "(and the S3 gateway route to its route tables); only the VPC's owner can")
    owner_account: str | None = Field(
        None, pattern=ACCOUNT_PATTERN,
        description="account that owns the VPC when it is shared with this environment's account (VPC "
                    "sharing through AWS RAM); its ARN carries this account; omitted: the environment's own")


class Network(Frozen):
    create: CreateVpc | None = Field(None, description="a new VPC for this environment (set this or import)")
    import_: ImportVpc | None = Field(None, alias="import", description="an existing VPC by ids (set this or create)")

    @model_validator(mode="after")
    def _exactly_one(self) -> "Network":
        if (self.create is None) == (self.import_ is None):
            raise ValueError("set exactly one of 'create' (a new VPC) or 'import' (an existing VPC by ids)")
        return self

    @property
    def cidr(self) -> str:
        return self.create.cidr if self.create is not None else self.import_.vpc_cidr  # type: ignore[union-attr]

    def vpc_owner(self, account: str) -> str:
        """The account that owns the VPC, for an environment in `account`."""
        owner = self.import_.owner_account if self.import_ is not None else None
        return owner or account


class Alarms(Frozen):
    topic_arn: str | None = Field(
        None, pattern=r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}$",
        description="existing SNS topic for alarms; omitted: the foundation stack creates an encrypted one")
    emails: tuple[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")], ...] = Field(
        (), description="addresses subscribed to the alarm topic by email (each confirms its subscription)")


class EnvironmentDefaults(Frozen):
    log_retention_days: int = Field(30, description=f"one of {LOG_RETENTION_DAYS}")
    retain_stateful_resources: bool = Field(
        True, description="keep KMS keys, log groups and buckets when a stack is deleted")
    public_load_balancer: bool = Field(False, description="internet-facing load balancers (TLS required)")
    certificate_arn: str | None = Field(
        None, pattern=ACM_CERTIFICATE_PATTERN,
        description="ACM certificate (this account and region) for the HTTPS listener of the load balancers: "
                    "required by public ones; internal ones serve HTTPS with it, plain HTTP inside the VPC without")
    safety_factor: float = Field(0.5, gt=0, le=1, description="default share of measured throughput an "
                                 "instance is asked to carry; the rest is headroom")

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        if value not in LOG_RETENTION_DAYS:
            raise ValueError(f"must be one of {', '.join(map(str, LOG_RETENTION_DAYS))}")
        return value

    @model_validator(mode="after")
    def _public_needs_tls(self) -> "EnvironmentDefaults":
        if self.public_load_balancer and self.certificate_arn is None:
            raise ValueError("public_load_balancer needs certificate_arn: an internet-facing load balancer "
                             "serves HTTPS only")
        return self


class ReleaseRef(Frozen):
    manifest: str = Field(
        min_length=1, pattern=r"^[^/].*\.json$",
        description="pin file written by `inferstack promote`, relative to this config directory "
                    "(e.g. releases/staging.json): the environment deploys exactly these image digests")


# The most workers one Locust master takes in this project (inferstack.loadtest.runner.MAX_WORKERS, whose task
# entrypoint refuses more): a run on Fargate never asks for more.
MAX_LOAD_TEST_WORKERS = 64


class LoadTest(Frozen):
    """The environment's load-test generators: Locust on Fargate in its private subnets (stacks/load_test_stack.py),
    started by `inferstack loadtest --env`; nothing runs, and nothing costs, between runs."""

    worker_cpu: int = Field(
        1024, description="Fargate CPU units of each generator task, master and workers (1024 = 1 vCPU): one of "
                          f"{', '.join(map(str, fargate.MEMORY_MIB))}. One Locust process keeps one vCPU busy, "
                          "so 1024 fits the one process a worker runs",
        json_schema_extra={"enum": list(fargate.MEMORY_MIB)})
    worker_memory_mib: int = Field(
        2048, description="memory of each generator task in MiB; Fargate accepts only some values per CPU size "
                          "(inferstack/schema/fargate.py)")
    max_workers: int = Field(
        20, ge=2, le=MAX_LOAD_TEST_WORKERS,
        description="the most worker tasks one run may start; a run whose rate needs more is refused rather than "
                    f"run on saturated generators (at most {MAX_LOAD_TEST_WORKERS}: one Locust master's limit here)")
    per_worker_rps: PositiveFloat = Field(
        description="requests per second one worker task of this size sustains below Locust's 90 % CPU warning: "
                    "measured with benchmarks/loadtest_worker.py, not guessed. A run starts ceil(rate / "
                    "per_worker_rps) workers, at least 2")
    results_retention_days: int = Field(
        90, ge=1, le=3650, description="days each run's result.json, report.txt and latency.png stay in the "
                                       "environment's results bucket; promotion's gate reads them from there")

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
        min_length=2, max_length=6, description="zones of the region, written down so synth never looks them up")
    network: Network = Field(description="the VPC: create a new one, or import an existing one by ids")
    alarms: Alarms = Field(Alarms(), description="where alarms notify: an existing SNS topic or a new one, "
                           "with email subscriptions")
    defaults: EnvironmentDefaults = Field(EnvironmentDefaults(), description="settings every stack of the "
                                          "environment takes unless a model or fleet overrides them")
    prices: dict[InstanceType, PositiveFloat] = Field(
        default_factory=dict, description="USD per instance hour, overriding inferstack.capacity.pricing's table")
    release: ReleaseRef | None = Field(
        None, description="deploy a promoted release (pinned image digests) instead of building images")
    deploy_role_arn: str | None = Field(
        None, pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/[A-Za-z0-9+=,.@_/-]+$",
        description="role the promote/smoke tools assume for this environment (default: the ambient "
                    "AWS credentials)")
    production: bool | None = Field(
        None, description="serves production traffic: validate warns when a model or fleet here is sized from an "
        "estimated throughput_profile entry; omitted: true for the pipeline's last stage, false elsewhere")
    load_test: LoadTest | None = Field(
        None, description="Locust generators on Fargate inside this environment's VPC, and a bucket for their "
                          "results (a LoadTest stack); omitted: none")

    @model_validator(mode="after")
    def _zones_in_region(self) -> "Environment":
        bad = [z for z in self.availability_zones if not re.fullmatch(re.escape(self.region) + r"[a-z]", z)]
        if bad:
            raise ValueError(f"availability_zones {bad} are not zones of region {self.region}")
        if len(set(self.availability_zones)) != len(self.availability_zones):
            raise ValueError("availability_zones repeats a zone")
        certificate = self.defaults.certificate_arn
        if certificate is not None:
            region, account = re.fullmatch(ACM_CERTIFICATE_PATTERN, certificate).groups()  # type: ignore[union-attr]
            if (region, account) != (self.region, self.account):
                raise ValueError(f"defaults.certificate_arn is in {account}/{region}; a load balancer can only "
                                 f"use a certificate of its own account and region ({self.account}/{self.region})")
        if self.deploy_role_arn is not None and self.deploy_role_arn.split(":")[4] != self.account:
            raise ValueError(f"deploy_role_arn is in account {self.deploy_role_arn.split(':')[4]}, not this "
                             f"environment's account {self.account}")
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
    Rules spanning the environments (known names, approvals among the stages) live in checks.py."""

    account: str = Field(pattern=ACCOUNT_PATTERN, description="tooling account the pipeline runs in")
    region: str = Field(pattern=REGION_PATTERN, description="region the pipeline runs in")
    connection_arn: str = Field(
        pattern=CONNECTION_ARN_PATTERN,
        description="CodeConnections (or CodeStar Connections) connection of the tooling account to the repository")
    repository: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$", description="owner/name")
    branch: str = Field("main", pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$", max_length=255,
                        description="branch whose pushes run the pipeline")
    stages: tuple[Name, ...] = Field(
        min_length=1, description="environments the pipeline deploys, in this order (each after the previous "
                                  "one's smoke test passed)")
    approval_before: tuple[Name, ...] = Field(
        (), description="environments whose deployment waits for a manual approval")
    smoke_role_name: str = Field(
        DEFAULT_SMOKE_ROLE_NAME, pattern=r"^[\w+=,.@-]{1,64}$",
        description="IAM role (in each environment's account, trusting the tooling account) the smoke test "
                    "assumes to reach that environment")
    load_test_role_name: str = Field(
        DEFAULT_LOAD_TEST_ROLE_NAME, pattern=r"^[\w+=,.@-]{1,64}$",
        description="IAM role (in the account of each environment with load_test, trusting the tooling account) "
                    "the load test step after that environment's smoke test assumes to start it and read its results")


# ---------------------------------------------------------------- fleets (models sharing accelerators)

class FleetCapacity(Frozen):
    instance_type: InstanceType
    min: int = Field(ge=0, description="instances at the least; 0 scales the fleet to zero when idle "
                     "(sagemaker-inference-components only; a neuron-cores fleet reaches 0 through off_hours)")
    max: PositiveInt = Field(description="instances at the most; the plan must carry every member's peak within it")
    safety_factor: float | None = Field(None, gt=0, le=1, description="overrides the environment default")


class FleetCapacityOverride(Frozen):
    instance_type: InstanceType | None = Field(None, description="this environment's instance type")
    min: int | None = Field(None, ge=0, description="this environment's minimum instances")
    max: PositiveInt | None = Field(None, description="this environment's maximum instances")
    safety_factor: float | None = Field(None, gt=0, le=1, description="this environment's safety factor")


class FleetEnvironmentOverride(Frozen):
    capacity: FleetCapacityOverride = Field(FleetCapacityOverride(), description="this environment's capacity, "
                                            "key by key over the fleet's")
    off_hours: tuple[OffHours, ...] = Field((), description="scheduled windows of reduced capacity; min 0 "
                                            "scales the fleet to zero for the window")
    deployment: Deployment | None = Field(None, description="neuron-cores: this environment's rollout")


class _FleetBase(Frozen):
    description: str = Field("", description="free text for readers of the file; not deployed")
    models: tuple[Name, ...] = Field(min_length=1, description="the models this fleet carries, in this order")
    capacity: FleetCapacity = Field(description="the shared instances: type, min, max and safety factor")
    environments: dict[Name, FleetEnvironmentOverride] = Field(
        default_factory=dict, description="per-environment overrides of capacity and off_hours")

    @field_validator("models")
    @classmethod
    def _unique_models(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError("models repeat")
        return value

    def capacity_for(self, environment: str) -> FleetCapacity:
        override = self.environments.get(environment, FleetEnvironmentOverride()).capacity
        return self.capacity.model_copy(update=override.model_dump(exclude_none=True))

    def off_hours_for(self, environment: str) -> tuple[OffHours, ...]:
        return self.environments.get(environment, FleetEnvironmentOverride()).off_hours


class InferenceComponentFleet(_FleetBase):
    """One SageMaker endpoint whose instances (managed instance scaling) are shared by its models, each an
    inference component with its own copies, scaling, alarms, dashboard and smoke test."""

    kind: Literal["sagemaker-inference-components"] = Field(
        description="one SageMaker endpoint, each member an inference component")
    deploy_in: tuple[Name, ...] | None = Field(
        None, description="environments where the models share this endpoint; elsewhere each keeps its own "
        "(dedicated endpoints, e.g. where an SLO needs them); omitted: every environment")

    def deploys_in(self, environment: str) -> bool:
        return self.deploy_in is None or environment in self.deploy_in


class NeuronCoreFleet(_FleetBase):
    """Inferentia instances whose NeuronCores are split among several neuron-ecs models: one task per
    instance, one image with every model compiled in, each model on its own core range and port. Packed in
    every environment, so the one image promotes unchanged."""

    kind: Literal["neuron-cores"] = Field(description="one ECS service whose task splits the NeuronCores among "
                                          "the members")
    # One member is still a fleet: a fleet whose other members retired keeps its stack, load balancer and URL, so
    # the model left is where its callers find it (moving it to a stack of its own is a change of address).
    models: tuple[Name, ...] = Field(min_length=1, description="the models sharing each instance, in core order "
                                     "(each on its own serving.port)")
    deployment: Deployment | None = Field(
        None, description="the fleet service's ECS rollout (as a neuron-ecs model's deployment); omitted: rolling")

    def deployment_for(self, environment: str) -> Deployment | None:
        override = self.environments.get(environment, FleetEnvironmentOverride()).deployment
        return override if override is not None else self.deployment

    def deploys_in(self, environment: str) -> bool:
        return True


Fleet = Annotated[Union[InferenceComponentFleet, NeuronCoreFleet], Field(discriminator="kind")]


class EnvironmentsFile(Frozen):
    default_environment: Name = Field(description="the environment synthesized when none is chosen; it must "
                                      "synthesize on a fresh clone (dev)")
    environments: dict[Name, Environment] = Field(
        min_length=1, description="every environment by name (dev, staging, prod): account, region, network")
    pipeline: PipelineSettings | None = Field(
        None, description="CDK Pipelines deployment of the environments; omitted: no pipeline stack")
    fleets: dict[Name, Fleet] = Field(
        default_factory=dict, description="models sharing accelerators: several models on one SageMaker "
        "endpoint (inference components) or on one Inferentia instance's NeuronCores")

    @model_validator(mode="after")
    def _default_exists(self) -> "EnvironmentsFile":
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


# ---------------------------------------------------------------- model files, shared parts

class ModelSource(Frozen):
    huggingface_id: str | None = Field(None, pattern=r"^[\w.-]+(/[\w.-]+)?$",
                                       description="Hugging Face Hub checkpoint the image build downloads "
                                       "(set this or local_path)")
    revision: str | None = Field(None, description="commit or tag pinned for reproducible builds")
    local_path: str | None = Field(None, description="path inside the image's build context")
    family: str | None = Field(
        None, pattern=r"^[a-z][a-z0-9_-]*$",
        description="the checkpoint's architecture (Hugging Face model_type: "
                    f"{', '.join(families.FAMILIES)}); omitted: read from the checkpoint's config.json where "
                    "local_path is in the image's build context, else from huggingface_id's name. validate "
                    "checks export.token_type_ids and the task against it; the image build rehearsal builds its "
                    "tiny stand-in checkpoint from it")
    task: Literal["text-classification", "text2text-generation"] = Field(
        description="what the model does: the tensors it takes and answers with follow from it")
    labels: tuple[str, ...] = Field((), description="text-classification: the class names, in the order of the "
                                    "model's logits (at least two)")

    @model_validator(mode="after")
    def _source(self) -> "ModelSource":
        if (self.huggingface_id is None) == (self.local_path is None):
            raise ValueError("set exactly one of 'huggingface_id' or 'local_path'")
        if self.task == "text-classification" and len(self.labels) < 2:
            raise ValueError("text-classification needs 'labels' with at least two entries")
        if len(set(self.labels)) != len(self.labels):
            raise ValueError("labels repeat")
        return self


class Slo(Frozen):
    p99_latency_ms: PositiveFloat = Field(description="end-to-end p99 the service must meet")
    peak_tps: PositiveFloat = Field(description="peak inferences per second across the fleet")
    cold_start_seconds: PositiveFloat | None = Field(
        None, description="longest the model's callers accept to wait (retrying) after it scaled to zero, "
        "until it serves again; required to scale a model to zero, and must cover the planner's cold-start "
        "estimate (inferstack/capacity/packing.py)")


# measured.method of an entry read from an Inference Recommender job, before the job's name.
RECOMMENDER_METHOD = "inference-recommender job"


class Measurement(Frozen):
    """Where a measured profile entry comes from (`inferstack profile` writes it). An entry without one is an
    estimate: plan --compare does not rank it and validate warns when production is sized from it."""

    date: datetime.date = Field(description="day the load test ran (ISO 8601, e.g. 2025-06-01)")
    method: str = Field(min_length=1, max_length=200, pattern=r"^[^\r\n]+$",
                        description='what measured it: "inferstack profile" (Locust) or "inference-recommender job '
                                    '<job name>"')
    environment: Name | None = Field(None, description="the environment whose instances served the test; "
                                     "omitted: a run against a target outside the environments (e.g. local)")
    release: str | None = Field(None, min_length=1, max_length=200, pattern=r"^[^\r\n]+$",
                                description="the release (commit, manifest) the measured instances ran")
    instances: PositiveInt = Field(description="instances behind the target during the test; "
                                   "throughput_per_second is the highest rate held divided by this")
    # One percentile per entry, named by its key: a figure is never read as a percentile it was not taken at.
    p99_latency_ms: PositiveFloat | None = Field(
        None, description="the p99 measured at that rate (a load test: `inferstack profile`); set this or "
        "p95_latency_ms")
    p95_latency_ms: PositiveFloat | None = Field(
        None, description="the p95 measured at that rate: an Inference Recommender job's model latency (in the "
        "container, not end to end). The Advanced job `inferstack profile --recommender` builds is a custom load "
        "test, which the API judges at P95 "
        "(https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ModelLatencyThreshold.html): the entry "
        "has no measured p99, so plan --compare does not rank it and validate warns when production is sized "
        "from it")
    results: str = Field(min_length=1, max_length=2048, pattern=r"^\S+$",
                         description="where the full results are: s3://bucket/key, or a file path")

    @field_validator("date")
    @classmethod
    def _not_in_future(cls, value: datetime.date) -> datetime.date:
        # UTC, as the results' timestamps: a measurement dated tomorrow was typed, not measured.
        if value > datetime.datetime.now(datetime.timezone.utc).date():
            raise ValueError(f"{value} is in the future")
        return value

    @field_validator("p95_latency_ms")
    @classmethod
    def _one_percentile(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is not None and info.data.get("p99_latency_ms") is not None:
            raise ValueError("set with p99_latency_ms: a measurement records its latency at one percentile, "
                             "p99_latency_ms or p95_latency_ms")
        return value

    @model_validator(mode="after")
    def _a_percentile(self) -> "Measurement":
        if self.p99_latency_ms is None and self.p95_latency_ms is None:
            raise ValueError("set p99_latency_ms (a load test's p99) or p95_latency_ms (an Inference Recommender "
                             "job's P95 model latency)")
        return self

    @property
    def latency_percentile(self) -> Literal["p99", "p95"]:
        return "p99" if self.p99_latency_ms is not None else "p95"

    @property
    def latency_ms(self) -> float:
        return self.p95_latency_ms if self.p99_latency_ms is None else self.p99_latency_ms  # type: ignore[return-value]


class ProfilePoint(Frozen):
    """An operating point of one instance: the most it sustains while meeting p99_latency_ms."""

    throughput_per_second: PositiveFloat = Field(description="inferences per second one instance sustains")
    p99_latency_ms: PositiveFloat = Field(description="end-to-end p99 at that throughput (server and network "
                                          "included), the one the plan uses; where nothing measured a p99 (an "
                                          "estimate, or measured.p95_latency_ms) it is assumed, and source says so")
    source: str = Field(min_length=1, description="where the figure comes from (benchmark run, publication)")
    measured: Measurement | None = Field(
        None, description="provenance of a measured entry; omitted: the entry is an estimate")

    @model_validator(mode="after")
    def _no_better_than_measured(self) -> "ProfilePoint":
        # A p99 is never below the p95 of the same requests: an entry planning with one would promise more.
        measured = self.measured
        if measured is not None and self.p99_latency_ms < measured.latency_ms:
            percentile = measured.latency_percentile
            raise ValueError(f"p99_latency_ms {self.p99_latency_ms:g} is below the measured {percentile} "
                             f"{measured.latency_ms:g} (measured.{percentile}_latency_ms): plan with what was measured")
        return self


class Capacity(Frozen):
    instance_type: InstanceType
    min: PositiveInt = Field(description="instances (one task each on ECS) the service never scales below")
    max: PositiveInt = Field(description="instances the service never scales above; the SLO's peak must fit")
    safety_factor: float | None = Field(None, gt=0, le=1, description="overrides the environment default")


class CapacityOverride(Frozen):
    instance_type: InstanceType | None = Field(None, description="this environment's instance type")
    min: PositiveInt | None = Field(None, description="this environment's minimum")
    max: PositiveInt | None = Field(None, description="this environment's maximum")
    safety_factor: float | None = Field(None, gt=0, le=1, description="this environment's safety factor")


class SloOverride(Frozen):
    p99_latency_ms: PositiveFloat | None = Field(None, description="this environment's p99 latency SLO")
    peak_tps: PositiveFloat | None = Field(None, description="this environment's peak (dev and staging see less)")
    cold_start_seconds: PositiveFloat | None = Field(None, description="this environment's cold-start SLO")


# Application Auto Scaling cron: six fields, minutes to year (e.g. "cron(0 20 ? * MON-FRI *)").
CRON_PATTERN = r"^cron\(\S+ \S+ \S+ \S+ \S+ \S+\)$"


def _time_zone(value: str) -> str:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown IANA time zone {value!r} (e.g. UTC, Europe/Berlin)") from None
    return value


class OffHours(Frozen):
    """A recurring window (nights, weekends) with reduced capacity. Capacity returns to the planned
    min/max at `end`, so a scale-down can never be left without its scale-up."""

    start: str = Field(pattern=CRON_PATTERN, description="cron(...) when the window opens")
    end: str = Field(pattern=CRON_PATTERN, description="cron(...) when planned capacity returns")
    min: int = Field(ge=0, description="minimum inside the window; 0 (scale to zero) where the model runs on a "
                     "fleet that allows it (config/checks.py): a dedicated real-time endpoint needs 1")
    max: int = Field(ge=0, description="maximum inside the window; 0 closes a neuron-cores fleet for the window")
    time_zone: Annotated[str, AfterValidator(_time_zone)] = Field("UTC", description="IANA zone of the crons")

    @model_validator(mode="after")
    def _window(self) -> "OffHours":
        if self.min > self.max:
            raise ValueError(f"min {self.min} > max {self.max}")
        if self.start == self.end:
            raise ValueError("start and end are the same schedule")
        return self


class EnvironmentOverride(Frozen):
    capacity: CapacityOverride = Field(CapacityOverride(), description="this environment's capacity, key by key "
                                       "over the model's")
    slo: SloOverride = Field(SloOverride(), description="this environment's SLO, key by key over the model's")
    off_hours: tuple[OffHours, ...] = Field(
        (), description="scheduled scale-down windows in this environment (e.g. nights and weekends in dev)")
    deployment: Deployment | None = Field(
        None, description="this environment's rollout, replacing the model's deployment (e.g. all at once in dev)")


class _ModelBase(Frozen):
    name: Name = Field(description="the model's name: its stack (<env>-<name>), image repository and release pin "
                       "entry; lower-case letters, digits and dashes")
    description: str = Field("", description="free text for readers of the file; not deployed")
    source: ModelSource = Field(description="the checkpoint: where it comes from and what task it does")
    slo: Slo = Field(description="what the service must meet: p99 latency and peak throughput")
    throughput_profile: dict[InstanceType, ProfilePoint] = Field(
        min_length=1, description="per instance type, the most one instance sustains within a p99: every capacity "
        "number is derived from it")
    capacity: Capacity = Field(description="the instance type and the fleet's bounds")
    environments: dict[Name, EnvironmentOverride] = Field(
        default_factory=dict, description="per-environment overrides of capacity and SLO")
    deploy_in: tuple[Name, ...] | None = Field(
        None, min_length=1, description="environments the model is deployed in (its stack, plan, release pin, "
        "promotion and smoke test); elsewhere it does not exist; omitted: every environment")

    @field_validator("deploy_in")
    @classmethod
    def _unique_environments(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError("environments repeat")
        return value

    def deploys_in(self, environment: str) -> bool:
        return self.deploy_in is None or environment in self.deploy_in

    def capacity_for(self, environment: str) -> Capacity:
        override = self.environments.get(environment, EnvironmentOverride()).capacity
        return self.capacity.model_copy(update=override.model_dump(exclude_none=True))

    def slo_for(self, environment: str) -> Slo:
        override = self.environments.get(environment, EnvironmentOverride()).slo
        return self.slo.model_copy(update=override.model_dump(exclude_none=True))

    def off_hours_for(self, environment: str) -> tuple[OffHours, ...]:
        return self.environments.get(environment, EnvironmentOverride()).off_hours

    def deployment_for(self, environment: str) -> "Deployment | None":
        override = self.environments.get(environment, EnvironmentOverride()).deployment
        return override if override is not None else getattr(self, "deployment", None)


# ---------------------------------------------------------------- neuron-ecs

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
        "data-parallel", description="data-parallel: one core per copy, copies on every core; "
                                     "pipeline: one copy sharded over neuron_cores_per_model cores")
    cast: Literal["none", "matmult", "all"] = Field(
        "none", description="down-cast FP32 ops (inf1 --fp32-cast, inf2 --auto-cast)")
    cast_type: Literal["bf16", "fp16"] = Field("bf16", description="inf2: the type --auto-cast casts to "
                                                "(--auto-cast-type)")
    extra_compiler_args: tuple[CompilerFlag, ...] = Field((), description="further compiler flags, appended as "
                                                          "given")

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
    warmup_requests: int = Field(8, ge=1, le=10000, description="inferences each worker runs at start, before it "
                                 "reports ready")
    health_check_grace_seconds: int = Field(300, ge=30, le=7200, description="model load plus warm-up")
    port: int = Field(8080, ge=1024, le=65535, description="container port the server listens on")
    root_volume_gib: int = Field(100, ge=30, le=16384, description="encrypted root volume of each instance: it "
                                 "holds the image with its compiled model; at least the AMI's own root size")


class NeuronLoadBalancer(Frozen):
    public: bool | None = Field(
        None, description="internet-facing, HTTPS only; omitted: the environment's defaults.public_load_balancer")
    deregistration_delay_seconds: int = Field(
        15, ge=0, le=3600, description="how long a stopping task keeps serving in-flight requests; requests are short")


class NeuronScaling(Frozen):
    scale_out_cooldown_seconds: int = Field(60, ge=0, le=3600, description="wait after adding tasks")
    scale_in_cooldown_seconds: int = Field(300, ge=0, le=3600, description="wait after removing tasks")


class NeuronAlarms(Frozen):
    error_rate_percent: float = Field(1.0, gt=0, le=100, description="target 5xx responses as a share of requests")
    cpu_percent: float = Field(90, gt=0, le=100, description="service CPU utilization, of the task's reservation")
    memory_percent: float = Field(90, gt=0, le=100, description="service memory utilization, of the task's limit")
    evaluation_minutes: int = Field(3, ge=1, le=60, description="consecutive breaching minutes before an alarm fires")


class NeuronEcsModel(_ModelBase):
    kind: Literal["neuron-ecs"] = Field(description="served on Inferentia by an ECS service behind a load balancer")
    compile: NeuronCompile = Field(description="how `docker build` compiles the model for the Neuron target")
    serving: NeuronServing = Field(NeuronServing(), description="the server in the task: batching, workers, "
                                   "warm-up, health check")
    deployment: Deployment | None = Field(
        None, description="ECS native rollout (canary, linear, all-at-once blue/green, or rolling), rolled back "
        "on the SLO alarms; omitted: rolling, starting the whole new fleet before stopping the old one")
    load_balancer: NeuronLoadBalancer = Field(NeuronLoadBalancer(), description="the service's Application "
                                              "Load Balancer")
    scaling: NeuronScaling = Field(NeuronScaling(), description="cooldowns of the scaling policies (their "
                                   "targets come from the plan)")
    alarms: NeuronAlarms = Field(NeuronAlarms(), description="alarm thresholds besides the SLO's p99")

    def public_load_balancer(self, environment: Environment) -> bool:
        """The model's own setting wins over the environment default."""
        if self.load_balancer.public is not None:
            return self.load_balancer.public
        return environment.defaults.public_load_balancer


# ---------------------------------------------------------------- triton-sagemaker

class TritonExport(Frozen):
    sequence_length: int = Field(128, ge=8, le=4096, description="inputs are padded to this many tokens")
    max_output_length: int | None = Field(None, ge=1, le=4096, description="generation models: output tokens")
    hidden_size: int | None = Field(
        None, ge=8, le=65536, description="generation models: d_model of the checkpoint; it shapes the "
        "encoder-to-decoder tensor and its warm-up data (the export checks it against the checkpoint)")
    token_type_ids: bool = Field(
        False, description="the tokenizer emits token_type_ids (BERT does; RoBERTa and DistilBERT do not)")
    onnx_opset: int = Field(17, ge=11, le=21, description="ONNX opset of the exported graph")
    parameters_millions: float | None = Field(
        None, gt=0, le=100_000, description="size of the checkpoint in millions of parameters (bert-base 110, "
        "bert-large 335, t5-small 60); sizes the start-up health-check timeout (TensorRT builds its engines at "
        "load); omitted: 350, a BERT-large-sized model")


class TensorRtAcceleration(Frozen):
    precision: Literal["FP16", "FP32"] = Field("FP16", description="precision of the TensorRT engines")
    max_workspace_size_bytes: int = Field(1 << 30, ge=1 << 20, le=1 << 34, description="GPU memory TensorRT may "
                                          "use while it builds an engine")


class DynamicBatching(Frozen):
    max_queue_delay_microseconds: int = Field(100, ge=0, le=1_000_000, description="longest Triton holds a "
                                              "request to fill a batch")
    preferred_batch_sizes: tuple[PositiveInt, ...] = Field(
        (), description="only where they help: e.g. the batch sizes a TensorRT plan was built for")


class InstanceGroup(Frozen):
    count: int = Field(1, ge=1, le=16, description="model instances per GPU")
    kind: Literal["KIND_GPU", "KIND_CPU"] = Field("KIND_GPU", description="where the instances run: the GPU, "
                                                  "or the CPU (no TensorRT there)")


# Values CloudFormation accepts for ProductionVariant.InferenceAmiVersion on GPU instances. The default
# AMI of ml.g4dn/ml.g5 ships NVIDIA driver 470 (CUDA 11.4); Triton images since 23.xx need CUDA 12.
InferenceAmiVersion = Literal[
    "al2-ami-sagemaker-inference-gpu-2", "al2-ami-sagemaker-inference-gpu-2-1",
    "al2-ami-sagemaker-inference-gpu-3-1", "al2023-ami-sagemaker-inference-gpu-4-1"]


class TritonServing(Frozen):
    backend: Literal["onnx", "tensorrt"] = Field(
        description="onnx: ONNX Runtime (optionally with the TensorRT accelerator); tensorrt: a TensorRT plan")
    tensorrt_acceleration: TensorRtAcceleration | None = Field(
        None, description="onnx backend only: TensorRT execution accelerator")
    max_batch_size: int = Field(8, ge=1, le=1024, description="largest batch Triton sends the model "
                                "(config.pbtxt max_batch_size)")
    dynamic_batching: DynamicBatching | None = Field(None, description="Triton's dynamic batcher; omitted: none")
    instance_group: InstanceGroup = Field(InstanceGroup(), description="model instances Triton runs side by side")
    warmup: bool = Field(True, description="Triton runs warm-up requests at load (at batch 1 and the largest "
                         "batch), before the endpoint takes traffic")
    response_cache: bool = Field(False, description="Triton's response cache, for models that see repeated "
                                 "inputs")
    tokenizer_instances: int = Field(2, ge=1, le=64, description="CPU instances (Python backend) of the text "
                                     "ensemble's tokenizer step, and of its postprocessing step")
    image_version: str = Field("24.09", pattern=r"^\d{2}\.\d{2}$", description="Triton release, YY.MM")
    container_startup_health_check_timeout_seconds: int | None = Field(
        None, ge=60, le=3600, description="model load, TensorRT engine build and warm-up must fit in it; "
        "omitted: estimated from export.parameters_millions, the TensorRT engines and instance_group.count "
        "(inferstack/triton/startup.py)")
    model_data_download_timeout_seconds: int = Field(600, ge=60, le=3600, description="SageMaker's "
                                                     "ModelDataDownloadTimeoutInSeconds")
    inference_ami_version: InferenceAmiVersion | None = Field(
        None, description="SageMaker inference AMI (GPU driver); set it for Triton images that need CUDA 12")

    @model_validator(mode="after")
    def _consistent(self) -> "TritonServing":
        if self.tensorrt_acceleration is not None and self.backend != "onnx":
            raise ValueError("tensorrt_acceleration applies to the onnx backend only")
        if self.dynamic_batching and any(s > self.max_batch_size for s in self.dynamic_batching.preferred_batch_sizes):
            raise ValueError("dynamic_batching.preferred_batch_sizes exceed max_batch_size")
        if self.instance_group.kind == "KIND_CPU" and (self.backend == "tensorrt" or self.tensorrt_acceleration):
            raise ValueError("TensorRT needs a GPU: use instance_group.kind KIND_GPU")
        return self


# SageMaker sizes every stepped deployment against the variant's instance count at deploy time: CanarySize
# "must be less than or equal to 50% of the variant's total instance count", LinearStepSize "must be 10-50%"
# of it (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_TrafficRoutingConfig.html), a rolling
# MaximumBatchSize "between 5% to 50%" (.../API_RollingUpdatePolicy.html). A step is at least one instance,
# and one instance is at most 50% of the fleet only from two instances on.
MIN_INSTANCES_FOR_STEPPED_DEPLOYMENT = 2


class Deployment(Frozen):
    """How a running fleet is replaced on update, rolled back automatically when the latency or error alarms
    fire: SageMaker deployment guardrails for Triton endpoints, ECS's native deployment strategies for
    Neuron services (the mapping and the ECS rules: inferstack/neuron/deployment.py)."""

    strategy: Literal["canary", "linear", "all-at-once", "rolling"] = Field(
        "canary", description="canary/linear/all-at-once: blue/green (a second fleet for the duration); "
        "rolling: replace the fleet in batches (no second fleet); a fleet that can be one instance at deploy "
        "time is replaced blue/green all at once")
    size_percent: int | None = Field(
        None, ge=1, le=50, description="canary: share of capacity that takes traffic first (1-50); linear: "
        "share shifted per step (10-50); rolling: batch size (5-50); unused by all-at-once")
    wait_interval_seconds: int = Field(300, ge=0, le=3600, description="baking time between steps, "
                                       "watched by the rollback alarms")
    termination_wait_seconds: int = Field(300, ge=0, le=3600, description="blue/green: keep the old fleet "
                                          "this long after the last shift")
    rollback_size_percent: int | None = Field(
        None, ge=1, le=100, description="rolling: batch size when rolling back (default: all at once)")
    maximum_execution_timeout_seconds: int = Field(3600, ge=600, le=28800, description="longest the whole "
                                                   "deployment may take; it must exceed the time it spends "
                                                   "waiting")

    @model_validator(mode="after")
    def _consistent(self) -> "TritonDeployment":
        size_range = {"canary": (1, 50), "linear": (10, 50), "rolling": (5, 50)}.get(self.strategy)
        if size_range is None:
            if self.size_percent is not None:
                raise ValueError("size_percent does not apply to strategy all-at-once")
        elif self.size_percent is None:
            raise ValueError(f"strategy {self.strategy} needs size_percent")
        elif not size_range[0] <= self.size_percent <= size_range[1]:
            raise ValueError(f"size_percent for {self.strategy} must be {size_range[0]} to {size_range[1]}")
        if self.strategy == "rolling" and "termination_wait_seconds" in self.model_fields_set:
            raise ValueError("termination_wait_seconds applies to blue/green strategies, not rolling")
        if self.strategy != "rolling" and self.rollback_size_percent is not None:
            raise ValueError("rollback_size_percent applies to strategy rolling only")
        if self.total_wait_seconds >= self.maximum_execution_timeout_seconds:
            raise ValueError(f"maximum_execution_timeout_seconds {self.maximum_execution_timeout_seconds} must "
                             f"exceed the {self.total_wait_seconds} s this deployment spends waiting")
        return self

    def for_fleet(self, smallest_fleet: int) -> "TritonDeployment":
        """The deployment SageMaker can run when the variant may hold only `smallest_fleet` instances at
        deploy time (the endpoint keeps its autoscaled count, so that is the planned minimum or an
        off-hours minimum). Below MIN_INSTANCES_FOR_STEPPED_DEPLOYMENT a canary, linear step or rolling
        batch would be the whole fleet: such a fleet is replaced blue/green all at once, still baked
        against the rollback alarms for wait_interval_seconds."""
        if self.strategy == "all-at-once" or smallest_fleet >= MIN_INSTANCES_FOR_STEPPED_DEPLOYMENT:
            return self
        return self.model_copy(update={"strategy": "all-at-once", "size_percent": None,
                                       "rollback_size_percent": None})

    @property
    def steps(self) -> int:
        """Traffic steps, each followed by a baking wait."""
        if self.strategy in ("linear", "rolling"):
            return math.ceil(100 / (self.size_percent or 100))
        return 2 if self.strategy == "canary" else 1

    @property
    def total_wait_seconds(self) -> int:
        termination = 0 if self.strategy == "rolling" else self.termination_wait_seconds
        return self.steps * self.wait_interval_seconds + termination


TritonDeployment = Deployment  # the name the SageMaker side grew up with


class TritonScaling(Frozen):
    scale_out_cooldown_seconds: int = Field(120, ge=0, le=3600, description="a new g4dn instance takes "
                                            "minutes to serve; shorter cooldowns overshoot")
    scale_in_cooldown_seconds: int = Field(600, ge=0, le=3600, description="wait after removing instances")


class DataCapture(Frozen):
    sampling_percentage: int = Field(ge=1, le=100, description="share of requests captured")
    capture: tuple[Literal["input", "output"], ...] = Field(("input", "output"), min_length=1,
                                                            description="what is captured of each sampled request")

    @field_validator("capture")
    @classmethod
    def _unique(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError("capture repeats a mode")
        return value


class InferenceComponentSpec(Frozen):
    """What one copy of the model holds on a shared endpoint (an AWS::SageMaker::InferenceComponent's
    ComputeResourceRequirements). Used where an inference-components fleet in environments.yaml carries
    the model; elsewhere the model keeps its own endpoint."""

    accelerators: int = Field(1, ge=1, le=8, description="GPUs one copy holds (NumberOfAcceleratorDevicesRequired)")
    cpu_cores: float = Field(1.0, ge=0.25, le=192, description="vCPUs one copy reserves (NumberOfCpuCoresRequired)")
    memory_mib: int = Field(ge=128, le=786_432, description="host memory one copy reserves (MinMemoryRequiredInMb)")
    profiled_on: InstanceType | None = Field(
        None, description="throughput_profile entry a copy's throughput comes from, scaled by accelerators over "
        "that instance's GPUs; omitted: capacity.instance_type")


class TritonSageMakerModel(_ModelBase):
    kind: Literal["triton-sagemaker"] = Field(description="served by NVIDIA Triton on a SageMaker real-time endpoint")
    export: TritonExport = Field(TritonExport(), description="how `docker build` exports the checkpoint to ONNX")
    serving: TritonServing = Field(description="Triton's configuration and the SageMaker variant's start-up")
    deployment: TritonDeployment = Field(TritonDeployment(strategy="canary", size_percent=10), description="how "
                                         "an update replaces the running fleet, rolled back on the SLO alarms")
    scaling: TritonScaling = Field(TritonScaling(), description="cooldowns of the scaling policy (its target comes "
                                   "from the plan)")
    data_capture: DataCapture | None = Field(None, description="log sampled requests/responses to an "
                                             "encrypted bucket")
    inference_component: InferenceComponentSpec | None = Field(
        None, description="resources of one copy on a shared endpoint; required where a fleet of kind "
        "sagemaker-inference-components in environments.yaml carries this model")
    pipeline: tuple[PipelineStep, ...] | None = Field(
        None, min_length=1, max_length=MAX_STEPS, description="serial steps on the endpoint: the model itself "
        "(model: self) and the user's Python steps from the model's folder, run in order as the text ensemble's "
        "steps (inferstack/schema/pipeline.py, docs/how-to/build-a-pipeline.md); omitted: the model alone")

    @model_validator(mode="after")
    def _generation_shapes(self) -> "TritonSageMakerModel":
        if self.source.task == "text2text-generation":
            missing = [f for f in ("max_output_length", "hidden_size") if getattr(self.export, f) is None]
            if missing:
                raise ValueError(f"text2text-generation needs export.{' and export.'.join(missing)}")
        return self


ModelConfig = Annotated[Union[NeuronEcsModel, TritonSageMakerModel], Field(discriminator="kind")]
