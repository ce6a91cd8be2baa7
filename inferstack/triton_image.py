"""The SageMaker Triton base image for a region and release, from the SageMaker SDK's bundled image
tables (offline; never a hand-written account map). Called by the stacks, not by constructs."""

from __future__ import annotations

import functools

FRAMEWORK = "sagemaker-tritonserver"


class UnknownTritonImage(ValueError):
    """The installed SageMaker SDK knows no Triton image for this region/version/instance type."""


@functools.cache
def base_image_uri(*, region: str, version: str, instance_type: str) -> str:
    # The SDK import takes seconds; only Triton models pay for it.
    from sagemaker.core import image_uris

    try:
        return image_uris.retrieve(framework=FRAMEWORK, region=region, version=version,
                                   instance_type=instance_type)
    except ValueError as exc:
        # The SDK's message lists what it supports; keep it on one line.
        raise UnknownTritonImage(
            f"no {FRAMEWORK} image for region {region}, version {version}, {instance_type}: "
            f"{' '.join(str(exc).split())}") from None
