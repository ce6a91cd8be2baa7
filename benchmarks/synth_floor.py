"""Floors of a CDK synth: the templates of a synthesized cloud assembly built again with no L2 construct
at all, as a CDK app, in one of two ways:

    cdk synth --app "python benchmarks/synth_floor.py [--templates] SOURCE_ASSEMBLY [PART/PARTS]" -o OUT

- by default every resource a raw `CfnResource` holding its final properties: what a Python design
  that renders L1 resources from plain values would cost (one jsii call or two per resource);
- `--templates`: each stack's whole template handed over in one call (`CfnInclude`): the least any
  CDK app, in any language, can hand the CDK. What is left is the CDK's own work per template.

(PART/PARTS, e.g. 0/2: only that contiguous slice of the stacks, to run a floor in parallel processes.)

Everything else is as in app.py: the same stages, stack names and environments, cdk.json's feature
flags, the cdk-nag checks with the same acknowledgements (read from the source's metadata), the CDK's
CloudFormation validation and a written assembly. What it leaves out (the Docker image assets) only
lowers it. benchmarks/synth_scale.py `--floor` runs both next to the real synth, and `--check`
(below) proves they write the same templates.

    python benchmarks/synth_floor.py --check SOURCE OUT   # every template of OUT equals SOURCE's
"""

from __future__ import annotations

import functools
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What the synthesizer adds to every stack by itself.
SYNTHESIZER_PARAMETERS = {"BootstrapVersion"}
RESOURCE_ATTRIBUTES = (
    "DependsOn",
    "Metadata",
    "Condition",
    "DeletionPolicy",
    "UpdateReplacePolicy",
    "UpdatePolicy",
    "CreationPolicy",
)
SYNTHESIZER_RULES = {"CheckBootstrapVersion"}
ACKNOWLEDGED = "aws:cdk:acknowledged-rules"
LOGICAL_ID = "aws:cdk:logicalId"
PROVIDER = "aws:cdk:is-custom-resource-handler-customResourceProvider"
USAGE = (
    "usage: synth_floor.py [--templates] SOURCE_ASSEMBLY [PART/PARTS] | --check SOURCE FLOOR "
    "(an assembly is a directory with a manifest.json; PART counts from 0)"
)


def stacks_of(assembly: Path) -> list[tuple[str, dict, Path]]:
    """(stage name, stack artifact, nested assembly directory) in synth order."""
    manifest = json.loads((assembly / "manifest.json").read_text())
    found = []
    for artifact in manifest["artifacts"].values():
        if artifact["type"] != "cdk:cloud-assembly":
            continue
        nested = assembly / artifact["properties"]["directoryName"]
        inner = json.loads((nested / "manifest.json").read_text())
        found += [
            (artifact["properties"]["displayName"], a, nested)
            for a in inner["artifacts"].values()
            if a["type"] == "aws:cloudformation:stack"
        ]
    return found


def template_of(artifact: dict, nested: Path) -> dict:
    return json.loads((nested / artifact["properties"]["templateFile"]).read_text())


def build(source: Path, part: int = 0, parts: int = 1, *, whole_templates: bool = False) -> None:
    """`whole_templates`: one CfnInclude per stack instead of a CfnResource per resource."""
    import aws_cdk as cdk

    from inferstack.constructs import nag
    from stacks.app_builder import POST_CLI_CONTEXT

    app = cdk.App(post_cli_context=POST_CLI_CONTEXT)
    stages: dict[str, cdk.Stage] = {}
    stacks = stacks_of(source)
    # CfnInclude reads its template file when constructed: the files are not needed for app.synth().
    with tempfile.TemporaryDirectory(prefix="synth-floor-") as scratch:
        for stage_name, artifact, nested in stacks[part * len(stacks) // parts : (part + 1) * len(stacks) // parts]:
            _, account, region = artifact["environment"].rsplit("/", 2)
            if stage_name not in stages:
                stages[stage_name] = cdk.Stage(app, stage_name, env=cdk.Environment(account=account, region=region))
            stage = stages[stage_name]
            props = artifact["properties"]
            template = template_of(artifact, nested)
            stack = cdk.Stack(
                stage,
                artifact["displayName"].split("/")[-1],
                stack_name=props["stackName"],
                description=template.get("Description"),
                termination_protection=props.get("terminationProtection", False),
            )
            metadata = _metadata(nested, artifact)
            if whole_templates:
                _include(stack, template, Path(scratch) / f"{props['stackName']}.json", metadata)
            else:
                _add_resources(stack, template, metadata)
    nag.add_checks(app)
    app.synth()


def _add_resources(stack, template: dict, metadata: dict) -> None:
    """`template` into `stack` as one raw CfnResource per resource, plus its parameters and outputs."""
    import aws_cdk as cdk

    resources = {}
    for logical_id, resource in template.get("Resources", {}).items():
        element = cdk.CfnResource(stack, logical_id, type=resource["Type"], properties=resource.get("Properties"))
        element.override_logical_id(logical_id)
        for attribute in RESOURCE_ATTRIBUTES:
            if attribute in resource:
                element.add_override(attribute, resource[attribute])
        resources[logical_id] = element
    for name, parameter in template.get("Parameters", {}).items():
        if name not in SYNTHESIZER_PARAMETERS:
            cdk.CfnParameter(
                stack,
                name,
                type=parameter["Type"],
                default=parameter.get("Default"),
                description=parameter.get("Description"),
            ).override_logical_id(name)
    for name, output in template.get("Outputs", {}).items():
        export = output.get("Export", {}).get("Name")
        cdk.CfnOutput(
            stack,
            name,
            value=cdk.Token.as_string(output["Value"]),
            export_name=export,
            description=output.get("Description"),
        ).override_logical_id(name)
    _acknowledge(metadata, resources.get)


def _include(stack, template: dict, path: Path, metadata: dict) -> None:
    """`template` into `stack` as one CfnInclude, less what the synthesizer adds by itself."""
    import aws_cdk as cdk
    from aws_cdk import cloudformation_include

    body = {key: value for key, value in template.items() if key != "Description"}
    for section, added in (("Parameters", SYNTHESIZER_PARAMETERS), ("Rules", SYNTHESIZER_RULES)):
        kept = {name: value for name, value in body.get(section, {}).items() if name not in added}
        body.pop(section, None)
        if kept:
            body[section] = kept
    path.write_text(json.dumps(body))
    included = cloudformation_include.CfnInclude(stack, "Template", template_file=str(path))
    resources = template.get("Resources", {})

    @functools.cache  # one jsii call per resource, however many acknowledgements reach it
    def resource_of(logical_id: str):
        return included.get_resource(logical_id) if logical_id in resources else None

    for logical_id, resource in resources.items():
        if len(resource.get("DependsOn", [])) > 1:  # CfnInclude sorts them; keep the source's order
            resource_of(logical_id).add_override("DependsOn", resource["DependsOn"])
    _acknowledge(metadata, resource_of)
    # The CDK's custom-resource providers create their roles as untyped CfnResources, which cdk-nag's
    # rules skip; included, they are CfnRoles, so acknowledge what nag would newly find there
    # (AWS-managed policies), to get the source's verdict. Anything else still fails the synth.
    for logical_id in _under(metadata, PROVIDER):
        resource = resources.get(logical_id, {})
        if resource.get("Type") == "AWS::IAM::Role":
            validations = cdk.Validations.of(resource_of(logical_id))
            for arn in resource.get("Properties", {}).get("ManagedPolicyArns", []):
                validations.acknowledge(
                    cdk.Acknowledgment(
                        id=f"AwsSolutions::AwsSolutions-IAM4[Policy::{_nag_text(arn)}]",
                        reason="an untyped CfnResource in the source app, which cdk-nag does not check",
                    )
                )


def _nag_text(value) -> str:
    """A policy ARN as cdk-nag prints it in a finding: intrinsics flattened, Ref X and ${X} as <X>."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return f"<{value['Ref']}>"
    if isinstance(value, dict) and set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
        return re.sub(r"\$\{([^}]+)\}", r"<\1>", value["Fn::Sub"])
    if isinstance(value, dict) and set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return separator.join(_nag_text(p) for p in parts)
    return json.dumps(value)


def _metadata(nested: Path, artifact: dict) -> dict:
    metadata_file = nested / artifact.get("additionalMetadataFile", "")
    return json.loads(metadata_file.read_text()) if metadata_file.is_file() else artifact.get("metadata", {})


def _under(metadata: dict, entry_type: str) -> list[str]:
    """Logical ids of the resources under the constructs carrying metadata `entry_type`."""
    marked = [path for path, entries in metadata.items() if any(e["type"] == entry_type for e in entries)]
    return [
        entry["data"]
        for path, entries in metadata.items()
        for entry in entries
        if entry["type"] == LOGICAL_ID and any(_within(path, m) for m in marked)
    ]


def _within(path: str, scope: str) -> bool:
    """Whether construct `path` is `scope` or under it."""
    return path == scope or path.startswith(scope + "/")


def _acknowledge(metadata: dict, resource_of) -> None:
    """The source's cdk-nag acknowledgements, on the resources under each acknowledged construct.
    `resource_of`: logical id -> the floor's construct for it (None where it has none)."""
    import aws_cdk as cdk

    paths = {
        entries_path: entry["data"]
        for entries_path, entries in metadata.items()
        for entry in entries
        if entry["type"] == LOGICAL_ID
    }
    for ack_path, entries in metadata.items():
        for entry in entries:
            if entry["type"] != ACKNOWLEDGED:
                continue
            for path, logical_id in paths.items():
                resource = resource_of(logical_id) if _within(path, ack_path) else None
                if resource is not None:
                    validations = cdk.Validations.of(resource)
                    for rule, reason in entry["data"].items():
                        validations.acknowledge(cdk.Acknowledgment(id=rule, reason=reason))


def differing_templates(source: Path, *floors: Path) -> list[str]:
    """Templates of `source` that the `floors` (one assembly per part) do not reproduce exactly (missing
    ones included)."""
    built = {
        artifact["displayName"]: template_of(artifact, nested)
        for floor in floors
        for _, artifact, nested in stacks_of(floor)
    }
    return [
        artifact["displayName"]
        for _, artifact, nested in stacks_of(source)
        if built.get(artifact["displayName"]) != template_of(artifact, nested)
    ]


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "--check":
        differ = differing_templates(Path(argv[1]), Path(argv[2]))
        print(f"{len(differ)} templates differ" + (f": {', '.join(differ[:5])}" if differ else ""))
        return 1 if differ else 0
    whole_templates = bool(argv) and argv[0] == "--templates"
    args = argv[1:] if whole_templates else argv
    part = _part(args[1]) if len(args) == 2 else (0, 1)
    if len(args) not in (1, 2) or part is None or not (Path(args[0]) / "manifest.json").is_file():
        print(USAGE, file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    build(Path(args[0]), *part, whole_templates=whole_templates)
    return 0


def _part(text: str) -> tuple[int, int] | None:
    try:
        part, parts = (int(v) for v in text.split("/"))
    except ValueError:
        return None
    return (part, parts) if 0 <= part < parts else None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
