"""The floor of a Python CDK synth: the templates of a synthesized cloud assembly built again with no
L2 construct at all, every resource a raw `CfnResource` holding its final properties, as a CDK app:

    cdk synth --app "python benchmarks/synth_floor.py SOURCE_ASSEMBLY [PART/PARTS]" -o OUT

(PART/PARTS, e.g. 0/2: only that contiguous slice of the stacks, to run the floor in parallel processes.)

Everything else is as in app.py: the same stages, stack names and environments, cdk.json's feature
flags, the cdk-nag checks with the same acknowledgements (read from the source's metadata), the CDK's
CloudFormation validation and a written assembly. What it leaves out (the Docker image assets) only
lowers it. So its time is what any design in this language pays for these templates: the jsii round
trips of one call or two per resource, and the CDK's per-template synth work. benchmarks/synth_scale.py
`--floor` runs it next to the real synth, and `--check` (below) proves it writes the same templates.

    python benchmarks/synth_floor.py --check SOURCE OUT   # every template of OUT equals SOURCE's
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What the synthesizer adds to every stack by itself.
SYNTHESIZER_PARAMETERS = {"BootstrapVersion"}
RESOURCE_ATTRIBUTES = ("DependsOn", "Metadata", "Condition", "DeletionPolicy", "UpdateReplacePolicy",
                       "UpdatePolicy", "CreationPolicy")
ACKNOWLEDGED = "aws:cdk:acknowledged-rules"
LOGICAL_ID = "aws:cdk:logicalId"


def stacks_of(assembly: Path) -> list[tuple[str, dict, Path]]:
    """(stage name, stack artifact, nested assembly directory) in synth order."""
    manifest = json.loads((assembly / "manifest.json").read_text())
    found = []
    for artifact in manifest["artifacts"].values():
        if artifact["type"] != "cdk:cloud-assembly":
            continue
        nested = assembly / artifact["properties"]["directoryName"]
        inner = json.loads((nested / "manifest.json").read_text())
        found += [(artifact["properties"]["displayName"], a, nested) for a in inner["artifacts"].values()
                  if a["type"] == "aws:cloudformation:stack"]
    return found


def template_of(artifact: dict, nested: Path) -> dict:
    return json.loads((nested / artifact["properties"]["templateFile"]).read_text())


def build(source: Path, part: int = 0, parts: int = 1) -> None:
    import aws_cdk as cdk

    from inferstack import nag
    from stacks.app_builder import POST_CLI_CONTEXT

    app = cdk.App(post_cli_context=POST_CLI_CONTEXT)
    stages: dict[str, cdk.Stage] = {}
    stacks = stacks_of(source)
    for stage_name, artifact, nested in stacks[part * len(stacks) // parts:(part + 1) * len(stacks) // parts]:
        _, account, region = artifact["environment"].rsplit("/", 2)
        if stage_name not in stages:
            stages[stage_name] = cdk.Stage(app, stage_name, env=cdk.Environment(account=account, region=region))
        stage = stages[stage_name]
        props = artifact["properties"]
        template = template_of(artifact, nested)
        stack = cdk.Stack(stage, artifact["displayName"].split("/")[-1], stack_name=props["stackName"],
                          description=template.get("Description"),
                          termination_protection=props.get("terminationProtection", False))
        resources = {}
        for logical_id, resource in template.get("Resources", {}).items():
            element = cdk.CfnResource(stack, logical_id, type=resource["Type"],
                                      properties=resource.get("Properties"))
            element.override_logical_id(logical_id)
            for attribute in RESOURCE_ATTRIBUTES:
                if attribute in resource:
                    element.add_override(attribute, resource[attribute])
            resources[logical_id] = element
        for name, parameter in template.get("Parameters", {}).items():
            if name not in SYNTHESIZER_PARAMETERS:
                cdk.CfnParameter(stack, name, type=parameter["Type"], default=parameter.get("Default"),
                                 description=parameter.get("Description")).override_logical_id(name)
        for name, output in template.get("Outputs", {}).items():
            export = output.get("Export", {}).get("Name")
            cdk.CfnOutput(stack, name, value=cdk.Token.as_string(output["Value"]), export_name=export,
                          description=output.get("Description")).override_logical_id(name)
        _acknowledge(nested / artifact.get("additionalMetadataFile", ""), artifact, resources)
    nag.add_checks(app)
    app.synth()


def _acknowledge(metadata_file: Path, artifact: dict, resources: dict) -> None:
    """The source's cdk-nag acknowledgements, on the resources under each acknowledged construct."""
    import aws_cdk as cdk

    metadata = (json.loads(metadata_file.read_text()) if metadata_file.is_file()
                else artifact.get("metadata", {}))
    paths = {entries_path: entry["data"] for entries_path, entries in metadata.items() for entry in entries
             if entry["type"] == LOGICAL_ID}
    for ack_path, entries in metadata.items():
        for entry in entries:
            if entry["type"] != ACKNOWLEDGED:
                continue
            for path, logical_id in paths.items():
                if (path == ack_path or path.startswith(ack_path + "/")) and logical_id in resources:
                    validations = cdk.Validations.of(resources[logical_id])
                    for rule, reason in entry["data"].items():
                        validations.acknowledge(cdk.Acknowledgment(id=rule, reason=reason))


def differing_templates(source: Path, *floors: Path) -> list[str]:
    """Templates of `source` that the `floors` (one assembly per part) do not reproduce exactly (missing
    ones included)."""
    built = {artifact["displayName"]: template_of(artifact, nested)
             for floor in floors for _, artifact, nested in stacks_of(floor)}
    return [artifact["displayName"] for _, artifact, nested in stacks_of(source)
            if built.get(artifact["displayName"]) != template_of(artifact, nested)]


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "--check":
        differ = differing_templates(Path(argv[1]), Path(argv[2]))
        print(f"{len(differ)} templates differ" + (f": {', '.join(differ[:5])}" if differ else ""))
        return 1 if differ else 0
    part = _part(argv[1]) if len(argv) == 2 else (0, 1)
    if len(argv) not in (1, 2) or part is None or not (Path(argv[0]) / "manifest.json").is_file():
        print("usage: synth_floor.py SOURCE_ASSEMBLY [PART/PARTS] | --check SOURCE FLOOR "
              "(an assembly is a directory with a manifest.json; PART counts from 0)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    build(Path(argv[0]), *part)
    return 0


def _part(text: str) -> tuple[int, int] | None:
    try:
        part, parts = (int(v) for v in text.split("/"))
    except ValueError:
        return None
    return (part, parts) if 0 <= part < parts else None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
