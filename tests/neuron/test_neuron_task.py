"""The Neuron task derived from an instance type: devices, cores, cpu/memory headroom, build args, env."""

from __future__ import annotations

import json

import pytest

from inferstack import config
from inferstack.neuron import task as neuron_task
from inferstack.schema import instances
from tests.support.paths import CONFIG_DIR

# Devices and NeuronCores per instance, from the Neuron docs' Inf1 and Inf2 architecture pages
# (awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-hardware/inf1-arch.html, inf2-arch.html:
# Inferentia chips per size; 4 NeuronCores per Inferentia chip, 2 per Inferentia2 chip).
INFERENTIA = {
    "inf1.xlarge": (1, 4),
    "inf1.2xlarge": (1, 4),
    "inf1.6xlarge": (4, 16),
    "inf1.24xlarge": (16, 64),
    "inf2.xlarge": (1, 2),
    "inf2.8xlarge": (1, 2),
    "inf2.24xlarge": (6, 12),
    "inf2.48xlarge": (12, 24),
}
ECS_MAX_TASK_CPU_UNITS = 196608  # 192 vCPUs


@pytest.fixture(scope="module")
def intent():
    return config.load(CONFIG_DIR).model("intent-bert")


def for_generation(model, generation):
    return model.model_copy(update={"compile": model.compile.model_copy(update={"neuron_generation": generation})})


def test_every_inferentia_type_is_covered():
    assert set(INFERENTIA) == {n for n, s in instances.INSTANCES.items() if s.neuron_generation}


@pytest.mark.parametrize("instance_type", INFERENTIA)
def test_devices_cores_and_headroom(intent, instance_type):
    devices, cores = INFERENTIA[instance_type]
    spec = instances.get(instance_type)
    task = neuron_task.for_instance(for_generation(intent, spec.neuron_generation), instance_type)
    assert task.device_paths == tuple(f"/dev/neuron{i}" for i in range(devices))
    assert task.neuron_cores == cores
    assert task.visible_cores == f"0-{cores - 1}"
    assert task.neuron_target == instance_type[:4]
    assert task.dockerfile == f"Dockerfile.{instance_type[:4]}"
    # Room is left for the OS and the ECS agent, but the task still gets most of the host.
    assert 0.85 * spec.vcpus * 1024 <= task.cpu_units < spec.vcpus * 1024
    assert task.cpu_units <= ECS_MAX_TASK_CPU_UNITS
    assert 0.80 * spec.memory_gib * 1024 <= task.memory_mib <= 0.93 * spec.memory_gib * 1024


def test_build_args_follow_the_model(intent):
    task = neuron_task.for_instance(intent, "inf1.6xlarge")
    assert dict(task.build_args) == {
        "MODEL_SOURCE": "bert-base-uncased",
        "TASK": "text-classification",
        "LABELS": "search,navigate,purchase,support,other",
        "BATCH_SIZE": "1",
        "SEQUENCE_LENGTH": "128",
        "NEURON_CORES_PER_MODEL": "1",
        "PARALLELISM": "data-parallel",
        "COMPILER_ARGS": "--fp32-cast=all",
        "NEURON_TARGET": "inf1",
    }
    local = intent.model_copy(
        update={
            "source": intent.source.model_copy(
                update={"huggingface_id": None, "local_path": "models/intent", "revision": "v3"}
            )
        }
    )
    args = neuron_task.for_instance(local, "inf1.6xlarge").build_args
    assert (args["MODEL_SOURCE"], args["MODEL_REVISION"]) == ("models/intent", "v3")


def test_runtime_environment_follows_the_serving_config(intent):
    task = neuron_task.for_instance(intent, "inf1.xlarge")
    assert dict(task.environment) == {
        "MODEL_NAME": "intent-bert",
        "PORT": "8080",
        "NEURON_RT_VISIBLE_CORES": "0-3",
        "SERVER_WORKERS": "4",
        "SERVER_MAX_BATCH_SIZE": "16",
        "SERVER_MAX_QUEUE_DELAY_MS": "1",
        "SERVER_WARMUP_ITERATIONS": "32",
        "SERVER_SLO_MS": "10",
    }  # admission answers 503 at once to what it could not serve within the SLO
    assert neuron_task.for_instance(intent, "inf1.xlarge", slo_p99_ms=25).environment["SERVER_SLO_MS"] == "25"


def test_generation_mismatch_is_refused(intent):
    with pytest.raises(neuron_task.IncompatibleInstance, match="compiled for inf1, inf2.xlarge runs inf2"):
        neuron_task.for_instance(intent, "inf2.xlarge")
    with pytest.raises(neuron_task.IncompatibleInstance, match="not an Inferentia EC2 type"):
        neuron_task.for_instance(intent, "ml.g4dn.xlarge")


# ----------------------------------------------------------------------------- several models in one task


@pytest.fixture(scope="module")
def fleet():
    """The shipped neuron-cores fleet in dev: its members and plan (inf1.xlarge, 4 cores)."""
    from inferstack.capacity import packing

    project = config.load(CONFIG_DIR)
    members = project.fleet_members("intent-pack")
    plan = packing.plan_fleet("intent-pack", project.fleets["intent-pack"], members, "dev", project.environments["dev"])
    return plan, members


def test_packed_build_args_name_every_member_and_its_compile_settings(fleet):
    plan, members = fleet
    task = neuron_task.for_fleet(plan, members)
    assert set(task.build_args) == {"MODELS", "NEURON_TARGET"}  # MODEL_SOURCE stays empty beside MODELS
    assert task.build_args["NEURON_TARGET"] == "inf1" and task.dockerfile == "Dockerfile.inf1"
    models = json.loads(task.build_args["MODELS"])
    assert models == [
        {
            "name": "intent-bert",
            "model": "bert-base-uncased",
            "revision": None,
            "task": "text-classification",
            "labels": ["search", "navigate", "purchase", "support", "other"],
            "batch_size": 1,
            "sequence_length": 128,
            "neuron_cores": 1,
            "parallelism": "data-parallel",
            "compiler_args": ["--fp32-cast=all"],
        },
        {
            "name": "duplicate-bert",
            "model": "bert-base-uncased",
            "revision": None,
            "task": "text-classification",
            "labels": ["distinct", "duplicate"],
            "batch_size": 6,
            "sequence_length": 128,
            "neuron_cores": 1,
            "parallelism": "data-parallel",
            "compiler_args": ["--fp32-cast=all"],
        },
    ]
    # deterministic bytes (sorted keys, compact), whatever order the members come in: the image asset's hash
    assert task.build_args["MODELS"] == json.dumps(models, sort_keys=True, separators=(",", ":"))
    assert neuron_task.for_fleet(plan, list(reversed(members))).build_args == task.build_args


def test_packed_environment_comes_from_the_plans_shares(fleet):
    plan, members = fleet
    task = neuron_task.for_fleet(plan, members)
    # no MODEL_NAME, no PORT; warm-up applies to every packed model
    assert set(task.environment) == {"SERVER_MODELS", "NEURON_RT_VISIBLE_CORES", "SERVER_WARMUP_ITERATIONS"}
    assert task.visible_cores == "0-3" and task.environment["SERVER_WARMUP_ITERATIONS"] == "32"
    assert json.loads(task.environment["SERVER_MODELS"]) == [
        {
            "name": "intent-bert",
            "port": 8080,
            "visible_cores": "0-2",
            "workers": 3,
            "max_batch_size": 16,
            "max_queue_delay_ms": 1.0,
            "slo_ms": plan.shares[0].slo_p99_ms,
        },
        {
            "name": "duplicate-bert",
            "port": 8081,
            "visible_cores": "3",
            "workers": 1,
            "max_batch_size": 24,
            "max_queue_delay_ms": 5.0,
            "slo_ms": plan.shares[1].slo_p99_ms,
        },
    ]  # each admits within its own SLO
    assert [s["name"] for s in json.loads(task.environment["SERVER_MODELS"])] == [s.model for s in plan.shares]
    # the same host facts as a dedicated task on that instance type
    dedicated = neuron_task.for_instance(members[0], plan.instance_type)
    assert (task.device_paths, task.cpu_units, task.memory_mib) == (
        dedicated.device_paths,
        dedicated.cpu_units,
        dedicated.memory_mib,
    )


def test_packed_task_refuses_a_member_of_another_generation_or_a_foreign_model(fleet, intent):
    plan, members = fleet
    inf2 = [for_generation(members[0], "inf2"), members[1]]
    with pytest.raises(
        neuron_task.IncompatibleInstance, match="intent-bert is compiled for inf2, inf1.xlarge runs inf1"
    ):
        neuron_task.for_fleet(plan, inf2)
    with pytest.raises(
        ValueError, match="the plan shares intent-bert, duplicate-bert, the models given are intent-bert$"
    ):
        neuron_task.for_fleet(plan, [intent])
