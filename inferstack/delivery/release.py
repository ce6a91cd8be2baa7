"""`python -m inferstack release`: the release manifest of a synthesized cloud assembly. Per environment
and stack it records what `cdk deploy` would publish (image assets with their Dockerfile, build args and
destination; file assets with their hashes), plus the config hash, the git commit and the tool versions,
so a promotion can prove that what it moves is what was built. Deterministic: same input, same bytes."""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import re
import subprocess
from pathlib import Path

import yaml

import inferstack
from inferstack import atomic_write
from inferstack.command_line import DEFAULT_CONFIG_DIR, UsageError
from inferstack.review import assembly

FORMAT = "inferstack-release/1"
COMMIT_PATTERN = r"^[0-9a-f]{7,40}$"
# Pins are outputs of promotion, schemas are generated from code: neither is an input of a release.
CONFIG_EXCLUDED_DIRS = ("releases", "schema")


class ReleaseError(Exception):
    """Bad input (assembly, config directory, commit): one line naming what is wrong."""


def config_sha256(config_dir: Path) -> str:
    """sha256 over every YAML file of the config directory, canonical: each file is parsed and re-dumped as
    sorted-key JSON, so comments, key order and formatting do not change the hash; values do."""
    if not config_dir.is_dir():
        raise ReleaseError(f"--config-dir {config_dir}: no such directory")
    digest = hashlib.sha256()
    files = sorted(
        p
        for p in config_dir.rglob("*")
        if p.is_file()
        and p.suffix in (".yaml", ".yml")
        and not set(p.relative_to(config_dir).parts[:-1]) & set(CONFIG_EXCLUDED_DIRS)
    )
    if not files:
        raise ReleaseError(f"--config-dir {config_dir}: no YAML files")
    for path in files:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ReleaseError(f"{path}: cannot read as YAML: {' '.join(str(exc).split())}") from None
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
        digest.update(f"{path.relative_to(config_dir).as_posix()}\0{canonical}\0".encode())
    return digest.hexdigest()


def git_commit(commit: str | None, cwd: Path) -> str:
    if commit is not None:
        if not re.fullmatch(COMMIT_PATTERN, commit):
            raise ReleaseError(f"--commit {commit!r}: expected 7 to 40 lower-case hex digits")
        return commit
    try:
        result = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReleaseError(f"cannot run git ({exc}); pass --commit SHA") from None
    if result.returncode != 0:
        raise ReleaseError(
            f"{cwd}: not inside a git repository with a commit (git rev-parse HEAD failed); pass --commit SHA"
        )
    return result.stdout.strip()


def _resolve(value: str, account: str | None, region: str | None) -> str:
    """The asset manifest writes bootstrap names with placeholders; fill in the stack's environment."""
    for placeholder, actual in (
        ("${AWS::AccountId}", account),
        ("${AWS::Region}", region),
        ("${AWS::Partition}", "aws"),
    ):
        if actual:
            value = value.replace(placeholder, actual)
    return value


def _image_entry(asset_id: str, image: dict, stack: assembly.Stack) -> dict:
    source = image.get("source") or {}
    destinations = sorted((image.get("destinations") or {}).items())
    if not destinations:
        raise ReleaseError(f"{stack.asset_manifest_path}: image asset {asset_id} has no destination")
    _, destination = destinations[0]  # CDK writes one per stack environment
    account, region = stack.account, destination.get("region") or stack.region
    repository = _resolve(str(destination.get("repositoryName", "")), account, region)
    tag = str(destination.get("imageTag", asset_id))
    registry = f"{account}.dkr.ecr.{region}.amazonaws.com" if account and region else None
    return {
        "asset_id": asset_id,
        "display_name": image.get("displayName"),
        "dockerfile": source.get("dockerFile", "Dockerfile"),
        "build_args": dict(sorted((source.get("dockerBuildArgs") or {}).items())),
        "platform": source.get("platform"),
        "repository": repository,
        "tag": tag,
        "image_uri": f"{registry}/{repository}:{tag}" if registry else None,
        "digest": None,  # known once `cdk deploy` has pushed it; promote reads it from ECR
    }


def _stack_entry(stack: assembly.Stack) -> dict:
    entry: dict = {
        "stack_name": stack.stack_name,
        "account": stack.account,
        "region": stack.region,
        "images": [],
        "files": [],
    }
    if stack.asset_manifest_path is None:
        return entry
    manifest = assembly.read_json(stack.asset_manifest_path)
    template_file = stack.template_path.name
    for asset_id, image in sorted((manifest.get("dockerImages") or {}).items()):
        entry["images"].append(_image_entry(asset_id, image, stack))
    for asset_id, file in sorted((manifest.get("files") or {}).items()):
        source = file.get("source") or {}
        if source.get("path") == template_file:
            continue  # the stack's own template, not an asset of the stack
        # CDK names a file asset by the sha256 of its source, so the id is the checksum.
        entry["files"].append(
            {
                "asset_id": asset_id,
                "sha256": asset_id,
                "display_name": file.get("displayName"),
                "packaging": source.get("packaging", "file"),
            }
        )
    return entry


def build(cdk_out: Path, config_dir: Path, commit: str) -> dict:
    loaded = assembly.load(cdk_out)
    environments = {}
    for env_name, environment in loaded.environments.items():
        environments[env_name] = {
            "stacks": {name: _stack_entry(stack) for name, stack in sorted(environment.stacks.items())}
        }
    return {
        "format": FORMAT,
        "commit": commit,
        "config_sha256": config_sha256(config_dir),
        "versions": {
            "aws-cdk-lib": importlib.metadata.version("aws-cdk-lib"),
            "cloud_assembly_schema": loaded.schema_version,
            "minimum_cdk_cli": loaded.minimum_cli_version,
            "inferstack": inferstack.__version__,
        },
        "environments": environments,
    }


def dump(manifest: dict) -> str:
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"


def sha256_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def load(path: Path) -> tuple[dict, str]:
    """A manifest written by `release`, and the sha256 of its bytes (the pin records it)."""
    try:
        data, text = assembly.read_json_text(path)
    except assembly.AssemblyError as exc:
        raise ReleaseError(f"--manifest {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ReleaseError(f"--manifest {path}: not a release manifest (format is not {FORMAT!r})")
    if not isinstance(data.get("environments"), dict):
        raise ReleaseError(f"--manifest {path}: 'environments' is not an object")
    return data, sha256_of(text)


def model_images(manifest: dict, model: str) -> list[dict]:
    """Every image asset the release built for a stack, over all environments. `model`: the stack's id, a
    model's name or a neuron-cores fleet's (whose one image holds all its members). A Neuron image is the same
    asset everywhere; a Triton image's build args name the region's base image, so regions differ."""
    found: dict[object, dict] = {}
    for environment in manifest["environments"].values():
        stack = ((environment or {}).get("stacks") or {}).get(model) or {}
        for image in stack.get("images") or []:
            found.setdefault(image.get("asset_id"), image)
    return [found[k] for k in sorted(found, key=str)]


def add_parser(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser("release", help="write the release manifest of a synthesized cdk.out")
    cmd.add_argument("--cdk-out", type=Path, required=True, help="output directory of `cdk synth`")
    cmd.add_argument("--out", type=Path, required=True, help="manifest file to write (JSON)")
    cmd.add_argument("--commit", help="git commit to record (default: git rev-parse HEAD)")
    cmd.add_argument("--config-dir", type=Path, default=DEFAULT_CONFIG_DIR)
    cmd.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        commit = git_commit(args.commit, Path.cwd())
        manifest = build(args.cdk_out, args.config_dir, commit)
    except (ReleaseError, assembly.AssemblyError) as exc:
        raise UsageError(str(exc)) from None
    if not args.out.parent.is_dir():
        raise UsageError(f"--out {args.out}: directory {args.out.parent} does not exist")
    try:
        atomic_write.write_text(args.out, dump(manifest))
    except OSError as exc:
        raise UsageError(f"--out {args.out}: cannot write: {exc.strerror or exc}") from None
    images = sum(len(s["images"]) for e in manifest["environments"].values() for s in e["stacks"].values())
    print(
        f"wrote {args.out}: commit {commit[:12]}, {len(manifest['environments'])} environments, {images} image assets"
    )
    return 0
