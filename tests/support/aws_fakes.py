"""Deployed environments on moto for the promote and smoke tests: accounts reached through each
environment's deploy_role_arn, serving stacks whose outputs name an ECS service or SageMaker endpoint,
and ECR images with real blobs (so a copy can move layers)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import yaml

from inferstack.neuron.task import CONTAINER_NAME

ACCOUNTS = {"dev": "111111111111", "staging": "222222222222", "prod": "333333333333"}
ASSET_REPOSITORY = "cdk-hnb659fds-container-assets-{account}-{region}"
MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def with_deploy_roles(config_dir: Path) -> None:
    """Give every environment a deploy role in its own account (moto then keeps accounts apart)."""
    path = config_dir / "environments.yaml"
    data = yaml.safe_load(path.read_text())
    for env in data["environments"].values():
        env["deploy_role_arn"] = f"arn:aws:iam::{env['account']}:role/inferstack-deploy"
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def session(env: str, region: str = "us-east-1") -> boto3.Session:
    credentials = boto3.client("sts", region_name=region).assume_role(
        RoleArn=f"arn:aws:iam::{ACCOUNTS[env]}:role/inferstack-deploy", RoleSessionName="test-setup"
    )["Credentials"]
    return boto3.Session(
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
        region_name=region,
    )


def create_stack(sess: boto3.Session, name: str, outputs: dict[str, str]) -> None:
    template = {
        "Resources": {"Marker": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    sess.client("cloudformation").create_stack(StackName=name, TemplateBody=json.dumps(template))


@dataclass
class PushedImage:
    uri: str  # by tag, as CDK deploys it
    tag: str
    digest: str
    blobs: dict[str, bytes] = field(default_factory=dict)  # digest -> content


def push_image(sess: boto3.Session, repository: str, seed: str) -> PushedImage:
    ecr = sess.client("ecr")
    try:
        ecr.create_repository(repositoryName=repository)
    except ecr.exceptions.RepositoryAlreadyExistsException:
        pass
    blobs = {}
    for part in ("config", "layer"):
        content = f"{seed}-{part}".encode()
        blobs["sha256:" + hashlib.sha256(content).hexdigest()] = content
    config_digest, layer_digest = blobs
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": len(blobs[config_digest]),
                "digest": config_digest,
            },
            "layers": [
                {
                    "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": len(blobs[layer_digest]),
                    "digest": layer_digest,
                }
            ],
        }
    )
    tag = hashlib.sha256(seed.encode()).hexdigest()  # like a CDK asset hash
    image = ecr.put_image(
        repositoryName=repository, imageManifest=manifest, imageManifestMediaType=MANIFEST_TYPE, imageTag=tag
    )["image"]
    account = sess.client("sts").get_caller_identity()["Account"]
    uri = f"{account}.dkr.ecr.{sess.region_name}.amazonaws.com/{repository}:{tag}"
    return PushedImage(uri, tag, image["imageId"]["imageDigest"], blobs)


def deploy_neuron(sess: boto3.Session, env: str, model: str, image_uri: str) -> None:
    ecs = sess.client("ecs")
    cluster = f"{env}-{model}-cluster"
    ecs.create_cluster(clusterName=cluster)
    task = ecs.register_task_definition(
        family=f"{env}-{model}", containerDefinitions=[{"name": CONTAINER_NAME, "image": image_uri, "memory": 1024}]
    )["taskDefinition"]["taskDefinitionArn"]
    ecs.create_service(cluster=cluster, serviceName=f"{model}-service", taskDefinition=task, desiredCount=1)
    create_stack(
        sess,
        f"{env}-{model}",
        {"ClusterName": cluster, "ServiceName": f"{model}-service", "Url": "http://internal-lb.example"},
    )


def deploy_triton(sess: boto3.Session, env: str, model: str, image_uri: str) -> str:
    sagemaker = sess.client("sagemaker")
    account = sess.client("sts").get_caller_identity()["Account"]
    sagemaker.create_model(
        ModelName=f"{model}-model",
        PrimaryContainer={"Image": image_uri},
        ExecutionRoleArn=f"arn:aws:iam::{account}:role/sagemaker",
    )
    sagemaker.create_endpoint_config(
        EndpointConfigName=f"{model}-config",
        ProductionVariants=[
            {
                "VariantName": "AllTraffic",
                "ModelName": f"{model}-model",
                "InitialInstanceCount": 1,
                "InstanceType": "ml.g4dn.xlarge",
            }
        ],
    )
    endpoint = f"{env}-{model}"
    sagemaker.create_endpoint(EndpointName=endpoint, EndpointConfigName=f"{model}-config")
    create_stack(sess, f"{env}-{model}", {"EndpointName": endpoint, "DashboardName": f"{model}-dashboard"})
    return endpoint


def deploy_triton_component(sess: boto3.Session, env: str, model: str, image_uri: str, fleet: str) -> str:
    """A Triton model as an inference component on its fleet's shared endpoint (created with the first
    member). moto models components only with rehearsal.moto_patches' sagemaker-variant-without-model
    and sagemaker-inference-components applied."""
    sagemaker = sess.client("sagemaker")
    account = sess.client("sts").get_caller_identity()["Account"]
    endpoint = f"{env}-{fleet}"
    if not sagemaker.list_endpoints(NameContains=endpoint)["Endpoints"]:
        sagemaker.create_endpoint_config(
            EndpointConfigName=f"{fleet}-config",
            ProductionVariants=[
                {
                    "VariantName": "AllTraffic",
                    "InitialInstanceCount": 1,
                    "InstanceType": "ml.g4dn.xlarge",
                    "ManagedInstanceScaling": {"Status": "ENABLED", "MinInstanceCount": 0, "MaxInstanceCount": 4},
                }
            ],
            ExecutionRoleArn=f"arn:aws:iam::{account}:role/sagemaker",
        )
        sagemaker.create_endpoint(EndpointName=endpoint, EndpointConfigName=f"{fleet}-config")
    sagemaker.create_model(
        ModelName=f"{model}-model",
        PrimaryContainer={"Image": image_uri},
        ExecutionRoleArn=f"arn:aws:iam::{account}:role/sagemaker",
    )
    component = f"{env}-{model}"
    sagemaker.create_inference_component(
        InferenceComponentName=component,
        EndpointName=endpoint,
        VariantName="AllTraffic",
        Specification={
            "ModelName": f"{model}-model",
            "ComputeResourceRequirements": {"NumberOfAcceleratorDevicesRequired": 1, "MinMemoryRequiredInMb": 1024},
        },
        RuntimeConfig={"CopyCount": 1},
    )
    create_stack(
        sess,
        f"{env}-{model}",
        {"EndpointName": endpoint, "InferenceComponentName": component, "DashboardName": f"{model}-dashboard"},
    )
    return component
