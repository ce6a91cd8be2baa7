"""Which properties force a replacement, from the CloudFormation resource provider schemas that cfn-lint
ships (`createOnlyProperties`), so the list follows AWS rather than being hand-written here."""

from __future__ import annotations

import functools
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

DEFAULT_REGION = "us-east-1"  # schemas differ little by region; used when a stack has no region


class SchemasUnavailable(Exception):
    """cfn-lint (which carries the schemas) is not installed in this Python."""


@dataclass(frozen=True)
class ReplacementRules:
    """JSON pointers such as "/properties/ProductionVariants" or "/properties/A/*/B" ("*": any list item)."""

    create_only: tuple[str, ...] = ()
    conditional_create_only: tuple[str, ...] = ()  # CloudFormation: "may" replace, depending on the change
    known: bool = False  # False: no schema for this type (custom resources, new types)


@functools.cache
def _schema_root() -> Path:
    spec = importlib.util.find_spec("cfnlint")
    if spec is None or not spec.submodule_search_locations:
        raise SchemasUnavailable(
            "cfn-lint is not installed: it provides the CloudFormation resource schemas "
            "the diff needs to tell updates from replacements"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "schemas"


@functools.cache
def _region_index(region: str) -> dict[str, str]:
    # cfn-lint 1.x: providers/<region>.json maps type name -> schema file name in resources/.
    path = _schema_root() / "providers" / f"{region}.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _schema_path(type_name: str, region: str) -> Path | None:
    root = _schema_root()
    digest = _region_index(region).get(type_name)
    if digest:
        return root / "resources" / f"{digest}.json"
    # Older cfn-lint layout: providers/<region_with_underscores>/aws-sagemaker-endpointconfig.json
    legacy = root / "providers" / region.replace("-", "_") / (type_name.replace("::", "-").lower() + ".json")
    return legacy if legacy.is_file() else None


@functools.cache
def rules(type_name: str, region: str | None = None) -> ReplacementRules:
    for candidate in dict.fromkeys([region or DEFAULT_REGION, DEFAULT_REGION]):
        path = _schema_path(type_name, candidate)
        if path is not None and path.is_file():
            schema = json.loads(path.read_text())
            return ReplacementRules(
                tuple(schema.get("createOnlyProperties") or ()),
                tuple(schema.get("conditionalCreateOnlyProperties") or ()),
                known=True,
            )
    return ReplacementRules()
