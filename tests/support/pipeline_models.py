"""The example pipeline of docs/how-to/build-a-pipeline.md (tests/support/pipeline_example/: pipeline.yaml and its
two user steps) on the shipped classifier, loaded as validate loads it from a copy of model_configs/."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from inferstack import config
from tests.support.paths import CONFIG_DIR, ROOT

EXAMPLE = ROOT / "tests" / "support" / "pipeline_example"
NAME = "bert-large-classifier"


def with_example_pipeline(tmp_path: Path, name: str = NAME):
    """`name` with the example pipeline and its step files in its folder, loaded from a copy of model_configs/."""
    configs = tmp_path / "model_configs"
    shutil.copytree(CONFIG_DIR, configs)
    shutil.copytree(EXAMPLE / "steps", configs / name / "steps")
    path = configs / f"{name}.yaml"
    data = yaml.safe_load(path.read_text())
    data.update(yaml.safe_load((EXAMPLE / "pipeline.yaml").read_text()))
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return config.load(configs).model(name)
