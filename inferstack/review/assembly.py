"""Read a synthesized cloud assembly (cdk.out/) from disk: its environments (nested `cdk:cloud-assembly`
artifacts, one per Stage), their stacks and templates, the construct tree and the asset manifests."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

NESTED_ASSEMBLY = "cdk:cloud-assembly"
STACK = "aws:cloudformation:stack"
ASSET_MANIFEST = "cdk:asset-manifest"
TREE = "cdk:tree"
ROOT_ENVIRONMENT = "(app)"  # stacks defined directly on the App, outside any Stage


class AssemblyError(Exception):
    """The directory is missing, is not a cloud assembly, or holds a file that cannot be read."""


@dataclass(frozen=True)
class Asset:
    kind: str  # "container image", "file asset (zip)", "file asset"
    display_name: str


@dataclass
class Stack:
    name: str  # the stack's id inside its Stage: "Foundation", "intent-bert"
    artifact_id: str
    stack_name: str  # the CloudFormation stack name: "dev-intent-bert"
    region: str | None
    template: dict
    template_path: Path
    # logical id -> construct path of its L1, e.g. "dev/Foundation/PlatformKey/Key/Resource"
    construct_paths: dict[str, str] = field(default_factory=dict)
    account: str | None = None
    # the stack's own asset manifest (<artifact>.assets.json): what `cdk deploy` publishes for it
    asset_manifest_path: Path | None = None

    @property
    def resources(self) -> dict[str, dict]:
        return self.template.get("Resources") or {}

    def construct_path(self, logical_id: str) -> str | None:
        return self.construct_paths.get(logical_id)


@dataclass
class Environment:
    name: str
    directory: Path
    stacks: dict[str, Stack] = field(default_factory=dict)
    assets: dict[str, Asset] = field(default_factory=dict)  # asset hash -> what it is


@dataclass
class Assembly:
    path: Path
    environments: dict[str, Environment]
    tree: dict | None  # tree.json's "tree" node, when the assembly has one
    schema_version: str | None = None  # the cloud assembly schema version (manifest.json "version")
    minimum_cli_version: str | None = None  # the oldest CDK CLI that can deploy it


def read_json_text(path: Path) -> tuple[object, str]:
    """The JSON document at `path` and its text; AssemblyError (one line, naming the path) otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
        return json.loads(text), text
    except FileNotFoundError:
        raise AssemblyError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:  # a decode error has no strerror
        raise AssemblyError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    except json.JSONDecodeError as exc:
        raise AssemblyError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None


def read_json(path: Path) -> dict:
    """A JSON object from the assembly; AssemblyError (one line, naming the path) otherwise."""
    data, _ = read_json_text(path)
    if not isinstance(data, dict):
        raise AssemblyError(f"{path}: expected a JSON object")
    return data


def _manifest(directory: Path) -> dict:
    path = directory / "manifest.json"
    if not path.is_file():
        raise AssemblyError(f"{directory}: not a cloud assembly (no manifest.json)")
    manifest = read_json(path)
    if not isinstance(manifest.get("artifacts", {}), dict):
        raise AssemblyError(f"{path}: 'artifacts' is not an object")
    return manifest


def _artifacts(manifest: dict, kind: str) -> list[tuple[str, dict]]:
    return sorted(
        (k, a) for k, a in (manifest.get("artifacts") or {}).items() if isinstance(a, dict) and a.get("type") == kind
    )


def _region(artifact: dict) -> str | None:
    # "aws://111111111111/us-east-1"; environment-agnostic stacks say "unknown-region".
    region = str(artifact.get("environment", "")).rsplit("/", 1)[-1]
    return region if region and not region.startswith("unknown") else None


def _account(artifact: dict) -> str | None:
    parts = str(artifact.get("environment", "")).removeprefix("aws://").split("/")
    return parts[0] if len(parts) == 2 and parts[0].isdigit() else None


def _asset_manifest_path(directory: Path, manifest: dict, artifact: dict) -> Path | None:
    artifacts = manifest.get("artifacts") or {}
    for dependency in artifact.get("dependencies") or []:
        dep = artifacts.get(dependency)
        if isinstance(dep, dict) and dep.get("type") == ASSET_MANIFEST:
            file = (dep.get("properties") or {}).get("file")
            if file:
                return directory / file
    return None


def _construct_paths(directory: Path, artifact: dict, template: dict) -> dict[str, str]:
    """Logical id -> construct path. The stack's metadata (inline or in its additionalMetadataFile) maps
    them whatever the synth settings; the templates' aws:cdk:path metadata only when path metadata is on
    (the CDK CLI's default), so it is the fallback."""
    metadata = dict(artifact.get("metadata") or {})
    if artifact.get("additionalMetadataFile"):
        metadata.update(read_json(directory / artifact["additionalMetadataFile"]))
    paths = {}
    for path, entries in metadata.items():
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict) or entry.get("type") != "aws:cdk:logicalId":
                continue
            if isinstance(entry.get("data"), str):
                paths[entry["data"]] = path.lstrip("/")
    for logical_id, resource in (template.get("Resources") or {}).items():
        path = (resource.get("Metadata") or {}).get("aws:cdk:path") if isinstance(resource, dict) else None
        if isinstance(path, str):
            paths.setdefault(logical_id, path)
    return paths


def _stacks(directory: Path, manifest: dict, prefix: str) -> dict[str, Stack]:
    stacks = {}
    for artifact_id, artifact in _artifacts(manifest, STACK):
        props = artifact.get("properties") or {}
        template_file = props.get("templateFile")
        if not template_file:
            raise AssemblyError(f"{directory / 'manifest.json'}: stack {artifact_id} names no templateFile")
        display = artifact.get("displayName") or artifact_id
        name = display.split("/", 1)[1] if prefix and display.startswith(prefix + "/") else display
        path = directory / template_file
        template = read_json(path)
        stacks[name] = Stack(
            name=name,
            artifact_id=artifact_id,
            stack_name=props.get("stackName") or artifact_id,
            region=_region(artifact),
            template=template,
            template_path=path,
            construct_paths=_construct_paths(directory, artifact, template),
            account=_account(artifact),
            asset_manifest_path=_asset_manifest_path(directory, manifest, artifact),
        )
    return stacks


def _assets(directory: Path, manifest: dict) -> dict[str, Asset]:
    assets: dict[str, Asset] = {}
    for _, artifact in _artifacts(manifest, ASSET_MANIFEST):
        file = (artifact.get("properties") or {}).get("file")
        if not file:
            continue
        data = read_json(directory / file)
        for digest, image in (data.get("dockerImages") or {}).items():
            assets[digest] = Asset("container image", image.get("displayName", ""))
        for digest, entry in (data.get("files") or {}).items():
            packaging = (entry.get("source") or {}).get("packaging")
            kind = "file asset (zip)" if packaging == "zip" else "file asset"
            assets[digest] = Asset(kind, entry.get("displayName", ""))
    return assets


def load(path: Path) -> Assembly:
    """Every environment of the assembly at `path`. Raises AssemblyError naming the offending path."""
    path = Path(path)
    if not path.exists():
        raise AssemblyError(f"{path}: no such directory")
    if not path.is_dir():
        raise AssemblyError(f"{path}: not a directory")
    manifest = _manifest(path)
    environments: dict[str, Environment] = {}
    for artifact_id, artifact in _artifacts(manifest, NESTED_ASSEMBLY):
        props = artifact.get("properties") or {}
        directory = path / props.get("directoryName", artifact_id)
        name = props.get("displayName") or artifact_id.removeprefix("assembly-")
        nested = _manifest(directory)
        environments[name] = Environment(name, directory, _stacks(directory, nested, name), _assets(directory, nested))
    root_stacks = _stacks(path, manifest, "")
    if root_stacks:
        environments[ROOT_ENVIRONMENT] = Environment(ROOT_ENVIRONMENT, path, root_stacks, _assets(path, manifest))
    if not environments:
        raise AssemblyError(f"{path / 'manifest.json'}: no stacks and no nested assemblies in this cloud assembly")
    tree = None
    for _, artifact in _artifacts(manifest, TREE):
        tree = read_json(path / (artifact.get("properties") or {}).get("file", "tree.json")).get("tree")
    return Assembly(
        path,
        dict(sorted(environments.items())),
        tree,
        schema_version=manifest.get("version"),
        minimum_cli_version=manifest.get("minimumCliVersion"),
    )
