"""Private ECR images for promotion and load tests: the image a deployed unit runs (running_image), parse an
image reference, resolve its digest, and copy an image by digest into another account's or region's repository
with the ECR API alone (no docker daemon).

A copy moves the manifest with BatchGetImage/PutImage. ECR accepts a manifest only when the repository
already holds every blob it names, so missing layers (and the config blob) are streamed across first:
GetDownloadUrlForLayer on the source, InitiateLayerUpload/UploadLayerPart/CompleteLayerUpload on the target.
Image indexes (multi-platform, or buildx attestations) are copied child manifest first."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import botocore.exceptions

from inferstack.aws import aws_sessions, stack_outputs
from inferstack.command_line import Failure
from inferstack.config.loader import ImageUnit
from inferstack.neuron.task import CONTAINER_NAME

if TYPE_CHECKING:
    import boto3

IMAGE_PATTERN = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.(?P<suffix>amazonaws\.com(?:\.cn)?)"
    r"/(?P<repository>[a-z0-9]+(?:[._/-][a-z0-9]+)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)
INDEX_MEDIA_TYPES = (
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
)
MANIFEST_MEDIA_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    *INDEX_MEDIA_TYPES,
)
DOWNLOAD_TIMEOUT_S = 300


class NotRunning(Exception):
    """The unit's service, endpoint or model is not there, or names no image (one line)."""


class ImageError(Failure):
    """An image cannot be found, parsed or copied; one line naming it."""


@dataclass(frozen=True)
class ImageRef:
    account: str
    region: str
    suffix: str
    repository: str
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        match = IMAGE_PATTERN.fullmatch(text)
        if match is None or not (match["tag"] or match["digest"]):
            raise ImageError(
                f"{text!r} is not a private ECR image reference with a tag or digest "
                f"(<account>.dkr.ecr.<region>.amazonaws.com/<repository>:<tag> or @sha256:...)"
            )
        return cls(
            match["account"], match["region"], match["suffix"], match["repository"], match["tag"], match["digest"]
        )

    @property
    def registry(self) -> str:
        return f"{self.account}.dkr.ecr.{self.region}.{self.suffix}"

    @property
    def repository_uri(self) -> str:
        return f"{self.registry}/{self.repository}"

    def __str__(self) -> str:
        return self.repository_uri + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


@dataclass(frozen=True)
class ResolvedImage:
    ref: ImageRef
    digest: str
    tags: tuple[str, ...]


def _code(exc: botocore.exceptions.ClientError) -> str:
    return exc.response.get("Error", {}).get("Code", "")


def resolve(ecr, ref: ImageRef) -> ResolvedImage:
    """The digest (and tags) of `ref` in its registry; a digest in the reference must exist too."""
    image_id = {"imageDigest": ref.digest} if ref.digest else {"imageTag": ref.tag}
    try:
        details = ecr.describe_images(registryId=ref.account, repositoryName=ref.repository, imageIds=[image_id])[
            "imageDetails"
        ]
    except botocore.exceptions.ClientError as exc:
        if _code(exc) in ("ImageNotFoundException", "RepositoryNotFoundException"):
            raise ImageError(f"{ref}: not found in ECR ({_code(exc)})") from None
        raise
    if not details:
        raise ImageError(f"{ref}: not found in ECR")
    return ResolvedImage(ref, details[0]["imageDigest"], tuple(sorted(details[0].get("imageTags") or ())))


def tags_of_digest(ecr, repository: str, digest: str) -> tuple[str, ...] | None:
    """Tags of `digest` in one of this account's repositories, or None when the image (or repository) is absent."""
    try:
        details = ecr.describe_images(repositoryName=repository, imageIds=[{"imageDigest": digest}])["imageDetails"]
    except botocore.exceptions.ClientError as exc:
        if _code(exc) in ("ImageNotFoundException", "RepositoryNotFoundException"):
            return None
        raise
    return tuple(sorted(details[0].get("imageTags") or ())) if details else None


def digest_of_tag(ecr, repository: str, tag: str) -> str | None:
    try:
        details = ecr.describe_images(repositoryName=repository, imageIds=[{"imageTag": tag}])["imageDetails"]
    except botocore.exceptions.ClientError as exc:
        if _code(exc) in ("ImageNotFoundException", "RepositoryNotFoundException"):
            return None
        raise
    return details[0]["imageDigest"] if details else None


def ensure_repository(ecr, name: str) -> bool:
    """Create the promotion repository if needed: KMS-encrypted, immutable tags (a pinned tag can never
    be re-pointed), scanned on push. True when it was created."""
    try:
        ecr.create_repository(
            repositoryName=name,
            imageTagMutability="IMMUTABLE",
            encryptionConfiguration={"encryptionType": "KMS"},
            imageScanningConfiguration={"scanOnPush": True},
        )
    except botocore.exceptions.ClientError as exc:
        if _code(exc) == "RepositoryAlreadyExistsException":
            return False
        raise
    return True


def download_layer(ecr, registry_id: str, repository: str, digest: str, part_size: int) -> Iterator[bytes]:
    """The blob `digest` of the source repository, in chunks of at most `part_size` bytes."""
    url = ecr.get_download_url_for_layer(registryId=registry_id, repositoryName=repository, layerDigest=digest)[
        "downloadUrl"
    ]
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:  # a presigned S3 URL
        while chunk := response.read(part_size):
            yield chunk


def _copy_blob(source_ecr, source: ImageRef, target_ecr, repository: str, digest: str) -> None:
    upload = target_ecr.initiate_layer_upload(repositoryName=repository)
    first = 0
    for chunk in download_layer(source_ecr, source.account, source.repository, digest, upload["partSize"]):
        target_ecr.upload_layer_part(
            repositoryName=repository,
            uploadId=upload["uploadId"],
            partFirstByte=first,
            partLastByte=first + len(chunk) - 1,
            layerPartBlob=chunk,
        )
        first += len(chunk)
    done = target_ecr.complete_layer_upload(
        repositoryName=repository, uploadId=upload["uploadId"], layerDigests=[digest]
    )
    if done["layerDigest"] != digest:
        raise ImageError(f"{source.repository_uri}: blob {digest} arrived as {done['layerDigest']}")


def _blobs(manifest: dict) -> list[str]:
    return [d["digest"] for d in [manifest.get("config") or {}, *(manifest.get("layers") or [])] if "digest" in d]


def copy(source_ecr, source: ImageRef, digest: str, target_ecr, repository: str, tag: str | None) -> None:
    """Copy `source@digest` into `repository` of the target registry, tagged `tag` (children untagged)."""
    try:
        result = source_ecr.batch_get_image(
            registryId=source.account,
            repositoryName=source.repository,
            imageIds=[{"imageDigest": digest}],
            acceptedMediaTypes=list(MANIFEST_MEDIA_TYPES),
        )
    except botocore.exceptions.ClientError as exc:
        raise ImageError(f"{source.repository_uri}@{digest}: cannot read manifest: {_code(exc)}") from None
    if not result.get("images"):
        reason = (result.get("failures") or [{}])[0].get("failureReason", "not found")
        raise ImageError(f"{source.repository_uri}@{digest}: cannot read manifest: {reason}")
    image = result["images"][0]
    text, media_type = image["imageManifest"], image.get("imageManifestMediaType")
    manifest = json.loads(text)
    media_type = media_type or manifest.get("mediaType")
    if media_type in INDEX_MEDIA_TYPES:
        for child in manifest.get("manifests") or []:
            if tags_of_digest(target_ecr, repository, child["digest"]) is None:
                copy(source_ecr, source, child["digest"], target_ecr, repository, None)
    else:
        blobs = _blobs(manifest)
        if blobs:
            available = target_ecr.batch_check_layer_availability(repositoryName=repository, layerDigests=blobs)
            present = {
                layer["layerDigest"]
                for layer in available.get("layers") or []
                if layer.get("layerAvailability") == "AVAILABLE"
            }
            for blob in blobs:
                if blob not in present:
                    _copy_blob(source_ecr, source, target_ecr, repository, blob)
    put = {"repositoryName": repository, "imageManifest": text, "imageDigest": digest}
    if media_type:
        put["imageManifestMediaType"] = media_type
    if tag:
        put["imageTag"] = tag
    try:
        target_ecr.put_image(**put)
    except botocore.exceptions.ClientError as exc:
        if _code(exc) != "ImageAlreadyExistsException":
            raise ImageError(f"{repository}: cannot put {digest}: {' '.join(str(exc).split())}") from None


def running_image(session: boto3.Session, env_name: str, unit: ImageUnit) -> str:
    """The image reference the unit's deployed service (a model's, or a neuron-cores fleet's) runs in
    `env_name`."""
    values = stack_outputs.outputs(session.client("cloudformation"), env_name, unit.name)
    if unit.kind.hosting == "ecs":
        cluster, service = stack_outputs.require(values, ("ClusterName", "ServiceName"), env_name, unit.name)
        ecs = session.client("ecs")
        found = ecs.describe_services(cluster=cluster, services=[service])
        # A deleted service stays visible for a while as INACTIVE.
        if not [s for s in found.get("services") or [] if s.get("status") != "INACTIVE"]:
            raise NotRunning(f"{unit.name}: ECS service {service} not found in cluster {cluster} ({env_name})")
        task_definition = found["services"][0]["taskDefinition"]
        containers = ecs.describe_task_definition(taskDefinition=task_definition)["taskDefinition"][
            "containerDefinitions"
        ]
        images = [c["image"] for c in containers if c.get("name") == CONTAINER_NAME] or (
            [containers[0]["image"]] if len(containers) == 1 else []
        )
        if not images:
            raise NotRunning(f"{unit.name}: task definition {task_definition} has no container {CONTAINER_NAME!r}")
        return images[0]
    (endpoint,) = stack_outputs.require(values, (stack_outputs.ENDPOINT_NAME,), env_name, unit.name)
    sagemaker = session.client("sagemaker")
    component = values.get(stack_outputs.INFERENCE_COMPONENT_NAME)
    if component:  # on a fleet's shared endpoint, whose variant names no model: the component names it
        try:
            specification = sagemaker.describe_inference_component(InferenceComponentName=component)["Specification"]
        except aws_sessions.AWS_ERRORS as exc:
            raise NotRunning(
                f"{unit.name}: SageMaker inference component {component} on endpoint {endpoint} "
                f"not found ({env_name}): {' '.join(str(exc).split())}"
            ) from None
        if not specification.get("ModelName"):
            raise NotRunning(f"{unit.name}: inference component {component} names no SageMaker model")
        return _model_image(sagemaker, unit.name, specification["ModelName"])
    try:
        config_name = sagemaker.describe_endpoint(EndpointName=endpoint)["EndpointConfigName"]
    except aws_sessions.AWS_ERRORS as exc:
        raise NotRunning(
            f"{unit.name}: SageMaker endpoint {endpoint} not found ({env_name}): {' '.join(str(exc).split())}"
        ) from None
    variants = sagemaker.describe_endpoint_config(EndpointConfigName=config_name)["ProductionVariants"]
    model_names = sorted({v["ModelName"] for v in variants if v.get("ModelName")})
    if len(model_names) != 1:
        raise NotRunning(f"{unit.name}: endpoint {endpoint} serves {len(model_names)} models; expected 1")
    return _model_image(sagemaker, unit.name, model_names[0])


def _model_image(sagemaker, unit: str, model_name: str) -> str:
    described = sagemaker.describe_model(ModelName=model_name)
    container = described.get("PrimaryContainer") or (described.get("Containers") or [{}])[0]
    if not container.get("Image"):
        raise NotRunning(f"{unit}: SageMaker model {model_name} names no image")
    return container["Image"]
