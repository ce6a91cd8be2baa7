"""Checks of a triton-sagemaker model: its Triton image in the region, its start-up time, its pipeline."""

from __future__ import annotations

from collections.abc import Iterator

from inferstack.config import pipeline_checks
from inferstack.config.checks.common import Finding
from inferstack.schema import instances, kinds
from inferstack.schema.environments import Environment, EnvironmentsFile
from inferstack.schema.triton_sagemaker import TritonSageMakerModel
from inferstack.triton import image as triton_image
from inferstack.triton import startup as triton_startup


def check_file(model: TritonSageMakerModel) -> Iterator[Finding]:
    yield from _check_startup(model)
    yield from pipeline_checks.check_wiring(model)


def _check_startup(model: TritonSageMakerModel) -> Iterator[Finding]:
    """SageMaker allows at most 3600 s from container start to a healthy /ping."""
    if model.serving.container_startup_health_check_timeout_seconds is not None:
        return
    needed = triton_startup.padded_seconds(model)
    if needed > triton_startup.MAX_SECONDS:
        key = ("export", "parameters_millions") if model.export.parameters_millions else ("serving", "instance_group")
        yield (
            key,
            (
                f"start-up (TensorRT engine builds, {model.serving.instance_group.count} instances per model, "
                f"warm-up) is estimated at {needed} s with margin, above SageMaker's "
                f"{triton_startup.MAX_SECONDS} s health-check limit: use fewer instances or a TensorRT plan, or "
                f"set serving.container_startup_health_check_timeout_seconds if it starts faster"
            ),
        )


def check_image(
    model: TritonSageMakerModel, spec: instances.InstanceSpec, environment: Environment
) -> Iterator[Finding]:
    try:
        triton_image.base_image_uri(
            region=environment.region, version=model.serving.image_version, instance_type=spec.name
        )
    except triton_image.UnknownTritonImage as exc:
        yield ("serving", "image_version"), str(exc)


def warnings(model: TritonSageMakerModel, env_file: EnvironmentsFile) -> Iterator[Finding]:
    """Settings of a model's own deployment that do not apply where a fleet carries it (its model file keys)."""
    if model.data_capture is None:
        return
    envs = [
        env
        for env in env_file.environments
        for fleet in env_file.fleets.values()
        if kinds.fleet_kind(fleet).member is kinds.TRITON_SAGEMAKER
        and model.name in fleet.models
        and fleet.deploys_in(env)
        and model.deploys_in(env)
    ]
    if envs:
        yield (
            ("data_capture",),
            (
                f"not applied in {', '.join(envs)}, where an inference-components fleet carries {model.name}: data "
                f"capture is a setting of a dedicated endpoint's configuration"
            ),
        )
