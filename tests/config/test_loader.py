"""The shipped configs load into frozen, typed objects that express the reference workloads."""

from __future__ import annotations

import pydantic
import pytest

from inferstack import config
from inferstack.config import NeuronEcsModel, TritonSageMakerModel
from inferstack.schema.neuron_ecs import NeuronCompile
from tests.support.paths import CONFIG_DIR


@pytest.fixture(scope="module")
def project() -> config.Project:
    return config.load(CONFIG_DIR)


def test_three_environments_with_dev_default(project):
    assert list(project.environments) == ["dev", "staging", "prod"]
    assert project.default_environment == "dev"
    dev = project.environments["dev"]
    assert dev.network.create is not None and dev.availability_zones == ("us-east-1a", "us-east-1b")
    prod = project.environments["prod"]
    assert prod.network.import_ is not None and prod.network.import_.vpc_id.startswith("vpc-")
    assert prod.alarms.topic_arn.endswith(":ml-platform-oncall")


def test_reference_workloads_are_shipped(project):
    intent = project.model("intent-bert")
    assert isinstance(intent, NeuronEcsModel)
    assert intent.capacity.instance_type == "inf1.6xlarge"
    assert (intent.slo.p99_latency_ms, intent.slo.peak_tps) == (10, 16000)
    assert intent.compile.parallelism == "data-parallel" and intent.serving.data_parallel
    assert intent.compile.compiler_args() == ("--fp32-cast=all",)

    bert_large = project.model("bert-large-classifier")
    assert isinstance(bert_large, TritonSageMakerModel)
    # "trt-db-ig": TensorRT + dynamic batching + 2 instance groups on ml.g4dn.xlarge
    assert bert_large.serving.tensorrt_acceleration is not None
    assert bert_large.serving.dynamic_batching is not None
    assert bert_large.serving.instance_group.count == 2
    assert bert_large.capacity.instance_type == "ml.g4dn.xlarge"
    assert bert_large.export.sequence_length == 512

    t5 = project.model("t5-spelling")
    assert t5.source.task == "text2text-generation" and t5.slo.p99_latency_ms == 50


def test_models_are_frozen(project):
    with pytest.raises(pydantic.ValidationError):
        project.model("intent-bert").capacity.max = 99  # type: ignore[misc] - assigning to a frozen model is the test


def test_environment_overrides_merge_over_model_defaults(project):
    intent = project.model("intent-bert")
    assert intent.capacity_for("dev").instance_type == "inf1.xlarge"
    assert (intent.capacity_for("dev").min, intent.capacity_for("dev").max) == (1, 2)
    assert intent.capacity_for("prod") == intent.capacity  # no prod override
    assert intent.slo_for("dev").peak_tps == 400 and intent.slo_for("dev").p99_latency_ms == 10


def test_pipeline_mode_compiler_args():
    comp = NeuronCompile(neuron_generation="inf1", parallelism="pipeline", neuron_cores_per_model=16, cast="matmult")
    assert comp.compiler_args() == ("--fp32-cast=matmult", "--neuroncore-pipeline-cores", "16")
    inf2 = NeuronCompile(neuron_generation="inf2", cast="all", cast_type="fp16", extra_compiler_args=("--optlevel=2",))
    assert inf2.compiler_args() == ("--auto-cast", "all", "--auto-cast-type", "fp16", "--optlevel=2")
