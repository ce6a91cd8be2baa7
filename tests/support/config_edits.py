"""Edits of a copy of model_configs/ (the `config_copy` fixture) and what the loader then says: a YAML change
applied with `edit_yaml` (`set_at`, `delete_at`), the problems of a load that must fail, the fleets taken out,
throughput_profile entries marked as measured."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from inferstack import config


def edit_yaml(path: Path, change: Callable[[dict], None]) -> None:
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def assert_rejected(config_dir: Path, filename: str, change: Callable[[dict], None], expected: str) -> None:
    """Apply `change` to `filename`; the load must fail with `expected` in a file:line: key: message line."""
    edit_yaml(config_dir / filename, change)
    problems = problems_of(config_dir)
    matching = [p for p in problems if expected in p]
    assert matching, f"expected {expected!r} in {problems}"
    where = "environments.yaml" if "fleets." in expected else filename
    assert matching[0].startswith(f"model_configs/{where}:")
    assert all("\n" not in p for p in problems)


def problems_of(config_dir: Path) -> list[str]:
    with pytest.raises(config.ConfigError) as caught:
        config.load(config_dir)
    return [str(p) for p in caught.value.problems]


def set_at(*path, value):
    """A change for `edit_yaml`: the key at `path` set to `value`."""

    def change(data):
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return change


def delete_at(*path):
    """A change for `edit_yaml`: the key at `path` deleted."""

    def change(data):
        node = data
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return change


def without_fleets(config_dir: Path, keep_models: tuple[str, ...] | None = None) -> Path:
    """Edit a config copy so every model runs on its own instances or endpoint: environments.yaml without its
    `fleets:` block and, with `keep_models`, only those models' files (a smaller, faster synth)."""
    path = config_dir / "environments.yaml"
    data = yaml.safe_load(path.read_text())
    data.pop("fleets", None)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    if keep_models is not None:
        for model_file in config_dir.glob("*.yaml"):
            if model_file.name != "environments.yaml" and model_file.stem not in keep_models:
                model_file.unlink()
    return config_dir


def mark_measured(
    config_dir: Path, model: str, *instance_types: str, date: str = "2025-03-04", environment: str | None = "staging"
) -> None:
    """Give each entry a measured: block with its own p99, as `inferstack profile` would have written it."""
    path = config_dir / f"{model}.yaml"
    data = yaml.safe_load(path.read_text())
    for itype in instance_types:
        point = data["throughput_profile"][itype]
        point["measured"] = {
            "date": date,
            "method": "inferstack profile",
            "instances": 2,
            "p99_latency_ms": point["p99_latency_ms"],
            "results": f"s3://inferstack-loadtest/r-1/{model}/run-1/result.json",
        }
        if environment is not None:
            point["measured"]["environment"] = environment
    path.write_text(yaml.safe_dump(data, sort_keys=False))
