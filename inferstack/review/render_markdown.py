"""The diff report as Markdown for a pull-request comment: a summary table per environment, then the
changes a reviewer must look at (CI change classes, protected resources, replacements, IAM, security groups,
scaling, image/model updates), what new stacks run, what a removal deletes and keeps, and everything else
folded away."""

from __future__ import annotations

import json
from typing import Any

from inferstack.review.changes import (
    CLASSES,
    ECR_IMAGES_NOTE,
    EnvironmentDiff,
    Report,
    ResourceChange,
    StackDiff,
    ValueChange,
    class_counts,
    counts,
)
from inferstack.review.summary import StackSummary

MAX_VALUE = 80  # characters of a property value shown inline
INLINE_PATHS = 3  # more changed paths than this go into a <details> block
FOLD_ENTRIES = 10  # a section with more entries than this is folded
MAX_ACTIONS = 40  # IAM actions listed inline in a stack summary; the rest are folded
# Classes shown on each entry; every change added or removed has `adds` / `removes`, which its line says anyway.
FLAGGED = tuple(c for c in CLASSES if c not in ("adds", "removes"))

SECTIONS = (
    (
        "Protected resources",
        lambda r: r.protected,
        "Serving and stateful resources (endpoints, services, load balancers, ASGs, keys, buckets, log groups, VPC).",
    ),
    (
        "Replacements",
        lambda r: r.replacement is not None,
        "CloudFormation creates a new resource and deletes the old one.",
    ),
    ("IAM", lambda r: "iam" in r.categories, None),
    ("Security groups", lambda r: "security-groups" in r.categories, None),
    ("Scaling", lambda r: "scaling" in r.categories, None),
)


def _code(text: Any) -> str:
    text = str(text).replace("`", "'").replace("\n", " ")
    return f"`{text}`"


def _value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return _code(text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…")


def _value_change(change: ValueChange) -> str:
    if change.change == "added":
        return f"{_code(change.path)} added: {_value(change.head)}"
    if change.change == "removed":
        return f"{_code(change.path)} removed (was {_value(change.base)})"
    return f"{_code(change.path)}: {_value(change.base)} → {_value(change.head)}"


def _what(r: ResourceChange) -> str:
    if r.replacement == "always":
        return "**replaced**"
    if r.replacement == "conditional":
        return "**may be replaced**"
    if r.action == "asset-update":
        return "image/model update"
    if r.action == "modified" and not r.changes and r.caused_by:
        return "updated in place"
    return r.action


def _name(r: ResourceChange) -> str:
    type_name = f"{r.base_type} → {r.type}" if r.base_type else r.type
    return f"{_code(r.stack + '/' + r.logical_id)} ({type_name})"


def _details(r: ResourceChange) -> list[str]:
    lines = [_value_change(c) for c in r.changes]
    lines += [
        f"{_code(c['path'])} refers to replaced {_code(c['logical_id'])}"
        for c in r.caused_by
        if c["path"] not in r.replacing_paths
    ]
    lines += [f"{_code(a.path)}: {a.kind} {_short(a.base_hash)} → {_short(a.head_hash)}" for a in r.asset_updates]
    return lines


def _short(digest: str | None) -> str:
    return _code(digest[:12] + "…") if digest else "?"


def _reasons(r: ResourceChange) -> str:
    """One clause per distinct reason, naming its paths: six changes under ContainerDefinitions read
    as one create-only property, not six."""
    paths: dict[str, list[str]] = {}
    for reason in r.replacement_reasons:
        paths.setdefault(reason["why"], [])
        if reason["path"]:
            paths[reason["why"]].append(reason["path"])
    clauses = []
    for why, found in paths.items():
        if not found:
            clauses.append(why)
            continue
        shown = ", ".join(_code(p) for p in found[:INLINE_PATHS])
        more = f" and {len(found) - INLINE_PATHS} more" if len(found) > INLINE_PATHS else ""
        clauses.append(f"{shown}{more} {'is' if len(found) == 1 else 'are'} {why}")
    return "; ".join(clauses)


def _kept(r: ResourceChange) -> str:
    if not r.kept_by_policy:
        return ""
    which = "kept" if r.action == "removed" else "old resource kept"
    return f" ({which}: {r.kept_by_policy})"


def _entry(r: ResourceChange) -> list[str]:
    flag = "🛑 **protected** " if r.protected and r.replacement else ("**protected** " if r.protected else "")
    head = f"- {flag}{_name(r)}: {_what(r)}{_kept(r)}"
    if r.replacement_reasons:
        head += ": " + _reasons(r)
    flagged = [c for c in r.classes if c in FLAGGED]
    classes = [f"  - classes: {', '.join(_code(c) for c in flagged)}"] if flagged else []
    details = [] if r.action in ("added", "removed") else _details(r)
    if len(details) <= INLINE_PATHS:
        return [head, *classes] + [f"  - {d}" for d in details]
    return [
        head,
        *classes,
        f"  <details><summary>{len(details)} changed properties</summary>",
        "",
        *[f"  - {d}" for d in details],
        "",
        "  </details>",
    ]


def _fold(summary: str, body: list[str]) -> list[str]:
    return [f"<details><summary>{summary}</summary>", "", *body, "", "</details>", ""]


def _section(title: str, entries: list[ResourceChange], note: str | None) -> list[str]:
    lines = [f"#### {title} ({len(entries)})", ""]
    if note:
        lines += [f"_{note}_", ""]
    # Consequential replacements (a subnet following its replaced VPC) are many and predictable: fold them.
    direct = [r for r in entries if not r.cascaded]
    cascaded = [r for r in entries if r.cascaded]
    body = [line for r in direct for line in _entry(r)]
    lines += _fold("show all", body) if len(direct) > FOLD_ENTRIES else body + [""]
    if cascaded:
        lines += _fold(
            f"{len(cascaded)} more, because they refer to a replaced resource",
            [line for r in cascaded for line in _entry(r)],
        )
    return lines


def _asset_section(entries: list[ResourceChange]) -> list[str]:
    lines = [
        f"#### Image/model updates ({len(entries)})",
        "",
        "_Only a CDK asset hash moved: a new container image, model artifact or bundled file._",
        "",
    ]
    for r in entries:
        for a in r.asset_updates:
            asset = f" ({a.asset})" if a.asset else ""
            lines.append(
                f"- {_name(r)}: new {a.kind}{asset} at {_code(a.path)}: "
                f"{_short(a.base_hash)} → {_short(a.head_hash)}"
                + (f" — **{_what(r).strip('*')}**" if r.replacement else "")
            )
    return lines + [""]


def _classes_section(env: EnvironmentDiff) -> list[str]:
    """Changes with a class CI may fail on (adds/removes aside), each with why."""
    entries = [r for r in env.resources if any(c in FLAGGED for c in r.classes)]
    if not entries:
        return []
    lines = [
        f"#### Change classes ({len(entries)})",
        "",
        "_What `--fail-on` matches besides `adds` and `removes`: a serving resource replaced, traffic "
        "interrupted, an autoscaled count reset to the template's, autoscaling paused for an update, a "
        "production listener rule rewritten._",
        "",
    ]
    body = []
    for r in entries:
        body.append(f"- {_name(r)}: {_what(r)}")
        body += [f"  - {_code(c)}: {r.class_reasons[c]}" for c in r.classes if c in FLAGGED]
    return lines + (_fold("show all", body) if len(entries) > FOLD_ENTRIES else body + [""])


def _summary(summary: StackSummary | None) -> list[str]:
    """A stack's capacity, IAM actions and cost as sub-items."""
    if summary is None:
        return []
    lines = []
    for c in summary.capacity:
        what = ", ".join(x for x in (c.instance_type and _code(c.instance_type), f"{c.range()} {c.unit}") if x)
        on = f" on {_code(c.on)}" if c.on else ""
        lines.append(f"  - capacity: {_code(c.resource)} ({c.kind}): {what}{on}")
    if not summary.capacity:
        lines.append("  - capacity: none (no Auto Scaling group, scalable target or endpoint config)")
    if summary.cost:
        lines.append(
            f"  - cost: ${summary.cost['usd_per_month_min']:,.0f}–${summary.cost['usd_per_month_max']:,.0f} "
            f"a month: {summary.cost_note}"
        )
    else:
        lines.append(f"  - cost: {summary.cost_note}")
    if summary.iam_actions:
        shown = ", ".join(_code(a) for a in summary.iam_actions[:MAX_ACTIONS])
        more = len(summary.iam_actions) - MAX_ACTIONS
        lines.append(
            f"  - IAM actions granted ({len(summary.iam_actions)}): {shown}"
            + (f" and {more} more (see the JSON report)" if more > 0 else "")
        )
    else:
        lines.append("  - IAM actions granted: none")
    if summary.denied_actions:
        lines.append(f"  - IAM actions denied: {', '.join(_code(a) for a in summary.denied_actions)}")
    if summary.managed_policies:
        lines.append(f"  - managed policies: {', '.join(_code(m) for m in summary.managed_policies)}")
    return lines


def _stack_line(stack: StackDiff, what: str = "") -> list[str]:
    return [
        f"- {_code(stack.name)} ({_code(stack.stack_name)}), {stack.resource_count} resources"
        + (f": {what}" if what else ""),
        *_summary(stack.summary),
    ]


def _new_stacks(env: EnvironmentDiff) -> list[str]:
    added = [s for s in env.stacks if s.status == "added"]
    if not added:
        return []
    lines = [f"#### New stacks ({len(added)})", ""]
    for stack in added:
        lines += _stack_line(stack)
    return lines + [""]


def _retirement(env: EnvironmentDiff) -> list[str]:
    """What a removal deletes, and what DeletionPolicy keeps."""
    retirement = env.retirement()
    if retirement is None:
        return []
    kept, deleted = len(retirement["kept"]), retirement["deleted"]
    lines = [
        f"#### Removed: what goes and what is kept ({deleted} deleted, {kept} kept)",
        "",
        f"_{ECR_IMAGES_NOTE}._",
        "",
    ]
    for stack in (s for s in env.stacks if s.status == "removed"):
        gone = [r for r in stack.resources if r.action == "removed"]
        kept_here = [r for r in gone if r.kept_by_policy]
        lines += _stack_line(
            stack, f"stack removed: {len(gone) - len(kept_here)} deleted, {len(kept_here)} kept (Retain)"
        )
        lines += [f"  - kept (Retain): {_name(r)}: {r.kept_by_policy}" for r in kept_here]
        ecr = [r for r in gone if r.type == "AWS::ECR::Repository" and not r.kept_by_policy]
        lines += [f"  - **deletes ECR repository {_code(r.logical_id)} and its images**" for r in ecr]
    single = [
        r for s in env.stacks if s.status != "removed" for r in s.resources if r.action == "removed" or r.replaces
    ]
    if single:
        lines += ["- removed from stacks that stay:"]
        for r in single:
            name = (
                _name(r)
                if not r.replaces
                else f"{_code(r.stack + '/' + r.replaces['logical_id'])} (logical ID changed to {_code(r.logical_id)})"
            )
            lines.append(f"  - {name}: " + (f"kept (Retain): {r.kept_by_policy}" if r.kept_by_policy else "deleted"))
    return lines + [""]


def _one_sided(env: EnvironmentDiff) -> list[str]:
    side = "head" if env.status == "only-in-base" else "base"
    lines = [
        f"### {env.note}",
        "",
        f"Not compared: its {len(env.stacks)} stack(s) are not counted as "
        f"{'removed' if side == 'head' else 'added'} and not flagged. Synthesize {_code(env.name)} in the "
        f"{side} as well to compare it, or leave it out with `--env`.",
        "",
    ]
    body = [line for stack in env.stacks for line in _stack_line(stack)]
    return lines + _fold(f"{len(env.stacks)} stack(s) of {env.name}", body)


def _table(env: EnvironmentDiff) -> list[str]:
    lines = [
        "| Stack | Status | Added | Removed | Modified | Replaced | Image/model updates | Protected |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for stack in env.stacks:
        c = counts(stack.resources)
        lines.append(
            f"| {stack.name} | {stack.status} | {c['added']} | {c['removed']} | {c['modified']} | "
            f"{c['replaced']} | {c['asset_updates']} | {c['protected']} |"
        )
    return lines + [""]


def _environment(env: EnvironmentDiff) -> list[str]:
    if not env.compared:
        return _one_sided(env)
    lines = [f"### {env.name}: {env.status}", "", *_table(env)]
    if env.status == "unchanged":
        return lines + ["No changes.", ""]
    for warning in env.warnings:
        lines += [f"> [!WARNING]\n> {warning}", ""]
    lines += _classes_section(env)
    shown: set[int] = set()
    for title, wanted, note in SECTIONS:
        entries = [r for r in env.resources if wanted(r)]
        if entries:
            lines += _section(title, entries, note)
            shown.update(id(r) for r in entries)
    assets = [r for r in env.resources if r.asset_updates]
    if assets:
        lines += _asset_section(assets)
        shown.update(id(r) for r in assets if r.action == "asset-update")
    lines += _new_stacks(env)
    lines += _retirement(env)
    rest = [r for r in env.resources if id(r) not in shown]
    if rest:
        lines += _section("Other changes", rest, None)
    template = [(s.name, c) for s in env.stacks for c in s.template_changes]
    if template:
        lines += [f"#### Template changes ({len(template)})", ""]
        lines += _fold("Outputs, parameters, conditions", [f"- {s}: {_value_change(c)}" for s, c in template])
    return lines


def render(report: Report, *, diagrams: list[str] | None = None) -> str:
    c = counts(report.resources)
    lines = [
        "## Infrastructure diff",
        "",
        f"Base {_code(report.base)} → head {_code(report.head)}: {c['added']} added, {c['removed']} removed, "
        f"{c['modified']} modified, {c['replaced']} replaced, {c['asset_updates']} image/model updates.",
        "",
    ]
    classes = class_counts(report.resources)
    lines += ["Change classes: " + ", ".join(f"{_code(k)} {v}" for k, v in classes.items()) + ".", ""]
    if report.selected:
        lines += [f"Environments compared (`--env`): {', '.join(_code(e) for e in report.selected)}.", ""]
    one_sided = report.one_sided()
    if one_sided:
        lines += (
            ["> [!NOTE]"]
            + [f"> - {e.note}: not compared, its {len(e.stacks)} stack(s) not counted" for e in one_sided]
            + [""]
        )
    protected = report.protected_replacements()
    if protected:
        lines += ["> [!CAUTION]", f"> **{len(protected)} protected resource(s) would be replaced:**"]
        lines += [f"> - {_code(f'{env}/{r.stack}/{r.logical_id}')} ({r.type})" for env, r in protected]
        lines += [""]
    for env in report.environments:
        lines += _environment(env)
    if diagrams:
        lines += ["#### Diagrams", "", *[f"- {d}" for d in diagrams], ""]
    return "\n".join(lines).rstrip() + "\n"
