"""Hand-made cloud assemblies for the shard merge tests (inferstack/synthesis/shards.py): what one shard's
`cdk synth` writes, small enough to write in a test or in a child process standing for a shard."""

from __future__ import annotations

import json
from pathlib import Path


def shard_assembly(root: Path, env: str, stacks: dict[str, str], asset: str = "asset.abc") -> Path:
    """A minimal cloud assembly as the CDK writes one: a nested assembly per stage, a staged asset."""
    nested = root / f"assembly-{env}"
    nested.mkdir(parents=True)
    artifacts = {}
    for name, body in stacks.items():
        (nested / f"{name}.template.json").write_text(body)
        artifacts[name] = {"type": "aws:cloudformation:stack", "properties": {"templateFile": f"{name}.template.json"}}
    (nested / "manifest.json").write_text(json.dumps({"version": "55.0.0", "artifacts": artifacts}))
    (root / asset).mkdir()
    (root / asset / "Dockerfile").write_text("FROM scratch\n")
    (root / "manifest.json").write_text(
        json.dumps(
            {
                "version": "55.0.0",
                "artifacts": {
                    f"assembly-{env}": {
                        "type": "cdk:cloud-assembly",
                        "properties": {"directoryName": f"assembly-{env}"},
                    },
                    "Tree": {"type": "cdk:tree", "properties": {"file": "tree.json"}},
                },
            }
        )
    )
    children = {env: {"id": env, "children": {name: {"id": name} for name in stacks}}, "Tree": {"id": "Tree"}}
    (root / "tree.json").write_text(json.dumps({"version": "tree-0.1", "tree": {"id": "App", "children": children}}))
    return root
