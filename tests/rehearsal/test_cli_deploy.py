"""The README's deploy path rehearsed with the real CDK CLI against moto's server (rehearsal/
cli_deploy.py), once, and each named moto workaround (rehearsal/moto_patches.py) shown at the
moto-backend level: the defect without the patch, fixed with it."""

from __future__ import annotations

import json
import os
import warnings

import boto3
import pytest
from moto import mock_aws

from rehearsal import moto_patches

ACCOUNT, REGION = "111111111111", "us-east-1"


def test_every_patch_is_named_documented_and_tested_here():
    tested = {
        name.removeprefix("test_patch_").split("__")[0].replace("_", "-")
        for name in globals()
        if name.startswith("test_patch_")
    }
    assert tested == {p.name for p in moto_patches.PATCHES}
    assert all(p.defect and p.apply.__doc__ for p in moto_patches.PATCHES)


def test_patches_refuse_another_moto_version(monkeypatch):
    import moto

    monkeypatch.setattr(moto, "__version__", "9.9.9")
    with pytest.raises(RuntimeError, match="written for moto 5.2.5"):
        moto_patches.apply_all()


# ----------------------------------------------------------------------------- account-from-access-key


def _response_signed_by(key: str):
    from moto.core.responses import BaseResponse

    response = BaseResponse()
    response.headers = {
        "Authorization": f"AWS4-HMAC-SHA256 Credential={key}/20260101/{REGION}/sts/aws4_request, "
        f"SignedHeaders=host, Signature=00"
    }
    response.querystring = {}
    return response


def test_patch_account_from_access_key():
    from moto.iam import models as iam_models

    def account_of_request() -> str:
        return iam_models.get_account_id_from(_response_signed_by(ACCOUNT).get_access_key())

    assert account_of_request() == "123456789012"  # moto's default account: the CLI refuses to deploy
    with moto_patches.applied("account-from-access-key"):
        assert account_of_request() == ACCOUNT
        assert iam_models.get_account_id_from("AKIAIOSFODNN7EXAMPLE") == "123456789012"  # other keys unchanged
    assert account_of_request() == "123456789012"  # undone


# ----------------------------------------------------------------------------- kms-key-cloudformation-tags


def _key_from_cloudformation():
    from moto.kms.models import Key

    return Key.create_from_cloudformation_json(
        "PlatformKey",
        {
            "Properties": {
                "KeyPolicy": {"Version": "2012-10-17", "Statement": []},
                "EnableKeyRotation": True,
                "Tags": [{"Key": "team", "Value": "ml"}],
            }
        },
        "123456789012",
        REGION,
    )


def test_patch_kms_key_cloudformation_tags(moto_env):
    with mock_aws():
        with pytest.raises(KeyError, match="TagKey"):
            _key_from_cloudformation()
        with moto_patches.applied("kms-key-cloudformation-tags"):
            key = _key_from_cloudformation()
        tags = boto3.client("kms").list_resource_tags(KeyId=key.id)["Tags"]
        assert tags == [{"TagKey": "team", "TagValue": "ml"}]


# ----------------------------------------------------------------------------- change-set-outputs-and-exports


def exporting(suffix: str) -> dict:
    return {
        "Resources": {
            "Param": {
                "Type": "AWS::SSM::Parameter",
                "Properties": {"Name": f"/rehearsal/{suffix}", "Type": "String", "Value": "v1"},
            }
        },
        "Outputs": {"Name": {"Value": {"Ref": "Param"}, "Export": {"Name": "shared-param"}}},
    }


EXPORTING = exporting("param")
IMPORTING = {
    "Resources": {
        "Copy": {
            "Type": "AWS::SSM::Parameter",
            "Properties": {"Name": "/rehearsal/copy", "Type": "String", "Value": {"Fn::ImportValue": "shared-param"}},
        }
    },
    "Outputs": {"Copied": {"Value": {"Ref": "Copy"}}},
}


def _deploy_through_change_set(cloudformation, name: str, template: dict) -> dict:
    cloudformation.create_change_set(
        StackName=name, ChangeSetName="cdk-deploy-change-set", ChangeSetType="CREATE", TemplateBody=json.dumps(template)
    )
    try:
        cloudformation.execute_change_set(StackName=name, ChangeSetName="cdk-deploy-change-set")
    except Exception as exc:  # moto raises the creation error through the API
        return {"StackStatus": "error", "error": str(exc)}
    return cloudformation.describe_stacks(StackName=name)["Stacks"][0]


def test_patch_change_set_outputs_and_exports(moto_env):
    with mock_aws():
        cloudformation = boto3.client("cloudformation")
        plain = _deploy_through_change_set(cloudformation, "plain", exporting("plain"))
        assert plain["StackStatus"] == "CREATE_COMPLETE" and "Outputs" not in plain  # no outputs
        assert cloudformation.list_exports()["Exports"] == []  # no exports
        with moto_patches.applied("change-set-outputs-and-exports"):
            exporter = _deploy_through_change_set(cloudformation, "exporting", EXPORTING)
            importer = _deploy_through_change_set(cloudformation, "importing", IMPORTING)
        assert exporter["StackStatus"] == "CREATE_COMPLETE"
        assert [(o["OutputKey"], o["OutputValue"], o.get("ExportName")) for o in exporter["Outputs"]] == [
            ("Name", "/rehearsal/param", "shared-param")
        ]
        (export,) = cloudformation.list_exports()["Exports"]
        assert (export["Name"], export["ExportingStackId"]) == ("shared-param", exporter["StackId"])
        assert importer["StackStatus"] == "CREATE_COMPLETE"
        assert importer["Outputs"] == [{"OutputKey": "Copied", "OutputValue": "/rehearsal/copy"}]
        assert boto3.client("ssm").get_parameter(Name="/rehearsal/copy")["Parameter"]["Value"] == "/rehearsal/param"


def test_change_set_patch_reports_a_failed_create_as_create_failed(moto_env):
    with mock_aws(), moto_patches.applied("change-set-outputs-and-exports"):
        cloudformation = boto3.client("cloudformation")
        failed = _deploy_through_change_set(cloudformation, "importing", IMPORTING)  # nothing exports it
        assert failed["StackStatus"] == "CREATE_FAILED"
        events = cloudformation.describe_stack_events(StackName="importing")["StackEvents"]
        assert any("shared-param" in (e.get("ResourceStatusReason") or "") for e in events)


# ----------------------------------------------------------------------------- template-url-on-loopback


def test_patch_template_url_on_loopback(moto_env):
    from moto.cloudformation.responses import CloudFormationResponse

    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="cdk-assets")
        s3.put_object(Bucket="cdk-assets", Key="stack.json", Body=b'{"Resources": {}}')
        response = CloudFormationResponse()
        response.current_account, response.partition = "123456789012", "aws"
        url = "http://127.0.0.1:45123/cdk-assets/stack.json"  # what the CLI passes with AWS_ENDPOINT_URL
        with pytest.raises(Exception, match="NoSuchBucket|bucket does not exist"):
            response._get_stack_from_s3_url(url)
        with moto_patches.applied("template-url-on-loopback"):
            assert response._get_stack_from_s3_url(url) == '{"Resources": {}}'


# ----------------------------------------------------------------------------- custom-resources-without-docker


def _custom_resource():
    from moto.cloudformation.custom_model import CustomModel

    iam = boto3.client("iam")
    role = iam.create_role(RoleName="provider", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    function = boto3.client("lambda").create_function(
        FunctionName="provider",
        Runtime="nodejs22.x",
        Role=role,
        Handler="index.handler",
        Code={"ZipFile": b"PK\x05\x06" + b"\x00" * 18},
    )["FunctionArn"]
    stack = boto3.client("cloudformation").create_stack(StackName="holder", TemplateBody=json.dumps(EXPORTING))
    return CustomModel.create_from_cloudformation_json(
        "RestrictDefaultSG",
        {"Properties": {"ServiceToken": function}},
        "123456789012",
        REGION,
        LogicalId="RestrictDefaultSG",
        StackId=stack["StackId"],
        ResourceType="Custom::VpcRestrictDefaultSG",
    )


# Plain moto still starts a thread that tries the Docker socket for the provider Lambda and dies there:
# that failure is the defect this test shows, not a fault of the test.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_patch_custom_resources_without_docker(moto_env):
    # Lambda without Docker: moto's invoke returns at once and nobody answers the ResponseURL.
    with mock_aws(config={"lambda": {"use_docker": False}}):
        assert not _custom_resource().is_created()  # CloudFormation would wait for it forever
    with mock_aws(config={"lambda": {"use_docker": False}}), moto_patches.applied("custom-resources-without-docker"):
        before = len(moto_patches.CUSTOM_RESOURCES_NOT_RUN)
        resource = _custom_resource()
        assert resource.is_created()
        assert moto_patches.CUSTOM_RESOURCES_NOT_RUN[before:][0][1:] == (
            "RestrictDefaultSG",
            "Custom::VpcRestrictDefaultSG",
        )


# ----------------------------------------------------------------------------- getatt-of-unmodeled-resource

READS_AN_ALARM = {
    "Resources": {
        "Alarm": {
            "Type": "AWS::CloudWatch::Alarm",
            "Properties": {
                "MetricName": "ModelLatency",
                "Namespace": "AWS/SageMaker",
                "Statistic": "Average",
                "Period": 60,
                "EvaluationPeriods": 1,
                "Threshold": 1,
                "ComparisonOperator": "GreaterThanThreshold",
            },
        },
        "Reader": {
            "Type": "AWS::SSM::Parameter",
            "Properties": {"Name": "/rehearsal/reader", "Type": "String", "Value": {"Fn::GetAtt": ["Alarm", "Arn"]}},
        },
    }
}


def test_patch_getatt_of_unmodeled_resource(moto_env):
    from moto.cloudformation.parsing import get_model_map

    assert "AWS::CloudWatch::Alarm" not in get_model_map()  # the premise: moto 5.2.5 skips alarms
    with mock_aws(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cloudformation = boto3.client("cloudformation")
        with pytest.raises(Exception, match="references undefined resource Alarm"):
            cloudformation.create_stack(StackName="plain", TemplateBody=json.dumps(READS_AN_ALARM))
        with moto_patches.applied("getatt-of-unmodeled-resource"):
            cloudformation.create_stack(StackName="patched", TemplateBody=json.dumps(READS_AN_ALARM))
        assert cloudformation.describe_stacks(StackName="patched")["Stacks"][0]["StackStatus"] == "CREATE_COMPLETE"
        resources = cloudformation.list_stack_resources(StackName="patched")["StackResourceSummaries"]
        resources = [r for r in resources if r["LogicalResourceId"]]  # moto also lists unnamed entries
        assert [r["LogicalResourceId"] for r in resources] == ["Reader"]  # the alarm is still not created
        value = boto3.client("ssm").get_parameter(Name=resources[0]["PhysicalResourceId"])["Parameter"]["Value"]
        assert value == f"arn:aws:unmodeled:{REGION}:123456789012:Alarm/Arn"


# ----------------------------------------------------------------------------- target-group-getatt

READS_A_TARGET_GROUP = {
    "Resources": {
        "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}},
        "Group": {
            "Type": "AWS::ElasticLoadBalancingV2::TargetGroup",
            "Properties": {
                "Name": {"Ref": "AWS::StackName"},
                "Port": 8080,
                "Protocol": "HTTP",
                "VpcId": {"Ref": "Vpc"},
            },
        },
        "Reader": {
            "Type": "AWS::SSM::Parameter",
            "Properties": {
                "Name": {"Fn::Sub": "/rehearsal/${AWS::StackName}"},
                "Type": "String",
                "Value": {"Fn::GetAtt": ["Group", "TargetGroupFullName"]},
            },
        },
    }
}


def test_patch_target_group_getatt(moto_env):
    with mock_aws():
        cloudformation = boto3.client("cloudformation")
        with pytest.raises(AttributeError, match="get_cfn_attribute"):
            cloudformation.create_stack(StackName="plain", TemplateBody=json.dumps(READS_A_TARGET_GROUP))
        with moto_patches.applied("target-group-getatt"):
            cloudformation.create_stack(StackName="patched", TemplateBody=json.dumps(READS_A_TARGET_GROUP))
        (group,) = boto3.client("elbv2").describe_target_groups(Names=["patched"])["TargetGroups"]
        value = boto3.client("ssm").get_parameter(Name="/rehearsal/patched")["Parameter"]["Value"]
        assert value == group["TargetGroupArn"].split(":")[-1]
        assert value.startswith("targetgroup/patched/")


# ----------------------------------------------------------------------------- listener-forward-config


def _weighted_listener_stack(name: str) -> dict:
    """A load balancer whose listener forwards to two target groups, weighted (ECS blue/green's shape)."""
    subnets = {
        f"Subnet{i}": {
            "Type": "AWS::EC2::Subnet",
            "Properties": {
                "VpcId": {"Ref": "Vpc"},
                "CidrBlock": f"10.2.{i}.0/24",
                "AvailabilityZone": f"{REGION}{zone}",
            },
        }
        for i, zone in enumerate("ab")
    }
    groups = {
        g: {
            "Type": "AWS::ElasticLoadBalancingV2::TargetGroup",
            "Properties": {
                "Name": f"{name}-{g.lower()}",
                "Port": 8080,
                "Protocol": "HTTP",
                "TargetType": "ip",
                "VpcId": {"Ref": "Vpc"},
            },
        }
        for g in ("Blue", "Green")
    }
    return {
        "Resources": {
            "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.2.0.0/16"}},
            **subnets,
            **groups,
            "Balancer": {
                "Type": "AWS::ElasticLoadBalancingV2::LoadBalancer",
                "Properties": {"Scheme": "internal", "Subnets": [{"Ref": s} for s in subnets]},
            },
            "Listener": {
                "Type": "AWS::ElasticLoadBalancingV2::Listener",
                "Properties": {
                    "LoadBalancerArn": {"Ref": "Balancer"},
                    "Port": 80,
                    "Protocol": "HTTP",
                    "DefaultActions": [
                        {
                            "Type": "forward",
                            "ForwardConfig": {
                                "TargetGroups": [
                                    {"TargetGroupArn": {"Ref": "Blue"}, "Weight": 100},
                                    {"TargetGroupArn": {"Ref": "Green"}, "Weight": 0},
                                ]
                            },
                        }
                    ],
                },
            },
        }
    }


def test_patch_listener_forward_config(moto_env):
    with mock_aws():
        cloudformation, elbv2 = boto3.client("cloudformation"), boto3.client("elbv2")
        with pytest.raises(KeyError, match="TargetGroupArn"):
            cloudformation.create_stack(StackName="plain", TemplateBody=json.dumps(_weighted_listener_stack("plain")))
        with moto_patches.applied("listener-forward-config"):
            cloudformation.create_stack(
                StackName="patched", TemplateBody=json.dumps(_weighted_listener_stack("patched"))
            )
        listener_arn = cloudformation.describe_stack_resource(StackName="patched", LogicalResourceId="Listener")[
            "StackResourceDetail"
        ]["PhysicalResourceId"]
        (listener,) = elbv2.describe_listeners(ListenerArns=[listener_arn])["Listeners"]
        (action,) = listener["DefaultActions"]
        groups = {g["TargetGroupArn"]: g["TargetGroupName"] for g in elbv2.describe_target_groups()["TargetGroups"]}
        assert action["Type"] == "forward"
        assert [(groups[t["TargetGroupArn"]], t["Weight"]) for t in action["ForwardConfig"]["TargetGroups"]] == [
            ("patched-blue", 100),
            ("patched-green", 0),
        ]


# ----------------------------------------------------------------------------- ecs-service-load-balancers


def _service_behind_a_target_group(name: str) -> dict:
    template = _weighted_listener_stack(name)
    template["Resources"].update(
        {
            "Cluster": {"Type": "AWS::ECS::Cluster", "Properties": {}},
            "Task": {
                "Type": "AWS::ECS::TaskDefinition",
                "Properties": {
                    "Family": "svc",
                    "ContainerDefinitions": [
                        {
                            "Name": "app",
                            "Image": "public.ecr.aws/x/y:1",
                            "Memory": 128,
                            "PortMappings": [{"ContainerPort": 8080}],
                        }
                    ],
                },
            },
            "Route": {
                "Type": "AWS::ElasticLoadBalancingV2::ListenerRule",
                "Properties": {
                    "ListenerArn": {"Ref": "Listener"},
                    "Priority": 1,
                    "Conditions": [{"Field": "path-pattern", "PathPatternConfig": {"Values": ["/*"]}}],
                    "Actions": template["Resources"]["Listener"]["Properties"]["DefaultActions"],
                },
            },
            "Service": {
                "Type": "AWS::ECS::Service",
                "Properties": {
                    "Cluster": {"Ref": "Cluster"},
                    "TaskDefinition": {"Ref": "Task"},
                    "DesiredCount": 0,
                    "LoadBalancers": [
                        {
                            "TargetGroupArn": {"Ref": "Blue"},
                            "ContainerName": "app",
                            "ContainerPort": 8080,
                            "AdvancedConfiguration": {
                                "AlternateTargetGroupArn": {"Ref": "Green"},
                                "ProductionListenerRule": {"Ref": "Route"},
                                "RoleArn": "arn:aws:iam::123456789012:role/ecs-lb",
                            },
                        }
                    ],
                },
            },
        }
    )
    return template


def _load_balancers_of_the_service(stack: str) -> list[dict]:
    cloudformation, ecs = boto3.client("cloudformation"), boto3.client("ecs")
    ids = {
        r["LogicalResourceId"]: r["PhysicalResourceId"]
        for r in cloudformation.describe_stack_resources(StackName=stack)["StackResources"]
    }
    (service,) = ecs.describe_services(cluster=ids["Cluster"], services=[ids["Service"]])["services"]
    return service.get("loadBalancers", [])


def test_patch_ecs_service_load_balancers(moto_env):
    with mock_aws(), moto_patches.applied("listener-forward-config"):
        cloudformation = boto3.client("cloudformation")
        cloudformation.create_stack(StackName="plain", TemplateBody=json.dumps(_service_behind_a_target_group("plain")))
        assert _load_balancers_of_the_service("plain") == []
        with moto_patches.applied("ecs-service-load-balancers"):
            cloudformation.create_stack(
                StackName="patched", TemplateBody=json.dumps(_service_behind_a_target_group("patched"))
            )
        (balancer,) = _load_balancers_of_the_service("patched")
        ids = {
            r["LogicalResourceId"]: r["PhysicalResourceId"]
            for r in cloudformation.describe_stack_resources(StackName="patched")["StackResources"]
        }
        assert balancer == {
            "targetGroupArn": ids["Blue"],
            "containerName": "app",
            "containerPort": 8080,
            "advancedConfiguration": {
                "alternateTargetGroupArn": ids["Green"],
                "productionListenerRule": ids["Route"],
                "roleArn": "arn:aws:iam::123456789012:role/ecs-lb",
            },
        }


# ----------------------------------------------------------------------------- sagemaker-endpoint-name


def _endpoint_stack(name: str) -> dict:
    return {
        "Resources": {
            "Model": {
                "Type": "AWS::SageMaker::Model",
                "Properties": {
                    "ExecutionRoleArn": "arn:aws:iam::123456789012:role/x",
                    "PrimaryContainer": {"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/m@sha256:" + "0" * 64},
                },
            },
            "Config": {
                "Type": "AWS::SageMaker::EndpointConfig",
                "Properties": {
                    "ProductionVariants": [
                        {
                            "ModelName": {"Fn::GetAtt": ["Model", "ModelName"]},
                            "VariantName": "AllTraffic",
                            "InitialInstanceCount": 1,
                            "InstanceType": "ml.g4dn.xlarge",
                        }
                    ]
                },
            },
            "Endpoint": {
                "Type": "AWS::SageMaker::Endpoint",
                "Properties": {
                    "EndpointName": name,
                    "EndpointConfigName": {"Fn::GetAtt": ["Config", "EndpointConfigName"]},
                },
            },
        }
    }


def test_patch_sagemaker_endpoint_name(moto_env):
    with mock_aws():
        cloudformation, sagemaker = boto3.client("cloudformation"), boto3.client("sagemaker")
        cloudformation.create_stack(StackName="plain", TemplateBody=json.dumps(_endpoint_stack("dev-plain")))
        with pytest.raises(sagemaker.exceptions.ClientError, match="Could not find endpoint"):
            sagemaker.describe_endpoint(EndpointName="dev-plain")
        with moto_patches.applied("sagemaker-endpoint-name"):
            cloudformation.create_stack(StackName="patched", TemplateBody=json.dumps(_endpoint_stack("dev-patched")))
        assert sagemaker.describe_endpoint(EndpointName="dev-patched")["EndpointStatus"] == "InService"


# ----------------------------------------------------------------------------- route-table-delete

VPC_WITH_A_ROUTED_SUBNET = {
    "Resources": {
        "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}},
        "Subnet": {"Type": "AWS::EC2::Subnet", "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": "10.0.0.0/24"}},
        "Table": {"Type": "AWS::EC2::RouteTable", "Properties": {"VpcId": {"Ref": "Vpc"}}},
        "Association": {
            "Type": "AWS::EC2::SubnetRouteTableAssociation",
            "Properties": {"SubnetId": {"Ref": "Subnet"}, "RouteTableId": {"Ref": "Table"}},
        },
    }
}


# moto warns that its own DependencyViolation has no shape in the service models: the defect's error itself.
@pytest.mark.filterwarnings("ignore:Exception\\(DependencyViolationError\\):UserWarning")
def test_patch_route_table_delete(moto_env):
    with mock_aws():
        cloudformation, ec2 = boto3.client("cloudformation"), boto3.client("ec2")
        cloudformation.create_stack(StackName="plain", TemplateBody=json.dumps(VPC_WITH_A_ROUTED_SUBNET))
        with pytest.raises(cloudformation.exceptions.ClientError, match="The vpc vpc-.* has dependencies"):
            cloudformation.delete_stack(StackName="plain")
        with moto_patches.applied("route-table-delete"):
            cloudformation.create_stack(StackName="patched", TemplateBody=json.dumps(VPC_WITH_A_ROUTED_SUBNET))
            vpc_id = cloudformation.describe_stack_resource(StackName="patched", LogicalResourceId="Vpc")[
                "StackResourceDetail"
            ]["PhysicalResourceId"]
            cloudformation.delete_stack(StackName="patched")
        assert not ec2.describe_vpcs(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["Vpcs"]
        assert not ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["RouteTables"]


# ----------------------------------------------------------------------------- deletes-without-a-handler

OUTLIVES_ITS_STACK = {
    "Resources": {
        "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.1.0.0/16"}},
        "Subnet": {"Type": "AWS::EC2::Subnet", "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": "10.1.0.0/24"}},
        "Ip": {"Type": "AWS::EC2::EIP", "Properties": {"Domain": "vpc"}},
        "Nat": {
            "Type": "AWS::EC2::NatGateway",
            "Properties": {"SubnetId": {"Ref": "Subnet"}, "AllocationId": {"Fn::GetAtt": ["Ip", "AllocationId"]}},
        },
        "Cluster": {"Type": "AWS::ECS::Cluster", "Properties": {}},
        "Task": {
            "Type": "AWS::ECS::TaskDefinition",
            "Properties": {
                "Family": "rehearsal",
                "ContainerDefinitions": [{"Name": "app", "Image": "public.ecr.aws/x/y:1", "Memory": 128}],
            },
        },
        "Targets": {
            "Type": "AWS::ElasticLoadBalancingV2::TargetGroup",
            "Properties": {"Port": 80, "Protocol": "HTTP", "VpcId": {"Ref": "Vpc"}},
        },
    }
}


def _left_over(stack: str) -> dict[str, bool]:
    cloudformation = boto3.client("cloudformation")
    ids = {
        r["LogicalResourceId"]: r["PhysicalResourceId"]
        for r in cloudformation.describe_stack_resources(StackName=stack)["StackResources"]
    }
    ec2, ecs, elbv2 = boto3.client("ec2"), boto3.client("ecs"), boto3.client("elbv2")
    cloudformation.delete_stack(StackName=stack)
    (nat,) = ec2.describe_nat_gateways(NatGatewayIds=[ids["Nat"]])["NatGateways"]
    (cluster,) = ecs.describe_clusters(clusters=[ids["Cluster"]])["clusters"]
    task = ecs.describe_task_definition(taskDefinition=ids["Task"])["taskDefinition"]
    groups = [g["TargetGroupArn"] for g in elbv2.describe_target_groups()["TargetGroups"]]
    return {
        "Nat": nat["State"] != "deleted",
        "Cluster": cluster["status"] == "ACTIVE",
        "Task": task["status"] == "ACTIVE",
        "Targets": ids["Targets"] in groups,
    }


def test_patch_deletes_without_a_handler(moto_env):
    with mock_aws():
        boto3.client("cloudformation").create_stack(StackName="plain", TemplateBody=json.dumps(OUTLIVES_ITS_STACK))
        assert _left_over("plain") == {"Nat": True, "Cluster": True, "Task": True, "Targets": True}
        with moto_patches.applied("deletes-without-a-handler"):
            boto3.client("cloudformation").create_stack(
                StackName="patched", TemplateBody=json.dumps(OUTLIVES_ITS_STACK)
            )
            assert _left_over("patched") == {"Nat": False, "Cluster": False, "Task": False, "Targets": False}


def test_patch_deletes_without_a_handler__listener_rule(moto_env):
    """A fleet member retired: its listener rule and the target group it forwards to leave the stack in one update
    (with the patch the rule goes, and then its target group can: rule removals-in-cleanup retries in that order)."""

    def stack(with_rule: bool) -> str:
        resources = {
            "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.1.0.0/16"}},
            "SubnetA": {
                "Type": "AWS::EC2::Subnet",
                "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": "10.1.0.0/24", "AvailabilityZone": "us-east-1a"},
            },
            "SubnetB": {
                "Type": "AWS::EC2::Subnet",
                "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": "10.1.1.0/24", "AvailabilityZone": "us-east-1b"},
            },
            "Balancer": {
                "Type": "AWS::ElasticLoadBalancingV2::LoadBalancer",
                "Properties": {"Scheme": "internal", "Subnets": [{"Ref": "SubnetA"}, {"Ref": "SubnetB"}]},
            },
            "Listener": {
                "Type": "AWS::ElasticLoadBalancingV2::Listener",
                "Properties": {
                    "LoadBalancerArn": {"Ref": "Balancer"},
                    "Port": 80,
                    "Protocol": "HTTP",
                    "DefaultActions": [{"Type": "fixed-response", "FixedResponseConfig": {"StatusCode": "404"}}],
                },
            },
        }
        if with_rule:
            resources["Targets"] = {
                "Type": "AWS::ElasticLoadBalancingV2::TargetGroup",
                "Properties": {"Port": 80, "Protocol": "HTTP", "VpcId": {"Ref": "Vpc"}, "TargetType": "ip"},
            }
            resources["Route"] = {
                "Type": "AWS::ElasticLoadBalancingV2::ListenerRule",
                "Properties": {
                    "ListenerArn": {"Ref": "Listener"},
                    "Priority": 7,
                    "Conditions": [{"Field": "path-pattern", "Values": ["/a/*"]}],
                    "Actions": [{"Type": "forward", "TargetGroupArn": {"Ref": "Targets"}}],
                },
            }
        return json.dumps({"Resources": resources})

    def rules_left(name: str) -> int:
        elbv2 = boto3.client("elbv2")
        ids = {
            r["LogicalResourceId"]: r["PhysicalResourceId"]
            for r in boto3.client("cloudformation").describe_stack_resources(StackName=name)["StackResources"]
        }
        return sum(not r["IsDefault"] for r in elbv2.describe_rules(ListenerArn=ids["Listener"])["Rules"])

    with mock_aws():
        cloudformation = boto3.client("cloudformation")
        cloudformation.create_stack(StackName="plain", TemplateBody=stack(True))
        cloudformation.update_stack(StackName="plain", TemplateBody=stack(False))
        assert rules_left("plain") == 1  # the rule outlived the update (and so did its target group)
        with moto_patches.applied("deletes-without-a-handler"):
            cloudformation.create_stack(StackName="patched", TemplateBody=stack(True))
            cloudformation.update_stack(StackName="patched", TemplateBody=stack(False))
            assert rules_left("patched") == 0


# ----------------------------------------------------------------------------- update-removes-unmodeled


def test_patch_update_removes_unmodeled(moto_env):
    """A member leaving a fleet removes its alarms (a type moto's CloudFormation does not model) in an update; an
    earlier update that changed the alarm left None as its parsed resource (moto's update of a type it does not
    model returns None)."""

    def templates(stack: str) -> tuple[str, str, str]:
        """(with the alarm, the alarm changed, without it)"""
        marker = {"Type": "AWS::SSM::Parameter", "Properties": {"Type": "String", "Value": "v", "Name": f"/{stack}"}}
        alarm = {
            "Type": "AWS::CloudWatch::Alarm",
            "Properties": {
                "ComparisonOperator": "GreaterThanThreshold",
                "EvaluationPeriods": 1,
                "Threshold": 1,
                "MetricName": "Latency",
                "Namespace": "Test",
                "Statistic": "Average",
                "Period": 60,
            },
        }
        changed = {**alarm, "Properties": {**alarm["Properties"], "Threshold": 2}}
        return tuple(
            json.dumps({"Resources": resources})
            for resources in (
                {"Marker": marker, "Alarm": alarm},
                {"Marker": marker, "Alarm": changed},
                {"Marker": marker},
            )
        )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # moto warns of the type it skips
        with mock_aws():
            cloudformation = boto3.client("cloudformation")
            with_alarm, changed, without = templates("plain")
            cloudformation.create_stack(StackName="plain", TemplateBody=with_alarm)
            cloudformation.update_stack(StackName="plain", TemplateBody=changed)
            with pytest.raises(AttributeError, match="'NoneType' object has no attribute"):
                cloudformation.update_stack(StackName="plain", TemplateBody=without)
            with moto_patches.applied("update-removes-unmodeled"):
                with_alarm, changed, without = templates("patched")
                cloudformation.create_stack(StackName="patched", TemplateBody=with_alarm)
                cloudformation.update_stack(StackName="patched", TemplateBody=changed)
                cloudformation.update_stack(StackName="patched", TemplateBody=without)
                resources = cloudformation.describe_stack_resources(StackName="patched")["StackResources"]
                assert [r["LogicalResourceId"] for r in resources] == ["Marker"]


# ----------------------------------------------------------------------------- sagemaker-variant-without-model


def _shared_endpoint_stack(name: str) -> dict:
    """An endpoint for inference components: its variant names no model, its config an execution role."""
    return {
        "Resources": {
            "Config": {
                "Type": "AWS::SageMaker::EndpointConfig",
                "Properties": {
                    "ExecutionRoleArn": "arn:aws:iam::123456789012:role/x",
                    "ProductionVariants": [
                        {
                            "VariantName": "AllTraffic",
                            "InitialInstanceCount": 1,
                            "InstanceType": "ml.g4dn.xlarge",
                            "ManagedInstanceScaling": {
                                "Status": "ENABLED",
                                "MinInstanceCount": 0,
                                "MaxInstanceCount": 2,
                            },
                            "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"},
                        }
                    ],
                },
            },
            "Endpoint": {
                "Type": "AWS::SageMaker::Endpoint",
                "Properties": {
                    "EndpointName": name,
                    "EndpointConfigName": {"Fn::GetAtt": ["Config", "EndpointConfigName"]},
                },
            },
        }
    }


def test_patch_sagemaker_variant_without_model(moto_env):
    with mock_aws():
        cloudformation, sagemaker = boto3.client("cloudformation"), boto3.client("sagemaker")
        with pytest.raises(KeyError, match="ModelName"):
            cloudformation.create_stack(StackName="plain", TemplateBody=json.dumps(_shared_endpoint_stack("dev-plain")))
        with moto_patches.applied("sagemaker-endpoint-name", "sagemaker-variant-without-model"):
            cloudformation.create_stack(
                StackName="patched", TemplateBody=json.dumps(_shared_endpoint_stack("dev-shared"))
            )
            with pytest.raises(sagemaker.exceptions.ClientError, match="Could not find model"):  # still checked
                sagemaker.create_endpoint_config(
                    EndpointConfigName="named",
                    ProductionVariants=[
                        {
                            "VariantName": "AllTraffic",
                            "ModelName": "missing",
                            "InitialInstanceCount": 1,
                            "InstanceType": "ml.g4dn.xlarge",
                        }
                    ],
                )
        assert cloudformation.describe_stacks(StackName="patched")["Stacks"][0]["StackStatus"] == "CREATE_COMPLETE"
        assert sagemaker.describe_endpoint(EndpointName="dev-shared")["EndpointStatus"] == "InService"


# ----------------------------------------------------------------------------- sagemaker-inference-components


def _member_stack(endpoint: str, outputs: bool = True) -> dict:
    """A fleet member: its Model and its inference component on the shared endpoint (by name), and outputs
    reading the component (plain moto fails the stack on those: leave them out to see the component skipped)."""
    model = _endpoint_stack("unused")["Resources"]["Model"]
    return {
        "Resources": {
            "Model": model,
            "Component": {
                "Type": moto_patches.INFERENCE_COMPONENT,
                "Properties": {
                    "InferenceComponentName": "dev-member",
                    "EndpointName": endpoint,
                    "VariantName": "AllTraffic",
                    "Specification": {
                        "ModelName": {"Fn::GetAtt": ["Model", "ModelName"]},
                        "ComputeResourceRequirements": {
                            "NumberOfAcceleratorDevicesRequired": 1,
                            "MinMemoryRequiredInMb": 1024,
                        },
                    },
                    "RuntimeConfig": {"CopyCount": 1},
                },
            },
        },
        "Outputs": {
            "Arn": {"Value": {"Ref": "Component"}},
            "Name": {"Value": {"Fn::GetAtt": ["Component", "InferenceComponentName"]}},
        }
        if outputs
        else {},
    }


def test_patch_sagemaker_inference_components(moto_env):
    from moto.cloudformation.parsing import get_model_map

    shared = ("sagemaker-endpoint-name", "sagemaker-variant-without-model")
    with mock_aws(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cloudformation, sagemaker = boto3.client("cloudformation"), boto3.client("sagemaker")
        with moto_patches.applied(*shared):
            cloudformation.create_stack(
                StackName="fleet", TemplateBody=json.dumps(_shared_endpoint_stack("dev-shared"))
            )
            # plain: the component is skipped and the API is missing
            assert moto_patches.INFERENCE_COMPONENT not in get_model_map()
            cloudformation.create_stack(StackName="plain", TemplateBody=json.dumps(_member_stack("dev-shared", False)))
            resources = cloudformation.list_stack_resources(StackName="plain")["StackResourceSummaries"]
            assert [r["LogicalResourceId"] for r in resources if r["LogicalResourceId"]] == ["Model"]
            with pytest.raises(NotImplementedError, match="describe_inference_component"):
                sagemaker.describe_inference_component(InferenceComponentName="dev-member")
            cloudformation.delete_stack(StackName="plain")
            with moto_patches.applied("sagemaker-inference-components"):
                # on an endpoint that does not exist, as SageMaker, it fails the stack
                with pytest.raises(Exception, match="Could not find endpoint"):
                    cloudformation.create_stack(StackName="astray", TemplateBody=json.dumps(_member_stack("dev-none")))
                cloudformation.create_stack(StackName="member", TemplateBody=json.dumps(_member_stack("dev-shared")))
                (stack,) = cloudformation.describe_stacks(StackName="member")["Stacks"]
                outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}
                assert outputs == {
                    "Arn": "arn:aws:sagemaker:us-east-1:123456789012:inference-component/dev-member",
                    "Name": "dev-member",
                }
                component = sagemaker.describe_inference_component(InferenceComponentName="dev-member")
                model = cloudformation.describe_stack_resource(StackName="member", LogicalResourceId="Model")[
                    "StackResourceDetail"
                ]["PhysicalResourceId"]
                assert (
                    component["EndpointName"],
                    component["VariantName"],
                    component["Specification"]["ModelName"],
                    component["RuntimeConfig"]["DesiredCopyCount"],
                ) == ("dev-shared", "AllTraffic", model.rsplit("/", 1)[-1], 1)
                listed = sagemaker.list_inference_components(EndpointNameEquals="dev-shared")["InferenceComponents"]
                assert [c["InferenceComponentName"] for c in listed] == ["dev-member"]
                cloudformation.delete_stack(StackName="member")
                with pytest.raises(sagemaker.exceptions.ClientError, match="Could not find inference component"):
                    sagemaker.describe_inference_component(InferenceComponentName="dev-member")
            assert moto_patches.INFERENCE_COMPONENT not in get_model_map()  # undone


# ----------------------------------------------------------------------------- deleted-stack-outputs


def test_patch_deleted_stack_outputs(moto_env):
    """Describing a deleted stack by id (cdk destroy polls it) must not create what its exports reference."""
    template = {
        **_endpoint_stack("dev-shared"),
        "Outputs": {
            "Name": {"Value": {"Fn::GetAtt": ["Endpoint", "EndpointName"]}, "Export": {"Name": "shared-endpoint"}}
        },
    }

    def deleted_stack_described() -> list[str]:
        cloudformation, sagemaker = boto3.client("cloudformation"), boto3.client("sagemaker")
        stack_id = cloudformation.create_stack(StackName="shared", TemplateBody=json.dumps(template))["StackId"]
        cloudformation.delete_stack(StackName=stack_id)
        assert cloudformation.describe_stacks(StackName=stack_id)["Stacks"][0]["StackStatus"] == "DELETE_COMPLETE"
        return [e["EndpointName"] for e in sagemaker.list_endpoints()["Endpoints"]]

    with mock_aws(), moto_patches.applied("sagemaker-endpoint-name"):
        assert deleted_stack_described() == ["dev-shared"]  # created again by describing the deleted stack
    with mock_aws(), moto_patches.applied("sagemaker-endpoint-name", "deleted-stack-outputs"):
        assert deleted_stack_described() == []


# ----------------------------------------------------------------------------- live-values


def test_patch_live_values(moto_env):
    """The reader runs in moto (its own read function) on create and again on update, and a resource reading it
    is updated after it although its own template text did not change."""

    def template(planned: int) -> dict:
        return {
            "Resources": {
                "Function": {
                    "Type": "AWS::Lambda::Function",
                    "Properties": {
                        "Role": "arn:aws:iam::123456789012:role/reader",
                        "Runtime": "python3.12",
                        "Handler": "index.handler",
                        "Code": {"ZipFile": "def handler(event, context): pass"},
                    },
                },
                "Reader": {
                    "Type": moto_patches.LIVE_VALUE,
                    "Properties": {
                        "ServiceToken": {"Fn::GetAtt": ["Function", "Arn"]},
                        "Read": {"Kind": "copy-count", "InferenceComponentName": "dev-member", "Planned": planned},
                    },
                },
                "Copies": {
                    "Type": "AWS::SSM::Parameter",
                    "Properties": {
                        "Name": "/rehearsal/copies",
                        "Type": "String",
                        "Value": {"Fn::GetAtt": ["Reader", "CopyCount"]},
                    },
                },
            }
        }

    def copies() -> str:
        return boto3.client("ssm").get_parameter(Name="/rehearsal/copies")["Parameter"]["Value"]

    with mock_aws(config={"lambda": {"use_docker": False}}), moto_patches.applied("custom-resources-without-docker"):
        boto3.client("iam").create_role(RoleName="reader", AssumeRolePolicyDocument="{}")
        cloudformation = boto3.client("cloudformation")
        with pytest.raises(cloudformation.exceptions.ClientError, match="Value '' at 'value'"):
            # the reader answered nothing: what reads it gets an empty value and the stack fails
            cloudformation.create_stack(StackName="plain", TemplateBody=json.dumps(template(2)))
    with (
        mock_aws(config={"lambda": {"use_docker": False}}),
        moto_patches.applied(
            "custom-resources-without-docker",
            "live-values",
            "new-values-update-readers",
            "sagemaker-inference-components",
        ),
    ):
        boto3.client("iam").create_role(RoleName="reader", AssumeRolePolicyDocument="{}")
        cloudformation = boto3.client("cloudformation")
        cloudformation.create_stack(StackName="patched", TemplateBody=json.dumps(template(2)))
        assert copies() == "2"  # no component yet: the planned count
        cloudformation.update_stack(StackName="patched", TemplateBody=json.dumps(template(3)))
        assert copies() == "3"  # the reader read again, and the parameter reading it was updated after it


# ----------------------------------------------------------------------------- scaling-handover

HANDED_OVER = "dev-retyped"  # an endpoint whose variant is autoscaled, as the handover finds it
HANDED_OVER_TARGET = {
    "ServiceNamespace": "sagemaker",
    "ResourceId": f"endpoint/{HANDED_OVER}/variant/AllTraffic",
    "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
}
TARGET_TRACKING = {
    "TargetValue": 1596,
    "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
}


def _autoscaled_endpoint(instance_type: str) -> None:
    """`HANDED_OVER` on `instance_type`, its variant a registered scalable target (1-2) with a policy."""
    sagemaker, scaling = boto3.client("sagemaker"), boto3.client("application-autoscaling")
    sagemaker.create_model(
        ModelName="retyped",
        ExecutionRoleArn="arn:aws:iam::123456789012:role/x",
        PrimaryContainer={"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/m:1"},
    )
    sagemaker.create_endpoint_config(
        EndpointConfigName="retyped",
        ProductionVariants=[
            {
                "VariantName": "AllTraffic",
                "ModelName": "retyped",
                "InitialInstanceCount": 1,
                "InstanceType": instance_type,
            }
        ],
    )
    sagemaker.create_endpoint(EndpointName=HANDED_OVER, EndpointConfigName="retyped")
    scaling.register_scalable_target(**HANDED_OVER_TARGET, MinCapacity=1, MaxCapacity=2)


def _handover_stack(instance_type: str) -> dict:
    """A Custom::ScalingHandover asking for `instance_type` (its properties as inferstack renders them)."""
    return {
        "Resources": {
            "Function": {
                "Type": "AWS::Lambda::Function",
                "Properties": {
                    "Role": "arn:aws:iam::123456789012:role/handover",
                    "Runtime": "python3.12",
                    "Handler": "index.handler",
                    "Code": {"ZipFile": "def handler(event, context): pass"},
                },
            },
            "Handover": {
                "Type": moto_patches.SCALING_HANDOVER,
                "Properties": {
                    "ServiceToken": {"Fn::GetAtt": ["Function", "Arn"]},
                    "EndpointName": HANDED_OVER,
                    "VariantName": "AllTraffic",
                    "InstanceType": instance_type,
                    "Target": {**HANDED_OVER_TARGET, "MinCapacity": 1, "MaxCapacity": 2},
                    "Policies": [
                        {
                            "PolicyName": "invocations",
                            "PolicyType": "TargetTrackingScaling",
                            "TargetTrackingScalingPolicyConfiguration": TARGET_TRACKING,
                        }
                    ],
                },
            },
        }
    }


def _registered() -> list[tuple[int, int]]:
    targets = boto3.client("application-autoscaling").describe_scalable_targets(
        ServiceNamespace="sagemaker", ResourceIds=[HANDED_OVER_TARGET["ResourceId"]]
    )["ScalableTargets"]
    return [(t["MinCapacity"], t["MaxCapacity"]) for t in targets]


def test_patch_scaling_handover(moto_env):
    """The handover runs in moto (its own hand_over) on create and on update: asked for another instance type than
    the endpoint runs, it deregisters the variant's target; asked for the one it runs, it registers it again."""
    with mock_aws(config={"lambda": {"use_docker": False}}), moto_patches.applied("custom-resources-without-docker"):
        boto3.client("iam").create_role(RoleName="handover", AssumeRolePolicyDocument="{}")
        _autoscaled_endpoint("ml.g4dn.xlarge")
        boto3.client("cloudformation").create_stack(
            StackName="plain", TemplateBody=json.dumps(_handover_stack("ml.g4dn.2xlarge"))
        )
        assert _registered() == [(1, 2)]  # marked created, nothing released: UpdateEndpoint would be refused
    with (
        mock_aws(config={"lambda": {"use_docker": False}}),
        moto_patches.applied("custom-resources-without-docker", "scaling-handover"),
    ):
        boto3.client("iam").create_role(RoleName="handover", AssumeRolePolicyDocument="{}")
        _autoscaled_endpoint("ml.g4dn.xlarge")
        cloudformation = boto3.client("cloudformation")
        cloudformation.create_stack(StackName="patched", TemplateBody=json.dumps(_handover_stack("ml.g4dn.2xlarge")))
        assert _registered() == []  # released before the endpoint moves
        cloudformation.update_stack(StackName="patched", TemplateBody=json.dumps(_handover_stack("ml.g4dn.xlarge")))
        assert _registered() == [(1, 2)]  # the endpoint runs what is asked: registered again, with its policy
        policies = boto3.client("application-autoscaling").describe_scaling_policies(
            ServiceNamespace="sagemaker", ResourceId=HANDED_OVER_TARGET["ResourceId"]
        )["ScalingPolicies"]
        assert [p["PolicyName"] for p in policies] == ["invocations"]
        assert moto_patches.SCALING_HANDOVERS == [
            ("Handover", "Create", "released"),
            ("Handover", "Update", "restored"),
        ]


# ----------------------------------------------------------------------------- sagemaker-replacements-in-cleanup


def _endpoint_on(instance_type: str, image: str) -> dict:
    template = _endpoint_stack("dev-replaced")
    template["Resources"]["Model"]["Properties"]["PrimaryContainer"]["Image"] += image
    template["Resources"]["Config"]["Properties"]["ProductionVariants"][0]["InstanceType"] = instance_type
    return template


def test_patch_sagemaker_replacements_in_cleanup(moto_env):
    """A new image and instance type replace the endpoint's Model and EndpointConfig: while CloudFormation updates
    the Endpoint, the config it still names (and that config's model) must exist; after the update, only the new
    ones do."""
    from moto.sagemaker.models import FakeEndpoint, sagemaker_backends

    def replaced(*patches: str) -> tuple[list[tuple[bool, bool]], int, int]:
        """(whether the endpoint's config and its model existed when the Endpoint's update began, configs and
        models left after the update)"""
        seen = []
        with mock_aws(), moto_patches.applied("sagemaker-endpoint-name", "new-values-update-readers", *patches):
            original = FakeEndpoint.__dict__["update_from_cloudformation_json"].__func__

            def spy(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name):
                backend = sagemaker_backends[account_id][region_name]
                config = backend.endpoint_configs.get(original_resource.endpoint_config_name)
                seen.append(
                    (
                        config is not None,
                        config is not None and config.production_variants[0]["ModelName"] in backend._models,
                    )
                )
                return original(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name)

            undo = moto_patches.replace(FakeEndpoint, "update_from_cloudformation_json", classmethod(spy))
            try:
                cloudformation, sagemaker = boto3.client("cloudformation"), boto3.client("sagemaker")
                cloudformation.create_stack(StackName="s", TemplateBody=json.dumps(_endpoint_on("ml.g4dn.xlarge", "1")))
                cloudformation.update_stack(
                    StackName="s", TemplateBody=json.dumps(_endpoint_on("ml.g4dn.2xlarge", "2"))
                )
                return (
                    seen,
                    len(sagemaker.list_endpoint_configs()["EndpointConfigs"]),
                    len(sagemaker.list_models()["Models"]),
                )
            finally:
                undo()

    assert replaced() == ([(False, False)], 1, 1)  # deleted before the endpoint moved off them
    assert replaced("sagemaker-replacements-in-cleanup") == ([(True, True)], 1, 1)  # kept until the cleanup


def test_replacements_are_kept_when_the_update_fails(moto_env):
    """The Endpoint's update refused (rule autoscaled-variant-update): the endpoint still runs its old config."""
    with (
        mock_aws(),
        moto_patches.applied(
            "sagemaker-endpoint-name",
            "new-values-update-readers",
            "sagemaker-replacements-in-cleanup",
            "autoscaled-variant-update",
        ),
    ):
        cloudformation, sagemaker = boto3.client("cloudformation"), boto3.client("sagemaker")
        cloudformation.create_stack(StackName="s", TemplateBody=json.dumps(_endpoint_on("ml.g4dn.xlarge", "1")))
        boto3.client("application-autoscaling").register_scalable_target(
            ServiceNamespace="sagemaker",
            ResourceId="endpoint/dev-replaced/variant/AllTraffic",
            ScalableDimension="sagemaker:variant:DesiredInstanceCount",
            MinCapacity=1,
            MaxCapacity=2,
        )
        with pytest.raises(cloudformation.exceptions.ClientError, match="registered as Application Auto Scaling"):
            cloudformation.update_stack(StackName="s", TemplateBody=json.dumps(_endpoint_on("ml.g4dn.2xlarge", "2")))
        config = sagemaker.describe_endpoint(EndpointName="dev-replaced")["EndpointConfigName"]
        (variant,) = sagemaker.describe_endpoint_config(EndpointConfigName=config)["ProductionVariants"]
        assert variant["InstanceType"] == "ml.g4dn.xlarge"
        sagemaker.describe_model(ModelName=variant["ModelName"])


# ----------------------------------------------------------------------------- updates-in-dependency-order


def _reader_before_source(version: str) -> dict:
    """A parameter reading (Ref) another that the same update replaces, listed before it."""
    return {
        "Resources": {
            "Reader": {
                "Type": "AWS::SSM::Parameter",
                "Properties": {
                    "Name": "/rehearsal/reader",
                    "Type": "String",
                    "Value": {"Fn::Join": ["-", [{"Ref": "Source"}, version]]},
                },
            },
            "Source": {
                "Type": "AWS::SSM::Parameter",
                "Properties": {"Name": f"/rehearsal/source-{version}", "Type": "String", "Value": "v"},
            },
        }
    }


def test_patch_updates_in_dependency_order(moto_env):
    def read_after_update() -> str:
        cloudformation = boto3.client("cloudformation")
        cloudformation.create_stack(StackName="s", TemplateBody=json.dumps(_reader_before_source("1")))
        cloudformation.update_stack(StackName="s", TemplateBody=json.dumps(_reader_before_source("2")))
        return boto3.client("ssm").get_parameter(Name="/rehearsal/reader")["Parameter"]["Value"]

    with mock_aws():
        assert read_after_update() == "/rehearsal/source-1-2"  # updated first: it read the replaced name
    with mock_aws(), moto_patches.applied("updates-in-dependency-order"):
        assert read_after_update() == "/rehearsal/source-2-2"


def test_dependency_order_follows_depends_on_and_sub():
    from moto.cloudformation.parsing import ResourceMap

    old = {name: {"Type": "AWS::SSM::Parameter", "Properties": {"Value": "1"}} for name in "ABCD"}
    new = {
        "A": {"Type": "AWS::SSM::Parameter", "DependsOn": "B", "Properties": {"Value": "2"}},
        "B": {"Type": "AWS::SSM::Parameter", "Properties": {"Value": {"Fn::Sub": "${C.Value}-${!D}"}}},
        "C": {"Type": "AWS::SSM::Parameter", "Properties": {"Value": "2"}},
        "D": {"Type": "AWS::SSM::Parameter", "Properties": {"Value": "2"}},
    }
    resource_map = ResourceMap.__new__(ResourceMap)
    resource_map._resource_json_map = old
    with moto_patches.applied("updates-in-dependency-order"):
        modify = ResourceMap.build_resource_diff(resource_map, {"Resources": new})["Modify"]
    assert modify == ["C", "D", "B", "A"]  # ${!D} is a literal, not a reference


# ----------------------------------------------------------------------------- deregister-keeps-policies


def test_patch_deregister_keeps_policies(moto_env):
    def left_after_deregistering() -> tuple[int, int]:
        scaling = boto3.client("application-autoscaling")
        key = HANDED_OVER_TARGET
        scaling.register_scalable_target(**key, MinCapacity=1, MaxCapacity=2)
        scaling.put_scaling_policy(
            **key,
            PolicyName="invocations",
            PolicyType="TargetTrackingScaling",
            TargetTrackingScalingPolicyConfiguration=TARGET_TRACKING,
        )
        scaling.put_scheduled_action(
            **key,
            ScheduledActionName="night",
            Schedule="cron(0 20 ? * MON-FRI *)",
            ScalableTargetAction={"MinCapacity": 1, "MaxCapacity": 1},
        )
        scaling.deregister_scalable_target(**key)
        return (
            len(scaling.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]),
            len(scaling.describe_scheduled_actions(ServiceNamespace="sagemaker")["ScheduledActions"]),
        )

    with mock_aws():
        assert left_after_deregistering() == (1, 1)
    with mock_aws(), moto_patches.applied("deregister-keeps-policies"):
        assert left_after_deregistering() == (0, 0)
        with pytest.raises(Exception, match="No scalable target found"):  # still refused when there is none
            boto3.client("application-autoscaling").deregister_scalable_target(**HANDED_OVER_TARGET)


# ----------------------------------------------------------------------------- change-sets-by-stack


def test_patch_change_sets_by_stack(moto_env):
    """Two stacks, each with its `cdk-deploy-change-set`: the name with one stack's name reaches that stack's."""

    def update_first(cloudformation):
        for name in ("first", "second"):
            cloudformation.create_stack(StackName=name, TemplateBody=json.dumps(exporting(name) | {"Outputs": {}}))
        for name in ("first", "second"):
            cloudformation.create_change_set(
                StackName=name,
                ChangeSetName="cdk-deploy-change-set",
                ChangeSetType="UPDATE",
                TemplateBody=json.dumps(
                    {
                        "Resources": {
                            "Param": {
                                "Type": "AWS::SSM::Parameter",
                                "Properties": {"Name": f"/rehearsal/{name}", "Type": "String", "Value": "v2"},
                            }
                        }
                    }
                ),
            )
        return cloudformation.describe_change_set(StackName="first", ChangeSetName="cdk-deploy-change-set")

    with mock_aws():
        described = update_first(boto3.client("cloudformation"))
        assert described["StackName"] == "second"  # another stack's change set
    with mock_aws(), moto_patches.applied("change-sets-by-stack"):
        cloudformation = boto3.client("cloudformation")
        assert update_first(cloudformation)["StackName"] == "first"
        cloudformation.delete_change_set(StackName="first", ChangeSetName="cdk-deploy-change-set")
        with pytest.raises(cloudformation.exceptions.ChangeSetNotFoundException):
            cloudformation.describe_change_set(StackName="first", ChangeSetName="cdk-deploy-change-set")
        assert (
            cloudformation.describe_change_set(StackName="second", ChangeSetName="cdk-deploy-change-set")["StackName"]
            == "second"
        )


# ----------------------------------------------------------------------------- ssm-parameter-previous-value

SSM_TYPED = {
    "Parameters": {"Image": {"Type": "AWS::SSM::Parameter::Value<String>", "Default": "/rehearsal/image"}},
    "Resources": {
        "Copy": {
            "Type": "AWS::SSM::Parameter",
            "Properties": {"Name": "/rehearsal/copy", "Type": "String", "Value": {"Ref": "Image"}},
        }
    },
}


def test_patch_ssm_parameter_previous_value(moto_env):
    def update_with_previous_value(cloudformation):
        boto3.client("ssm").put_parameter(Name="/rehearsal/image", Value="ami-0123", Type="String")
        cloudformation.create_stack(
            StackName="ssm",
            TemplateBody=json.dumps(SSM_TYPED),
            Parameters=[{"ParameterKey": "Image", "ParameterValue": "/rehearsal/image"}],
        )
        changed = {
            **SSM_TYPED,
            "Resources": {
                "Copy": {
                    **SSM_TYPED["Resources"]["Copy"],
                    "Properties": {**SSM_TYPED["Resources"]["Copy"]["Properties"], "Description": "updated"},
                }
            },
        }
        # How the CDK CLI updates: a change set, the SSM-typed parameter passed back with UsePreviousValue.
        cloudformation.create_change_set(
            StackName="ssm",
            ChangeSetName="cdk-deploy-change-set",
            ChangeSetType="UPDATE",
            TemplateBody=json.dumps(changed),
            Parameters=[{"ParameterKey": "Image", "UsePreviousValue": True}],
        )
        cloudformation.execute_change_set(StackName="ssm", ChangeSetName="cdk-deploy-change-set")
        return boto3.client("ssm").get_parameter(Name="/rehearsal/copy")["Parameter"]["Value"]

    with mock_aws():
        with pytest.raises(Exception):  # noqa: B017 - moto answers 500 (AttributeError: the AMI id as a name)
            update_with_previous_value(boto3.client("cloudformation"))
    with mock_aws(), moto_patches.applied("ssm-parameter-previous-value"):
        assert update_with_previous_value(boto3.client("cloudformation")) == "ami-0123"


# ----------------------------------------------------------------------------- task-definition-update


def _task_definition(image: str) -> dict:
    return {
        "Resources": {
            "Task": {
                "Type": "AWS::ECS::TaskDefinition",
                "Properties": {
                    "Family": "server",
                    "ContainerDefinitions": [{"Name": "Server", "Image": image, "Memory": 512}],
                },
            }
        }
    }


def test_patch_task_definition_update(moto_env):
    def updated_containers() -> list[dict]:
        cloudformation, ecs = boto3.client("cloudformation"), boto3.client("ecs")
        cloudformation.create_stack(StackName="task", TemplateBody=json.dumps(_task_definition("server@sha256:1")))
        cloudformation.update_stack(StackName="task", TemplateBody=json.dumps(_task_definition("server@sha256:2")))
        return ecs.describe_task_definition(taskDefinition="server")["taskDefinition"]["containerDefinitions"]

    with mock_aws():
        assert "image" not in updated_containers()[0]  # the revision keeps the template's "Image"
    with mock_aws(), moto_patches.applied("task-definition-update"):
        assert updated_containers()[0]["image"] == "server@sha256:2"


# ----------------------------------------------------------------------------- new-values-update-readers


def _service_on(image: str) -> dict:
    return {
        "Resources": {
            **_task_definition(image)["Resources"],
            "Cluster": {"Type": "AWS::ECS::Cluster", "Properties": {}},
            "Service": {
                "Type": "AWS::ECS::Service",
                "Properties": {"Cluster": {"Ref": "Cluster"}, "TaskDefinition": {"Ref": "Task"}, "DesiredCount": 1},
            },
        }
    }


def test_patch_new_values_update_readers(moto_env):
    """A new task definition revision reaches the service that names it by Ref (its own text unchanged)."""

    def running_revision() -> str:
        cloudformation, ecs = boto3.client("cloudformation"), boto3.client("ecs")
        cloudformation.create_stack(StackName="svc", TemplateBody=json.dumps(_service_on("server@sha256:1")))
        cloudformation.update_stack(StackName="svc", TemplateBody=json.dumps(_service_on("server@sha256:2")))
        (cluster,) = ecs.list_clusters()["clusterArns"]
        (service,) = ecs.list_services(cluster=cluster)["serviceArns"]
        return ecs.describe_services(cluster=cluster, services=[service])["services"][0]["taskDefinition"]

    with mock_aws(), moto_patches.applied("task-definition-update"):
        assert running_revision().endswith(":1")  # the service still runs the first revision
    with mock_aws(), moto_patches.applied("task-definition-update", "new-values-update-readers"):
        assert running_revision().endswith(":2")


# ----------------------------------------------------------------------------- task-definition-properties


def _fargate_definition_template(value: str) -> dict:
    return {
        "Resources": {
            "Master": {
                "Type": "AWS::ECS::TaskDefinition",
                "Properties": {
                    "Family": "master",
                    "NetworkMode": "awsvpc",
                    "RequiresCompatibilities": ["FARGATE"],
                    "Cpu": "1024",
                    "Memory": "2048",
                    "TaskRoleArn": f"arn:aws:iam::{ACCOUNT}:role/master",
                    "ExecutionRoleArn": f"arn:aws:iam::{ACCOUNT}:role/execution",
                    "RuntimePlatform": {"CpuArchitecture": "X86_64", "OperatingSystemFamily": "LINUX"},
                    "ContainerDefinitions": [
                        {
                            "Name": "Master",
                            "Image": "example",
                            "Command": ["master"],
                            "Environment": [{"Name": "V", "Value": value}],
                        }
                    ],
                },
            }
        },
        "Outputs": {"Definition": {"Value": {"Ref": "Master"}}},
    }


def test_patch_task_definition_properties(moto_env):
    def registered(*patches: str) -> list[dict]:
        with mock_aws(), moto_patches.applied(*patches):
            cloudformation, ecs = boto3.client("cloudformation"), boto3.client("ecs")
            found = []
            for value in ("1", "2"):  # created, then updated: a new revision
                template = json.dumps(_fargate_definition_template(value))
                if value == "1":
                    cloudformation.create_stack(StackName="lt", TemplateBody=template)
                else:
                    cloudformation.update_stack(StackName="lt", TemplateBody=template)
                (output,) = cloudformation.describe_stacks(StackName="lt")["Stacks"][0]["Outputs"]
                found.append(ecs.describe_task_definition(taskDefinition=output["OutputValue"])["taskDefinition"])
            return found

    def shape(definition: dict) -> tuple:
        return (
            definition["networkMode"],
            definition.get("requiresCompatibilities"),
            definition.get("cpu"),
            definition.get("taskRoleArn", "").rsplit("/", 1)[-1],
            definition.get("runtimePlatform"),
        )

    plain = registered("task-definition-update")
    assert [shape(d) for d in plain] == [("bridge", None, None, "", None)] * 2  # an EC2 definition in bridge mode
    fixed = registered("task-definition-update", "task-definition-properties")
    platform = {"cpuArchitecture": "X86_64", "operatingSystemFamily": "LINUX"}
    assert [shape(d) for d in fixed] == [("awsvpc", ["FARGATE"], "1024", "master", platform)] * 2
    assert [d["revision"] for d in fixed] == [1, 2] and fixed[1]["containerDefinitions"][0]["environment"] == [
        {"name": "V", "value": "2"}
    ]


# ------------------------------------------------------------------------ fargate-task-memory, ecs-agent-state-changes


def _fargate_task(ecs, ec2) -> dict:
    """A Fargate task as the LoadTest stack's are: task-level cpu and memory, none on the container, awsvpc."""
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})  # as CDK's VPC has it
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="generators", Description="g", VpcId=vpc)["GroupId"]
    ecs.create_cluster(clusterName="generators")
    definition = ecs.register_task_definition(
        family="master",
        networkMode="awsvpc",
        requiresCompatibilities=["FARGATE"],
        cpu="1024",
        memory="2048",
        containerDefinitions=[{"name": "Master", "image": "example", "command": ["master"]}],
    )
    return ecs.run_task(
        cluster="generators",
        taskDefinition=definition["taskDefinition"]["taskDefinitionArn"],
        launchType="FARGATE",
        networkConfiguration={
            "awsvpcConfiguration": {"subnets": [subnet], "securityGroups": [group], "assignPublicIp": "DISABLED"}
        },
    )["tasks"][0]


def test_patch_fargate_task_memory(moto_env):
    with mock_aws():
        with pytest.raises(Exception, match="500|TypeError|unsupported operand"):
            _fargate_task(boto3.client("ecs"), boto3.client("ec2"))
    with mock_aws(), moto_patches.applied("fargate-task-memory"):
        task = _fargate_task(boto3.client("ecs"), boto3.client("ec2"))
        assert task["lastStatus"] == "RUNNING" and task["launchType"] == "FARGATE"
        assert task["attachments"][0]["type"] == "ElasticNetworkInterface"


def test_patch_ecs_agent_state_changes(moto_env):
    def report_exit(ecs, arn: str):
        return ecs.submit_task_state_change(
            cluster="generators",
            task=arn,
            status="STOPPED",
            reason="Essential container in task exited",
            containers=[{"containerName": "Master", "exitCode": 3, "status": "STOPPED", "reason": "exit code 3"}],
        )

    with mock_aws(), moto_patches.applied("fargate-task-memory"):
        ecs = boto3.client("ecs")
        arn = _fargate_task(ecs, boto3.client("ec2"))["taskArn"]
        with pytest.raises(Exception, match="404|not.*(valid|supported|implemented)"):
            report_exit(ecs, arn)
        assert ecs.describe_tasks(cluster="generators", tasks=[arn])["tasks"][0]["containers"][0]["exitCode"] == 0
    with mock_aws(), moto_patches.applied("fargate-task-memory", "ecs-agent-state-changes"):
        ecs = boto3.client("ecs")
        arn = _fargate_task(ecs, boto3.client("ec2"))["taskArn"]
        assert report_exit(ecs, arn)["acknowledgment"] == "ACK"
        (task,) = ecs.describe_tasks(cluster="generators", tasks=[arn])["tasks"]
        assert (task["lastStatus"], task["desiredStatus"], task["stopCode"]) == (
            "STOPPED",
            "STOPPED",
            "EssentialContainerExited",
        )
        assert task["stoppedReason"] == "Essential container in task exited"
        (container,) = task["containers"]
        assert (container["exitCode"], container["lastStatus"], container["reason"]) == (3, "STOPPED", "exit code 3")
        assert ecs.list_tasks(cluster="generators", desiredStatus="RUNNING")["taskArns"] == []
        with pytest.raises(Exception, match="not a task state"):
            ecs.submit_task_state_change(cluster="generators", task=arn, status="EXPLODED")


# ----------------------------------------------------------------------------- the rehearsal itself


@pytest.mark.cli_rehearsal
def test_cli_deploy_rehearsal():
    """The whole rehearsal once, with CI=true (the CDK CLI then prints to stdout, not stderr), on the shipped
    config plus one added model of each kind whose names sort before, between and after the shipped ones: the
    first deploy, then day two (production moved and counts scaled as ECS and autoscaling do, variants registered
    as scalable targets, release N+1 with an autoscaled endpoint's instance type changed, rollback, a fleet member
    retired), then destroy."""
    from rehearsal import cli_deploy, day_two

    if not (cli_deploy.ROOT / "node_modules" / ".bin" / "cdk").exists():
        pytest.skip("the CDK CLI is not installed (make setup)")
    result = cli_deploy.rehearse_once(timeout=720, ci=True, add_models=True)
    text = cli_deploy.report(result)
    print(text)
    assert result.ok, text
    names = [s.name for s in result.steps]
    assert names[-1] == "delete CDKToolkit" and len(names) == 12, names
    assert result.workarounds and result.unmodeled and not result.leftovers
    assert any("Custom::VpcRestrictDefaultSG" in c for c in result.custom_resources_not_run)
    assert not any("Custom::LiveValue" in c for c in result.custom_resources_not_run)  # they ran
    assert not any("Custom::ScalingHandover" in c for c in result.custom_resources_not_run)
    # Every added model was deployed and, for Triton, smoked against its own reply (names in any order).
    smoked = {line.split(":", 1)[0] for line in result.tool_lines["smoke"] if ": ok:" in line}
    assert {"a-sentiment", "m-spelling", "bert-large-classifier", "t5-spelling"} <= smoked, smoked
    assert not any(line.startswith("FAIL") for line in result.tool_lines["smoke"])
    assert any(n.startswith("smoke of ") and "faq-bert" in n and "zz-router" in n for n in result.not_run)
    # Day two held: production stayed on the group ECS left serving, and the counts autoscaling set, after the
    # next release, the rollback and the retirement.
    for after in ("release N+1", "rollback", f"retiring {day_two.RETIRED_MODEL} and {day_two.RETIRED_FLEET_MEMBER}"):
        kept = [c for c in result.checks if c.startswith(f"after {after}:")]
        assert sum("still forwards 100%" in c for c in kept) >= 4, kept  # intent-pack x3 members, 2 services
        assert any("keeps the 2 tasks" in c for c in kept) and any("copies autoscaling set" in c for c in kept)
        target = (
            f"after {after}: endpoint/dev-{day_two.RETYPED_MODEL}/variant/AllTraffic keeps its scalable target "
            f"(1-2; scaling policies: 1, scheduled actions: 2)"
        )
        assert target in kept, kept
    assert any(
        c.startswith("retire: dev-t5-spelling and its") and "dev-intent-pack lost duplicate-bert's own" in c
        for c in result.checks
    )
    # release N+1 reordered intent-pack, and its new first member retired: no listener rule priority clashed
    # (the emulator refuses what ELB refuses: rule listener-rule-priority-in-use) and the fleet kept its Url.
    assert any(
        "intent-pack: models ['intent-bert', 'duplicate-bert', 'faq-bert'] -> ['duplicate-bert', 'faq-bert', "
        "'intent-bert']" in c
        for c in result.config_changes
    )
    # release N+1 also moved an autoscaled dedicated endpoint to another instance type, in that one deploy: the
    # scaling handover released its target before the Endpoint's update (which the emulator refuses otherwise: rule
    # autoscaled-variant-update) and registered it again after, with its range, policy and scheduled actions.
    assert (
        f"{day_two.RETYPED_MODEL}: dev capacity.instance_type ml.g4dn.xlarge -> {day_two.RETYPED_TO}"
        in result.config_changes
    )
    assert (
        f"release N+1: dev-{day_two.RETYPED_MODEL} InService on {day_two.RETYPED_TO} (variant AllTraffic) in one "
        f"deploy; endpoint/dev-{day_two.RETYPED_MODEL}/variant/AllTraffic registered again as a scalable target "
        f"(1-2; scaling policies: 1, scheduled actions: 2)" in result.checks
    )
    # The load-test generators (load_test given to dev in the rehearsal's config copy) deployed and read back.
    assert any(c.startswith("dev-LoadTest: CREATE_COMPLETE, 8/8 outputs") for c in result.checks)
    assert any(c.startswith("dev-LoadTest: cluster, Fargate master and worker") for c in result.checks)
    assert os.environ.get("AWS_ENDPOINT_URL") is None  # nothing leaked into this process
