"""The Triton serving image: what it builds from (the repository root reduced to container/triton/ and the
renderer it imports), and the SageMaker Triton base image it starts from for a region and release, read
from the SageMaker SDK's bundled image table (offline; never a hand-written account map). Called by the
stacks and by validate, not by constructs. The Neuron twin: inferstack/neuron/image.py."""

from __future__ import annotations

import importlib.util
import json
import re
from functools import cache
from pathlib import Path

CONTEXT = "container/triton"  # the image's own files, relative to the repository root
DOCKERFILE = f"{CONTEXT}/Dockerfile"
# The Triton image builds from the repository root so its export step imports inferstack's renderer
# (shared code, not a copy). Only what the build uses is in the context, so the image (and with it
# the endpoint) changes only when the renderer, the part of the config schema it imports (not environments.yaml's,
# nor the other model kinds') or container/triton/ does. A module the export starts to import is added here.
# Kept identical to container/triton/Dockerfile.dockerignore (a test checks).
BUILD_CONTEXT = (
    "*",
    "!inferstack/__init__.py",
    "!inferstack/schema/__init__.py",
    "!inferstack/schema/base.py",
    "!inferstack/schema/deployment.py",
    "!inferstack/schema/families.py",
    "!inferstack/schema/instances.py",
    "!inferstack/schema/model_file.py",
    "!inferstack/schema/off_hours.py",
    "!inferstack/schema/pipeline.py",
    "!inferstack/schema/throughput.py",
    "!inferstack/schema/triton_sagemaker.py",
    "!inferstack/triton/__init__.py",
    "!inferstack/triton/config.py",
    "!inferstack/triton/folders.py",
    "!inferstack/triton/queue_policy.py",
    "!inferstack/triton/spec.py",
    "!container/triton",
    "**/__pycache__",
    "**/*.pyc",
)
# What a model file's source.local_path is relative to: the export runs in /build, the repository root
# reduced to BUILD_CONTEXT.
LOCAL_PATH_BASE = "."

FRAMEWORK = "sagemaker-tritonserver"
# The SDK's table for FRAMEWORK, inside the installed `sagemaker` distribution (requirements.txt pins it).
TABLE = ("core", "image_uri_config", f"{FRAMEWORK}.json")
# "ml.<family>.<size>": a GPU family (g*, p*) runs the Triton image whose tag carries no processor suffix.
_GPU_TYPE = re.compile(r"^ml\.[gp][a-z\d-]*\.\w+$")


class UnknownTritonImage(ValueError):
    """The installed SageMaker SDK's table has no Triton image for this region/version/instance type."""


@cache
def base_image_uri(*, region: str, version: str, instance_type: str) -> str:
    """The image URI `sagemaker.core.image_uris.retrieve(framework="sagemaker-tritonserver", ...)` returns for a
    GPU instance type, from the same table and botocore's ECR endpoint, without importing the SDK: its import
    (about 2 s of sagemaker-core's pydantic models) was a quarter of a `cdk synth` and most of a `validate`.
    tests/triton/test_triton_image.py compares the two across the table's regions and versions."""

    def unknown(reason: str) -> UnknownTritonImage:
        return UnknownTritonImage(
            f"no {FRAMEWORK} image for region {region}, version {version}, {instance_type}: {reason}"
        )

    if not _GPU_TYPE.match(instance_type):
        raise unknown("Triton images are resolved for GPU instance types (ml.g*, ml.p*) only")
    table = _table()
    versions = table["versions"]
    entry = versions.get(table.get("version_aliases", {}).get(version, version))
    if entry is None:
        raise unknown(
            f"Unsupported {FRAMEWORK} version: {version}. Supported {FRAMEWORK} version(s): {', '.join(versions)}."
        )
    registries = entry["registries"]
    if region not in registries:
        raise unknown(f"Unsupported region: {region}. Supported region(s): {', '.join(registries)}.")
    return f"{registries[region]}.dkr.{_ecr_hostname(region)}/{entry['repository']}:{entry.get('tag_prefix', version)}"


@cache
def _table() -> dict:
    """The SDK's image table, found through the import system without running the SDK's package code."""
    spec = importlib.util.find_spec("sagemaker")
    if spec is None or not spec.submodule_search_locations:
        raise UnknownTritonImage("the SageMaker SDK is not installed: pip install -r requirements.txt")
    for location in spec.submodule_search_locations:
        path = Path(location).joinpath(*TABLE)
        if path.is_file():
            return json.loads(path.read_text())
    raise UnknownTritonImage(f"the installed SageMaker SDK has no {'/'.join(TABLE)}: pip install -r requirements.txt")


def _ecr_hostname(region: str) -> str:
    """ECR's host name in the region (its partition's DNS suffix), as the SDK takes it from botocore."""
    endpoint = _endpoints().construct_endpoint("ecr", region)
    # The SDK's own fallback for a region its botocore may not list yet.
    return endpoint["hostname"] if endpoint else f"ecr.{region}.amazonaws.com"


@cache
def _endpoints():
    import botocore.loaders
    import botocore.regions

    return botocore.regions.EndpointResolver(botocore.loaders.create_loader().load_data("endpoints"))
