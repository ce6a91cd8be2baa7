"""The start-up health-check timeout of a Triton endpoint follows from what it loads: the model's size (the
TensorRT engine build), its TensorRT folders and its instance count; SageMaker allows 60-3600 s
(https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ProductionVariant.html)."""

from __future__ import annotations

import pytest

from inferstack import config
from inferstack.triton import startup
from tests.support.config_edits import assert_rejected, set_at
from tests.support.paths import CONFIG_DIR


@pytest.fixture(scope="module")
def project() -> config.Project:
    return config.load(CONFIG_DIR)


def _serving(model, **changes):
    return model.model_copy(update={"serving": model.serving.model_copy(update=changes)})


def _export(model, **changes):
    return model.model_copy(update={"export": model.export.model_copy(update=changes)})


def test_shipped_models(project):
    assert startup.health_check_timeout_seconds(project.model("bert-large-classifier")) == 900
    assert startup.health_check_timeout_seconds(project.model("t5-spelling")) == 540


def test_grows_with_size_and_instances(project):
    model = project.model("bert-large-classifier")
    base = startup.estimated_seconds(model)
    assert startup.estimated_seconds(_export(model, parameters_millions=670)) > base
    assert (
        startup.estimated_seconds(
            _serving(model, instance_group=model.serving.instance_group.model_copy(update={"count": 4}))
        )
        > base
    )
    # a TensorRT plan is built ahead of time: nothing to build at load
    plan = _serving(model, backend="tensorrt", tensorrt_acceleration=None)
    assert startup.estimated_seconds(plan) < base


def test_padded_is_whole_minutes_within_sagemakers_range(project):
    for model in project.models:
        if model.kind == "triton-sagemaker":
            padded = startup.padded_seconds(model)
            assert padded % 60 == 0 and padded >= startup.estimated_seconds(model) * startup.MARGIN
            assert startup.MIN_SECONDS <= startup.health_check_timeout_seconds(model) <= startup.MAX_SECONDS


def test_a_configured_timeout_wins(project):
    model = _serving(project.model("t5-spelling"), container_startup_health_check_timeout_seconds=1200)
    assert startup.health_check_timeout_seconds(model) == 1200


def test_an_estimate_beyond_sagemakers_limit_is_rejected(config_copy):
    assert_rejected(
        config_copy,
        "bert-large-classifier.yaml",
        set_at("export", "parameters_millions", value=6000),
        "export.parameters_millions: start-up (TensorRT engine builds, 2 instances per model, warm-up) is estimated at",
    )
