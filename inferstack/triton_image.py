"""The SageMaker Triton base image for a region and release, from the SageMaker SDK's bundled image
tables (offline; never a hand-written account map). Called by the stacks, not by constructs."""

from __future__ import annotations

import functools
import os
from contextlib import contextmanager

FRAMEWORK = "sagemaker-tritonserver"


class UnknownTritonImage(ValueError):
    """The installed SageMaker SDK knows no Triton image for this region/version/instance type."""


@functools.cache
def base_image_uri(*, region: str, version: str, instance_type: str) -> str:
    # The SDK import takes seconds; only Triton models pay for it.
    with _without_aws_profile():
        from sagemaker.core import image_uris

    try:
        return image_uris.retrieve(framework=FRAMEWORK, region=region, version=version,
                                   instance_type=instance_type)
    except ValueError as exc:
        # The SDK's message lists what it supports; keep it on one line.
        raise UnknownTritonImage(
            f"no {FRAMEWORK} image for region {region}, version {version}, {instance_type}: "
            f"{' '.join(str(exc).split())}") from None


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
