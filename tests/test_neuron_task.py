"""The Neuron task derived from an instance type: devices, cores, cpu/memory headroom, build args, env."""

from __future__ import annotations

import pytest

from inferstack import config
from inferstack.schema import instances
from inferstack.neuron import task as neuron_task
from tests.conftest import CONFIG_DIR

# From the instance table in REFERENCE.md: devices, NeuronCores.
INFERENTIA = {
    "inf1.xlarge": (1, 4), "inf1.2xlarge": (1, 4), "inf1.6xlarge": (4, 16), "inf1.24xlarge": (16, 64),
    "inf2.xlarge": (1, 2), "inf2.8xlarge": (1, 2), "inf2.24xlarge": (6, 12), "inf2.48xlarge": (12, 24),
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
        "MODEL_SOURCE": "bert-base-uncased", "TASK": "text-classification",
        "LABELS": "search,navigate,purchase,support,other", "BATCH_SIZE": "1", "SEQUENCE_LENGTH": "128",
        "NEURON_CORES_PER_MODEL": "1", "PARALLELISM": "data-parallel", "COMPILER_ARGS": "--fp32-cast=all",
        "NEURON_TARGET": "inf1"}
    local = intent.model_copy(update={"source": intent.source.model_copy(update={
        "huggingface_id": None, "local_path": "models/intent", "revision": "v3"})})
    args = neuron_task.for_instance(local, "inf1.6xlarge").build_args
    assert (args["MODEL_SOURCE"], args["MODEL_REVISION"]) == ("models/intent", "v3")


def test_runtime_environment_follows_the_serving_config(intent):
    task = neuron_task.for_instance(intent, "inf1.xlarge")
    assert dict(task.environment) == {
        "MODEL_NAME": "intent-bert", "PORT": "8080", "NEURON_RT_VISIBLE_CORES": "0-3", "SERVER_WORKERS": "4",
        "SERVER_MAX_BATCH_SIZE": "16", "SERVER_MAX_QUEUE_DELAY_MS": "1", "SERVER_WARMUP_ITERATIONS": "32"}


def test_generation_mismatch_is_refused(intent):
    with pytest.raises(neuron_task.IncompatibleInstance, match="compiled for inf1, inf2.xlarge runs inf2"):
        neuron_task.for_instance(intent, "inf2.xlarge")
    with pytest.raises(neuron_task.IncompatibleInstance, match="not an Inferentia EC2 type"):
        neuron_task.for_instance(intent, "ml.g4dn.xlarge")
