"""dev deployed on moto for the promote, rollback and load-test-gate tests (the `dev` fixture of
tests/delivery/conftest.py builds it with `deploy`), and `promote` run in-process."""

from __future__ import annotations

from inferstack import cli
from inferstack.config import load
from tests.support import aws_fakes

# The image units (Project.image_units): each Triton model's own stack, and the fleet's.
MODELS = ("bert-large-classifier", "intent-bert-inf2", "intent-pack", "t5-spelling")
NEURON = ("intent-bert-inf2", "intent-pack")
TARGET = "222222222222.dkr.ecr.us-east-1.amazonaws.com/inferstack"
# moto 5.2.5 models no inference components (or an endpoint for them): the named patches do, in this process.
COMPONENT_PATCHES = ("sagemaker-variant-without-model", "sagemaker-inference-components")


def deploy(sess, config_dir, units=MODELS) -> dict[str, aws_fakes.PushedImage]:
    """Each image unit of `config_dir` deployed in dev as its stack would run it."""
    project = load(config_dir)
    repository = aws_fakes.ASSET_REPOSITORY.format(account="111111111111", region="us-east-1")
    images = {}
    for name in units:
        images[name] = image = aws_fakes.push_image(sess, repository, seed=name)
        fleet = project.fleet_of(name, "dev")
        if name in NEURON:
            aws_fakes.deploy_neuron(sess, "dev", name, image.uri)
        elif fleet is not None:
            aws_fakes.deploy_triton_component(sess, "dev", name, image.uri, fleet)
        else:
            aws_fakes.deploy_triton(sess, "dev", name, image.uri)
    return images


def promote_cli(capsys, config_dir, *args: str) -> tuple[int, list[str], list[str]]:
    code = cli.main(["promote", "--from", "dev", "--to", "staging", "--config-dir", str(config_dir), *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def release_manifest(images, tags: dict[str, str] | None = None) -> dict:
    tags = tags or {}
    return {
        "format": "inferstack-release/1",
        "commit": "c" * 40,
        "config_sha256": "f" * 64,
        "environments": {
            "dev": {
                "stacks": {
                    m: {"images": [{"asset_id": tags.get(m, i.tag), "tag": tags.get(m, i.tag), "digest": None}]}
                    for m, i in images.items()
                }
            }
        },
    }
