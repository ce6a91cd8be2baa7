"""Fixtures of the delivery tests (promote, rollback, the load test gate)."""

from __future__ import annotations

import pytest

from inferstack.aws import ecr_images
from rehearsal import moto_patches
from tests.support import aws_fakes
from tests.support.promote import COMPONENT_PATCHES, deploy


@pytest.fixture
def dev(aws, config_copy, monkeypatch):
    """dev deployed: every unit's stack, service or endpoint, and image."""
    aws_fakes.with_deploy_roles(config_copy)
    with moto_patches.applied(*COMPONENT_PATCHES):
        images = deploy(aws_fakes.session("dev"), config_copy)
        blobs = {d: b for image in images.values() for d, b in image.blobs.items()}
        # moto has no GetDownloadUrlForLayer: serve the source blobs directly, chunked as the real code is.
        monkeypatch.setattr(
            ecr_images,
            "download_layer",
            lambda ecr, registry, repo, digest, size: iter(
                [blobs[digest][i : i + 4] for i in range(0, len(blobs[digest]), 4)]
            ),
        )
        yield config_copy, images
