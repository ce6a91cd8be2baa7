"""The Triton serving image: what it builds from (the repository root reduced to container/triton/ and the
renderer it imports), and the SageMaker Triton base image it starts from for a region and release, from the
SageMaker SDK's bundled image tables (offline; never a hand-written account map). Called by the stacks and by
validate, not by constructs. The Neuron twin: inferstack/neuron/image.py."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager

CONTEXT = "container/triton"  # the image's own files, relative to the repository root
DOCKERFILE = f"{CONTEXT}/Dockerfile"
# The Triton image builds from the repository root so its export step imports inferstack's renderer
# (shared code, not a copy). Only what the build uses is in the context, so the image (and with it
# the endpoint) changes only when the renderer, the config schema or container/triton/ does.
# Kept identical to container/triton/Dockerfile.dockerignore (a test checks).
BUILD_CONTEXT = ("*", "!inferstack/__init__.py", "!inferstack/schema", "inferstack/schema/kinds.py",
                 "!inferstack/triton/__init__.py", "!inferstack/triton/config.py", "!container/triton", "**/__pycache__",
                 "**/*.pyc")
# What a model file's source.local_path is relative to: the export runs in /build, the repository root
# reduced to BUILD_CONTEXT.
LOCAL_PATH_BASE = "."

FRAMEWORK = "sagemaker-tritonserver"
# Set by a parallel synth for its shard processes (inferstack/synthesis/shards.py): the images the parent
# already resolved, so a shard does not import the SDK again (seconds of start-up per process).
KNOWN_IMAGES_ENV = "INFERSTACK_TRITON_IMAGES"
# (region, version, instance type) -> image URI: what this process resolved or was handed.
_known: dict[tuple[str, str, str], str] = {}


class UnknownTritonImage(ValueError):
    """The installed SageMaker SDK knows no Triton image for this region/version/instance type."""


def base_image_uri(*, region: str, version: str, instance_type: str) -> str:
    known = _known.get((region, version, instance_type))
    if known is not None:
        return known
    # The SDK import takes seconds; only Triton models pay for it.
    with _without_aws_profile():
        from sagemaker.core import image_uris

    try:
        uri = image_uris.retrieve(framework=FRAMEWORK, region=region, version=version,
                                  instance_type=instance_type)
    except ValueError as exc:
        # The SDK's message lists what it supports; keep it on one line.
        raise UnknownTritonImage(
            f"no {FRAMEWORK} image for region {region}, version {version}, {instance_type}: "
            f"{' '.join(str(exc).split())}") from None
    _known[(region, version, instance_type)] = uri
    return uri


def export_known() -> str:
    """What this process resolved, as the value of KNOWN_IMAGES_ENV for a process it starts."""
    return json.dumps([[*key, uri] for key, uri in sorted(_known.items())])


def import_known(text: str) -> None:
    """Take the images a parent process resolved (export_known's output). Raises ValueError naming the
    variable if `text` is not that."""
    try:
        entries = json.loads(text)
    except ValueError:
        entries = None
    if not isinstance(entries, list) or not all(
            isinstance(e, list) and len(e) == 4 and all(isinstance(v, str) and v for v in e) for e in entries):
        raise ValueError(f"{KNOWN_IMAGES_ENV}: expected [[region, version, instance_type, image_uri], ...], "
                         f"got {text[:80]!r}")
    for region, version, instance_type, uri in entries:
        _known[(region, version, instance_type)] = uri


@contextmanager
def _without_aws_profile():
    """Importing the SDK builds a default boto3 session, so an AWS_PROFILE that does not exist on this
    machine (common in CI) made the import, and with it `validate` and `cdk synth`, fail. The image
    tables are local files and need no credentials: import with the profile variables set aside."""
    saved = {name: os.environ.pop(name) for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE") if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)
