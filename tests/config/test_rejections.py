"""Every way a config can be wrong is rejected with one line naming file, line and key path."""

from __future__ import annotations

import pytest

from inferstack import config
from tests.support.config_edits import assert_rejected, delete_at, edit_yaml, problems_of, set_at

CASES = {
    "unknown key": ("intent-bert.yaml", set_at("serving", "colour", value="red"), "serving.colour: unknown key"),
    "wrong type": (
        "intent-bert.yaml",
        set_at("compile", "batch_size", value="four"),
        "compile.batch_size: Input should be a valid integer",
    ),
    "out of range": (
        "intent-bert.yaml",
        set_at("compile", "sequence_length", value=2),
        "compile.sequence_length: Input should be greater than or equal to 8",
    ),
    "unknown instance type": (
        "intent-bert.yaml",
        set_at("capacity", "instance_type", value="inf9.huge"),
        "capacity.instance_type: unknown instance type 'inf9.huge'",
    ),
    "neuron on a GPU type": (
        "intent-bert.yaml",
        set_at("capacity", "instance_type", value="ml.g4dn.xlarge"),
        "capacity.instance_type: ml.g4dn.xlarge is not an Inferentia EC2 type",
    ),
    "triton on an inferentia type": (
        "bert-large-classifier.yaml",
        set_at("capacity", "instance_type", value="inf1.xlarge"),
        "capacity.instance_type: inf1.xlarge is not a SageMaker GPU type",
    ),
    "inf1 instance with inf2 compile target": (
        "intent-bert.yaml",
        set_at("compile", "neuron_generation", value="inf2"),
        "compile.neuron_generation: compile target inf2 cannot run on inf1.6xlarge",
    ),
    "cores beyond the instance": (
        "intent-bert.yaml",
        lambda d: (
            d["compile"].update(parallelism="pipeline", neuron_cores_per_model=32),
            d["serving"].update(data_parallel=False, workers=1),
        ),
        "compile.neuron_cores_per_model: 32 NeuronCores per model, but inf1.6xlarge has 16",
    ),
    "workers that do not split the cores": (
        "intent-bert.yaml",
        set_at("serving", "workers", value=3),
        "serving.workers: 3 workers cannot split the 16 NeuronCores of inf1.6xlarge evenly",
    ),
    "pipeline with DataParallel": (
        "intent-bert.yaml",
        lambda d: d["compile"].update(parallelism="pipeline", neuron_cores_per_model=4),
        "serving.data_parallel: DataParallel cannot run a model compiled in pipeline mode",
    ),
    "data-parallel copy spanning cores": (
        "intent-bert.yaml",
        set_at("compile", "neuron_cores_per_model", value=2),
        "compile.neuron_cores_per_model: data-parallel copies are compiled for exactly 1 NeuronCore",
    ),
    "min above max": (
        "t5-spelling.yaml",
        set_at("capacity", "min", value=20),
        "capacity.min: min 20 > max 8 (environment prod)",
    ),
    "min above max in an override": (
        "t5-spelling.yaml",
        set_at("environments", "dev", "capacity", "min", value=5),
        "environments.dev.capacity.min: min 5 > max 2 (environment dev)",
    ),
    "peak the profile cannot serve within max": (
        "intent-bert.yaml",
        set_at("capacity", "max", value=4),
        "capacity.max: peak 16000 TPS needs 8 x inf1.6xlarge at 4000/s x safety factor 0.5, but max is 4",
    ),
    "p99 SLO below the profiled p99": (
        "intent-bert.yaml",
        set_at("slo", "p99_latency_ms", value=5),
        "slo.p99_latency_ms: SLO p99 5 ms is below the profiled p99 8 ms of inf1.6xlarge",
    ),
    "no profile for the instance type": (
        "intent-bert.yaml",
        delete_at("throughput_profile", "inf1.xlarge"),
        "throughput_profile: no throughput_profile entry for inf1.xlarge (the instance type used in dev)",
    ),
    "override for an unknown environment": (
        "t5-spelling.yaml",
        set_at("environments", "qa", value={"capacity": {"min": 1}}),
        "environments.qa: unknown environment; known: dev, prod, staging",
    ),
    "missing required field": ("t5-spelling.yaml", delete_at("slo"), "slo: required field is missing"),
    "unknown kind": (
        "t5-spelling.yaml",
        set_at("kind", value="lambda"),
        "kind: must be one of neuron-ecs, triton-sagemaker (got 'lambda')",
    ),
    "tensorrt accelerator on the plan backend": (
        "t5-spelling.yaml",
        set_at("serving", "backend", value="tensorrt"),
        "serving: tensorrt_acceleration applies to the onnx backend only",
    ),
    "classifier without labels": (
        "intent-bert.yaml",
        set_at("source", "labels", value=["only"]),
        "source: text-classification needs 'labels' with at least two entries",
    ),
    "two model sources": (
        "intent-bert.yaml",
        set_at("source", "local_path", value="models/intent"),
        "source: set exactly one of 'huggingface_id' or 'local_path'",
    ),
    "bad compiler flag": (
        "intent-bert.yaml",
        set_at("compile", "extra_compiler_args", value=["; rm -rf /"]),
        "compile.extra_compiler_args.0: '; rm -rf /' is not a compiler flag",
    ),
    # ---- triton-sagemaker: deployment, scaling, data capture, off-hours, serving
    "unknown deployment strategy": (
        "t5-spelling.yaml",
        set_at("deployment", "strategy", value="big-bang"),
        "deployment.strategy: Input should be 'canary', 'linear', 'all-at-once' or 'rolling'",
    ),
    "canary without a size": (
        "bert-large-classifier.yaml",
        delete_at("deployment", "size_percent"),
        "deployment: strategy canary needs size_percent",
    ),
    "linear step below 10%": (
        "t5-spelling.yaml",
        set_at("deployment", "size_percent", value=5),
        "deployment: size_percent for linear must be 10 to 50",
    ),
    "deployment size above 50%": (
        "t5-spelling.yaml",
        set_at("deployment", "size_percent", value=80),
        "deployment.size_percent: Input should be less than or equal to 50",
    ),
    "size for all-at-once": (
        "t5-spelling.yaml",
        set_at("deployment", "strategy", value="all-at-once"),
        "deployment: size_percent does not apply to strategy all-at-once",
    ),
    "termination wait with rolling": (
        "t5-spelling.yaml",
        set_at("deployment", "strategy", value="rolling"),
        "deployment: termination_wait_seconds applies to blue/green strategies",
    ),
    "rollback size without rolling": (
        "t5-spelling.yaml",
        set_at("deployment", "rollback_size_percent", value=20),
        "deployment: rollback_size_percent applies to strategy rolling only",
    ),
    "garbage wait interval": (
        "t5-spelling.yaml",
        set_at("deployment", "wait_interval_seconds", value="soon"),
        "deployment.wait_interval_seconds: Input should be a valid integer",
    ),
    "wait interval above an hour": (
        "t5-spelling.yaml",
        set_at("deployment", "wait_interval_seconds", value=7200),
        "deployment.wait_interval_seconds: Input should be less than or equal to 3600",
    ),
    "termination wait negative": (
        "t5-spelling.yaml",
        set_at("deployment", "termination_wait_seconds", value=-1),
        "deployment.termination_wait_seconds: Input should be greater than or equal to 0",
    ),
    "timeout shorter than the waits": (
        "t5-spelling.yaml",
        set_at("deployment", "maximum_execution_timeout_seconds", value=900),
        "deployment: maximum_execution_timeout_seconds 900 must exceed the 1500 s this deployment spends waiting",
    ),
    "timeout below the API minimum": (
        "t5-spelling.yaml",
        set_at("deployment", "maximum_execution_timeout_seconds", value=60),
        "deployment.maximum_execution_timeout_seconds: Input should be greater than or equal to 600",
    ),
    "garbage cooldown": (
        "bert-large-classifier.yaml",
        set_at("scaling", "scale_in_cooldown_seconds", value=[1]),
        "scaling.scale_in_cooldown_seconds: Input should be a valid integer",
    ),
    "negative cooldown": (
        "bert-large-classifier.yaml",
        set_at("scaling", "scale_out_cooldown_seconds", value=-5),
        "scaling.scale_out_cooldown_seconds: Input should be greater than or equal to 0",
    ),
    "data capture above 100%": (
        "bert-large-classifier.yaml",
        set_at("data_capture", "sampling_percentage", value=150),
        "data_capture.sampling_percentage: Input should be less than or equal to 100",
    ),
    "data capture unknown mode": (
        "bert-large-classifier.yaml",
        set_at("data_capture", "capture", value=["everything"]),
        "data_capture.capture.0: Input should be 'input' or 'output'",
    ),
    "data capture repeated mode": (
        "bert-large-classifier.yaml",
        set_at("data_capture", "capture", value=["input", "input"]),
        "data_capture.capture: capture repeats a mode",
    ),
    "off-hours garbage cron": (
        "t5-spelling.yaml",
        set_at("environments", "dev", "off_hours", 0, "start", value="every night"),
        "environments.dev.off_hours.0.start: String should match pattern",
    ),
    "off-hours unknown time zone": (
        "t5-spelling.yaml",
        set_at("environments", "dev", "off_hours", 0, "time_zone", value="Mars/Olympus"),
        "environments.dev.off_hours.0.time_zone: unknown IANA time zone 'Mars/Olympus'",
    ),
    "off-hours min above max": (
        "t5-spelling.yaml",
        set_at("environments", "dev", "off_hours", 0, "min", value=2),
        "environments.dev.off_hours.0: min 2 > max 1",
    ),
    "off-hours zero instances on a dedicated endpoint": (
        "t5-spelling.yaml",
        set_at("environments", "dev", "off_hours", 0, "min", value=0),
        "environments.dev.off_hours.0.min: a dedicated real-time SageMaker endpoint keeps at least 1 instance",
    ),
    "off-hours negative instances": (
        "t5-spelling.yaml",
        set_at("environments", "dev", "off_hours", 0, "min", value=-1),
        "environments.dev.off_hours.0.min: Input should be greater than or equal to 0",
    ),
    "off-hours cron that cannot be evaluated": (
        "t5-spelling.yaml",
        set_at("environments", "dev", "off_hours", 0, "start", value="cron(0 25 ? * MON-FRI *)"),
        "environments.dev.off_hours.0.start: cannot evaluate the schedule: '25' is outside 0-23",
    ),
    "off-hours same start and end": (
        "t5-spelling.yaml",
        set_at("environments", "dev", "off_hours", 0, "end", value="cron(0 20 ? * MON-FRI *)"),
        "environments.dev.off_hours.0: start and end are the same schedule",
    ),
    "off-hours above the planned max": (
        "t5-spelling.yaml",
        set_at("environments", "dev", "off_hours", 0, "max", value=5),
        "environments.dev.off_hours.0.max: off-hours max 5 exceeds the planned max 2",
    ),
    "neuron off-hours at zero but open": (
        "intent-bert.yaml",
        set_at(
            "environments",
            "dev",
            "off_hours",
            value=[{"start": "cron(0 20 * * ? *)", "end": "cron(0 7 * * ? *)", "min": 0, "max": 1}],
        ),
        "environments.dev.off_hours.0.max: an ECS service at 0 tasks has no target to count requests for",
    ),
    # ---- ECS native rollouts (inferstack/neuron/deployment.py): what ECS refuses
    "ECS bake time in seconds": (
        "intent-bert-inf2.yaml",
        set_at("deployment", "wait_interval_seconds", value=90),
        "deployment.wait_interval_seconds: 90 s: ECS bakes in whole minutes",
    ),
    "ECS bake time in seconds in one environment": (
        "intent-bert-inf2.yaml",
        set_at("environments", "dev", "deployment", "termination_wait_seconds", value=30),
        "environments.dev.deployment.termination_wait_seconds: 30 s: ECS bakes in whole minutes",
    ),
    "ECS rollback batch": (
        "intent-bert-inf2.yaml",
        set_at("deployment", value={"strategy": "rolling", "size_percent": 25, "rollback_size_percent": 50}),
        "deployment.rollback_size_percent: ECS rolls a blue/green-family deployment back by moving traffic",
    ),
    "ECS overall timeout": (
        "intent-bert-inf2.yaml",
        set_at("deployment", "maximum_execution_timeout_seconds", value=7200),
        "deployment.maximum_execution_timeout_seconds: ECS deployments have no overall timeout setting",
    ),
    "ECS linear step below the range": (
        "intent-bert-inf2.yaml",
        set_at("deployment", "size_percent", value=5),
        "deployment: size_percent for linear must be 10 to 50",
    ),
    "ECS bake time of a fleet": (
        "environments.yaml",
        set_at("fleets", "intent-pack", "deployment", "wait_interval_seconds", value=45),
        "fleets.intent-pack.deployment.wait_interval_seconds: 45 s: ECS bakes in whole minutes",
    ),
    # ---- fleets (environments.yaml `fleets:`)
    "fleet of an unknown model": (
        "environments.yaml",
        set_at("fleets", "intent-pack", "models", value=["intent-bert", "sentiment"]),
        "fleets.intent-pack.models.1: unknown model 'sentiment'",
    ),
    "fleet of the wrong kind of model": (
        "environments.yaml",
        set_at("fleets", "intent-pack", "models", value=["intent-bert", "t5-spelling"]),
        "fleets.intent-pack.models.1: t5-spelling is a triton-sagemaker model; a neuron-cores fleet carries "
        "neuron-ecs models",
    ),
    "fleet named like a model": (
        "environments.yaml",
        lambda data: data["fleets"].update({"t5-spelling": data["fleets"].pop("triton-shared")}),
        "fleets.t5-spelling: fleet name 't5-spelling' is also a model's or a reserved stack's name",
    ),
    "model on two fleets": (
        "environments.yaml",
        lambda data: data["fleets"].update({"second": dict(data["fleets"]["triton-shared"])}),
        "fleets.second.models.0: bert-large-classifier is already on fleet triton-shared in dev",
    ),
    "fleet in an unknown environment": (
        "environments.yaml",
        set_at("fleets", "triton-shared", "deploy_in", value=["qa"]),
        "fleets.triton-shared.deploy_in.0: unknown environment 'qa'",
    ),
    "neuron fleet whose last member left": (
        "environments.yaml",
        set_at("fleets", "intent-pack", "models", value=[]),
        "fleets.intent-pack.models: a neuron-cores fleet needs at least 1 member, it has none; to retire the fleet, "
        "remove its entry fleets.intent-pack from environments.yaml",
    ),
    "inference-components fleet whose last member left": (
        "environments.yaml",
        set_at("fleets", "triton-shared", "models", value=[]),
        "fleets.triton-shared.models: a sagemaker-inference-components fleet needs at least 1 member, it has none; "
        "to retire the fleet, remove its entry fleets.triton-shared from environments.yaml",
    ),
    "neuron fleet on a GPU type": (
        "environments.yaml",
        set_at("fleets", "intent-pack", "capacity", "instance_type", value="ml.g4dn.xlarge"),
        "fleets.intent-pack.capacity.instance_type: ml.g4dn.xlarge is not an Inferentia EC2 type",
    ),
    "neuron fleet on the other generation": (
        "environments.yaml",
        set_at("fleets", "intent-pack", "capacity", "instance_type", value="inf2.xlarge"),
        "fleets.intent-pack.models.0: intent-bert is compiled for inf1, inf2.xlarge runs inf2",
    ),
    "neuron fleet whose cores do not fit": (
        "duplicate-bert.yaml",
        lambda data: (
            data["compile"].update(neuron_cores_per_model=4, parallelism="pipeline"),
            data["serving"].update(data_parallel=False, workers=1),
        ),
        "fleets.intent-pack.environments.dev.capacity.instance_type: fleet intent-pack: its models need at least "
        "5 NeuronCores per instance (1 + 4), inf1.xlarge has 4",
    ),
    "neuron fleet too small for the peaks": (
        "environments.yaml",
        set_at("fleets", "intent-pack", "capacity", "max", value=4),
        "fleets.intent-pack.capacity.max: the members' peaks need 13 x inf1.6xlarge, but max is 4 (environment prod)",
    ),
    "neuron off-hours in one year only": (
        "environments.yaml",
        set_at(
            "fleets", "intent-pack", "environments", "dev", "off_hours", 0, "start", value="cron(0 20 ? * MON-FRI 2027)"
        ),
        "fleets.intent-pack.environments.dev.off_hours.0.start: year '2027': the Auto Scaling group's scheduled "
        "actions take a 5-field Unix cron",
    ),
    "neuron fleet at zero outside its windows": (
        "environments.yaml",
        set_at("fleets", "intent-pack", "environments", "dev", "capacity", "min", value=0),
        "fleets.intent-pack.environments.dev.capacity.min: a neuron-cores fleet keeps at least 1 instance",
    ),
    "neuron fleet window at zero but open": (
        "environments.yaml",
        set_at("fleets", "intent-pack", "environments", "dev", "off_hours", 0, "max", value=1),
        "fleets.intent-pack.environments.dev.off_hours.0.max: an ECS service at 0 tasks has no target",
    ),
    "packed model whose SLO the shared fleet cannot meet": (
        "duplicate-bert.yaml",
        set_at("slo", "p99_latency_ms", value=12),
        "fleets.intent-pack.models.1: duplicate-bert: SLO p99 12 ms is below the profiled p99 20 ms",
    ),
    "component without its resources": (
        "t5-spelling.yaml",
        delete_at("inference_component"),
        "fleets.triton-shared.models.1: t5-spelling needs inference_component",
    ),
    "component copy over the instance's memory": (
        "bert-large-classifier.yaml",
        set_at("inference_component", "memory_mib", value=100000),
        "fleets.triton-shared.capacity.instance_type: bert-large-classifier: one copy (1 GPU, 2 vCPU, 100000 MiB) "
        "does not fit on ml.g4dn.xlarge",
    ),
    "component copy over the instance's accelerators": (
        "bert-large-classifier.yaml",
        set_at("inference_component", "accelerators", value=2),
        "fleets.triton-shared.capacity.instance_type: bert-large-classifier: one copy (2 GPU",
    ),
    "scale to zero without a cold-start SLO": (
        "t5-spelling.yaml",
        set_at("environments", "dev", "slo", value={"peak_tps": 30}),
        "fleets.triton-shared.models.1: t5-spelling: scaling to zero makes a first request wait about",
    ),
    "scale to zero with a cold-start SLO below the estimate": (
        "bert-large-classifier.yaml",
        set_at("environments", "dev", "slo", "cold_start_seconds", value=60),
        "fleets.triton-shared.models.0: bert-large-classifier: scaling to zero makes a first request wait about",
    ),
    "shared endpoint members on different inference AMIs": (
        "t5-spelling.yaml",
        set_at("serving", "inference_ami_version", value="al2-ami-sagemaker-inference-gpu-3-1"),
        "fleets.triton-shared.models: the members share one endpoint variant and so one inference AMI",
    ),
    "unknown inference AMI": (
        "t5-spelling.yaml",
        set_at("serving", "inference_ami_version", value="al2-latest"),
        "serving.inference_ami_version: Input should be",
    ),
    "triton version the SDK does not know": (
        "t5-spelling.yaml",
        set_at("serving", "image_version", value="19.01"),
        "serving.image_version: no sagemaker-tritonserver image for region us-east-1, version 19.01",
    ),
    "tensorrt on CPU instances": (
        "t5-spelling.yaml",
        set_at("serving", "instance_group", "kind", value="KIND_CPU"),
        "serving: TensorRT needs a GPU",
    ),
    "generation without hidden size": (
        "t5-spelling.yaml",
        delete_at("export", "hidden_size"),
        "text2text-generation needs export.hidden_size",
    ),
    "garbage hidden size": (
        "t5-spelling.yaml",
        set_at("export", "hidden_size", value="wide"),
        "export.hidden_size: Input should be a valid integer",
    ),
    "garbage token_type_ids": (
        "bert-large-classifier.yaml",
        set_at("export", "token_type_ids", value="sometimes"),
        "export.token_type_ids: Input should be a valid boolean",
    ),
    "missing environment field": (
        "environments.yaml",
        delete_at("environments", "staging", "region"),
        "environments.staging.region: required field is missing",
    ),
    "bad account id": (
        "environments.yaml",
        set_at("environments", "prod", "account", value="12345"),
        "environments.prod.account: String should match pattern",
    ),
    "zone outside the region": (
        "environments.yaml",
        set_at("environments", "dev", "availability_zones", value=["us-west-2a", "us-east-1b"]),
        "environments.dev: availability_zones ['us-west-2a'] are not zones of region us-east-1",
    ),
    "both network modes": (
        "environments.yaml",
        set_at(
            "environments",
            "dev",
            "network",
            "import",
            value={
                "vpc_id": "vpc-0123456789abcdef0",
                "vpc_cidr": "10.0.0.0/16",
                "private_subnet_ids": ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"],
                "private_subnet_route_table_ids": ["rtb-0123456789abcdef0", "rtb-0123456789abcdef1"],
            },
        ),
        "environments.dev.network: set exactly one of 'create'",
    ),
    "bad log retention": (
        "environments.yaml",
        set_at("environments", "dev", "defaults", "log_retention_days", value=10),
        "environments.dev.defaults.log_retention_days: must be one of 1, 3, 5",
    ),
    # A participant cannot create VPC endpoints or change route tables in a VPC shared with it
    # (https://docs.aws.amazon.com/vpc/latest/userguide/vpc-share-limitations.html).
    "endpoints in a shared vpc": (
        "environments.yaml",
        set_at("environments", "prod", "network", "import", "create_endpoints", value=True),
        "environments.prod.network.import.create_endpoints: the VPC is shared from account 555555555555: "
        "participants cannot create VPC endpoints",
    ),
    "bad vpc owner account": (
        "environments.yaml",
        set_at("environments", "prod", "network", "import", "owner_account", value="shared"),
        "environments.prod.network.import.owner_account: String should match pattern",
    ),
    "default environment missing": (
        "environments.yaml",
        set_at("default_environment", value="qa"),
        "default_environment 'qa' is not one of the environments",
    ),
    # ---- load_test (the generators' Fargate tasks are sized from it: a pair Fargate refuses is refused here)
    "load test cpu fargate does not offer": (
        "environments.yaml",
        set_at("environments", "staging", "load_test", "worker_cpu", value=1000),
        "environments.staging.load_test.worker_cpu: must be a Fargate CPU value: one of 256, 512, 1024",
    ),
    "load test memory fargate does not pair with the cpu": (
        "environments.yaml",
        set_at("environments", "staging", "load_test", "worker_memory_mib", value=1024),
        "environments.staging.load_test.worker_memory_mib: Fargate pairs 1024 CPU units with 2048 to "
        "8192 in steps of 1024 MiB, not 1024",
    ),
    "load test memory off fargate's step": (
        "environments.yaml",
        lambda d: d["environments"]["staging"]["load_test"].update(worker_cpu=8192, worker_memory_mib=18432),
        "environments.staging.load_test.worker_memory_mib: Fargate pairs 8192 CPU units with 16384 to "
        "61440 in steps of 4096 MiB, not 18432",
    ),
    "load test with one worker": (
        "environments.yaml",
        set_at("environments", "staging", "load_test", "max_workers", value=1),
        "environments.staging.load_test.max_workers: Input should be greater than or equal to 2",
    ),
    "load test rate not measured": (
        "environments.yaml",
        delete_at("environments", "staging", "load_test", "per_worker_rps"),
        "environments.staging.load_test.per_worker_rps: required field is missing",
    ),
    "load test rate of zero": (
        "environments.yaml",
        set_at("environments", "staging", "load_test", "per_worker_rps", value=0),
        "environments.staging.load_test.per_worker_rps: Input should be greater than 0",
    ),
    "load test results kept for no days": (
        "environments.yaml",
        set_at("environments", "staging", "load_test", "results_retention_days", value=0),
        "environments.staging.load_test.results_retention_days: Input should be greater than or equal to 1",
    ),
    "load test unknown key": (
        "environments.yaml",
        set_at("environments", "staging", "load_test", "spot", value=True),
        "environments.staging.load_test.spot: unknown key",
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_rejection(config_copy, case):
    assert_rejected(config_copy, *CASES[case])


def test_a_fleet_member_retired_by_its_file_alone_is_still_on_its_fleet(config_copy):
    (config_copy / "t5-spelling.yaml").unlink()
    problems = problems_of(config_copy)
    assert len(problems) == 1, problems
    assert problems[0].startswith("model_configs/environments.yaml:")
    assert problems[0].split(": ", 1)[1] == (
        "fleets.triton-shared.models.1: unknown model 't5-spelling' (no model file names it: a model retired by "
        "removing its file leaves its fleet too; take it off this list); known: bert-large-classifier, "
        "duplicate-bert, intent-bert, intent-bert-inf2"
    )


def test_malformed_yaml_reports_its_line(config_copy):
    path = config_copy / "t5-spelling.yaml"
    lines = path.read_text().splitlines()
    lines[6] = "source: [unclosed"
    path.write_text("\n".join(lines) + "\n")
    (problem,) = problems_of(config_copy)
    assert problem.startswith("model_configs/t5-spelling.yaml:8: malformed YAML")


def test_duplicate_yaml_key_is_rejected(config_copy):
    path = config_copy / "intent-bert.yaml"
    path.write_text(path.read_text() + "name: intent-bert-again\n")
    problems = problems_of(config_copy)
    assert any(p.startswith("model_configs/intent-bert.yaml:") and ": name: duplicate key" in p for p in problems)


def test_problem_lines_point_at_the_key(config_copy):
    edit_yaml(config_copy / "intent-bert.yaml", set_at("serving", "workers", value=3))
    text = (config_copy / "intent-bert.yaml").read_text().splitlines()
    problems = problems_of(config_copy)
    assert len(problems) == 2  # inf1.6xlarge (prod, staging) and inf1.xlarge (dev)
    for problem in problems:
        line = int(problem.split(":")[1])
        assert text[line - 1].strip().startswith("workers: 3")


def test_duplicate_model_names(config_copy):
    (config_copy / "intent-bert-copy.yaml").write_text((config_copy / "intent-bert.yaml").read_text())
    problems = problems_of(config_copy)
    assert any("intent-bert-copy.yaml" in p and "name: duplicate model name 'intent-bert'" in p for p in problems)


def test_top_level_must_be_a_mapping(config_copy):
    (config_copy / "list.yaml").write_text("- a\n- b\n")
    assert problems_of(config_copy) == ["model_configs/list.yaml:1: expected a mapping at the top level"]


def test_all_problems_are_reported_at_once(config_copy):
    edit_yaml(config_copy / "intent-bert.yaml", set_at("serving", "workers", value=3))
    edit_yaml(config_copy / "t5-spelling.yaml", set_at("capacity", "min", value=20))
    edit_yaml(config_copy / "bert-large-classifier.yaml", set_at("serving", "colour", value="red"))
    problems = problems_of(config_copy)
    files = {p.split(":")[0] for p in problems}
    assert files == {
        "model_configs/intent-bert.yaml",
        "model_configs/t5-spelling.yaml",
        "model_configs/bert-large-classifier.yaml",
    }


def test_missing_config_dir(tmp_path):
    with pytest.raises(config.ConfigError, match="config directory not found"):
        config.load(tmp_path / "nowhere")


def test_missing_environments_file(config_copy):
    (config_copy / "environments.yaml").unlink()
    assert "model_configs/environments.yaml: file not found" in problems_of(config_copy)


def test_a_neuron_fleet_of_more_models_than_target_groups(config_copy):
    """Six neuron-ecs models on one fleet: ECS gives a service at most five target groups."""
    source = (config_copy / "duplicate-bert.yaml").read_text()
    names = [f"extra-{i}" for i in range(4)]
    for name in names:
        (config_copy / f"{name}.yaml").write_text(source.replace("name: duplicate-bert", f"name: {name}"))
    edit_yaml(
        config_copy / "environments.yaml",
        set_at("fleets", "intent-pack", "models", value=["intent-bert", "duplicate-bert", *names]),
    )
    problems = [p for p in problems_of(config_copy) if "fleets.intent-pack.models:" in p]
    assert len(problems) == 1 and "6 models; the fleet's ECS service routes each to its own target group" in problems[0]


def test_an_inference_components_fleet_of_more_members_than_the_role_holds(config_copy):
    source = (config_copy / "t5-spelling.yaml").read_text()
    names = [f"extra-{i}" for i in range(9)]
    for name in names:
        (config_copy / f"{name}.yaml").write_text(source.replace("name: t5-spelling", f"name: {name}"))
    edit_yaml(
        config_copy / "environments.yaml",
        set_at("fleets", "triton-shared", "models", value=["bert-large-classifier", "t5-spelling", *names]),
    )
    problems = [p for p in problems_of(config_copy) if "fleets.triton-shared.models:" in p]
    assert len(problems) == 1 and "11 models; each member grants the shared endpoint's role" in problems[0]


def test_fleet_members_whose_listener_rule_priorities_clash(config_copy):
    """Rule priorities come from the names (inferstack/neuron/routing.py); m249 and m256 hash alike."""
    from inferstack.neuron import routing

    assert routing.rule_priority("m249") == routing.rule_priority("m256")
    source = (config_copy / "duplicate-bert.yaml").read_text()
    for name, port in (("m249", "8081"), ("m256", "8082")):
        (config_copy / f"{name}.yaml").write_text(
            source.replace("name: duplicate-bert", f"name: {name}").replace("port: 8081", f"port: {port}")
        )
    edit_yaml(
        config_copy / "environments.yaml",
        set_at("fleets", "intent-pack", "models", value=["intent-bert", "m249", "m256"]),
    )
    problems = [p for p in problems_of(config_copy) if "fleets.intent-pack.models.2:" in p]
    # The same hash gives the same catch-all priority too (the shipped fleet shifts traffic in every environment).
    assert len(problems) == 2, problems
    assert "m256's listener rule priority 25300 is also m249's" in problems[1]
    assert f"m256's catch-all rule priority {routing.catch_all_priority('m249')} is also m249's" in problems[0]


def test_fleet_members_on_one_port(config_copy):
    """A member listens on its own serving.port in the fleet's task (its target groups are on that port, which
    must not move with the fleet's order): two members on one port are one line, with a free port to take."""
    edit_yaml(config_copy / "duplicate-bert.yaml", set_at("serving", "port", value=8080))
    problems = [p for p in problems_of(config_copy) if "fleets.intent-pack.models.1:" in p]
    assert len(problems) == 1, problems
    assert (
        "duplicate-bert listens on port 8080, as intent-bert does; the members of a fleet share one task: give "
        "duplicate-bert a port of its own (serving.port in its model file, e.g. 8081)"
    ) in problems[0]
    assert problems[0].startswith("model_configs/environments.yaml:")
