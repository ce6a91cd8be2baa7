"""One Graphviz diagram per environment from the synthesized construct tree (tree.json): stacks as
clusters, library-level constructs (L2/L3, not every L1 inside them) as nodes labelled with their
resource type, and an edge for every cross-stack reference (Fn::ImportValue of another stack's export).
Output is sorted, so the same assembly always gives the same DOT text."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferstack.review.assembly import ROOT_ENVIRONMENT, Assembly, Environment, Stack
from inferstack.review.changes import EnvironmentDiff

# Fill colours for what the diff says happens to a node's resources (worst first).
# (Removed resources are not in the head's tree, so they have no colour.)
CHANGE_COLOURS = {"replaced": "#f4b6b6", "added": "#c8e6c9", "modified": "#fff0b3"}
_RANK = {name: i for i, name in enumerate(CHANGE_COLOURS)}
GROUPING_FQNS = ("constructs.Construct",)  # plain constructs: this project's L3s written in Python
GROUP_AT = 4  # this many sibling constructs of one class (alarms, endpoints) become one node


@dataclass(frozen=True)
class Written:
    environment: str
    dot: Path
    svg: Path | None
    note: str  # why there is no SVG, or ""


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _fqn(node: dict) -> str:
    return (node.get("constructInfo") or {}).get("fqn", "")


def _class_fqn(node: dict) -> str:
    """What a node is drawn as. A plain construct holding only an L1 named "Resource" (an L1 placed where
    its L2 would put it, to keep the L2's logical id) is drawn as that L1, like an L2 with its Resource."""
    children = node.get("children") or {}
    if _fqn(node) in GROUPING_FQNS and list(children) == ["Resource"] and _is_l1(_fqn(children["Resource"])):
        return _fqn(children["Resource"])
    return _fqn(node)


def _is_l1(fqn: str) -> bool:
    return fqn.rsplit(".", 1)[-1].startswith("Cfn")


def _short_fqn(fqn: str) -> str:
    return fqn.removeprefix("aws-cdk-lib.").removeprefix("aws_")


class _Builder:
    def __init__(self, env: Environment, env_diff: EnvironmentDiff | None) -> None:
        self.env = env
        # construct path -> (stack, logical id, type) of every resource in the templates
        self.resources: dict[str, tuple[Stack, str, str]] = {}
        for stack in env.stacks.values():
            for logical_id, resource in stack.resources.items():
                path = stack.construct_path(logical_id)
                if path:
                    self.resources[path] = (stack, logical_id, str(resource.get("Type", "")))
        self.status: dict[tuple[str, str], str] = {}
        for change in env_diff.resources if env_diff else []:
            if change.action == "removed":
                continue
            status = "replaced" if change.replacement else change.action.replace("asset-update", "modified")
            self.status[(change.stack, change.logical_id)] = status
        self.owner: dict[tuple[str, str], str] = {}  # (stack, logical id) -> diagram node id
        self.lines: list[str] = []

    def _under(self, path: str) -> list[tuple[Stack, str, str]]:
        return [r for p, r in sorted(self.resources.items()) if p == path or p.startswith(path + "/")]

    def _emit(self, group: list[dict], node_id: str, indent: str) -> None:
        """One diagram node for `group` (one construct, or same-class siblings folded together)."""
        found = [r for member in group for r in self._under(member["path"])]
        fqn = _short_fqn(_class_fqn(group[0])) or "CfnResource"
        if len(group) == 1:
            primary = self._primary_type(group[0], found)
            label = f"{group[0]['id']}\n{fqn}\n{primary}"
            if len(found) > 1:
                label += f" (+{len(found) - 1} more)"
        else:
            names = ", ".join(m["id"] for m in group[:GROUP_AT]) + (", …" if len(group) > GROUP_AT else "")
            label = f"{len(group)} × {fqn}\n{self._primary_type(group[0], found)}\n{names}"
        ranks = [self.status[(s.name, lid)] for s, lid, _ in found if (s.name, lid) in self.status]
        attrs = f"label={_quote(label)}"
        if ranks:
            attrs += f", fillcolor={_quote(CHANGE_COLOURS[min(ranks, key=_RANK.__getitem__)])}"
        self.lines.append(f"{indent}{_quote(node_id)} [{attrs}];")
        for stack, logical_id, _ in found:
            self.owner[(stack.name, logical_id)] = node_id

    def _primary_type(self, node: dict, found: list[tuple[Stack, str, str]]) -> str:
        # An L2 keeps its main L1 as a direct child: "Resource" by convention ("Default" for custom
        # resources), else the one its class is named after (ecs.Ec2Service -> AWS::ECS::Service).
        path = node["path"]
        for candidate in (f"{path}/Resource", f"{path}/Default", path):
            if candidate in self.resources:
                return self.resources[candidate][2]
        direct = sorted(
            t for p, (_, _, t) in self.resources.items() if p.startswith(path + "/") and "/" not in p[len(path) + 1 :]
        )
        class_name = _fqn(node).rsplit(".", 1)[-1].lower()
        for type_name in direct:
            if type_name.rsplit("::", 1)[-1].lower() in class_name:
                return type_name
        if direct:
            return direct[0]
        return Counter(t for _, _, t in found).most_common(1)[0][0]

    def _children(self, node: dict, indent: str) -> None:
        leaves: list[dict] = []
        for child in sorted((node.get("children") or {}).values(), key=lambda c: c["id"]):
            if not self._under(child["path"]):
                continue  # outputs, parameters, asset staging: nothing deployed
            fqn = _class_fqn(child)
            if fqn in GROUPING_FQNS and child.get("children"):
                bearing = [c for c in child["children"].values() if self._under(c["path"])]
                if len(bearing) > 1:
                    self.lines.append(f"{indent}subgraph {_quote('cluster_' + child['path'])} {{")
                    self.lines.append(f"{indent}  label={_quote(child['id'])}; style=dashed;")
                    self._children(child, indent + "  ")
                    self.lines.append(f"{indent}}}")
                else:
                    self._children(child, indent)
            else:
                leaves.append(child)  # an L2/L3 (not descended into) or a lone L1
        by_class: dict[str, list[dict]] = {}
        for leaf in leaves:
            by_class.setdefault(_class_fqn(leaf), []).append(leaf)
        for leaf in leaves:
            siblings = by_class[_class_fqn(leaf)]
            if len(siblings) < GROUP_AT:
                self._emit([leaf], leaf["path"], indent)
            elif leaf is siblings[0]:
                self._emit(siblings, f"{node['path']}/*{_short_fqn(_class_fqn(leaf))}", indent)

    def build(self, stage: dict | None, title: str) -> str:
        head = [
            f"// {title}: generated by `python -m inferstack diff` from the synthesized assembly",
            f"digraph {_quote(title)} {{",
            f"  graph [rankdir=LR, compound=true, fontname=Helvetica, fontsize=12, labelloc=t, label={_quote(title)}];",
            '  node [shape=box, style="rounded,filled", fillcolor=white, fontname=Helvetica, fontsize=10];',
            '  edge [fontname=Helvetica, fontsize=9, color="#555555"];',
        ]
        for name, stack in sorted(self.env.stacks.items()):
            tree_node = self._stack_node(stage, name)
            self.lines.append(f"  subgraph {_quote('cluster_' + name)} {{")
            self.lines.append(f"    label={_quote(f'{name} ({stack.stack_name})')}; style=rounded;")
            if tree_node is not None:
                self._children(tree_node, "    ")
            self.lines.append("  }")
        edge_lines = []
        for source, target, labels in self._edges():
            edge_lines.append(f"  {_quote(source)} -> {_quote(target)} [label={_quote(labels)}];")
        legend = self._legend() if self.status else []
        return "\n".join(head + self.lines + edge_lines + legend + ["}"]) + "\n"

    def _stack_node(self, stage: dict | None, name: str) -> dict | None:
        return ((stage or {}).get("children") or {}).get(name)

    def _edges(self) -> list[tuple[str, str, str]]:
        exports: dict[str, tuple[str, str, str]] = {}  # export name -> (stack, referenced logical id, attribute)
        for stack in self.env.stacks.values():
            for output in (stack.template.get("Outputs") or {}).values():
                name = (output.get("Export") or {}).get("Name")
                referenced = _reference(output.get("Value"))
                if isinstance(name, str) and referenced:
                    exports[name] = (stack.name, *referenced)
        edges: dict[tuple[str, str], set[str]] = {}
        for stack in self.env.stacks.values():
            for logical_id, resource in stack.resources.items():
                for name in _imports(resource):
                    if name not in exports:
                        continue
                    target_stack, target_id, attribute = exports[name]
                    source = self.owner.get((stack.name, logical_id))
                    target = self.owner.get((target_stack, target_id))
                    if source and target and target_stack != stack.name:
                        edges.setdefault((source, target), set()).add(attribute)
        return [(s, t, ", ".join(sorted(labels))) for (s, t), labels in sorted(edges.items())]

    def _legend(self) -> list[str]:
        rows = "".join(f'<TR><TD BGCOLOR="{colour}">{name}</TD></TR>' for name, colour in CHANGE_COLOURS.items())
        return [
            '  subgraph "cluster_legend" {',
            '    label="change in this diff"; style=dotted;',
            f'    "legend" [shape=plain, style="", label=<<TABLE BORDER="0" CELLBORDER="1">{rows}</TABLE>>];',
            "  }",
        ]


def _reference(value: Any) -> tuple[str, str] | None:
    """(logical id, attribute) of an export value written as Ref or Fn::GetAtt."""
    if isinstance(value, dict) and len(value) == 1:
        key, arg = next(iter(value.items()))
        if key == "Ref" and isinstance(arg, str):
            return arg, "Ref"
        if key == "Fn::GetAtt":
            parts = arg if isinstance(arg, list) else str(arg).split(".", 1)
            if len(parts) == 2:
                return str(parts[0]), str(parts[1])
    return None


def _imports(value: Any) -> list[str]:
    if isinstance(value, dict):
        if set(value) == {"Fn::ImportValue"} and isinstance(value["Fn::ImportValue"], str):
            return [value["Fn::ImportValue"]]
        return [n for item in value.values() for n in _imports(item)]
    if isinstance(value, list):
        return [n for item in value for n in _imports(item)]
    return []


def build(assembly: Assembly, env_name: str, env_diff: EnvironmentDiff | None = None) -> str:
    """The DOT source for one environment of `assembly`, its changed nodes coloured from `env_diff`."""
    env = assembly.environments[env_name]
    tree = assembly.tree or {}
    stage = tree if env_name == ROOT_ENVIRONMENT else (tree.get("children") or {}).get(env_name)
    return _Builder(env, env_diff).build(stage, f"inferstack {env_name}")


def render_svg(dot_path: Path) -> tuple[Path | None, str]:
    """Render next to the DOT file when Graphviz is installed; otherwise say why not."""
    dot = shutil.which("dot")
    if dot is None:
        return None, "SVG not rendered: graphviz `dot` is not on PATH"
    svg = dot_path.with_suffix(".svg")
    result = subprocess.run([dot, "-Tsvg", "-o", str(svg), str(dot_path)], capture_output=True, text=True)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no message"])[-1]
        return None, f"SVG not rendered: dot failed: {last}"
    return svg, ""


def file_name(env_name: str) -> str:
    return "app" if env_name == ROOT_ENVIRONMENT else env_name
