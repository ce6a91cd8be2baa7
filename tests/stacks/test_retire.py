"""Retiring a model or a fleet member (docs/how-to/retire-a-model.md): removing a dedicated
model's file, or a member's file together with its fleet membership, removes that one stack from the synth
and changes no other template; `inferstack diff` reports the stack as removed (`removes`) and what its
removal deletes and keeps. The shared stacks stay as they are: the foundation exports every shareable value
whether a model uses it or not, and an inference-components fleet's stack exports only what its remaining
members still import.

dev only; each assembly is synthesized once per module (the shipped one is shared with test_diff)."""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from inferstack import config
from tests.support import review_assemblies
from tests.support.cli import run
from tests.support.paths import CONFIG_DIR
from tests.support.synth import synth

MODEL = "intent-bert-inf2"  # dev's one model on instances of its own
FLEET, MEMBER, REMAINING = "triton-shared", "t5-spelling", "bert-large-classifier"
NEURON_FLEET, NEURON_MEMBER, NEURON_REMAINING = "intent-pack", "duplicate-bert", "intent-bert"


def _edited_configs(tmp_path_factory, name: str, edit: Callable[[Path], None]) -> Path:
    configs = tmp_path_factory.mktemp(f"{name}-configs") / "model_configs"
    shutil.copytree(CONFIG_DIR, configs)
    edit(configs)
    return configs


def _synth(tmp_path_factory, name: str, edit: Callable[[Path], None]) -> Path:
    configs = _edited_configs(tmp_path_factory, name, edit)
    outdir = tmp_path_factory.mktemp(name)
    synth(config.load(configs), ["dev"], outdir)
    return outdir


def _edit_environments(configs: Path, change: Callable[[dict], None]) -> None:
    path = configs / "environments.yaml"
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def retire_model(configs: Path) -> None:
    (configs / f"{MODEL}.yaml").unlink()


def retire_member(configs: Path) -> None:
    """Retiring a fleet member is both: its file goes, and it leaves the fleet's `models:` (either alone is
    something else: the file alone is a validate error, the membership alone moves the model to an endpoint
    of its own)."""
    (configs / f"{MEMBER}.yaml").unlink()
    _edit_environments(configs, lambda data: data["fleets"][FLEET]["models"].remove(MEMBER))


def retire_neuron_member(configs: Path) -> None:
    """One of intent-pack's two members retired: the other stays on the fleet, now of one member."""
    (configs / f"{NEURON_MEMBER}.yaml").unlink()
    _edit_environments(configs, lambda data: data["fleets"][NEURON_FLEET]["models"].remove(NEURON_MEMBER))


def dissolve_neuron_fleet(configs: Path) -> None:
    """The fleet's entry removed, both model files kept: each member moves to a stack of its own."""
    _edit_environments(configs, lambda data: data["fleets"].pop(NEURON_FLEET))


def keep_stateful_resources(configs: Path) -> None:
    """dev as staging and prod run: `retain_stateful_resources: true` (log groups, buckets, keys are Retain)."""
    _edit_environments(
        configs, lambda data: data["environments"]["dev"]["defaults"].update(retain_stateful_resources=True)
    )


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return review_assemblies.base(tmp_path_factory)


@pytest.fixture(scope="module")
def model_retired(tmp_path_factory) -> Path:
    return _synth(tmp_path_factory, "model-retired", retire_model)


@pytest.fixture(scope="module")
def member_retired(tmp_path_factory) -> Path:
    return _synth(tmp_path_factory, "member-retired", retire_member)


@pytest.fixture(scope="module")
def neuron_member_retired(tmp_path_factory) -> Path:
    return _synth(tmp_path_factory, "neuron-member-retired", retire_neuron_member)


@pytest.fixture(scope="module")
def neuron_fleet_dissolved(tmp_path_factory) -> Path:
    return _synth(tmp_path_factory, "neuron-fleet-dissolved", dissolve_neuron_fleet)


@pytest.fixture(scope="module")
def kept_base(tmp_path_factory) -> Path:
    return _synth(tmp_path_factory, "kept-base", keep_stateful_resources)


@pytest.fixture(scope="module")
def kept_model_retired(tmp_path_factory) -> Path:
    return _synth(tmp_path_factory, "kept-model-retired", lambda c: (keep_stateful_resources(c), retire_model(c)))


# ------------------------------------------------------------------------------------------ the assemblies


def stack_files(outdir: Path, env: str = "dev") -> dict[str, dict[str, bytes]]:
    """Stack id ("Foundation", a model, a fleet) -> its template and asset manifest files, as bytes."""
    nested = outdir / f"assembly-{env}"
    artifacts = json.loads((nested / "manifest.json").read_text())["artifacts"]
    stacks = {}
    for artifact_id, artifact in artifacts.items():
        if artifact["type"] != "aws:cloudformation:stack":
            continue
        names = [artifact["properties"]["templateFile"], f"{artifact_id}.assets.json"]
        stacks[artifact["displayName"].split("/", 1)[1]] = {n: (nested / n).read_bytes() for n in names}
    return stacks


def template(outdir: Path, stack: str) -> dict:
    (text,) = [v for k, v in stack_files(outdir)[stack].items() if k.endswith(".template.json")]
    return json.loads(text)


def _import_names(node) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Fn::ImportValue" and isinstance(value, str):
                yield value
            else:
                yield from _import_names(value)
    elif isinstance(node, list):
        for value in node:
            yield from _import_names(value)


def exports_only_imported_by(outdir: Path, exporter: str, importer: str) -> dict[str, str]:
    """Output key -> export name, of `exporter`'s exports that `importer` imports and no other stack does."""
    stacks = stack_files(outdir)
    imported = {name: set(_import_names(template(outdir, name))) for name in stacks if name != exporter}
    others = set().union(*(names for name, names in imported.items() if name != importer))
    outputs = template(outdir, exporter).get("Outputs", {})
    return {
        key: out["Export"]["Name"]
        for key, out in outputs.items()
        if "Export" in out and out["Export"]["Name"] in imported[importer] - others
    }


# ------------------------------------------------------------------------------------------ the templates


def test_removing_a_model_file_removes_its_stack_and_nothing_else(base, model_retired):
    before, after = stack_files(base), stack_files(model_retired)
    assert set(after) == set(before) - {MODEL}
    for stack, files in after.items():
        assert files == before[stack], f"{stack} changed when {MODEL} was retired"


def test_retiring_a_fleet_member_removes_its_stack_and_only_its_exports_from_the_fleet(base, member_retired):
    before, after = stack_files(base), stack_files(member_retired)
    assert set(after) == set(before) - {MEMBER}
    for stack, files in after.items():
        if stack != FLEET:
            assert files == before[stack], f"{stack} changed when {MEMBER} left {FLEET}"
    # The fleet's stack loses exactly the exports the member alone imported (CDK exports a value only while
    # another stack references it), and nothing else.
    only_its = exports_only_imported_by(base, FLEET, MEMBER)
    expected = copy.deepcopy(template(base, FLEET))
    for key in only_its:
        del expected["Outputs"][key]
    assert template(member_retired, FLEET) == expected
    # Every member imports the same exports of the fleet (the endpoint's name, its security group and its
    # execution role), so today the fleet's stack does not change at all.
    fleet_exports = {out["Export"]["Name"] for out in template(base, FLEET)["Outputs"].values() if "Export" in out}
    member_imports = set(_import_names(template(base, MEMBER))) & fleet_exports
    assert len(member_imports) == 3 and member_imports == set(_import_names(template(base, REMAINING))) & fleet_exports
    assert only_its == {}
    assert after[FLEET] == before[FLEET]


def test_retiring_one_of_two_neuron_fleet_members_leaves_the_other_where_its_callers_find_it(
    base, neuron_member_retired
):
    """The fleet keeps its stack, load balancer, listener and the remaining member's target groups and production
    rule (same logical ids, same properties); only the member's own resources go, and no stack is added."""
    before, after = stack_files(base), stack_files(neuron_member_retired)
    assert set(after) == set(before)
    old, new = template(base, NEURON_FLEET)["Resources"], template(neuron_member_retired, NEURON_FLEET)["Resources"]
    member, port = (
        NEURON_MEMBER.replace("-", ""),
        "8081",
    )  # its own resources, and the security groups' rules on its port
    assert set(old) - set(new) and all(
        member in k
        or (old[k]["Type"] in ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress") and port in k)
        for k in set(old) - set(new)
    )
    assert set(new) <= set(old)  # nothing new: no replacement, no new address
    kept_types = (
        "AWS::ElasticLoadBalancingV2::LoadBalancer",
        "AWS::ElasticLoadBalancingV2::Listener",
        "AWS::ElasticLoadBalancingV2::TargetGroup",
        "AWS::ElasticLoadBalancingV2::ListenerRule",
    )
    kept = [k for k, r in new.items() if r["Type"] in kept_types]
    assert len(kept) == 2 + 3  # load balancer, listener; the remaining member's two target groups and its rule
    assert all(new[k] == old[k] for k in kept if new[k]["Type"] != "AWS::ElasticLoadBalancingV2::Listener")
    outputs = template(neuron_member_retired, NEURON_FLEET)["Outputs"]
    assert outputs["Url"] == template(base, NEURON_FLEET)["Outputs"]["Url"]
    assert json.loads(outputs["ModelPaths"]["Value"]) == {NEURON_REMAINING: f"/v2/models/{NEURON_REMAINING}"}


# ------------------------------------------------------------------------------------------ inferstack diff


def diff_json(base_dir: Path, head_dir: Path) -> dict:
    result = run("-m", "inferstack", "diff", str(base_dir), str(head_dir), "--format", "json")
    assert result.returncode == 0, result.stderr
    (dev,) = json.loads(result.stdout)["environments"]
    return dev


def diff_markdown(base_dir: Path, head_dir: Path) -> str:
    result = run("-m", "inferstack", "diff", str(base_dir), str(head_dir))
    assert result.returncode == 0, result.stderr
    return result.stdout


def _removed_alone(dev: dict, removed: str, base_dir: Path) -> dict:
    """The removed stack's entry, after checking every other stack is unchanged and the counts add up."""
    stacks = {s["name"]: s for s in dev["stacks"]}
    assert {n: s["status"] for n, s in stacks.items() if n != removed} == {
        n: "unchanged" for n in stack_files(base_dir) if n != removed
    }
    stack = stacks[removed]
    resources = template(base_dir, removed)["Resources"]
    assert (stack["status"], stack["classes"], stack["stack_name"]) == ("removed", ["removes"], f"dev-{removed}")
    assert stack["counts"]["removed"] == stack["resource_count"] == len(resources) == dev["counts"]["removed"]
    assert dev["counts"] | {"removed": 0} == {
        "added": 0,
        "removed": 0,
        "modified": 0,
        "replaced": 0,
        "asset_updates": 0,
        "protected": dev["counts"]["protected"],
    }
    assert dev["class_counts"] == {
        "replaces-serving-resource": 0,
        "interrupts-traffic": 0,
        "resets-scaled-count": 0,
        "pauses-autoscaling": 0,
        "touches-production-rule": 0,
        "adds": 0,
        "removes": len(resources),
    }
    assert dev["retirement"]["removed_stacks"] == [removed]
    return stack


@pytest.mark.parametrize("retired, removed", [("model_retired", MODEL), ("member_retired", MEMBER)])
def test_diff_reports_the_retired_stack_removed_and_its_log_group_deleted_in_dev(request, base, retired, removed):
    head = request.getfixturevalue(retired)
    dev = diff_json(base, head)
    stack = _removed_alone(dev, removed, base)
    # dev keeps nothing (retain_stateful_resources: false): its log group has DeletionPolicy: Delete.
    resources = template(base, removed)["Resources"]
    log_groups = {k for k, r in resources.items() if r["Type"] == "AWS::Logs::LogGroup"}
    assert log_groups and all(resources[k]["DeletionPolicy"] == "Delete" for k in log_groups)
    assert (dev["retirement"]["kept"], dev["retirement"]["deleted"]) == ([], len(resources))
    by_id = {r["logical_id"]: r for r in stack["resources"]}
    assert all(by_id[k]["action"] == "removed" and by_id[k]["kept_by_policy"] is None for k in log_groups)
    assert "ECR images are never deleted by a stack removal" in dev["retirement"]["ecr_images"]
    markdown = diff_markdown(base, head)
    assert f"| {removed} | removed | 0 | {len(resources)} |" in markdown
    assert (
        f"- `{removed}` (`dev-{removed}`), {len(resources)} resources: stack removed: {len(resources)} "
        f"deleted, 0 kept (Retain)"
    ) in markdown


def test_diff_lists_what_a_retirement_keeps_by_policy(kept_base, kept_model_retired):
    dev = diff_json(kept_base, kept_model_retired)
    _removed_alone(dev, MODEL, kept_base)
    resources = template(kept_base, MODEL)["Resources"]
    retained = {k: r for k, r in resources.items() if r.get("DeletionPolicy") in ("Retain", "RetainExceptOnCreate")}
    # with retain_stateful_resources: true, the model's log group and its load balancer's access-log bucket
    assert sorted((r["Type"], r["DeletionPolicy"]) for r in retained.values()) == [
        ("AWS::Logs::LogGroup", "Retain"),
        ("AWS::S3::Bucket", "Retain"),
    ]
    assert dev["retirement"]["kept"] == [
        {"stack": MODEL, "logical_id": k, "type": r["Type"], "policy": f"DeletionPolicy: {r['DeletionPolicy']}"}
        for k, r in sorted(retained.items())
    ]
    assert dev["retirement"]["deleted"] == len(resources) - len(retained)
    markdown = diff_markdown(kept_base, kept_model_retired)
    (log_group,) = [k for k, r in retained.items() if r["Type"] == "AWS::Logs::LogGroup"]
    assert f"  - kept (Retain): `{MODEL}/{log_group}` (AWS::Logs::LogGroup): DeletionPolicy: Retain" in markdown
    assert (f"stack removed: {len(resources) - len(retained)} deleted, {len(retained)} kept (Retain)") in markdown


def test_diff_fails_a_ci_job_on_a_retirement_when_asked(base, member_retired):
    result = run("-m", "inferstack", "diff", str(base), str(member_retired), "--fail-on", "removes")
    assert result.returncode == 3, result.stderr
    assert (
        [line for line in result.stderr.splitlines() if line.startswith("fail-on:")]
        == [line for line in result.stderr.splitlines() if line.startswith(f"fail-on: dev/{MEMBER}")]
        != []
    )


def test_diff_says_loudly_when_a_model_that_still_serves_changes_address(base, neuron_fleet_dissolved):
    """The fleet's entry removed while both members stay: each moves to a stack of its own, with a new load balancer.
    The fleet's load balancer goes while its models still serve: interrupts-traffic, counted, and a warning per
    model naming where it is served now."""
    dev = diff_json(base, neuron_fleet_dissolved)
    stacks = {s["name"]: s for s in dev["stacks"]}
    assert stacks[NEURON_FLEET]["status"] == "removed"
    assert stacks[NEURON_FLEET]["classes"] == ["interrupts-traffic", "removes"]
    assert {stacks[m]["status"] for m in (NEURON_MEMBER, NEURON_REMAINING)} == {"added"}
    (balancer,) = [
        r for r in stacks[NEURON_FLEET]["resources"] if r["type"] == "AWS::ElasticLoadBalancingV2::LoadBalancer"
    ]
    assert "interrupts-traffic" in balancer["classes"]
    assert "is still served (by" in balancer["class_reasons"]["interrupts-traffic"]
    assert dev["class_counts"]["interrupts-traffic"] >= 1
    moved = [w for w in dev["warnings"] if "'s address changes:" in w]
    assert sorted(w.split("'s address changes:")[0] for w in moved) == [NEURON_MEMBER, NEURON_REMAINING]
    assert all(f"while {w.split(chr(39))[0]} serves" in w for w in moved)
    failed = run("-m", "inferstack", "diff", str(base), str(neuron_fleet_dissolved), "--fail-on", "interrupts-traffic")
    assert failed.returncode == 3 and f"fail-on: dev/{NEURON_FLEET}: stack removed" in failed.stderr


def test_diff_of_a_member_retired_from_a_neuron_fleet_moves_no_address(base, neuron_member_retired):
    dev = diff_json(base, neuron_member_retired)
    stacks = {s["name"]: s for s in dev["stacks"]}
    assert stacks[NEURON_FLEET]["status"] == "modified"
    assert not [w for w in dev["warnings"] if "address changes" in w]
    balancers = [
        r for r in stacks[NEURON_FLEET]["resources"] if r["type"] == "AWS::ElasticLoadBalancingV2::LoadBalancer"
    ]
    assert balancers == []  # the load balancer is not even touched
