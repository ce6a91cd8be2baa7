"""Cloud assemblies for the diff and diagram tests: real `dev` synths (base = shipped configs, head =
a changed copy), copies of the base with their template JSON edited where config cannot express the
change, and tiny hand-written assemblies for resources the app does not have yet.

Synths are cached per test process, so test_diff and test_diagram share them."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import yaml

from inferstack import config
from tests.support.paths import CONFIG_DIR
from tests.support.synth import synth

FOUNDATION_TEMPLATE = "assembly-dev/devFoundation3D911934.template.json"
VPC = "NetworkVpc7FB7348F"
FLOW_LOG_POLICY = "NetworkVpcFlowLogIAMRoleDefaultPolicy65C62FE2"
ENDPOINT_SG = "NetworkEndpointSecurityGroup6DEF6240"
PLATFORM_KEY = "PlatformKey1C4A1A63"
SG_HANDLER = "CustomVpcRestrictDefaultSGCustomResourceProviderHandlerDC833E5E"  # Lambda with a zip asset

_cache: dict[str, Path] = {}


def _once(name: str, tmp_path_factory, make: Callable[[Path], None]) -> Path:
    if name not in _cache:
        outdir = tmp_path_factory.mktemp(name)
        make(outdir)
        _cache[name] = outdir
    return _cache[name]


def base(tmp_path_factory) -> Path:
    """`dev` synthesized from the shipped model_configs/."""
    return _once("base", tmp_path_factory, lambda out: synth(config.load(CONFIG_DIR), ["dev"], out))


def change_configs(config_dir: Path) -> None:
    """The head's config changes: a new dev VPC CIDR (create-only: the VPC is replaced), a new model
    (a stack is added), and instance types for an ECS fleet and for dev's shared SageMaker endpoint."""
    envs_path = config_dir / "environments.yaml"
    envs_path.write_text(envs_path.read_text().replace("cidr: 10.10.0.0/16", "cidr: 10.11.0.0/16"))
    source = (config_dir / "t5-spelling.yaml").read_text()
    (config_dir / "t5-grammar.yaml").write_text(source.replace("name: t5-spelling", "name: t5-grammar"))
    environments = yaml.safe_load(envs_path.read_text())
    environments["fleets"]["intent-pack"]["environments"]["dev"]["capacity"]["instance_type"] = "inf1.6xlarge"
    # dev's Triton models run on the triton-shared fleet's endpoint: its instance type is the fleet's.
    environments["fleets"]["triton-shared"]["capacity"]["instance_type"] = "ml.g5.xlarge"
    envs_path.write_text(yaml.safe_dump(environments, sort_keys=False))


def head_config(tmp_path_factory) -> Path:
    """`dev` synthesized from a copy of model_configs/ changed by `change_configs`."""

    def make(out: Path) -> None:
        configs = tmp_path_factory.mktemp("configs") / "model_configs"
        shutil.copytree(CONFIG_DIR, configs)
        change_configs(configs)
        synth(config.load(configs), ["dev"], out)

    return _once("head-config", tmp_path_factory, make)


def edited_copy(
    base_dir: Path, target: Path, edit: Callable[[dict], None], template: str = FOUNDATION_TEMPLATE
) -> Path:
    shutil.copytree(base_dir, target)
    path = target / template
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=1))
    return target


def write_assembly(directory: Path, environments: dict[str, dict[str, dict]], *, region: str = "us-east-1") -> Path:
    """A minimal cloud assembly as `cdk synth` lays it out: root manifest -> nested `assembly-<env>`
    manifests -> `aws:cloudformation:stack` artifacts -> template files."""
    directory.mkdir(parents=True)
    root = {"version": "55.0.0", "artifacts": {}}
    for env, stacks in environments.items():
        nested_dir = directory / f"assembly-{env}"
        nested_dir.mkdir()
        root["artifacts"][f"assembly-{env}"] = {
            "type": "cdk:cloud-assembly",
            "properties": {"directoryName": nested_dir.name, "displayName": env},
        }
        nested = {"version": "55.0.0", "artifacts": {}}
        for name, template in stacks.items():
            artifact = f"{env}{name}".replace("-", "")
            (nested_dir / f"{artifact}.template.json").write_text(json.dumps(template))
            nested["artifacts"][artifact] = {
                "type": "aws:cloudformation:stack",
                "environment": f"aws://111111111111/{region}",
                "displayName": f"{env}/{name}",
                "properties": {"templateFile": f"{artifact}.template.json", "stackName": f"{env}-{name}"},
            }
        (nested_dir / "manifest.json").write_text(json.dumps(nested))
    (directory / "manifest.json").write_text(json.dumps(root))
    return directory
