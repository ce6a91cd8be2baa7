"""The committed JSON Schemas match the pydantic models and accept exactly what the loader accepts
for the shipped files (editors validate as you type)."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from inferstack.config import json_schema
from tests.support.paths import CONFIG_DIR

SCHEMA_DIR = CONFIG_DIR / "schema"


@pytest.mark.parametrize("name", sorted(json_schema.SCHEMAS))
def test_committed_schema_is_in_sync(name):
    committed = (SCHEMA_DIR / name).read_text()
    assert committed == json_schema.render()[name], (
        f"model_configs/schema/{name} is stale: run `python -m inferstack schema`"
    )


def _validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads((SCHEMA_DIR / name).read_text()))


@pytest.mark.parametrize("path", sorted(p.name for p in CONFIG_DIR.glob("*.yaml") if p.name != "environments.yaml"))
def test_shipped_models_validate_against_the_schema(path):
    data = yaml.safe_load((CONFIG_DIR / path).read_text())
    assert list(_validator("model.schema.json").iter_errors(data)) == []


def test_environments_validate_against_the_schema():
    data = yaml.safe_load((CONFIG_DIR / "environments.yaml").read_text())
    assert list(_validator("environments.schema.json").iter_errors(data)) == []


def test_schema_rejects_unknown_keys_and_bad_instance_types():
    data = yaml.safe_load((CONFIG_DIR / "intent-bert.yaml").read_text())
    data["serving"]["colour"] = "red"
    data["capacity"]["instance_type"] = "inf9.huge"
    messages = [e.message for e in _validator("model.schema.json").iter_errors(data)]
    assert messages, "the schema accepted garbage"
    assert any("colour" in m for m in messages) or any("inf9.huge" in m for m in messages)
    # the whole document is rejected by the discriminated union; check each branch saw the problems
    detailed = [c.message for e in _validator("model.schema.json").iter_errors(data) for c in (e.context or [])]
    assert any("colour" in m for m in detailed) and any("inf9.huge" in m for m in detailed)
