"""`release` on a real synthesized assembly (dev only, once): image assets with their build definition
and destination, file-asset hashes, canonical config hash, commit, versions; deterministic bytes; every
bad input one line, exit 2, nothing written."""

from __future__ import annotations

import json
import subprocess

import pytest

from inferstack import cli, config
from inferstack.delivery import release
from tests.support.cli import run
from tests.support.paths import CONFIG_DIR, ROOT
from tests.support.synth import synth

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def cdk_out(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("cdk.out")
    synth(config.load(CONFIG_DIR), ["dev"], outdir)
    return outdir


def write_manifest(capsys, cdk_out, out, *extra: str) -> tuple[int, str]:
    code = cli.main(["release", "--cdk-out", str(cdk_out), "--out", str(out), *extra])
    return code, capsys.readouterr().err


def test_manifest_records_assets_config_commit_and_versions(cdk_out, tmp_path, capsys):
    out = tmp_path / "release.json"
    code, err = write_manifest(capsys, cdk_out, out, "--commit", COMMIT)
    assert code == 0, err
    manifest = json.loads(out.read_text())
    assert manifest["format"] == "inferstack-release/1"
    assert manifest["commit"] == COMMIT
    assert manifest["config_sha256"] == release.config_sha256(CONFIG_DIR)
    assert manifest["versions"]["aws-cdk-lib"] == "2.275.0"
    assert set(manifest["versions"]) == {"aws-cdk-lib", "cloud_assembly_schema", "minimum_cdk_cli", "inferstack"}
    stacks = manifest["environments"]["dev"]["stacks"]
    assert set(stacks) == {
        "Foundation",
        "bert-large-classifier",
        "intent-bert-inf2",
        "intent-pack",
        "t5-spelling",
        "triton-shared",
    }
    # the shared endpoint's stack builds no image: each member's stack builds its own, promoted per model
    assert stacks["triton-shared"]["images"] == []
    assert [i["build_args"]["TRITON_BASE_IMAGE"] for i in stacks["bert-large-classifier"]["images"]]

    # a neuron-cores fleet's stack: one image holds every member (MODELS), keyed by the fleet's name
    (neuron,) = stacks["intent-pack"]["images"]
    assert neuron["dockerfile"] == "Dockerfile.inf1"
    assert neuron["build_args"]["NEURON_TARGET"] == "inf1"
    assert [m["name"] for m in json.loads(neuron["build_args"]["MODELS"])] == ["intent-bert", "duplicate-bert"]
    assert neuron["repository"] == "cdk-hnb659fds-container-assets-111111111111-us-east-1"
    assert neuron["tag"] == neuron["asset_id"] and len(neuron["asset_id"]) == 64
    assert neuron["image_uri"] == f"111111111111.dkr.ecr.us-east-1.amazonaws.com/{neuron['repository']}:{neuron['tag']}"
    assert neuron["digest"] is None
    assert release.model_images(manifest, "intent-pack") == [neuron]
    assert release.model_images(manifest, "intent-bert") == []  # members have no image of their own
    (triton,) = stacks["t5-spelling"]["images"]
    assert triton["dockerfile"] == "container/triton/Dockerfile"
    assert json.loads(triton["build_args"]["TRITON_REPOSITORY_SPEC"])["name"] == "t5-spelling"
    # dev deletes its buckets' objects on teardown: the handler code is a file asset, named by its hash.
    files = stacks["intent-pack"]["files"]
    assert files and all(f["sha256"] == f["asset_id"] and f["packaging"] == "zip" for f in files)
    assert stacks["intent-pack"]["stack_name"] == "dev-intent-pack"


def test_manifest_is_deterministic_with_sorted_keys(cdk_out, tmp_path, capsys):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    assert write_manifest(capsys, cdk_out, first, "--commit", COMMIT)[0] == 0
    assert write_manifest(capsys, cdk_out, second, "--commit", COMMIT)[0] == 0
    assert first.read_bytes() == second.read_bytes()
    text = first.read_text()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"


def test_commit_defaults_to_git_head(cdk_out, tmp_path, capsys):
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    out = tmp_path / "release.json"
    assert write_manifest(capsys, cdk_out, out)[0] == 0  # pytest runs in the repository
    assert json.loads(out.read_text())["commit"] == head


def test_config_hash_ignores_formatting_but_not_values(config_copy):
    before = release.config_sha256(config_copy)
    path = config_copy / "intent-bert.yaml"
    path.write_text("# a new comment\n" + path.read_text())
    (config_copy / "releases").mkdir()
    (config_copy / "releases" / "staging.yaml").write_text("ignored: true\n")  # promotion output, not input
    assert release.config_sha256(config_copy) == before
    path.write_text(path.read_text().replace("peak_tps: 16000", "peak_tps: 15000"))
    assert release.config_sha256(config_copy) != before


def test_outside_a_repository_without_commit_is_one_line_exit_2(cdk_out, tmp_path):
    out = tmp_path / "release.json"
    result = run(
        "-m",
        "inferstack",
        "release",
        "--cdk-out",
        str(cdk_out),
        "--out",
        str(out),
        "--config-dir",
        str(CONFIG_DIR),
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"release: error: {tmp_path}: not inside a git repository with a commit (git rev-parse HEAD failed); "
        "pass --commit SHA"
    ]
    assert not out.exists()


@pytest.mark.parametrize("case", ["no cdk.out", "not an assembly", "bad commit", "no out dir", "no config dir"])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case, cdk_out, tmp_path, capsys):
    out = tmp_path / "release.json"
    cdk = {"no cdk.out": tmp_path / "missing", "not an assembly": tmp_path}.get(case, cdk_out)
    args = ["--commit", "not-a-sha" if case == "bad commit" else COMMIT]
    if case == "no out dir":
        out = tmp_path / "missing" / "release.json"
    if case == "no config dir":
        args += ["--config-dir", str(tmp_path / "missing")]
    code, err = write_manifest(capsys, cdk, out, *args)
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("release: error: "), err
    assert not out.exists()
    assert not list(tmp_path.glob(".*.tmp"))
