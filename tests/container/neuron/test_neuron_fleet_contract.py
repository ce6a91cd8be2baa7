"""What the CDK side hands a packed Neuron container (inferstack/neuron/task.py's for_fleet, from the shipped
neuron-cores fleet's plan in every environment) is what the serving app accepts: the MODELS build arg through
compile_models.parse_models, the task's environment through server_settings.from_args (SERVER_MODELS keys, no
PORT or MODEL_NAME beside it), every model's cores inside the task's NEURON_RT_VISIBLE_CORES."""

from __future__ import annotations

import argparse
import json

import pytest

# serving/ and build/'s flat modules, on the path from conftest.py (ruff would count them third-party).
# isort: split
import compile_models
import packing
import server_settings

from inferstack import config
from inferstack.capacity import packing as fleet_packing
from inferstack.neuron import task as neuron_task
from tests.support.paths import CONFIG_DIR

FLEET = "intent-pack"
ENVS = ("dev", "staging", "prod")


@pytest.fixture(scope="module")
def tasks():
    project = config.load(CONFIG_DIR)
    members = project.fleet_members(FLEET)
    return {
        env: neuron_task.for_fleet(
            fleet_packing.plan_fleet(FLEET, project.fleets[FLEET], members, env, project.environments[env]), members
        )
        for env in ENVS
    }


@pytest.mark.parametrize("env", ENVS)
def test_the_image_build_accepts_the_models_build_arg(tasks, env, tmp_path):
    task = tasks[env]
    entries = compile_models.parse_models(
        task.build_args["MODELS"], backend=task.neuron_target, out=str(tmp_path / "artifact")
    )
    assert [e.name for e in entries] == ["intent-bert", "duplicate-bert"]
    assert [e.settings.model_revision for e in entries] == [None, None]
    assert entries[1].settings.compiler_args == ("--fp32-cast=all",)


@pytest.mark.parametrize("env", ENVS)
def test_the_server_accepts_the_task_environment(tasks, env, tmp_path):
    task = tasks[env]
    parser = argparse.ArgumentParser()
    server_settings.add_arguments(parser)
    settings = server_settings.from_args(parser.parse_args(["--model-dir", str(tmp_path)]), dict(task.environment))
    assert [(m.name, m.port, m.visible_cores) for m in settings.models] == [
        (m["name"], m["port"], m["visible_cores"]) for m in json.loads(task.environment["SERVER_MODELS"])
    ]
    assert settings.warmup_iterations == 32
    task_cores = set(packing.parse_cores(settings.visible_cores))
    for model in settings.models:
        assert set(packing.parse_cores(model.visible_cores)) <= task_cores  # what preflight checks
