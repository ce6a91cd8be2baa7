"""The kind registry (inferstack/schema/kinds.py) against the schema's unions, and every per-kind table of the
layers above against the registry: a kind registered without an entry in one of them fails here, not at run
time in the one code path that looks it up."""

from __future__ import annotations

import importlib
import sys
import typing
from typing import Literal

import pytest
from pydantic import BaseModel

from inferstack import config
from inferstack.schema import instances, kinds
from inferstack.schema.fleets import Fleet
from inferstack.schema.model_config import ModelConfig
from tests.support.paths import CONFIG_DIR

# What imports every module that may hold a per-kind table: the CDK app and the command line's commands.
ENTRY_MODULES = (
    "stacks.app_builder",
    "inferstack.cli",
    "inferstack.delivery.smoke",
    "inferstack.delivery.promote",
    "inferstack.profile.command",
    "inferstack.profile.recommender_command",
    "inferstack.loadtest.command",
    "inferstack.loadtest.environment_run",
)
# The tables there are today; discovery must find at least these (a table it missed would go unchecked).
KNOWN_TABLES = {
    "inferstack.config.checks.models.MODEL_CHECKS",
    "inferstack.config.checks.fleets.FLEET_CHECKS",
    "inferstack.config.architecture.IMAGES",
    "inferstack.capacity.packing.PLANNERS",
    "inferstack.commands.plan_report.MEMBER_ROWS",
    "inferstack.loadtest.probes.PROBES",
    "stacks.serving_stack.SERVES",
    "stacks.fleet_stack.SERVES",
}


def per_kind_tables() -> dict[str, dict]:
    """Every module-level dict of inferstack/ and stacks/ keyed by kind descriptors, by "module.NAME"."""
    for name in ENTRY_MODULES:
        importlib.import_module(name)
    found = {}
    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith(("inferstack.", "stacks.")):
            continue
        for attr, value in vars(module).items():
            if (
                isinstance(value, dict)
                and value
                and all(isinstance(key, (kinds.ModelKind, kinds.FleetKind)) for key in value)
            ):
                found[f"{module_name}.{attr}"] = value
    return found


def incomplete(tables: dict[str, dict]) -> list[str]:
    """One line per table that lacks a registered kind of the sort it is keyed by (or holds one not registered)."""
    lines = []
    for name, table in sorted(tables.items()):
        registry = kinds.MODEL_KINDS if isinstance(next(iter(table)), kinds.ModelKind) else kinds.FLEET_KINDS
        missing = [kind.name for kind in registry.values() if kind not in table]
        unknown = [kind.name for kind in table if registry.get(kind.name) is not kind]
        if missing or unknown:
            lines.append(f"{name}: missing {missing}, not registered {unknown}")
    return lines


def union_members(annotated) -> set[type]:
    (union, *_) = typing.get_args(annotated)  # Annotated[Union[...], Field(discriminator="kind")]
    return set(typing.get_args(union))


def test_every_schema_class_is_registered_and_every_registered_kind_is_in_the_schema():
    assert (
        {k.schema for k in kinds.MODEL_KINDS.values()}
        == union_members(ModelConfig)
        == set(typing.get_args(kinds.Model))
    )
    assert {k.schema for k in kinds.FLEET_KINDS.values()} == union_members(Fleet)
    assert all(fleet.member in kinds.MODEL_KINDS.values() for fleet in kinds.FLEET_KINDS.values())


def test_every_per_kind_table_names_every_registered_kind():
    tables = per_kind_tables()
    assert KNOWN_TABLES <= set(tables), f"not found: {sorted(KNOWN_TABLES - set(tables))}"
    lines = incomplete(tables)
    assert not lines, "\n".join(lines)


class _Tagless(BaseModel):
    kind: Literal["tagless"]


def test_a_new_kind_without_its_table_entries_fails_the_completeness_check(monkeypatch):
    tables = per_kind_tables()
    monkeypatch.setattr(kinds, "MODEL_KINDS", dict(kinds.MODEL_KINDS))
    monkeypatch.setattr(kinds, "FLEET_KINDS", dict(kinds.FLEET_KINDS))
    new_model = kinds.register(
        kinds.ModelKind("tagless", _Tagless, accelerator=instances.SAGEMAKER_GPU, hosting="sagemaker", at_zero=None)
    )
    model_tables = {name for name, table in tables.items() if isinstance(next(iter(table)), kinds.ModelKind)}
    assert {line.split(":")[0] for line in incomplete(tables)} == model_tables
    assert all("missing ['tagless']" in line for line in incomplete(tables))
    kinds.register(
        kinds.FleetKind(
            "tagless-fleet",
            type("TaglessFleet", (BaseModel,), {"__annotations__": {"kind": Literal["tagless-fleet"]}}),
            member=new_model,
            serves_members=False,
            at_zero="on-demand",
        )
    )
    assert {line.split(":")[0] for line in incomplete(tables)} == set(tables)


def test_a_kind_is_registered_once_under_its_schema_tag(monkeypatch):
    monkeypatch.setattr(kinds, "MODEL_KINDS", dict(kinds.MODEL_KINDS))
    with pytest.raises(ValueError, match="registered twice"):
        kinds.register(
            kinds.ModelKind(
                "neuron-ecs",
                kinds.NEURON_ECS.schema,
                accelerator=instances.INFERENTIA_EC2,
                hosting="ecs",
                at_zero="closed",
            )
        )
    with pytest.raises(ValueError, match=r"'other': _Tagless.kind is Literal\['tagless'\]"):
        kinds.register(
            kinds.ModelKind("other", _Tagless, accelerator=instances.SAGEMAKER_GPU, hosting="sagemaker", at_zero=None)
        )


def test_the_shipped_configs_use_every_registered_kind():
    project = config.load(CONFIG_DIR)
    assert {kinds.model_kind(m) for m in project.models} == set(kinds.MODEL_KINDS.values())
    assert {kinds.fleet_kind(f) for f in project.fleets.values()} == set(kinds.FLEET_KINDS.values())
