"""Parallel synth (inferstack/synthesis/shards.py): the shard plan, the merge of cloud assemblies, and the
proof that matters: app.py in shards writes the same cloud assembly as app.py in one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from inferstack.synthesis import shards as synth_shards
from inferstack.synthesis.shards import Shard, merge, merge_reports, plan_shards, publish, run_shards, worker_count
from tests.support.cli import assert_nothing_written, cdk_env, run
from tests.support.paths import ROOT
from tests.support.shards import shard_assembly

ENVS = ["dev", "staging", "prod"]
MODELS = ["a", "b", "c", "d"]


# -- the plan -------------------------------------------------------------------------------


def test_shards_are_contiguous_slices_in_synth_order():
    shards = plan_shards(ENVS, MODELS, 2, head_start=0)
    assert [s.models for s in shards] == [
        {"dev": ["a", "b", "c", "d"], "staging": ["a", "b"]},
        {"staging": ["c", "d"], "prod": ["a", "b", "c", "d"]},
    ]


@pytest.mark.parametrize("workers", [1, 2, 3, 5, 12, 50])
@pytest.mark.parametrize("head_start", [0, 1, 3])
def test_every_stack_lands_in_exactly_one_shard(workers, head_start):
    shards = plan_shards(ENVS, MODELS, workers, head_start=head_start)
    assert len(shards) == min(workers, len(ENVS) * len(MODELS))
    flat = [(env, m) for s in shards for env, models in s.models.items() for m in models]
    assert flat == [(env, m) for env in ENVS for m in MODELS]
    assert all(s.models for s in shards)


@pytest.mark.parametrize(
    ("stacks", "workers", "sizes"),
    [
        (300, 2, [170, 130]),  # the first shard's process is already started: it takes `head_start` more
        (300, 3, [126, 87, 87]),
        (81, 2, [60, 21]),
        (50, 2, [45, 5]),
        (12, 2, [11, 1]),  # asked for two: the head start shrinks so that the second gets a stack
    ],
)
def test_the_first_shard_takes_the_start_up_of_the_others_in_stacks(stacks, workers, sizes):
    shards = plan_shards(["dev"], [f"m{i}" for i in range(stacks)], workers, head_start=40)
    assert [len(s.models["dev"]) for s in shards] == sizes


def test_a_fleets_models_stay_in_one_shard_first_in_their_environment():
    """A neuron-cores fleet's members are served by one stack, which the stage builds before the models' own:
    they come first in each environment and a slice that would end inside them ends after them."""
    together = {env: [["c", "b"]] for env in ENVS}
    shards = plan_shards(ENVS, MODELS, 2, head_start=0, together=together)
    assert [s.models for s in shards] == [
        {"dev": ["c", "b", "a", "d"], "staging": ["c", "b"]},
        {"staging": ["a", "d"], "prod": ["c", "b", "a", "d"]},
    ]
    # Four even slices of 12 end after stacks 3, 6 and 9; the 9th is the first of prod's fleet (c, b): that
    # slice ends after the fleet instead.
    shards = plan_shards(ENVS, MODELS, 4, head_start=0, together=together)
    assert [s.models for s in shards] == [
        {"dev": ["c", "b", "a"]},
        {"dev": ["d"], "staging": ["c", "b"]},
        {"staging": ["a", "d"], "prod": ["c", "b"]},
        {"prod": ["a", "d"]},
    ]
    for workers in range(1, 13):
        for shard in plan_shards(ENVS, MODELS, workers, head_start=1, together=together):
            for models in shard.models.values():
                assert ("b" in models) == ("c" in models), (workers, shard)


def test_every_fleet_deployed_in_an_environment_stays_together_there():
    """An inference-components fleet's members keep their own stacks, but those and the fleet's stack reference
    each other (the endpoint's role and security group, a stack dependency): one app, like a neuron-cores
    fleet's. Where the fleet does not deploy (triton-shared: dev only), its models are on their own."""
    from inferstack import config
    from stacks.app_builder import shard_groups
    from tests.support.paths import CONFIG_DIR

    project = config.load(CONFIG_DIR)
    groups = shard_groups(project, ["dev", "staging"])
    assert ["bert-large-classifier", "t5-spelling"] in groups["dev"]
    assert ["bert-large-classifier", "t5-spelling"] not in groups["staging"]
    assert all(list(project.fleets[name].models) in groups["dev"] for name in project.fleets_in("dev"))


def test_an_environment_without_models_still_gets_its_foundation():
    assert [s.models for s in plan_shards(ENVS, [], 4)] == [{"dev": [], "staging": [], "prod": []}]


def test_worker_count_auto_keeps_small_fleets_in_one_process():
    per_shard = synth_shards.MIN_STACKS_PER_SHARD
    assert per_shard >= 2 * synth_shards.STARTUP_STACKS  # a second process must save more than it costs
    assert worker_count(None, stacks=9, cpus=8) == 1
    assert worker_count("auto", stacks=2 * per_shard - 1, cpus=8) == 1
    assert worker_count("auto", stacks=2 * per_shard, cpus=8) == 2
    assert worker_count("auto", stacks=20 * per_shard, cpus=2) == 2  # never more than the CPUs
    assert worker_count("3", stacks=3, cpus=1) == 3  # an explicit count is taken as given
    assert worker_count(4, stacks=3, cpus=1) == 4


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity API on this platform")
def test_auto_counts_the_cpus_this_process_may_use_not_the_machines():
    # Under `taskset` or a container's cpuset, os.cpu_count() still reports every CPU of the machine.
    child = (
        "import os\n"
        "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "from inferstack.synthesis import shards as synth_shards\n"
        "print(synth_shards.available_cpus(), synth_shards.worker_count('auto', stacks=10_000))"
    )
    result = subprocess.run([sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "1"]
    assert synth_shards.available_cpus() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5", "", 0])
def test_worker_count_rejects_anything_but_a_positive_integer_or_auto(bad):
    with pytest.raises(ValueError, match=r"^-c inferstack:synth-workers: expected a positive integer or auto"):
        worker_count(bad, stacks=100, cpus=2)


def test_shard_round_trips_and_rejects_malformed_specs():
    shard = Shard({"dev": ["a"], "prod": []})
    assert Shard.from_json(shard.to_json(), ENVS, MODELS) == shard
    for bad in ('{"models": ["a"]}', '{"models": {"dev": "a"}}', "[]", '{"models": {"dev": [1]}}', "{not json"):
        with pytest.raises(ValueError, match=rf"^{synth_shards.SHARD_ENV}: expected"):
            Shard.from_json(bad, ENVS, MODELS)
    with pytest.raises(ValueError, match=r"unknown environment or model qa, zz$"):
        Shard.from_json('{"models": {"qa": ["a"], "dev": ["zz"]}}', ENVS, MODELS)


# -- the merge ------------------------------------------------------------------------------


def test_merge_joins_a_split_environment_in_synth_order(tmp_path):
    one = shard_assembly(tmp_path / "s0", "dev", {"Foundation": "F", "a": "A"})
    two = shard_assembly(tmp_path / "s1", "dev", {"Foundation": "F", "b": "B"})
    out = tmp_path / "out"
    out.mkdir()
    merge([one, two], out)
    manifest = json.loads((out / "assembly-dev" / "manifest.json").read_text())
    assert list(manifest["artifacts"]) == ["Foundation", "a", "b"]
    assert (out / "assembly-dev" / "b.template.json").read_text() == "B"
    tree = json.loads((out / "tree.json").read_text())["tree"]
    assert list(tree["children"]) == ["dev", "Tree"]
    assert list(tree["children"]["dev"]["children"]) == ["Foundation", "a", "b"]
    assert (out / "asset.abc" / "Dockerfile").exists()


def test_merge_stops_when_shards_disagree_on_a_shared_file(tmp_path):
    one = shard_assembly(tmp_path / "s0", "dev", {"Foundation": "F", "a": "A"})
    two = shard_assembly(tmp_path / "s1", "dev", {"Foundation": "F-different", "b": "B"})
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(synth_shards.ShardsDisagree, match=r"^synth shards disagree on Foundation\.template\.json: "):
        merge([one, two], out)


def test_publish_replaces_what_an_earlier_synth_left_and_keeps_the_rest(tmp_path):
    out = tmp_path / "out"
    (out / "assembly-dev").mkdir(parents=True)
    (out / "assembly-dev" / "gone.template.json").write_text("stale")
    (out / "manifest.json").write_text("old")
    (out / "unrelated.txt").write_text("kept")
    merged = tmp_path / "merged"
    merged.mkdir()
    merge([shard_assembly(tmp_path / "s0", "dev", {"Foundation": "F"})], merged)
    publish(merged, out)
    assert sorted(p.name for p in (out / "assembly-dev").iterdir()) == ["Foundation.template.json", "manifest.json"]
    assert json.loads((out / "manifest.json").read_text())["artifacts"]["assembly-dev"]["type"] == "cdk:cloud-assembly"
    assert (out / "unrelated.txt").read_text() == "kept"
    assert list(merged.iterdir()) == []


def test_disagreeing_shards_fail_the_synth_and_leave_the_output_alone(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text("previous synth")

    def synth_here(shard, outdir):
        shard_assembly(outdir, "dev", {"Foundation": "F", "a": "A"})
        return 0

    child = (
        f"import os, sys; from pathlib import Path; sys.path.insert(0, {str(ROOT)!r});"
        "from tests.support.shards import shard_assembly;"
        "shard_assembly(Path(os.environ['CDK_OUTDIR']), 'dev', {'Foundation': 'F-different', 'b': 'B'})"
    )
    with pytest.raises(synth_shards.ShardsDisagree):
        run_shards(plan_shards(["dev"], ["a", "b"], 2, head_start=0), out, [sys.executable, "-c", child], synth_here)
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"]
    assert (out / "manifest.json").read_text() == "previous synth"


def test_merged_report_keeps_each_finding_once_and_any_failure():
    finding = {"ruleName": "R1", "violatingConstructs": [{"constructPath": "dev/Foundation/X", "stackTraces": ["k1"]}]}
    same_elsewhere = {**finding, "violatingConstructs": [{"constructPath": "dev/Foundation/X", "stackTraces": ["k2"]}]}
    other = {"ruleName": "R2", "violatingConstructs": [{"constructPath": "dev/a/Y"}]}
    reports = [
        {
            "version": "55.0.0",
            "pluginReports": [
                {"pluginName": "P", "conclusion": "success", "violations": [], "suppressedViolations": [finding]}
            ],
        },
        {
            "version": "55.0.0",
            "pluginReports": [
                {
                    "pluginName": "P",
                    "conclusion": "failure",
                    "violations": [other],
                    "suppressedViolations": [same_elsewhere],
                }
            ],
        },
    ]
    merged = merge_reports(reports)["pluginReports"]
    assert [p["conclusion"] for p in merged] == ["failure"]
    assert merged[0]["suppressedViolations"] == [finding]
    assert merged[0]["violations"] == [other]


def test_a_failing_shard_fails_the_synth_and_leaves_the_output_alone(tmp_path, capsys):
    out = tmp_path / "out"

    def synth_here(shard, outdir):
        shard_assembly(outdir, "dev", {"Foundation": "F"})
        return 0

    argv = [sys.executable, "-c", "import sys; print('shard broke: reason', file=sys.stderr); sys.exit(3)"]
    with pytest.raises(synth_shards.ShardFailed) as failed:
        run_shards(plan_shards(["dev"], ["a", "b"], 2, head_start=0), out, argv, synth_here)
    assert failed.value.exit_code == 3
    assert "shard broke: reason" in capsys.readouterr().err
    assert list(out.iterdir()) == []  # no manifest, no shard directory left behind


# -- app.py ---------------------------------------------------------------------------------


def _normalized(outdir: Path) -> dict[str, object]:
    """Every file of a cloud assembly; metadata and the validation report without the stack traces
    (they name each process's own jsii kernel directory, so two serial synths differ there too)."""
    files = {}
    for path in sorted(p for p in outdir.rglob("*") if p.is_file()):
        name = path.relative_to(outdir).as_posix()
        if name.endswith(".metadata.json"):
            files[name] = synth_shards._without_traces(json.loads(path.read_text()))
        elif name == synth_shards.REPORT:
            report = json.loads(path.read_text())
            files[name] = [
                (
                    p["pluginName"],
                    p["conclusion"],
                    sorted(synth_shards._finding_key(v) for v in p["violations"]),
                    sorted(synth_shards._finding_key(v) for v in p["suppressedViolations"]),
                )
                for p in report["pluginReports"]
            ]
        else:
            files[name] = path.read_bytes()
    return files


def test_app_in_parallel_shards_writes_what_one_process_writes(tmp_path):
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    one = run("app.py", env=cdk_env(serial, pipeline="false", **{"inferstack:synth-workers": "1"}))
    assert one.returncode == 0, one.stderr
    two = run("app.py", env=cdk_env(parallel, pipeline="false", **{"inferstack:synth-workers": "2"}))
    assert two.returncode == 0, two.stderr
    assert "synthesized 15 serving stacks in 2 parallel shards" in two.stderr  # 5 models x 3 environments
    assert "parallel shards" not in one.stderr
    expected, actual = _normalized(serial), _normalized(parallel)
    assert sorted(actual) == sorted(expected)
    assert [name for name in expected if actual[name] != expected[name]] == []


def test_app_rejects_a_bad_worker_count_in_one_line(tmp_path):
    outdir = tmp_path / "cdk.out"
    result = run("app.py", env=cdk_env(outdir, pipeline="false", **{"inferstack:synth-workers": "many"}))
    assert result.returncode == 2
    assert result.stderr.strip() == "-c inferstack:synth-workers: expected a positive integer or auto, got 'many'"
    assert_nothing_written(outdir)


def test_app_rejects_a_malformed_shard_spec_in_one_line(tmp_path):
    outdir = tmp_path / "cdk.out"
    result = run("app.py", env={**cdk_env(outdir), synth_shards.SHARD_ENV: "not json at all"})
    assert result.returncode == 2
    assert synth_shards.SHARD_ENV in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert_nothing_written(outdir)
