"""Compare two cloud assemblies environment by environment and stack by stack: which resources are
added, removed, modified or replaced, which changes only move a CDK asset hash (new image or model),
and which touch IAM, security groups, scaling or protected (serving/stateful) resources."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from inferstack.review import classes, schemas, summary
from inferstack.review.assembly import Assembly, Asset, Environment, Stack

# The report's data model (changes.py), built here. CLASSES, class_counts and counts are not used here: they
# stay importable from this module for its readers (diff.counts(report.resources)), re-exported as `x as x`.
from inferstack.review.changes import CLASSES as CLASSES
from inferstack.review.changes import (
    ONLY_IN_BASE,
    ONLY_IN_HEAD,
    PROTECTED_TYPES,
    AssetUpdate,
    EnvironmentDiff,
    Report,
    ResourceChange,
    StackDiff,
    ValueChange,
)
from inferstack.review.changes import class_counts as class_counts
from inferstack.review.changes import counts as counts
from inferstack.review.template import Path, references

IAM_TYPE_PREFIXES = ("AWS::IAM::",)
IAM_POLICY_TYPES = frozenset(
    {
        "AWS::S3::BucketPolicy",
        "AWS::SNS::TopicPolicy",
        "AWS::SQS::QueuePolicy",
        "AWS::Lambda::Permission",
        "AWS::KMS::Grant",
    }
)
# Properties that grant or assume permissions wherever they appear (a KMS key policy, a repository policy...).
IAM_PROPERTIES = frozenset(
    {
        "KeyPolicy",
        "PolicyDocument",
        "Policies",
        "AssumeRolePolicyDocument",
        "ManagedPolicyArns",
        "PermissionsBoundary",
        "RepositoryPolicyText",
    }
)
# Changing which role a resource runs as is an IAM change; a new resource naming its role is not news.
IAM_ROLE_PROPERTIES = frozenset({"ExecutionRoleArn", "TaskRoleArn", "RoleArn"})
SECURITY_GROUP_TYPE_PREFIX = "AWS::EC2::SecurityGroup"
SECURITY_GROUP_PROPERTIES = frozenset(
    {"SecurityGroupIngress", "SecurityGroupEgress", "SecurityGroups", "SecurityGroupIds", "VpcSecurityGroupIds"}
)
SCALING_TYPE_PREFIXES = ("AWS::ApplicationAutoScaling::", "AWS::AutoScaling::")
SCALING_TYPES = frozenset({"AWS::ECS::CapacityProvider", "AWS::ECS::ClusterCapacityProviderAssociations"})
SCALING_PROPERTIES = frozenset(
    {
        "DesiredCount",
        "CapacityProviderStrategy",
        "DefaultCapacityProviderStrategy",
        "CapacityProviders",
        "InitialInstanceCount",
        "ManagedScaling",
    }
)

# DeletionPolicy / UpdateReplacePolicy values that keep the physical resource when CloudFormation lets go of it.
RETAINING_POLICIES = ("Retain", "RetainExceptOnCreate")

ASSET_HASH = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
# Legacy (pre-bootstrap-v2) synthesis names asset parameters after the hash, plus an id derived from it.
LEGACY_ASSET_PARAMETER = re.compile(r"AssetParameters[0-9a-f]{64}(S3Bucket|S3VersionKey|ArtifactHash)[0-9A-F]{8}")
# Metadata CDK and linters write for themselves; it changes nothing in the deployed resource.
_TOOL_METADATA = ("aws:cdk:", "aws:asset:", "cfn-lint", "cdk_nag", "guard")

_MISSING = object()


def format_path(path: Path) -> str:
    text = ""
    for token in path:
        text += f"[{token}]" if isinstance(token, int) else (f".{token}" if text else str(token))
    return text


# --- structural diff -------------------------------------------------------------------------------


def _is_intrinsic(value: Any) -> bool:
    if not isinstance(value, dict) or len(value) != 1:
        return False
    key = next(iter(value))
    return key in ("Ref", "Condition") or key.startswith("Fn::")


def _leaf_changes(base: Any, head: Any, path: Path) -> Iterator[tuple[Path, str, Any, Any]]:
    """(path, change, base, head) for each differing leaf. Intrinsic functions count as leaves, so a
    changed image URI inside Fn::Join is reported at the property, not at `Fn::Join[1][3]`."""
    if base == head:
        return
    if isinstance(base, dict) and isinstance(head, dict) and not _is_intrinsic(base) and not _is_intrinsic(head):
        for key in sorted(set(base) | set(head)):
            if key not in base:
                yield path + (key,), "added", None, head[key]
            elif key not in head:
                yield path + (key,), "removed", base[key], None
            else:
                yield from _leaf_changes(base[key], head[key], path + (key,))
    elif isinstance(base, list) and isinstance(head, list):
        for i in range(max(len(base), len(head))):
            if i >= len(base):
                yield path + (i,), "added", None, head[i]
            elif i >= len(head):
                yield path + (i,), "removed", base[i], None
            else:
                yield from _leaf_changes(base[i], head[i], path + (i,))
    else:
        yield path, "modified", base, head


def _mask_text(text: str) -> str:
    return ASSET_HASH.sub("<asset-hash>", LEGACY_ASSET_PARAMETER.sub(r"AssetParameters<asset-hash>\1", text))


def _mask(value: Any) -> str:
    return _mask_text(json.dumps(value, sort_keys=True))


def _comparable(resource: dict) -> dict:
    resource = dict(resource)
    metadata = {k: v for k, v in (resource.pop("Metadata", None) or {}).items() if not k.startswith(_TOOL_METADATA)}
    if metadata:
        resource["Metadata"] = metadata
    return resource


def _asset_update(path: Path, base: Any, head: Any, assets: dict[str, Asset]) -> AssetUpdate:
    base_hashes, head_hashes = ASSET_HASH.findall(json.dumps(base)), ASSET_HASH.findall(json.dumps(head))
    new = [h for h in head_hashes if h not in base_hashes] or head_hashes
    old = [h for h in base_hashes if h not in head_hashes] or base_hashes
    asset = assets.get(new[0]) if new else None
    text = json.dumps(head)
    if any(str(t).startswith("ModelData") for t in path) or ".tar.gz" in text:
        kind = "model artifact"
    elif asset is not None:
        kind = asset.kind
    elif ".dkr.ecr." in text or "container-assets" in text:
        kind = "container image"
    elif ".zip" in text:
        kind = "file asset (zip)"
    else:
        kind = "file asset"
    return AssetUpdate(
        format_path(path), kind, asset.display_name if asset else "", old[0] if old else None, new[0] if new else None
    )


# --- replacement -----------------------------------------------------------------------------------


def _pointer_tokens(pointer: str) -> tuple[str, ...]:
    tokens = tuple(t.replace("~1", "/").replace("~0", "~") for t in pointer.lstrip("/").split("/"))
    return ("Properties",) + tokens[1:] if tokens and tokens[0] == "properties" else tokens


def _same_token(a: str | int, b: str | int) -> bool:
    if a == "*":
        return isinstance(b, int) or b == "*"
    if b == "*":
        return isinstance(a, int)
    return str(a) == str(b)


def _prefix(short: tuple, long: tuple) -> bool:
    """Does `short` (a pointer or a path) lead to `long`? A pointer's "*" matches any list index."""
    return len(short) <= len(long) and all(_same_token(a, b) for a, b in zip(short, long, strict=False))


def _lookup(value: Any, tokens: tuple[str, ...]) -> list[Any]:
    if not tokens:
        return [value]
    head, rest = tokens[0], tokens[1:]
    if head == "*" and isinstance(value, list):
        return [v for item in value for v in _lookup(item, rest)]
    if isinstance(value, dict) and head in value:
        return _lookup(value[head], rest)
    return [_MISSING]


def _replacing(path: Path, pointers: tuple[str, ...], base: dict, head: dict) -> str | None:
    """The create-only pointer that makes a change at `path` a replacement, if any."""
    for pointer in pointers:
        tokens = _pointer_tokens(pointer)
        if _prefix(tokens, path):
            return pointer
        # A whole block added or removed above a nested create-only property (e.g. /properties/A/B).
        if _prefix(path, tokens) and _lookup(base, tokens) != _lookup(head, tokens):
            return pointer
    return None


def _classify_replacement(
    change: ResourceChange, paths: list[Path], base: dict, head: dict, region: str | None
) -> None:
    if change.base_type:
        change.replacement = "always"
        _reason(change, None, f"Type changed from {change.base_type} to {change.type}")
        return
    rules = schemas.rules(change.type, region)
    for path in paths:
        if path[:1] != ("Properties",):
            continue
        for level, pointers in (("always", rules.create_only), ("conditional", rules.conditional_create_only)):
            pointer = _replacing(path, pointers, base, head)
            if pointer:
                _mark_replacement(change, level, format_path(path), pointer)
                break


def _mark_replacement(
    change: ResourceChange, level: str, path: str, pointer: str, refers_to: str | None = None
) -> None:
    if change.replacement != "always":
        change.replacement = level
    if path not in change.replacing_paths:
        change.replacing_paths.append(path)
    why = "create-only" if level == "always" else "conditionally create-only (may replace)"
    why += f" ({pointer})"
    if refers_to:
        why += f" and refers to replaced {refers_to}"
    _reason(change, path, why, refers_to)


def _reason(change: ResourceChange, path: str | None, why: str, refers_to: str | None = None) -> None:
    reason = {"path": path, "why": why, "refers_to": refers_to}
    if reason not in change.replacement_reasons:
        change.replacement_reasons.append(reason)


def _cascade(stack: Stack, base_stack: Stack, changes: dict[str, ResourceChange], region: str | None) -> None:
    """A replaced resource gets a new physical id: resources referring to it update too, and are replaced
    themselves when the reference sits in a create-only property (e.g. an EndpointConfig naming a replaced
    Model). Repeated until nothing new is replaced."""
    while True:
        replaced = {lid for lid, c in changes.items() if c.replacement == "always" and c.action != "removed"}
        grew = False
        for logical_id, resource in sorted(stack.resources.items()):
            if logical_id not in base_stack.resources or logical_id in replaced:
                continue
            existing = changes.get(logical_id)
            if existing is not None and existing.action == "added":
                continue
            for path, target in references(resource.get("Properties") or {}, ("Properties",)):
                if target not in replaced or target == logical_id:
                    continue
                change = existing or changes.setdefault(
                    logical_id, _new_change(stack, logical_id, resource, "modified")
                )
                existing = change
                cause = {"path": format_path(path), "logical_id": target}
                if cause not in change.caused_by:
                    change.caused_by.append(cause)
                    change.categories = _merge(change.categories, _categories(change, [path], resource))
                    grew = True
                rules = schemas.rules(change.type, region)
                for level, pointers in (("always", rules.create_only), ("conditional", rules.conditional_create_only)):
                    pointer = _replacing(path, pointers, {}, {})
                    if pointer:
                        before = change.replacement
                        _mark_replacement(change, level, format_path(path), pointer, refers_to=target)
                        grew |= before != change.replacement
                        break
        if not grew:
            return


# --- categories ------------------------------------------------------------------------------------

CATEGORIES = ("iam", "security-groups", "scaling")


def _merge(a: list[str], b: list[str]) -> list[str]:
    return [c for c in CATEGORIES if c in a or c in b]


def _categories(change: ResourceChange, paths: list[Path], resource: dict) -> list[str]:
    whole = change.action in ("added", "removed")
    if whole:
        paths = [("Properties", key) for key in resource.get("Properties") or {}]
    tokens = {str(t) for p in paths for t in p}
    types = {t for t in (change.type, change.base_type) if t is not None}
    found = []
    if (
        any(t.startswith(IAM_TYPE_PREFIXES) or t in IAM_POLICY_TYPES for t in types)
        or tokens & IAM_PROPERTIES
        or (not whole and tokens & IAM_ROLE_PROPERTIES)
    ):
        found.append("iam")
    if any(t.startswith(SECURITY_GROUP_TYPE_PREFIX) for t in types) or tokens & SECURITY_GROUP_PROPERTIES:
        found.append("security-groups")
    if any(t.startswith(SCALING_TYPE_PREFIXES) or t in SCALING_TYPES for t in types) or tokens & SCALING_PROPERTIES:
        found.append("scaling")
    return found


# --- stacks and environments -----------------------------------------------------------------------


def _new_change(stack: Stack, logical_id: str, resource: dict, action: str) -> ResourceChange:
    type_name = str(resource.get("Type", ""))
    return ResourceChange(
        stack=stack.name,
        logical_id=logical_id,
        type=type_name,
        action=action,
        construct_path=stack.construct_path(logical_id),
        protected=type_name in PROTECTED_TYPES,
    )


def _diff_resource(
    base_stack: Stack, head_stack: Stack, logical_id: str, assets: dict[str, Asset]
) -> ResourceChange | None:
    base, head = _comparable(base_stack.resources[logical_id]), _comparable(head_stack.resources[logical_id])
    leaves = list(_leaf_changes(base, head, ()))
    if not leaves:
        return None
    change = _new_change(head_stack, logical_id, head_stack.resources[logical_id], "modified")
    if base.get("Type") != head.get("Type"):
        change.base_type = str(base.get("Type"))
        change.protected |= change.base_type in PROTECTED_TYPES
    real: list[Path] = []
    for path, kind, old, new in leaves:
        if kind == "modified" and _mask(old) == _mask(new) and path != ("Type",):
            change.asset_updates.append(_asset_update(path, old, new, assets))
        else:
            change.changes.append(ValueChange(format_path(path), kind, old, new))
            real.append(path)
    if not real:
        change.action = "asset-update"
    _classify_replacement(change, [p for p, *_ in leaves], base, head, head_stack.region)
    change.categories = _categories(change, real, head)
    return change


def _whole(stack: Stack, logical_id: str, action: str) -> ResourceChange:
    resource = stack.resources[logical_id]
    change = _new_change(stack, logical_id, resource, action)
    change.categories = _categories(change, [], resource)
    if action == "removed":
        change.kept_by_policy = _kept_by(resource, "DeletionPolicy")
    return change


def _kept_by(resource: dict, attribute: str) -> str | None:
    """ "DeletionPolicy: Retain" when that policy keeps the resource CloudFormation lets go of. A removal
    (from the template or with the whole stack) follows DeletionPolicy; the old physical resource of a
    replacement follows UpdateReplacePolicy."""
    policy = resource.get(attribute)
    return f"{attribute}: {policy}" if policy in RETAINING_POLICIES else None


def _template_changes(base: dict, head: dict) -> tuple[list[ValueChange], list[AssetUpdate]]:
    """Changes outside Resources (Outputs, Parameters, Conditions...); legacy asset parameters whose
    values differ only in an asset hash come back separately."""
    changes, assets = [], []
    base, head = dict(base), dict(head)
    if isinstance(base.get("Parameters"), dict) and isinstance(head.get("Parameters"), dict):
        assets += _renamed_asset_parameters(base, head)
    for section in sorted((set(base) | set(head)) - {"Resources"}):
        if section not in base:
            changes.append(ValueChange(section, "added", None, head[section]))
            continue
        if section not in head:
            changes.append(ValueChange(section, "removed", base[section], None))
            continue
        for path, kind, old, new in _leaf_changes(base[section], head[section], (section,)):
            if kind == "modified" and _mask(old) == _mask(new):
                update = _asset_update(path, old, new, {})
                update.kind = "asset parameter"
                assets.append(update)
            else:
                changes.append(ValueChange(format_path(path), kind, old, new))
    return changes, assets


def _renamed_asset_parameters(base: dict, head: dict) -> list[AssetUpdate]:
    """Legacy asset parameters carry the hash in their names: a rebuilt asset renames them. Report those
    as asset updates and compare the rest under the head's names."""
    renamed = []
    head_by_mask = {_mask_text(k): k for k in head["Parameters"]}
    parameters = {}
    for key, value in base["Parameters"].items():
        new = head_by_mask.get(_mask_text(key))
        if new is not None and new != key and key not in head["Parameters"]:
            old_hashes, new_hashes = ASSET_HASH.findall(key), ASSET_HASH.findall(new)
            renamed.append(
                AssetUpdate(
                    f"Parameters.{new}",
                    "asset parameter",
                    "",
                    old_hashes[0] if old_hashes else None,
                    new_hashes[0] if new_hashes else None,
                )
            )
            key = new
        parameters[key] = value
    base["Parameters"] = parameters
    return renamed


def _diff_stack(base: Stack | None, head: Stack | None, assets: dict[str, Asset]) -> StackDiff:
    stack = head or base
    assert stack is not None
    if base is None or head is None:
        action = "added" if base is None else "removed"
        resources = [_whole(stack, lid, action) for lid in sorted(stack.resources)]
        return StackDiff(stack.name, stack.stack_name, action, resources, resource_count=len(stack.resources))
    changes: dict[str, ResourceChange] = {}
    for logical_id in sorted(set(base.resources) | set(head.resources)):
        if logical_id not in base.resources:
            changes[logical_id] = _whole(head, logical_id, "added")
        elif logical_id not in head.resources:
            changes[logical_id] = _whole(base, logical_id, "removed")
        else:
            change = _diff_resource(base, head, logical_id, assets)
            if change is not None:
                changes[logical_id] = change
    _pair_renamed(changes)
    _cascade(head, base, changes, head.region)
    for change in changes.values():
        if change.replacement and change.action in ("modified", "asset-update"):
            change.kept_by_policy = _kept_by(head.resources[change.logical_id], "UpdateReplacePolicy")
    template_changes, template_assets = _template_changes(base.template, head.template)
    if template_assets:
        changes["(template)"] = ResourceChange(
            stack=head.name,
            logical_id="(template)",
            type="(template)",
            action="asset-update",
            asset_updates=template_assets,
        )
    resources = sorted(changes.values(), key=lambda c: c.logical_id)
    status = "modified" if resources or template_changes else "unchanged"
    return StackDiff(
        head.name, head.stack_name, status, resources, template_changes, resource_count=len(head.resources)
    )


def _pair_renamed(changes: dict[str, ResourceChange]) -> None:
    """A construct whose logical ID changed (moved or renamed in the tree) shows as one removed and one
    added resource at the same construct path: CloudFormation creates the new one and deletes the old,
    i.e. a replacement."""
    removed = {c.construct_path: c for c in changes.values() if c.action == "removed" and c.construct_path}
    for change in list(changes.values()):
        old = removed.get(change.construct_path) if change.action == "added" and change.construct_path else None
        if old is None or old.logical_id not in changes:
            continue
        del changes[old.logical_id]
        _mark_as_successor(change, old, f"logical ID changed from {old.logical_id}")


def _mark_as_successor(change: ResourceChange, old: ResourceChange, reason: str) -> None:
    change.replaces = {"stack": old.stack, "logical_id": old.logical_id}
    change.replacement = "always"
    _reason(change, None, f"{reason}: CloudFormation creates a new resource and deletes the old one")
    change.protected |= old.protected
    change.kept_by_policy = old.kept_by_policy  # the old logical ID is removed: its DeletionPolicy applies
    if old.type != change.type:
        change.base_type = old.type


def _pair_moved(stacks: list[StackDiff]) -> None:
    """The same logical ID and type leaving one stack of an environment and arriving in another. Not from a
    stack removed whole to one added whole: sibling stacks share logical IDs (every Triton model stack has
    TritonModel4CE37371), so a model retired and another added in one change are a removal and an addition,
    not a move (and the new component does not "replace" the retired one's)."""
    removed = {(c.logical_id, c.type): (s, c) for s in stacks for c in s.resources if c.action == "removed"}
    for stack in stacks:
        for change in stack.resources:
            source = removed.get((change.logical_id, change.type), (None,))[0]
            if source is not None and source.status == "removed" and stack.status == "added":
                continue
            if change.action != "added" or (change.logical_id, change.type) not in removed:
                continue
            source, old = removed.pop((change.logical_id, change.type))
            if source is stack:
                continue
            source.resources.remove(old)
            _mark_as_successor(change, old, f"moved from stack {old.stack}")


def _export_warnings(env_head: Environment, stacks: list[StackDiff]) -> list[str]:
    """An export whose value changes (its resource is replaced) cannot be updated while another stack
    imports it: CloudFormation fails the deploy. Say so before anyone runs it."""
    replaced = {
        (c.stack, c.logical_id)
        for s in stacks
        for c in s.resources
        if c.replacement == "always" and c.action != "removed"
    }
    imports: dict[str, set[str]] = {}
    for stack in env_head.stacks.values():
        for _path, imported in _imports(stack.template, ()):
            imports.setdefault(imported, set()).add(stack.name)
    warnings = []
    for stack in env_head.stacks.values():
        for _output_id, output in sorted((stack.template.get("Outputs") or {}).items()):
            name = (output.get("Export") or {}).get("Name")
            if not isinstance(name, str) or not imports.get(name, set()) - {stack.name}:
                continue
            targets = sorted({t for _, t in references(output.get("Value"), ()) if (stack.name, t) in replaced})
            if targets:
                importers = ", ".join(sorted(imports[name] - {stack.name}))
                warnings.append(
                    f"{stack.name}: export {name} changes ({', '.join(targets)} replaced) while "
                    f"{importers} import(s) it: CloudFormation refuses to update an export in use"
                )
    return warnings


def _imports(value: Any, path: Path) -> Iterator[tuple[Path, str]]:
    if isinstance(value, dict):
        if set(value) == {"Fn::ImportValue"} and isinstance(value["Fn::ImportValue"], str):
            yield path, value["Fn::ImportValue"]
            return
        for key, item in value.items():
            yield from _imports(item, path + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _imports(item, path + (i,))


def diff_environment(name: str, base: Environment | None, head: Environment | None) -> EnvironmentDiff:
    if base is None or head is None:
        return _one_sided(name, base, head)
    base_stacks, head_stacks = base.stacks, head.stacks
    # Hashes are looked up on both sides: the head's manifests name new assets, the base's old ones.
    assets = {**base.assets, **head.assets}
    stacks = [
        _diff_stack(base_stacks.get(s), head_stacks.get(s), assets) for s in sorted(set(base_stacks) | set(head_stacks))
    ]
    _pair_moved(stacks)
    warnings = _export_warnings(head, stacks)
    status = "modified" if any(s.status != "unchanged" for s in stacks) else "unchanged"
    env_diff = EnvironmentDiff(name, status, stacks, warnings)
    classes.classify(env_diff, base, head)
    for stack in stacks:
        if stack.status in ("added", "removed"):
            stack.summary = summary.summarize((head if stack.status == "added" else base).stacks[stack.name])
    return env_diff


def _one_sided(name: str, base: Environment | None, head: Environment | None) -> EnvironmentDiff:
    """An environment one side did not synthesize: its stacks listed and summarised, not counted as added
    or removed, not classified, not flagged."""
    env = head or base
    assert env is not None
    status = ONLY_IN_HEAD if base is None else ONLY_IN_BASE
    stacks = [
        StackDiff(s.name, s.stack_name, status, resource_count=len(s.resources), summary=summary.summarize(s))
        for _, s in sorted(env.stacks.items())
    ]
    return EnvironmentDiff(name, status, stacks)


class UnknownEnvironment(ValueError):
    """--env names an environment neither assembly has."""


def diff(base: Assembly, head: Assembly, environments: list[str] | None = None) -> Report:
    """Every environment of either assembly, or only `environments` (each in at least one of them)."""
    names = sorted(set(base.environments) | set(head.environments))
    if environments:
        unknown = [e for e in dict.fromkeys(environments) if e not in names]
        if unknown:
            raise UnknownEnvironment(
                f"--env {', '.join(unknown)}: in neither assembly; environments: {', '.join(names)}"
            )
        names = [n for n in names if n in environments]
    return Report(
        str(base.path),
        str(head.path),
        [diff_environment(n, base.environments.get(n), head.environments.get(n)) for n in names],
        selected=sorted(set(environments)) if environments else None,
    )
