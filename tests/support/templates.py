"""Reading synthesized CloudFormation templates (as JSON or as an aws_cdk.assertions Template), the asset
manifests beside them and the raw model YAML they are checked against; cfn-lint on template files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from aws_cdk.assertions import Template

from tests.support.paths import CONFIG_DIR, ROOT


def resources(template: dict, kind: str) -> dict[str, dict]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def only(template: Template | dict, kind: str, props: dict | None = None) -> tuple[str, dict]:
    """(logical id, resource) of the one resource of `kind` (with `props`, of those whose Properties match)."""
    if isinstance(template, Template):
        found = template.find_resources(kind, {"Properties": props} if props else None)
    else:
        assert props is None, "props: only with an aws_cdk.assertions Template"
        found = resources(template, kind)
    assert len(found) == 1, f"expected one {kind}, found {list(found)}"
    return next(iter(found.items()))


def image_asset(outdir: Path, stack_artifact_id: str, env: str) -> dict:
    """The source of a stack's one Docker image asset, from its asset manifest in the cloud assembly."""
    manifest = json.loads((outdir / f"assembly-{env}" / f"{stack_artifact_id}.assets.json").read_text())
    (image,) = manifest["dockerImages"].values()
    return image["source"]


def raw_yaml(model: str) -> dict:
    """A shipped model's YAML, read independently of the config loader and planning."""
    return yaml.safe_load((CONFIG_DIR / f"{model}.yaml").read_text())


def cfn_lint(paths: list[Path]) -> list[dict]:
    """cfn-lint's findings on these template files, with the repository's .cfnlintrc.yaml."""
    command = [
        str(Path(sys.executable).with_name("cfn-lint")),
        "--config-file",
        ".cfnlintrc.yaml",
        "--format",
        "json",
        *map(str, paths),
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode in (0, 2, 4, 6, 8, 10, 12, 14), result.stderr  # bit flags: 2 error, 4 warning, 8 info
    return json.loads(result.stdout or "[]")
