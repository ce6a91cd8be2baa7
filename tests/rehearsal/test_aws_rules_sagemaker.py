"""The SageMaker rules (rehearsal/aws_rules/sagemaker.py) at the moto-backend level: plain moto accepting what AWS
refuses, the rule refusing it as AWS does, and the rule accepting what AWS accepts."""

from __future__ import annotations

import json

import boto3
import botocore.exceptions
import pytest
from moto import mock_aws

from rehearsal import moto_patches
from rehearsal.aws_rules import sagemaker as rules

REGION = "us-east-1"
ENDPOINT = "dev-bert"
# Workarounds the update needs in moto before any rule can be met: the endpoint is named as the template says, and
# a replaced EndpointConfig reaches the Endpoint that names it by Fn::GetAtt.
WORKAROUNDS = ("sagemaker-endpoint-name", "new-values-update-readers")


def endpoint_stack(instance_type: str = "ml.g4dn.xlarge", *, variant: str = "AllTraffic", image: str = "1") -> str:
    """A dedicated endpoint as TritonEndpoint builds it: Model, EndpointConfig (CloudFormation names both) and the
    Endpoint on it."""
    return json.dumps(
        {
            "Resources": {
                "Model": {
                    "Type": "AWS::SageMaker::Model",
                    "Properties": {
                        "ExecutionRoleArn": "arn:aws:iam::123456789012:role/x",
                        "PrimaryContainer": {
                            "Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/m@sha256:" + image * 64
                        },
                    },
                },
                "Config": {
                    "Type": "AWS::SageMaker::EndpointConfig",
                    "Properties": {
                        "ProductionVariants": [
                            {
                                "ModelName": {"Fn::GetAtt": ["Model", "ModelName"]},
                                "VariantName": variant,
                                "InitialInstanceCount": 1,
                                "InstanceType": instance_type,
                            }
                        ]
                    },
                },
                "Endpoint": {
                    "Type": "AWS::SageMaker::Endpoint",
                    "Properties": {
                        "EndpointName": ENDPOINT,
                        "EndpointConfigName": {"Fn::GetAtt": ["Config", "EndpointConfigName"]},
                    },
                },
            }
        }
    )


def register(variant: str = "AllTraffic") -> None:
    """What the stack's AWS::ApplicationAutoScaling::ScalableTarget does on AWS (moto's CloudFormation skips it)."""
    boto3.client("application-autoscaling").register_scalable_target(
        ServiceNamespace="sagemaker",
        ResourceId=rules.variant_resource_id(ENDPOINT, variant),
        ScalableDimension=rules.VARIANT_DIMENSION,
        MinCapacity=1,
        MaxCapacity=4,
    )


def deployed(stack: str, template: str, *, registered: bool = True) -> None:
    boto3.client("cloudformation").create_stack(StackName=stack, TemplateBody=template)
    if registered:
        register()


def running() -> tuple[str, str]:
    """(instance type, variant) the endpoint runs."""
    sagemaker = boto3.client("sagemaker")
    config = sagemaker.describe_endpoint(EndpointName=ENDPOINT)["EndpointConfigName"]
    (variant,) = sagemaker.describe_endpoint_config(EndpointConfigName=config)["ProductionVariants"]
    return variant["InstanceType"], variant["VariantName"]


def update(stack: str, template: str) -> None:
    boto3.client("cloudformation").update_stack(StackName=stack, TemplateBody=template)


# ----------------------------------------------------------------------------- autoscaled-variant-update


def test_rule_autoscaled_variant_update(moto_env):
    with mock_aws(), moto_patches.applied(*WORKAROUNDS):
        deployed("plain", endpoint_stack())
        update("plain", endpoint_stack("ml.g4dn.2xlarge"))  # plain moto: accepted, the target still registered
        assert running() == ("ml.g4dn.2xlarge", "AllTraffic")

    with mock_aws(), moto_patches.applied(*WORKAROUNDS, "autoscaled-variant-update"):
        deployed("refused", endpoint_stack())
        with pytest.raises(botocore.exceptions.ClientError) as refused:
            update("refused", endpoint_stack("ml.g4dn.2xlarge"))
        assert refused.value.response["Error"]["Code"] == "ValidationException"
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert refused.value.response["Error"]["Message"] == (
            "Endpoint dev-bert: the update changes the instance type of, or removes, variant(s) that are registered "
            "as Application Auto Scaling scalable targets: AllTraffic (ml.g4dn.xlarge -> ml.g4dn.2xlarge). "
            "Deregister the scalable target(s) before the update (DeregisterScalableTarget) and register them "
            "again after it."
        )
        # a new variant name removes the autoscaled one: refused too
        with pytest.raises(botocore.exceptions.ClientError, match=r"AllTraffic \(removed\)"):
            update("refused", endpoint_stack("ml.g4dn.2xlarge", variant="G4dn2xlarge"))


def test_rule_autoscaled_variant_update__accepts_what_aws_accepts(moto_env):
    with mock_aws(), moto_patches.applied(*WORKAROUNDS, "autoscaled-variant-update"):
        scaling = boto3.client("application-autoscaling")
        # the same instance type with a new model (a new image): "If you change the model for a variant that is
        # configured for auto scaling, Amazon SageMaker auto scaling allows the update"
        deployed("model", endpoint_stack())
        update("model", endpoint_stack(image="2"))
        assert running() == ("ml.g4dn.xlarge", "AllTraffic")
        # the target deregistered first, as the docs say to: the new instance type goes through
        scaling.deregister_scalable_target(
            ServiceNamespace="sagemaker",
            ScalableDimension=rules.VARIANT_DIMENSION,
            ResourceId=rules.variant_resource_id(ENDPOINT, "AllTraffic"),
        )
        update("model", endpoint_stack("ml.g4dn.2xlarge", image="2"))
        assert running() == ("ml.g4dn.2xlarge", "AllTraffic")
        register()  # and registered again after
        # an endpoint whose variant is no scalable target changes instance type freely
        boto3.client("cloudformation").delete_stack(StackName="model")
        scaling.deregister_scalable_target(
            ServiceNamespace="sagemaker",
            ScalableDimension=rules.VARIANT_DIMENSION,
            ResourceId=rules.variant_resource_id(ENDPOINT, "AllTraffic"),
        )
        deployed("unscaled", endpoint_stack(), registered=False)
        update("unscaled", endpoint_stack("ml.g4dn.2xlarge"))
        assert running() == ("ml.g4dn.2xlarge", "AllTraffic")
