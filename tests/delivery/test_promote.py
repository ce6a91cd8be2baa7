"""`promote` on moto: dev runs five models in four image units (the neuron-cores fleet intent-pack, one ECS
service whose image serves intent-bert and duplicate-bert; intent-bert-inf2 on its own ECS service; the two
Triton models as inference components on the triton-shared fleet's endpoint, each with its own image; images
in dev's CDK asset repository); promote plans, copies manifests and layers into staging's account (the fleet's
image as the fleet), writes the pin, and refuses when the source is missing or runs something other than the
release. A dedicated SageMaker endpoint is read from a config whose dev has no fleets."""

from __future__ import annotations

import json

import pytest
import yaml

from inferstack import cli
from inferstack.aws import ecr_images
from inferstack.config import load
from inferstack.config.release_pin import ReleasePin
from inferstack.neuron.task import CONTAINER_NAME
from tests.support import aws_fakes
from tests.support.cli import run
from tests.support.paths import CONFIG_DIR
from tests.support.promote import MODELS, TARGET, deploy, promote_cli, release_manifest

PROJECT = load(CONFIG_DIR)


def test_dry_run_prints_the_plan_and_changes_nothing(dev, capsys):
    config_dir, images = dev
    code, out, err = promote_cli(capsys, config_dir)
    assert code == 0, err
    assert out[0] == (
        f"promote dev -> staging (dry run; --apply copies and writes {config_dir / 'releases' / 'staging.json'})"
    )
    source = "111111111111.dkr.ecr.us-east-1.amazonaws.com/cdk-hnb659fds-container-assets-111111111111-us-east-1"
    assert out[1:] == [f"{m}: {source}@{images[m].digest} -> {TARGET}/{m} as :{images[m].tag} (copy)" for m in MODELS]
    assert aws_fakes.session("staging").client("ecr").describe_repositories()["repositories"] == []
    assert not (config_dir / "releases").exists()


def test_apply_copies_images_with_layers_and_writes_the_pin(dev, capsys):
    config_dir, images = dev
    code, out, err = promote_cli(capsys, config_dir, "--apply")
    assert code == 0, err
    pin_path = config_dir / "releases" / "staging.json"
    assert out[-2] == f"wrote {pin_path}"
    assert out[-1].startswith("note: staging does not deploy it yet: add `release: {manifest: releases/staging.json}`")

    ecr = aws_fakes.session("staging").client("ecr")
    for model, image in images.items():
        (repository,) = ecr.describe_repositories(repositoryNames=[f"inferstack/{model}"])["repositories"]
        assert repository["imageTagMutability"] == "IMMUTABLE"
        assert repository["encryptionConfiguration"]["encryptionType"] == "KMS"
        (detail,) = ecr.describe_images(repositoryName=f"inferstack/{model}")["imageDetails"]
        assert (detail["imageDigest"], detail["imageTags"]) == (image.digest, [image.tag])
        layers = ecr.batch_check_layer_availability(
            repositoryName=f"inferstack/{model}", layerDigests=list(image.blobs)
        )["layers"]
        assert {layer["layerDigest"] for layer in layers} == set(image.blobs)

    pin = ReleasePin.model_validate_json(pin_path.read_text())
    assert (pin.environment, pin.promoted_from) == ("staging", "dev")
    assert {m: (i.repository_uri, i.digest) for m, i in pin.images.items()} == {
        m: (f"{TARGET}/{m}", images[m].digest) for m in MODELS
    }
    assert json.loads(pin_path.read_text()) == json.loads(json.dumps(json.loads(pin_path.read_text()), sort_keys=True))

    # The pin is what staging's config load accepts once environments.yaml names it.
    env_file = config_dir / "environments.yaml"
    env_file.write_text(
        env_file.read_text().replace("  staging:\n", "  staging:\n    release: {manifest: releases/staging.json}\n", 1)
    )
    assert load(config_dir).releases["staging"] == pin

    # A second promotion finds everything in place and rewrites the same pin.
    before = pin_path.read_text()
    code, out, err = promote_cli(capsys, config_dir, "--apply")
    assert code == 0, err
    assert all(line.endswith("(exists)") for line in out[1 : 1 + len(MODELS)]), out
    assert pin_path.read_text() == before


def test_release_manifest_is_checked_and_recorded(dev, capsys, tmp_path):
    config_dir, images = dev
    manifest = tmp_path / "release.json"
    manifest.write_text(json.dumps(release_manifest(images)))
    code, out, err = promote_cli(capsys, config_dir, "--apply", "--manifest", str(manifest))
    assert code == 0, err
    pin = ReleasePin.model_validate_json((config_dir / "releases" / "staging.json").read_text())
    assert pin.release.commit == "c" * 40
    assert pin.release.config_sha256 == "f" * 64
    assert pin.release.manifest_sha256 is not None


def test_source_running_another_image_than_the_release_fails_naming_the_model(dev, capsys, tmp_path):
    config_dir, images = dev
    manifest = tmp_path / "release.json"
    manifest.write_text(json.dumps(release_manifest(images, tags={"intent-pack": "0" * 64})))
    code, out, err = promote_cli(capsys, config_dir, "--manifest", str(manifest))
    assert code == 1
    assert len(err) == 1 and err[0].startswith("promote: error: intent-pack: dev runs ")
    assert f"not the image of release {manifest}" in err[0]


def test_missing_source_stack_fails_naming_model_and_stack(dev, capsys):
    config_dir, _ = dev
    aws_fakes.session("dev").client("cloudformation").delete_stack(StackName="dev-t5-spelling")
    code, out, err = promote_cli(capsys, config_dir, "--apply")
    assert code == 1
    assert err == ["promote: error: t5-spelling: stack dev-t5-spelling not found (is dev deployed?)"]
    assert not (config_dir / "releases").exists()


def test_missing_service_and_component_fail(dev, capsys):
    config_dir, _ = dev
    sess = aws_fakes.session("dev")
    sess.client("ecs").delete_service(cluster="dev-intent-pack-cluster", service="intent-pack-service", force=True)
    code, _, err = promote_cli(capsys, config_dir)
    assert code == 1
    assert err[0].startswith("promote: error: intent-pack: ECS service intent-pack-service not found")

    assert PROJECT.fleet_of("bert-large-classifier", "dev") == "triton-shared"
    sess.client("sagemaker").delete_inference_component(InferenceComponentName="dev-bert-large-classifier")
    code, _, err = promote_cli(capsys, config_dir)
    assert code == 1
    assert err[0].startswith(
        "promote: error: bert-large-classifier: SageMaker inference component "
        "dev-bert-large-classifier on endpoint dev-triton-shared not found"
    )


def test_a_component_is_promoted_from_the_model_it_names(dev, capsys):
    """The shared endpoint's variant names no model: the image comes from the component's model."""
    config_dir, images = dev
    sagemaker = aws_fakes.session("dev").client("sagemaker")
    (variant,) = sagemaker.describe_endpoint_config(EndpointConfigName="triton-shared-config")["ProductionVariants"]
    assert "ModelName" not in variant
    code, out, err = promote_cli(capsys, config_dir)
    assert code == 0, err
    assert any(
        line.startswith("t5-spelling: ") and f"@{images['t5-spelling'].digest} -> {TARGET}/t5-spelling" in line
        for line in out
    )


@pytest.fixture
def dedicated_dev(aws, config_copy):
    """dev without fleets: bert-large-classifier on its own endpoint."""
    aws_fakes.with_deploy_roles(config_copy)
    path = config_copy / "environments.yaml"
    data = yaml.safe_load(path.read_text())
    data.pop("fleets", None)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    images = deploy(aws_fakes.session("dev"), config_copy, units=("bert-large-classifier",))
    return config_copy, images


def test_a_dedicated_endpoint_is_read_through_its_config_and_its_absence_fails(dedicated_dev):
    config_dir, images = dedicated_dev
    sess = aws_fakes.session("dev")
    (unit,) = [u for u in load(config_dir).image_units("dev") if u.name == "bert-large-classifier"]
    image = ecr_images.running_image(sess, "dev", unit)
    assert image == images["bert-large-classifier"].uri
    sess.client("sagemaker").delete_endpoint(EndpointName="dev-bert-large-classifier")
    with pytest.raises(
        ecr_images.NotRunning, match="bert-large-classifier: SageMaker endpoint dev-bert-large-classifier not found"
    ):
        ecr_images.running_image(sess, "dev", unit)


def test_image_missing_from_ecr_fails(dev, capsys):
    config_dir, images = dev
    sess = aws_fakes.session("dev")
    repository = aws_fakes.ASSET_REPOSITORY.format(account="111111111111", region="us-east-1")
    sess.client("ecr").batch_delete_image(repositoryName=repository, imageIds=[{"imageTag": images["t5-spelling"].tag}])
    code, _, err = promote_cli(capsys, config_dir)
    assert code == 1
    assert err[0].startswith(f"promote: error: t5-spelling: {images['t5-spelling'].uri}: not found in ECR")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--from", "dev", "--to", "qa"], "promote: error: --to: unknown environment 'qa'; known: dev, staging, prod"),
        (["--from", "dev", "--to", "dev"], "promote: error: --from and --to name the same environment"),
        (
            ["--from", "dev", "--to", "staging", "--manifest", "/nonexistent/release.json"],
            "promote: error: --manifest /nonexistent/release.json: file not found",
        ),
    ],
)
def test_bad_arguments_are_one_line_exit_2(args, message, capsys):
    assert cli.main(["promote", *args]) == 2
    assert capsys.readouterr().err.splitlines() == [message]


def test_missing_argument_is_a_usage_error_without_traceback():
    result = run("-m", "inferstack", "promote", "--from", "dev")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "python -m inferstack promote: error: the following arguments are required: --to"
    ]


def test_not_a_release_manifest_is_rejected(tmp_path, capsys):
    path = tmp_path / "release.json"
    path.write_text('{"format": "something-else"}')
    assert cli.main(["promote", "--from", "dev", "--to", "staging", "--manifest", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"promote: error: --manifest {path}: not a release manifest (format is not 'inferstack-release/1')"
    ]


def test_a_fleet_members_are_pinned_as_the_fleet(dev, capsys):
    """One image serves intent-bert and duplicate-bert: one repository and one pin entry, named as the fleet
    (what stage.py's release.image_for(fleet) and config load expect), none for the members."""
    config_dir, images = dev
    code, out, err = promote_cli(capsys, config_dir, "--apply")
    assert code == 0, err
    assert not [line for line in out if line.startswith(("intent-bert:", "duplicate-bert:"))]
    pin = ReleasePin.model_validate_json((config_dir / "releases" / "staging.json").read_text())
    assert set(pin.images) == set(MODELS) and pin.image_for("intent-pack").digest == images["intent-pack"].digest
    repositories = {
        r["repositoryName"] for r in aws_fakes.session("staging").client("ecr").describe_repositories()["repositories"]
    }
    assert repositories == {f"inferstack/{m}" for m in MODELS}


def test_the_image_is_read_from_the_container_the_construct_names(dev):
    """A task with a sidecar listed first: promote reads the serving container NeuronEcsService names
    (inferstack.neuron.task.CONTAINER_NAME), and refuses a task of several containers without it rather than
    guess."""
    _, images = dev
    sess = aws_fakes.session("dev")
    ecs = sess.client("ecs")
    (unit,) = [u for u in PROJECT.image_units("dev") if u.name == "intent-bert-inf2"]
    served = images["intent-bert-inf2"].uri

    def run(*names: str) -> None:
        containers = [
            {"name": name, "image": served if name == CONTAINER_NAME else "public.ecr.aws/a/sidecar:1", "memory": 128}
            for name in names
        ]
        task = ecs.register_task_definition(family="dev-intent-bert-inf2", containerDefinitions=containers)
        ecs.update_service(
            cluster="dev-intent-bert-inf2-cluster",
            service="intent-bert-inf2-service",
            taskDefinition=task["taskDefinition"]["taskDefinitionArn"],
        )

    run("Sidecar", CONTAINER_NAME)
    assert ecr_images.running_image(sess, "dev", unit) == served
    run("Sidecar", "Proxy")
    with pytest.raises(ecr_images.NotRunning, match=f"has no container '{CONTAINER_NAME}'"):
        ecr_images.running_image(sess, "dev", unit)


def test_image_references():
    ref = ecr_images.ImageRef.parse("111111111111.dkr.ecr.us-east-1.amazonaws.com/a/b:tag1@sha256:" + "a" * 64)
    assert (ref.account, ref.region, ref.repository, ref.tag) == ("111111111111", "us-east-1", "a/b", "tag1")
    for bad in ("nginx:latest", "111111111111.dkr.ecr.us-east-1.amazonaws.com/repo"):
        with pytest.raises(ecr_images.ImageError):
            ecr_images.ImageRef.parse(bad)
