"""Parallel synth for large fleets: split the (environment, model) stacks into shards, synthesize each
shard in its own process (one jsii kernel each, so they really run in parallel), and merge the shards'
cloud assemblies into the one directory `cdk synth` reads.

A CDK app in Python is a ping-pong between the interpreter and one Node.js kernel, so a single synth
uses about one core however many the machine has, and costs about 0.12 s per stack. Shards are
contiguous slices of the stacks in synth order; a shard that holds part of an environment builds that
environment's foundation too (its template does not depend on the models: the foundation pre-exports
every shared value), so every shard is a valid app on its own. The merge checks that files written by
several shards are identical and reproduces the serial layout: the same files, manifests and tree,
artifacts in the serial order. The pipeline stack needs every stage in one app, so an app with the
pipeline always synthesizes serially (and its fleet is small: at most 23 models)."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferstack.atomic_write import write_text

SHARD_ENV = "INFERSTACK_SYNTH_SHARD"
# A child process's start-up (Python imports, the Node.js kernel loading aws-cdk-lib, the config, the
# CloudFormation validation engine: about 4.5 s; the Triton images come resolved from the parent) costs
# as much as synthesizing this many serving stacks. The first shard runs in app.py's own process,
# already started, so it takes that many more stacks; and a second process pays off only for fleets
# well past twice that.
STARTUP_STACKS = 25
MIN_STACKS_PER_SHARD = 2 * STARTUP_STACKS
MANIFEST = "manifest.json"
TREE = "tree.json"
REPORT = "validation-report.json"  # the policy validation report (cdk-nag, CloudFormation Validate)
# A cloud assembly's JSON (manifest, tree, report), read and merged key by key.
JsonObject = dict[str, Any]


class ShardsDisagree(RuntimeError):
    """Two shards wrote different content for the same file: the app is not deterministic."""


class ShardFailed(RuntimeError):
    """A shard's synth failed; it printed why (the CDK's findings, or a one-line error) to stderr."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(f"a synth shard exited {exit_code}")
        self.exit_code = exit_code


@dataclass(frozen=True)
class Shard:
    """Which models of which environments one process synthesizes, in synth order."""

    models: dict[str, list[str]]  # environment -> model names

    def to_json(self) -> str:
        return json.dumps({"models": self.models})

    @classmethod
    def from_json(cls, text: str, environments: Sequence[str], models: Sequence[str]) -> Shard:
        """Raises ValueError naming the variable when the spec is malformed or names an unknown
        environment or model."""
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        spec = data.get("models") if isinstance(data, dict) else None
        if not isinstance(spec, dict) or not all(
            isinstance(v, list) and all(isinstance(m, str) for m in v) for v in spec.values()
        ):
            raise ValueError(f'{SHARD_ENV}: expected {{"models": {{env: [model, ...]}}}}, got {text[:80]!r}')
        unknown = [e for e in spec if e not in environments] + sorted(
            {m for names in spec.values() for m in names if m not in models}
        )
        if unknown:
            raise ValueError(f"{SHARD_ENV}: unknown environment or model {', '.join(unknown)}")
        return cls(spec)


def worker_count(requested: str | int | None, stacks: int, cpus: int | None = None) -> int:
    """`requested`: the `inferstack:synth-workers` context, a positive number or "auto" (the default):
    one worker per CPU, fewer when the fleet is too small to pay for the extra processes."""
    cpus = cpus or available_cpus()
    if requested in (None, "auto"):
        return max(1, min(cpus, stacks // MIN_STACKS_PER_SHARD))
    try:
        value = int(requested)
    except (TypeError, ValueError):
        value = 0
    if value < 1 or str(requested).strip() != str(value):
        raise ValueError(f"-c inferstack:synth-workers: expected a positive integer or auto, got {requested!r}")
    return value


def available_cpus() -> int:
    """The CPUs this process may run on: a container or `taskset` can allow fewer than the machine has."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # no affinity API (macOS)
        return os.cpu_count() or 1


def plan_shards(
    env_names: Sequence[str],
    model_names: Sequence[str] | Mapping[str, Sequence[str]],
    workers: int,
    head_start: int = STARTUP_STACKS,
    together: Mapping[str, Sequence[Sequence[str]]] | None = None,
) -> list[Shard]:
    """`workers` contiguous slices (fewer if there are fewer stacks) of the environment-major list of
    serving stacks, sized so all finish together: the first (synthesized in the already started
    process) takes `head_start` more than each other one. `model_names`: the models of every environment,
    or environment -> the models deployed there (a model file's `deploy_in`). Only a fleet without models
    leaves an environment out of every slice: then one shard builds the foundations.

    `together`: environment -> groups of models that one stack serves there (a neuron-cores fleet's members).
    A group comes first in its environment, in the given order, as the stage builds fleet stacks before the
    models' own, and never straddles two shards: a slice that would end inside a group ends after it."""
    groups = {env: [list(g) for g in (together or {}).get(env, ())] for env in env_names}
    units: list[tuple[str, list[str]]] = []  # (environment, models one shard must hold together)
    for env in env_names:
        grouped = {m for group in groups[env] for m in group}
        units += [(env, group) for group in groups[env]]
        deployed = model_names[env] if isinstance(model_names, Mapping) else model_names
        units += [(env, [m]) for m in deployed if m not in grouped]
    stacks = [(env, model) for env, models in units for model in models]
    if not stacks:
        return [Shard({env: [] for env in env_names})]
    count = max(1, min(workers, len(stacks)))
    # Every shard gets at least one stack: a small fleet split on request gets a smaller head start.
    head = min(head_start, (len(stacks) - count) // (count - 1)) if count > 1 else 0
    first = len(stacks) if count == 1 else (len(stacks) + (count - 1) * head) // count
    rest = stacks[first:]
    bounds = [0, first] + [first + (i + 1) * len(rest) // (count - 1) for i in range(count - 1)]
    ends, position = set(), 0  # where a slice may end: after a whole unit
    for _, models in units:
        position += len(models)
        ends.add(position)
    bounds = sorted({min(e for e in ends if e >= b) if b else 0 for b in bounds})
    shards = []
    for start, end in itertools.pairwise(bounds):
        held: dict[str, list[str]] = {}
        for env, model in stacks[start:end]:
            held.setdefault(env, []).append(model)
        shards.append(Shard(held))
    return shards


def run_shards(
    shards: Sequence[Shard], outdir: Path, argv: Sequence[str], synth_here: Callable[[Shard, Path], int]
) -> None:
    """Synthesize the first shard in this process with `synth_here(shard, outdir)` (its Python and
    Node.js start-up is already paid) and every other one with `argv` (this app, run again) in parallel,
    then merge them and move the result into `outdir`, its manifest.json last. Raises ShardFailed with the
    first failing shard's exit code, or ShardsDisagree; `outdir` is then left as it was."""
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".shards-", dir=outdir) as tmp:
        dirs = [Path(tmp) / f"shard-{i}" for i in range(len(shards))]

        def synth_child(index: int) -> subprocess.CompletedProcess[str]:
            env = {**os.environ, SHARD_ENV: shards[index].to_json(), "CDK_OUTDIR": str(dirs[index])}
            # The CLI's performance counters are one process's; shards would overwrite each other's.
            env.pop("CDK_PERF_COUNTERS_FILE", None)
            return subprocess.run(list(argv), env=env, capture_output=True, text=True)

        with ThreadPoolExecutor(max_workers=max(1, len(shards) - 1)) as pool:
            children = [pool.submit(synth_child, i) for i in range(1, len(shards))]
            here = synth_here(shards[0], dirs[0])
            results = [child.result() for child in children]
        seen: set[str] = set()
        for result in results:  # each child's warnings once, in shard order
            for line in result.stderr.splitlines():
                if line not in seen:
                    seen.add(line)
                    print(line, file=sys.stderr)
        if here != 0:
            raise ShardFailed(here)
        for result in results:
            if result.returncode != 0:
                raise ShardFailed(result.returncode)
        merged = Path(tmp) / "merged"
        merged.mkdir()
        merge(dirs, merged)
        publish(merged, outdir)
    stacks = sum(len(models) for shard in shards for models in shard.models.values())
    print(f"inferstack: synthesized {stacks} serving stacks in {len(shards)} parallel shards", file=sys.stderr)


def merge(shard_dirs: Sequence[Path], outdir: Path) -> None:
    """Move the shards' assemblies into the empty directory `outdir`, with one manifest.json, tree.json
    and validation report for all of them."""
    manifests = [json.loads((d / MANIFEST).read_text()) for d in shard_dirs]
    trees = [json.loads((d / TREE).read_text()) for d in shard_dirs]
    reports = [json.loads((d / REPORT).read_text()) for d in shard_dirs if (d / REPORT).exists()]
    nested = {name for m in manifests for name, a in m["artifacts"].items() if a["type"] == "cdk:cloud-assembly"}
    for shard in shard_dirs:
        for entry in sorted(shard.iterdir()):
            if entry.name in (MANIFEST, TREE, REPORT):
                continue
            target = outdir / entry.name
            if entry.name in nested and target.exists():
                _merge_nested(entry, target)
            else:
                _place(entry, target)
    if reports:
        write_text(outdir / REPORT, json.dumps(merge_reports(reports), indent=2))
    write_text(outdir / TREE, json.dumps(_merge_trees(trees), separators=(",", ":")))
    write_text(outdir / MANIFEST, json.dumps(_merge_manifests(manifests), indent=2))


def publish(merged: Path, outdir: Path) -> None:
    """Move a merged assembly into `outdir`, replacing what an earlier synth left under the same names
    (as the CDK overwrites its output); manifest.json, which the CLI reads first, goes last."""
    for entry in sorted(merged.iterdir(), key=lambda e: e.name == MANIFEST):
        target = outdir / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
        entry.rename(target)


def merge_reports(reports: Sequence[JsonObject]) -> JsonObject:
    """One report as a serial synth writes it: per plugin, the shards' findings in shard (so synth)
    order, those of a foundation that several shards built once; failed if it failed in any shard."""
    merged = {k: v for k, v in reports[0].items() if k != "pluginReports"}
    plugins: dict[str, JsonObject] = {}
    for report in reports:
        for plugin in report.get("pluginReports", []):
            into = plugins.setdefault(plugin["pluginName"], {**plugin, "violations": [], "suppressedViolations": []})
            if plugin.get("conclusion") == "failure":
                into["conclusion"] = "failure"
            for key in ("violations", "suppressedViolations"):
                known = {_finding_key(v) for v in into[key]}
                into[key].extend(v for v in plugin.get(key, []) if _finding_key(v) not in known)
    merged["pluginReports"] = list(plugins.values())
    return merged


def _finding_key(violation: JsonObject) -> str:
    """A finding without its stack traces, which name each process's own jsii kernel directory."""
    constructs = [{k: v for k, v in c.items() if k != "stackTraces"} for c in violation.get("violatingConstructs", [])]
    return json.dumps({**violation, "violatingConstructs": constructs}, sort_keys=True)


def _merge_nested(source: Path, target: Path) -> None:
    """A later shard's part of an environment: its stacks' files join the earlier shard's."""
    for entry in sorted(source.iterdir()):
        if entry.name != MANIFEST:
            _place(entry, target / entry.name)
    merged = _merge_manifests(
        [json.loads((target / MANIFEST).read_text()), json.loads((source / MANIFEST).read_text())]
    )
    write_text(target / MANIFEST, json.dumps(merged, indent=2))


def _place(source: Path, target: Path) -> None:
    """Move `source` to `target`. What another shard placed there already (a shared foundation's
    template, an asset staged by several shards) must be the same, or the merge stops."""
    if not target.exists():
        source.rename(target)
    elif source.name.startswith("asset.") and source.is_dir() and target.is_dir():
        pass  # staged assets are content-addressed: the name is the hash of the content
    elif not (source.is_file() and target.is_file() and _same_content(source, target)):
        raise ShardsDisagree(f"synth shards disagree on {target.name}: the app is not deterministic")


def _same_content(a: Path, b: Path) -> bool:
    """Byte-identical, except that a stack's metadata may carry stack traces (acknowledgements'; creation
    stacks with `cdk synth --debug`), which name each process's own jsii kernel directory: those are left
    out of the comparison (the first shard's stay)."""
    if a.read_bytes() == b.read_bytes():
        return True
    if not a.name.endswith(".metadata.json"):
        return False
    return _without_traces(json.loads(a.read_text())) == _without_traces(json.loads(b.read_text()))


def _without_traces(metadata: JsonObject) -> JsonObject:
    return {
        path: [
            {k: v for k, v in entry.items() if k != "trace"}
            for entry in entries
            if entry.get("type") != "aws:cdk:creationStack"
        ]
        for path, entries in metadata.items()
    }


def _merge_manifests(manifests: Sequence[JsonObject]) -> JsonObject:
    """The first manifest with every other's artifacts added in order (missing ones only) and their
    `missing` context entries combined."""
    merged: JsonObject = json.loads(json.dumps(manifests[0]))
    artifacts = dict(merged["artifacts"])
    order = list(artifacts)
    for manifest in manifests[1:]:
        for name, artifact in manifest["artifacts"].items():
            if name not in artifacts:
                artifacts[name] = artifact
                order.append(name)
            elif artifact != artifacts[name]:
                raise ShardsDisagree(f"synth shards disagree on artifact {name}: the app is not deterministic")
        for entry in manifest.get("missing", []):
            if entry not in merged.setdefault("missing", []):
                merged["missing"].append(entry)
    # The serial layout: nested assemblies and stacks in synth order, then the tree and the reports.
    trailing = [n for n in order if artifacts[n]["type"] in ("cdk:tree", "cdk:feature-flag-report")]
    leading = [n for n in order if n not in trailing]
    merged["artifacts"] = {n: artifacts[n] for n in leading + trailing}
    return merged


def _merge_trees(trees: Sequence[JsonObject]) -> JsonObject:
    merged: JsonObject = json.loads(json.dumps(trees[0]))
    for tree in trees[1:]:
        _merge_node(merged["tree"], tree["tree"])
    # Keep the App's children in synth order: the stages, then the Tree construct.
    children = merged["tree"].get("children", {})
    tail = {k: children[k] for k in children if k == "Tree"}
    merged["tree"]["children"] = {**{k: v for k, v in children.items() if k != "Tree"}, **tail}
    return merged


def _merge_node(into: JsonObject, other: JsonObject) -> None:
    for name, child in other.get("children", {}).items():
        if name in into.setdefault("children", {}):
            _merge_node(into["children"][name], child)
        else:
            into["children"][name] = child
