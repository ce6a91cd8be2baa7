"""Synth at fleet scale: generate N model configs (mixed kinds) in a temporary copy of model_configs/,
synthesize every environment with `cdk synth` (the CDK CLI, as `make synth` runs it; `--via app` runs
app.py alone, without the CLI's own start-up), and print per N the wall time, peak memory of the synth
process tree, stack count, the largest resource count per stack and the largest template, checked
against CloudFormation's per-template limits.

Each N runs twice, side by side: in one process (`-c inferstack:synth-workers=1`, the baseline) and
as `cdk synth` does by default (`auto`: parallel shards once the fleet is big enough to pay for them,
inferstack/synthesis/shards.py). `x N=1` is each mode's time over its own time for the smallest N.

`--floor` adds, per N, two floors for the same templates (benchmarks/synth_floor.py), each checked to
write exactly the real app's templates: `L1 floor`, every resource a raw CfnResource (a Python design
rendering L1s from plain values), and `template floor`, each template handed to the CDK in one call
(the least any CDK app can do: what is left is the CDK's own work per template), in one process and
split between one process per CPU (not merged afterwards, so a lower bound). Their `x N=1` is over
their own smallest N in one process: a design at a floor would start up at the floor too. `--cpus K` runs
everything on K of this machine's CPUs (auto shards follow), to see how synth scales with cores.

    .venv/bin/python benchmarks/synth_scale.py                 # N = 1, 10, 100, 300
    .venv/bin/python benchmarks/synth_scale.py --counts 1 100 --floor
    .venv/bin/python benchmarks/synth_scale.py --counts 1 10   # a quicker run
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

# The benchmarks beside this one, flat on the path (ruff would sort them in with the third-party ones).
# isort: split
import synth_floor

ROOT = Path(__file__).resolve().parent.parent
# CloudFormation quotas per template (docs: "CloudFormation quotas").
LIMITS = {"resources": 500, "template_bytes": 1_000_000, "parameters": 200, "outputs": 200}
TEMPLATES = {"neuron-ecs": "intent-bert.yaml", "triton-sagemaker": "bert-large-classifier.yaml"}


@dataclass
class Result:
    mode: str
    models: int
    seconds: float
    peak_rss_mib: float
    stacks: int
    max_resources: int
    max_template_kib: float
    max_parameters: int
    max_outputs: int
    over_limits: list[str]


def write_configs(target: Path, count: int) -> None:
    """`count` models alternating between the two kinds, each a renamed copy of a shipped model.

    The CDK pipeline is left out: it deploys an environment in one CodePipeline stage, which holds at
    most 23 models (config validation rejects more), so a fleet beyond that deploys with the CLI."""
    environments = yaml.safe_load((ROOT / "model_configs" / "environments.yaml").read_text())
    environments.pop("pipeline", None)
    environments.pop("fleets", None)  # they name the shipped models, which the copies are not
    (target / "environments.yaml").write_text(yaml.safe_dump(environments, sort_keys=False))
    kinds = list(TEMPLATES.values())
    for i in range(count):
        data = yaml.safe_load((ROOT / "model_configs" / kinds[i % len(kinds)]).read_text())
        data["name"] = f"model-{i:03d}"
        (target / f"model-{i:03d}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def _tree_rss_kib(pid: int) -> int:
    """Resident memory of `pid` and all its descendants (python app.py + the jsii node process)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            status = (entry / "status").read_text()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss[int(entry.name)] = int(line.split()[1])
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        total += rss.get(current, 0)
        stack.extend(children.get(current, []))
    return total


def synth(count: int, workdir: Path, workers: str, via: str, cpus: set[int] | None) -> Result:
    config_dir = workdir / f"configs-{count}"
    outdir = workdir / f"cdk.out-{count}-{workers}"
    if not config_dir.exists():
        config_dir.mkdir()
        write_configs(config_dir, count)
    context = {"inferstack:config-dir": str(config_dir), "inferstack:synth-workers": workers}
    seconds, peak_mib, printed = run_app([sys.executable, "app.py"], context, outdir, via, cpus)
    shards = re.search(r"in (\d+) parallel shards", printed)
    mode = "serial" if workers == "1" else f"{workers}: {shards.group(1) if shards else 1} proc"
    return measure(mode, count, seconds, peak_mib, outdir)


@dataclass(frozen=True)
class Floor:
    mode: str  # the row's name
    templates: bool  # synth_floor.py --templates: one CfnInclude per stack
    parts: int  # processes side by side
    baseline: str  # whose smallest N its `x N=1` is over


def floors(cpus: int) -> list[Floor]:
    """The L1 floor in one process; the template floor in one, and in one per CPU as auto shards run
    (over the one-process N=1: like auto, a sharded design would synthesize one model in one process)."""
    found = [Floor("L1 floor", False, 1, "L1 floor"), Floor("template floor", True, 1, "template floor")]
    return found + ([Floor(f"template: {cpus} proc", True, cpus, "template floor")] if cpus > 1 else [])


def floor(count: int, workdir: Path, source: Path, via: str, cpus: set[int] | None, kind: Floor) -> Result:
    """The same templates as `source` (an assembly of `count` models) from the floor app, its stacks
    split between `kind.parts` processes run side by side (their outputs are not merged: a lower bound)."""
    parts = kind.parts
    outdirs = [
        workdir / f"cdk.out-{count}-{kind.mode.replace(' ', '-').replace(':', '')}-{part}" for part in range(parts)
    ]
    flags = ["--templates"] if kind.templates else []
    start = time.perf_counter()
    with ThreadPoolExecutor(parts) as pool:
        runs = list(
            pool.map(
                lambda part: run_app(
                    [
                        sys.executable,
                        str(ROOT / "benchmarks" / "synth_floor.py"),
                        *flags,
                        str(source),
                        f"{part}/{parts}",
                    ],
                    {},
                    outdirs[part],
                    via,
                    cpus,
                ),
                range(parts),
            )
        )
    seconds = time.perf_counter() - start
    differ = synth_floor.differing_templates(source, *outdirs)
    if differ:
        raise SystemExit(f"the {kind.mode} app wrote different templates for {', '.join(differ[:5])}")
    # Each process's own peak, summed: at most what they held together.
    return measure(kind.mode, count, seconds, sum(peak for _, peak, _ in runs), *outdirs)


def run_app(
    app: list[str], context: dict[str, str], outdir: Path, via: str, cpus: set[int] | None
) -> tuple[float, float, str]:
    """Synthesize `app` into `outdir` with the CDK CLI (`via` "cli") or as the CLI runs it (cdk.json's
    context in CDK_CONTEXT_JSON). Returns the wall time, the process tree's peak memory (MiB) and what it
    printed (stdout and stderr together: with CI=true the CLI prints on stdout)."""
    env = {
        **os.environ,
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        "PATH": os.pathsep.join(
            [str(ROOT / "node_modules" / ".bin"), str(Path(sys.executable).parent), os.environ["PATH"]]
        ),
    }
    if via == "cli":
        command = ["cdk", "synth", "--quiet", "--output", str(outdir), "--app", subprocess.list2cmdline(app)]
        for key, value in context.items():
            command += ["--context", f"{key}={value}"]
    else:
        command = app
        env |= {
            "CDK_OUTDIR": str(outdir),
            "CDK_CONTEXT_JSON": json.dumps(json.loads((ROOT / "cdk.json").read_text())["context"] | context),
        }
    start = time.perf_counter()
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    )
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss_kib(proc.pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    printed, _ = proc.communicate()
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"synth of {' '.join(app)} into {outdir} failed:\n{printed}")
    return seconds, peak / 1024, printed


def measure(mode: str, count: int, seconds: float, peak_mib: float, *outdirs: Path) -> Result:
    templates = sorted(t for outdir in outdirs for t in outdir.glob("**/*.template.json"))
    sizes, resources, parameters, outputs, over = [], [], [], [], []
    for path in templates:
        template = json.loads(path.read_text())
        figures = {
            "resources": len(template.get("Resources", {})),
            "template_bytes": path.stat().st_size,
            "parameters": len(template.get("Parameters", {})),
            "outputs": len(template.get("Outputs", {})),
        }
        over += [f"{path.name}: {k} {v} > {LIMITS[k]}" for k, v in figures.items() if v > LIMITS[k]]
        sizes.append(figures["template_bytes"])
        resources.append(figures["resources"])
        parameters.append(figures["parameters"])
        outputs.append(figures["outputs"])
    return Result(
        mode,
        count,
        seconds,
        peak_mib,
        len(templates),
        max(resources),
        max(sizes) / 1024,
        max(parameters),
        max(outputs),
        over,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 10, 100, 300])
    parser.add_argument(
        "--workers",
        nargs="+",
        default=["1", "auto"],
        help="inferstack:synth-workers values to compare (1 = one process, the baseline)",
    )
    parser.add_argument(
        "--via",
        choices=["cli", "app"],
        default="cli",
        help="cli: `cdk synth` (the default); app: app.py alone, as the CLI runs it",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also synthesize each N's templates at two floors (synth_floor.py): as raw "
        "CfnResources, and one CfnInclude per template (in one process and one per CPU)",
    )
    parser.add_argument("--cpus", type=int, help="run on this many of the CPUs this process may use")
    args = parser.parse_args()
    if any(c < 1 for c in args.counts):
        parser.error("--counts: every N must be at least 1")
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    if args.cpus is not None and (allowed is None or not 1 <= args.cpus <= len(allowed)):
        parser.error(
            f"--cpus: expected 1 to {len(allowed) if allowed else 'the CPUs'} "
            f"(the CPUs this process may use), got {args.cpus}"
        )
    cpus = set(allowed[: args.cpus]) if args.cpus else None
    floor_kinds = floors(len(cpus or allowed or [])) if args.floor else []

    print(
        f"cpus: {len(cpus or allowed or []) or os.cpu_count()}; via {args.via}; "
        f"load average before: {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'models':>6} {'mode':>16} {'stacks':>6} {'wall s':>8} {'x N=1':>6} {'peak MiB':>9} {'max res':>7} "
        f"{'max KiB':>8} {'max par':>7} {'max out':>7}  limits"
    )
    baselines: dict[str, float] = {}

    def show(r: Result, baseline: str) -> None:
        baselines.setdefault(baseline, r.seconds)
        print(
            f"{r.models:>6} {r.mode:>16} {r.stacks:>6} {r.seconds:>8.1f} {r.seconds / baselines[baseline]:>6.2f} "
            f"{r.peak_rss_mib:>9.0f} {r.max_resources:>7} {r.max_template_kib:>8.1f} "
            f"{r.max_parameters:>7} {r.max_outputs:>7}  {'; '.join(r.over_limits) or 'OK'}",
            flush=True,
        )

    with tempfile.TemporaryDirectory() as tmp:
        for count in args.counts:
            for workers in args.workers:
                show(synth(count, Path(tmp), workers, args.via, cpus), workers)
            for kind in floor_kinds:
                source = Path(tmp) / f"cdk.out-{count}-{args.workers[0]}"
                show(floor(count, Path(tmp), source, args.via, cpus, kind), kind.baseline)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
