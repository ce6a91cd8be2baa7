"""An instance-type change of an autoscaled dedicated endpoint, deployed through CloudFormation on moto with the
rule AWS enforces and moto does not (rehearsal/aws_rules/sagemaker.py, autoscaled-variant-update): staging's
t5-spelling stack is created as synthesized, its variant registered as the stack's ScalableTarget registers it on
AWS, and the stack is updated to the same config with another `capacity.instance_type`.

- Without the scaling handover (the template as TritonEndpoint wrote it before inferstack.constructs.scaling_handover:
  the same resources less the two Custom::ScalingHandover and the DependsOn on them), the Endpoint's update meets
  the registered target and is refused, as UpdateEndpoint is on AWS.
- With it, the update completes: the endpoint keeps its name, runs the new instance type, and its variant is a
  registered scalable target again with the template's range, scheduled actions and policy.

What moto cannot do is done here, in the open: the imports come from a stand-in foundation stack exporting the same
names; the scalable target is registered by hand after the create (moto's CloudFormation does not model
AWS::ApplicationAutoScaling::*, so on moto it is the handover alone that registers it again after the update).
moto's own defects on this path are worked around by the CLI rehearsal's named patches (rehearsal/moto_patches.py,
each shown failing on plain moto in tests/rehearsal/test_cli_deploy.py): among them, the handover's Lambda runs
in-process (scaling-handover), a replaced EndpointConfig is deleted in the cleanup phase
(sagemaker-replacements-in-cleanup), an update runs its resources in dependency order (updates-in-dependency-order)
and deregistering a target deletes its policy (deregister-keeps-policies), so the policy found after the update is
the one the handover put back."""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
from collections.abc import Iterator

import boto3
import botocore.exceptions
import pytest
import yaml
from moto import mock_aws

from inferstack import config
from inferstack.constructs.scaling_handover import RESOURCE_TYPE
from rehearsal import moto_patches
from rehearsal.aws_rules import sagemaker as rules
from tests.support.paths import CONFIG_DIR
from tests.support.synth import synth
from tests.support.templates import only, resources

ENV, MODEL, NEW_TYPE = "staging", "t5-spelling", "ml.g4dn.2xlarge"
ENDPOINT = f"{ENV}-{MODEL}"
RESOURCE_ID = rules.variant_resource_id(ENDPOINT, "AllTraffic")
# moto's own defects on this path, worked around by the CLI rehearsal's named patches (in the order PATCHES has
# them: updates-in-dependency-order orders what new-values-update-readers adds).
WORKAROUNDS = (
    "sagemaker-endpoint-name",
    "getatt-of-unmodeled-resource",
    "scaling-handover",
    "new-values-update-readers",
    "sagemaker-replacements-in-cleanup",
    "updates-in-dependency-order",
    "deregister-keeps-policies",
)

pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse .* not supported by moto:UserWarning")


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> tuple[dict, dict]:
    """(before, after): staging's t5-spelling as shipped, and after its staging capacity moves to NEW_TYPE (with a
    throughput profile for it, as the planner needs)."""
    config_dir = tmp_path_factory.mktemp("instance-type") / "model_configs"
    shutil.copytree(CONFIG_DIR, config_dir)
    project = config.load(config_dir)
    path = config_dir / f"{MODEL}.yaml"
    data = yaml.safe_load(path.read_text())
    data["throughput_profile"][NEW_TYPE] = {
        "throughput_per_second": 150,
        "p99_latency_ms": 35,
        "source": "estimate for this test",
    }
    data["environments"][ENV]["capacity"]["instance_type"] = NEW_TYPE
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    before = synth(project, [ENV], tmp_path_factory.mktemp("before")).templates[ENV][MODEL]
    after = synth(config.load(config_dir), [ENV], tmp_path_factory.mktemp("after")).templates[ENV][MODEL]
    return before, after


def without_handover(template: dict) -> dict:
    """The template as TritonEndpoint wrote it before the scaling handover."""
    copied = copy.deepcopy(template)
    gone = set(resources(copied, RESOURCE_TYPE))
    for name in gone:
        del copied["Resources"][name]
    for resource in copied["Resources"].values():
        if "DependsOn" in resource:
            kept = [d for d in resource["DependsOn"] if d not in gone]
            if kept:
                resource["DependsOn"] = kept
            else:
                del resource["DependsOn"]
    return copied


def test_the_change_moves_the_instance_type_and_keeps_the_endpoint_and_its_logical_ids(templates):
    before, after = templates
    assert set(before["Resources"]) == set(after["Resources"])  # nothing added, removed or renamed
    (variant,) = only(after, "AWS::SageMaker::EndpointConfig")[1]["Properties"]["ProductionVariants"]
    assert variant["InstanceType"] == NEW_TYPE and variant["VariantName"] == "AllTraffic"
    assert only(after, "AWS::SageMaker::Endpoint")[1]["Properties"]["EndpointName"] == ENDPOINT
    assert only(before, "AWS::SageMaker::Endpoint") == only(after, "AWS::SageMaker::Endpoint")
    for handover in resources(after, RESOURCE_TYPE).values():
        assert handover["Properties"]["InstanceType"] == NEW_TYPE


# ----------------------------------------------------------------------------- moto, with what it lacks


def foundation_stand_in(template: dict) -> dict:
    """A stack exporting every name `template` imports: a VPC and subnets, an SNS topic, a KMS key's ARN (nothing
    here encrypts with it)."""
    names = sorted({value for value in _imports(template)})
    resources_ = {
        "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.20.0.0/16"}},
        "Topic": {"Type": "AWS::SNS::Topic", "Properties": {}},
    }
    outputs = {}
    for index, name in enumerate(names):
        if "Subnet" in name:
            resources_[f"Subnet{index}"] = {
                "Type": "AWS::EC2::Subnet",
                "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": f"10.20.{index}.0/24"},
            }
            value = {"Ref": f"Subnet{index}"}
        elif "Vpc" in name:
            value = {"Ref": "Vpc"}
        elif "Key" in name:
            value = "arn:aws:kms:us-east-1:222222222222:key/00000000-0000-0000-0000-000000000000"
        else:
            value = {"Ref": "Topic"}
        outputs[f"Out{index}"] = {"Value": value, "Export": {"Name": name}}
    return {"Resources": resources_, "Outputs": outputs}


def _imports(value) -> Iterator[str]:
    if isinstance(value, dict):
        if set(value) == {"Fn::ImportValue"}:
            yield value["Fn::ImportValue"]
            return
        for item in value.values():
            yield from _imports(item)
    elif isinstance(value, list):
        for item in value:
            yield from _imports(item)


@contextlib.contextmanager
def emulator(monkeypatch, account: str) -> Iterator[None]:
    monkeypatch.setenv("MOTO_ACCOUNT_ID", account)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with (
        mock_aws(config={"lambda": {"use_docker": False}}),
        moto_patches.applied(*WORKAROUNDS, "autoscaled-variant-update"),
    ):
        yield


def deploy(template: dict) -> None:
    """Create the stand-in foundation and the serving stack, then register its scalable target as the stack's
    ScalableTarget does on AWS (its template's range, scheduled actions and policy)."""
    boto3.client("ssm").put_parameter(Name="/cdk-bootstrap/hnb659fds/version", Value="30", Type="String")
    cloudformation = boto3.client("cloudformation")
    cloudformation.create_stack(StackName=f"{ENV}-Foundation", TemplateBody=json.dumps(foundation_stand_in(template)))
    cloudformation.create_stack(
        StackName=ENDPOINT, TemplateBody=json.dumps(template), Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"]
    )
    _, target = only(template, "AWS::ApplicationAutoScaling::ScalableTarget")
    _, policy = only(template, "AWS::ApplicationAutoScaling::ScalingPolicy")
    props = target["Properties"]
    scaling = boto3.client("application-autoscaling")
    key = {k: props[k] for k in ("ServiceNamespace", "ResourceId", "ScalableDimension")}
    scaling.register_scalable_target(
        **key, MinCapacity=props["MinCapacity"], MaxCapacity=props["MaxCapacity"], RoleARN=props["RoleARN"]
    )
    scaling.put_scaling_policy(
        **key,
        PolicyName=policy["Properties"]["PolicyName"],
        PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration=policy["Properties"]["TargetTrackingScalingPolicyConfiguration"],
    )


def live() -> dict:
    sagemaker, scaling = boto3.client("sagemaker"), boto3.client("application-autoscaling")
    endpoint = sagemaker.describe_endpoint(EndpointName=ENDPOINT)
    (variant,) = sagemaker.describe_endpoint_config(EndpointConfigName=endpoint["EndpointConfigName"])[
        "ProductionVariants"
    ]
    targets = scaling.describe_scalable_targets(ServiceNamespace="sagemaker", ResourceIds=[RESOURCE_ID])[
        "ScalableTargets"
    ]
    policies = scaling.describe_scaling_policies(ServiceNamespace="sagemaker", ResourceId=RESOURCE_ID)[
        "ScalingPolicies"
    ]
    return {
        "status": endpoint["EndpointStatus"],
        "instance_type": variant["InstanceType"],
        "variant": variant["VariantName"],
        "range": [(t["MinCapacity"], t["MaxCapacity"]) for t in targets],
        "policies": [(p["PolicyName"], p["TargetTrackingScalingPolicyConfiguration"]["TargetValue"]) for p in policies],
    }


def planned(template: dict) -> dict:
    props = only(template, "AWS::ApplicationAutoScaling::ScalableTarget")[1]["Properties"]
    policy = only(template, "AWS::ApplicationAutoScaling::ScalingPolicy")[1]["Properties"]
    (variant,) = only(template, "AWS::SageMaker::EndpointConfig")[1]["Properties"]["ProductionVariants"]
    return {
        "status": "InService",
        "instance_type": variant["InstanceType"],
        "variant": "AllTraffic",
        "range": [(props["MinCapacity"], props["MaxCapacity"])],
        "policies": [(policy["PolicyName"], policy["TargetTrackingScalingPolicyConfiguration"]["TargetValue"])],
    }


def test_without_the_handover_aws_refuses_the_update(templates, monkeypatch, project):
    before, after = (without_handover(t) for t in templates)
    with emulator(monkeypatch, project.environments[ENV].account):
        deploy(before)
        assert live() == planned(before)
        with pytest.raises(botocore.exceptions.ClientError) as refused:
            boto3.client("cloudformation").update_stack(
                StackName=ENDPOINT, TemplateBody=json.dumps(after), Capabilities=["CAPABILITY_IAM"]
            )
        assert refused.value.response["Error"]["Code"] == "ValidationException"
        assert f"AllTraffic (ml.g4dn.xlarge -> {NEW_TYPE})" in refused.value.response["Error"]["Message"]


def test_with_the_handover_the_update_deploys_and_scaling_is_registered_again(templates, monkeypatch, project):
    before, after = templates
    with emulator(monkeypatch, project.environments[ENV].account):
        deploy(before)
        assert live() == planned(before)
        boto3.client("cloudformation").update_stack(
            StackName=ENDPOINT, TemplateBody=json.dumps(after), Capabilities=["CAPABILITY_IAM"]
        )
        assert live() == planned(after)  # same name, new instance type, the target and its policy registered
        assert planned(after)["instance_type"] == NEW_TYPE
        release, restore = sorted(resources(after, RESOURCE_TYPE), key=lambda name: "Restore" in name)
        assert moto_patches.SCALING_HANDOVERS == [  # in the order CloudFormation (here: moto) ran them
            (release, "Create", "no endpoint"),
            (restore, "Create", "kept"),  # the stack's create: nothing to do
            (release, "Update", "released"),  # before UpdateEndpoint: the target deregistered
            (restore, "Update", "restored"),  # after it: registered again with its policy
        ]
