"""moto_env, for the emulator patches' and rules' backend-level tests; and the fixtures of the image tier (marker
image_build: tests/rehearsal/test_image_build.py): dev and staging
synthesized by the real CDK CLI (the assets `cdk deploy` would hand to Docker: dev's serving images, which staging
builds alike, and staging's load-test image), and each image asset rehearsed once per session (shared between
xdist workers)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from rehearsal import image_build
from tests.support.build_once import build_once
from tests.support.paths import ROOT


@pytest.fixture
def moto_env(monkeypatch):
    """moto in this process (mock_aws), as account 123456789012 in us-east-1: nothing of the machine's AWS
    settings leaks in. The emulator patches' and rules' backend-level tests use it."""
    for key in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_SESSION_TOKEN", "MOTO_ACCOUNT_ID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


# What `make rehearse-images` synthesizes: every image the shipped environments build, each once.
IMAGE_ENVIRONMENTS = "dev,staging"


def synth_with_cli(out: Path, env_name: str = IMAGE_ENVIRONMENTS) -> None:
    result = subprocess.run(
        ["cdk", "synth", "--quiet", "-c", f"environments={env_name}", "-o", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "CDK_DISABLE_CLI_TELEMETRY": "true"},
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="session")
def dev_assembly(tmp_path_factory) -> Path:
    return build_once(tmp_path_factory, "dev-assembly", lambda target: synth_with_cli(target / "cdk.out")) / "cdk.out"


@pytest.fixture(scope="session")
def dev_images(dev_assembly) -> dict[str, image_build.ImageAsset]:
    """The image assets by the name of the stack that first builds them: dev's models and fleet, and staging's
    LoadTest (staging's serving images are dev's: the same assets)."""
    assets = image_build.image_assets(dev_assembly)
    return {asset.stacks[0].split("/")[-1]: asset for asset in assets}


@pytest.fixture(scope="session")
def rehearsed(tmp_path_factory, dev_images):
    """Rehearse one image asset once per session: rehearsed(model stack name) -> (report lines, image root)."""

    def get(stack: str) -> Path:
        asset = dev_images[stack]

        def build(target: Path) -> None:
            report = image_build.rehearse(asset, target / "work")
            (target / "report.txt").write_text("\n".join(report.lines()) + "\n")
            (target / "image-root").symlink_to(report.image_root)
            (target / "imports.txt").write_text("\n".join(sorted(report.imports)) + "\n")

        return build_once(tmp_path_factory, f"image-{asset.asset_id[:16]}", build)

    return get
