"""An environment with `release: {manifest: ...}` deploys the pinned images by digest: no serving image is
built for its models (only the load-test tool's, where the environment has one), and the execution roles may
pull from the pinned repositories only. A neuron-cores fleet's one image is pinned by the fleet's name.
Environments without a pin are untouched (the snapshots of the shipped environments hold that)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_cdk.assertions import Template

from inferstack import config
from tests.support.paths import CONFIG_DIR
from tests.support.synth import synth

ACCOUNT, REGION = "222222222222", "us-east-1"
# Image units: the Triton models' and intent-bert-inf2's own stacks, and the neuron-cores fleet intent-pack
# (intent-bert, duplicate-bert).
MODELS = ("bert-large-classifier", "intent-pack", "t5-spelling", "intent-bert-inf2")


def digest(n: int) -> str:
    return "sha256:" + f"{n:x}" * 64


def digest_of(model: str) -> str:
    """The digest pin_document gives `model`."""
    return digest(MODELS.index(model) + 1)


def pin_document(models=MODELS, environment="staging", account=ACCOUNT, region=REGION) -> dict:
    return {
        "format": "inferstack-pin/1",
        "environment": environment,
        "promoted_from": "dev",
        "release": {"commit": "0" * 40},
        "images": {
            m: {"repository_uri": f"{account}.dkr.ecr.{region}.amazonaws.com/inferstack/{m}", "digest": digest(i + 1)}
            for i, m in enumerate(models)
        },
    }


def pin_staging(config_dir: Path, document: dict | str | None) -> Path:
    """Point staging at releases/staging.json and write `document` there (None: leave it missing)."""
    env_file = config_dir / "environments.yaml"
    text = env_file.read_text()
    anchor = "    alarms:\n      emails: [ml-platform-alerts@example.com]\n"
    assert anchor in text
    env_file.write_text(text.replace(anchor, anchor + "    release: {manifest: releases/staging.json}\n"))
    path = config_dir / "releases" / "staging.json"
    if document is not None:
        path.parent.mkdir(exist_ok=True)
        path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


@pytest.fixture(scope="module")
def pinned(tmp_path_factory):
    import shutil

    from tests.support.paths import CONFIG_DIR

    config_dir = tmp_path_factory.mktemp("pinned") / "model_configs"
    shutil.copytree(CONFIG_DIR, config_dir)
    pin_staging(config_dir, pin_document())
    project = config.load(config_dir)
    return synth(project, ["staging"], tmp_path_factory.mktemp("cdk.out"))


def test_pinned_neuron_service_runs_the_digest_and_pulls_from_that_repository_only(pinned):
    tpl = Template.from_json(pinned.template("staging", "intent-pack"))  # the fleet's one image, by its name
    (task,) = tpl.find_resources("AWS::ECS::TaskDefinition").values()
    image = task["Properties"]["ContainerDefinitions"][0]["Image"]
    assert image == {
        "Fn::Join": [
            "",
            [
                f"{ACCOUNT}.dkr.ecr.{REGION}.",
                {"Ref": "AWS::URLSuffix"},
                f"/inferstack/intent-pack@{digest_of('intent-pack')}",
            ],
        ]
    }
    policies = tpl.find_resources("AWS::IAM::Policy")
    execution = next(p for k, p in policies.items() if "TaskExecutionRole" in k)
    pull = [s for s in execution["Properties"]["PolicyDocument"]["Statement"] if "ecr:BatchGetImage" in s["Action"]]
    assert [s["Resource"] for s in pull] == [f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/inferstack/intent-pack"]


def test_pinned_triton_model_uses_the_digest_uri_and_scoped_pull(pinned):
    tpl = Template.from_json(pinned.template("staging", "t5-spelling"))
    (model,) = tpl.find_resources("AWS::SageMaker::Model").values()
    assert model["Properties"]["PrimaryContainer"]["Image"] == (
        f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/inferstack/t5-spelling@{digest_of('t5-spelling')}"
    )
    (policy,) = tpl.find_resources("AWS::IAM::Policy").values()
    (pull,) = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s.get("Sid") == "PullServingImage"]
    assert pull["Resource"] == f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/inferstack/t5-spelling"


def test_pinned_environment_builds_no_serving_image_only_the_load_test_tool(pinned):
    """The serving images are the pinned ones; the load-test generators' image (staging has load_test) is built
    from the commit being deployed, like the stack that runs it: it measures the release, it is not part of it."""
    built = {
        manifest.name.split(".")[0]: sorted(json.loads(manifest.read_text()).get("dockerImages", {}))
        for manifest in (pinned.outdir / "assembly-staging").glob("*.assets.json")
    }
    load_test = pinned.stages["staging"].load_test
    assert load_test is not None
    assert {stack: images for stack, images in built.items() if images} == {
        load_test.artifact_id: [load_test.image.asset_hash]
    }


def test_pinned_fleet_member_runs_the_digest_and_the_shared_endpoint_pulls_from_that_repository_only(tmp_path_factory):
    """dev pinned (as the CLI deploy rehearsal pins it): a model on the shared endpoint runs its pinned image,
    and both its Model's role and the endpoint's role (through the member's grant) may pull that repository only."""
    import shutil

    config_dir = tmp_path_factory.mktemp("pinned-dev") / "model_configs"
    shutil.copytree(CONFIG_DIR, config_dir)
    env_file = config_dir / "environments.yaml"
    anchor = '  dev:\n    account: "111111111111"\n'
    assert anchor in env_file.read_text()
    env_file.write_text(env_file.read_text().replace(anchor, anchor + "    release: {manifest: releases/dev.json}\n"))
    (config_dir / "releases").mkdir(exist_ok=True)
    (config_dir / "releases" / "dev.json").write_text(
        json.dumps(pin_document(environment="dev", account="111111111111"))
    )
    project = config.load(config_dir)
    assert project.fleet_of("t5-spelling", "dev") is not None
    templates = synth(project, ["dev"], tmp_path_factory.mktemp("cdk.out")).templates["dev"]
    tpl = Template.from_json(templates["t5-spelling"])
    (model,) = tpl.find_resources("AWS::SageMaker::Model").values()
    assert model["Properties"]["PrimaryContainer"]["Image"] == (
        f"111111111111.dkr.ecr.{REGION}.amazonaws.com/inferstack/t5-spelling@{digest_of('t5-spelling')}"
    )
    pulls = [
        s["Resource"]
        for p in tpl.find_resources("AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s.get("Sid") == "PullServingImage"
    ]
    assert pulls == [f"arn:aws:ecr:{REGION}:111111111111:repository/inferstack/t5-spelling"] * 2


# ----------------------------------------------------------------------------- rejections at config load


def load_problems(config_dir: Path) -> list[str]:
    with pytest.raises(config.ConfigError) as info:
        config.load(config_dir)
    return [str(p) for p in info.value.problems]


def test_missing_pin_file_points_at_the_reference(config_copy):
    pin_staging(config_copy, None)
    (line,) = load_problems(config_copy)
    assert line.startswith("model_configs/environments.yaml:")
    assert "environments.staging.release.manifest: model_configs/releases/staging.json: file not found" in line


@pytest.mark.parametrize(
    "document, expected",
    [
        ("{not json", "model_configs/releases/staging.json:1: not valid JSON"),
        (
            pin_document(models=("intent-pack", "t5-spelling", "intent-bert-inf2")),
            "model_configs/releases/staging.json: images: no pinned image for bert-large-classifier; promote again",
        ),
        # a fleet's members are not units of their own: one image serves them, pinned by the fleet's name
        (
            pin_document(
                models=("bert-large-classifier", "intent-bert", "duplicate-bert", "t5-spelling", "intent-bert-inf2")
            ),
            "model_configs/releases/staging.json: images: no pinned image for intent-pack; promote again",
        ),
        (
            pin_document(models=(*MODELS, "intent-bert")),
            "model_configs/releases/staging.json: images.intent-bert: unknown model or fleet (a neuron-cores fleet's "
            "members are pinned by the fleet's name)",
        ),
        (
            {**pin_document(), "environment": "prod"},
            "model_configs/releases/staging.json: environment: pin is for environment 'prod', but staging names it",
        ),
        (
            pin_document(account="111111111111"),
            "model_configs/releases/staging.json: images.intent-pack.repository_uri: "
            "image is in 111111111111/us-east-1",
        ),
        (
            pin_document(models=(*MODELS, "retired-model")),
            "model_configs/releases/staging.json: images.retired-model: unknown model or fleet",
        ),
    ],
)
def test_bad_pins_are_one_line_problems_naming_file_and_key(config_copy, document, expected):
    pin_staging(config_copy, document)
    lines = load_problems(config_copy)
    assert any(line.startswith(expected) for line in lines), lines


def test_digest_must_be_present_and_well_formed(config_copy):
    document = pin_document()
    del document["images"]["intent-pack"]["digest"]
    document["images"]["t5-spelling"]["digest"] = "latest"
    pin_staging(config_copy, document)
    lines = load_problems(config_copy)
    assert "model_configs/releases/staging.json: images.intent-pack.digest: required field is missing" in lines
    assert any(
        line.startswith("model_configs/releases/staging.json: images.t5-spelling.digest: String should match pattern")
        for line in lines
    ), lines


def test_promote_can_load_a_config_whose_pin_is_stale(config_copy):
    pin_staging(config_copy, pin_document(models=("intent-pack",)))
    project = config.load(config_copy, releases=False)
    assert dict(project.releases) == {}
