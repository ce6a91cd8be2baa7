"""Fine-grained assertions on each environment's foundation and on what every serving stack shares."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match, Template

ENDPOINT_SERVICES = ("ecr.api", "ecr.dkr", "logs", "sagemaker.runtime")


@pytest.fixture(scope="module")
def dev(synthesized) -> Template:
    return Template.from_json(synthesized.template("dev", "Foundation"))


@pytest.fixture(scope="module")
def prod(synthesized) -> Template:
    return Template.from_json(synthesized.template("prod", "Foundation"))


def test_created_vpc_has_private_subnets_per_zone_and_nat(dev, synthesized):
    dev.has_resource_properties("AWS::EC2::VPC", {"CidrBlock": "10.10.0.0/16"})
    dev.resource_count_is("AWS::EC2::NatGateway", 1)
    subnets = dev.find_resources("AWS::EC2::Subnet")
    private = [
        s for s in subnets.values() if {"Key": "aws-cdk:subnet-type", "Value": "Private"} in s["Properties"]["Tags"]
    ]
    zones = sorted(s["Properties"]["AvailabilityZone"] for s in private)
    assert zones == ["us-east-1a", "us-east-1b"]
    staging = Template.from_json(synthesized.template("staging", "Foundation"))
    staging.resource_count_is("AWS::EC2::NatGateway", 2)
    assert len(staging.find_resources("AWS::EC2::Subnet")) == 6  # 3 zones x (public, private)


def test_no_subnet_maps_public_ips(dev):
    for subnet in dev.find_resources("AWS::EC2::Subnet").values():
        assert subnet["Properties"]["MapPublicIpOnLaunch"] is False


def test_vpc_flow_logs_go_to_an_encrypted_log_group(dev):
    dev.has_resource_properties(
        "AWS::EC2::FlowLog", {"ResourceType": "VPC", "TrafficType": "ALL", "LogDestinationType": "cloud-watch-logs"}
    )
    dev.has_resource_properties(
        "AWS::Logs::LogGroup", {"KmsKeyId": Match.object_like({"Fn::GetAtt": Match.any_value()}), "RetentionInDays": 14}
    )


@pytest.mark.parametrize("env", ["dev", "staging"])
def test_interface_and_gateway_endpoints(synthesized, env):
    template = Template.from_json(synthesized.template(env, "Foundation"))
    endpoints = template.find_resources("AWS::EC2::VPCEndpoint")
    region = {"prod": "us-west-2"}.get(env, "us-east-1")
    interface = {
        e["Properties"]["ServiceName"].removeprefix(f"com.amazonaws.{region}.")
        for e in endpoints.values()
        if e["Properties"]["VpcEndpointType"] == "Interface"
    }
    assert interface == set(ENDPOINT_SERVICES)
    for endpoint in endpoints.values():
        if endpoint["Properties"]["VpcEndpointType"] == "Interface":
            assert endpoint["Properties"]["PrivateDnsEnabled"] is True
    gateways = [e for e in endpoints.values() if e["Properties"]["VpcEndpointType"] == "Gateway"]
    assert len(gateways) == 1 and gateways[0]["Properties"]["ServiceName"]["Fn::Join"][1][-1] == ".s3"


def test_endpoint_security_group_admits_https_from_the_vpc_only(dev):
    dev.has_resource_properties(
        "AWS::EC2::SecurityGroup",
        {
            "SecurityGroupIngress": [
                Match.object_like({"FromPort": 443, "ToPort": 443, "IpProtocol": "tcp", "CidrIp": Match.any_value()})
            ],
            "SecurityGroupEgress": Match.any_value(),
        },
    )
    (sg,) = [g for k, g in dev.find_resources("AWS::EC2::SecurityGroup").items() if k.startswith("NetworkEndpoint")]
    ingress = sg["Properties"]["SecurityGroupIngress"]
    assert all(rule.get("CidrIp") != "0.0.0.0/0" for rule in ingress)


def test_kms_key_rotates_and_lets_logs_and_alarms_use_it(dev):
    dev.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})
    (key,) = dev.find_resources("AWS::KMS::Key").values()
    statements = {s.get("Sid"): s for s in key["Properties"]["KeyPolicy"]["Statement"]}
    assert statements["CloudWatchLogs"]["Principal"] == {"Service": "logs.us-east-1.amazonaws.com"}
    assert "kms:EncryptionContext:aws:logs:arn" in statements["CloudWatchLogs"]["Condition"]["ArnLike"]
    assert statements["CloudWatchAlarms"]["Principal"] == {"Service": "cloudwatch.amazonaws.com"}


def test_dev_key_is_destroyed_prod_like_keys_are_retained(synthesized, dev):
    assert next(iter(dev.find_resources("AWS::KMS::Key").values()))["DeletionPolicy"] == "Delete"
    staging = Template.from_json(synthesized.template("staging", "Foundation"))
    assert next(iter(staging.find_resources("AWS::KMS::Key").values()))["DeletionPolicy"] == "Retain"


def test_created_alarm_topic_is_encrypted_and_tls_only(dev, synthesized):
    dev.has_resource_properties("AWS::SNS::Topic", {"KmsMasterKeyId": Match.any_value()})
    dev.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [Match.object_like({"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}})]
                )
            }
        },
    )
    staging = Template.from_json(synthesized.template("staging", "Foundation"))
    staging.has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ml-platform-alerts@example.com"}
    )


def test_prod_imports_its_vpc_and_topic(prod):
    prod.resource_count_is("AWS::EC2::VPC", 0)
    prod.resource_count_is("AWS::EC2::Subnet", 0)
    prod.resource_count_is("AWS::SNS::Topic", 0)


def test_prod_leaves_the_shared_vpcs_endpoints_and_routes_to_its_owner(prod):
    """prod's VPC is shared from the network account; participants cannot create VPC endpoints or change
    route tables (https://docs.aws.amazon.com/vpc/latest/userguide/vpc-share-limitations.html)."""
    prod.resource_count_is("AWS::EC2::VPCEndpoint", 0)
    for kind in ("AWS::EC2::Route", "AWS::EC2::RouteTable", "AWS::EC2::SubnetRouteTableAssociation"):
        prod.resource_count_is(kind, 0)


def test_a_participant_cannot_wire_endpoints_into_a_shared_vpc():
    import aws_cdk as cdk
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_logs as logs

    from inferstack.constructs.network import InferenceNetwork
    from inferstack.schema.environments import Network

    network = Network.model_validate(
        {
            "import": {
                "vpc_id": "vpc-0a1b2c3d4e5f60718",
                "vpc_cidr": "10.30.0.0/16",
                "owner_account": "555555555555",
                "private_subnet_ids": ["subnet-0a1b2c3d4e5f60001", "subnet-0a1b2c3d4e5f60002"],
                "private_subnet_route_table_ids": ["rtb-0a1b2c3d4e5f60001", "rtb-0a1b2c3d4e5f60002"],
                "create_endpoints": True,
            }
        }
    )
    stack = cdk.Stack(cdk.App(), "Participant", env=cdk.Environment(account="333333333333", region="us-west-2"))
    with pytest.raises(ValueError, match="shared from account 555555555555"):
        InferenceNetwork(
            stack,
            "Network",
            network=network,
            availability_zones=["us-west-2a", "us-west-2b"],
            key=kms.Key(stack, "Key"),
            log_retention=logs.RetentionDays.ONE_WEEK,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )


def test_foundation_pins_stateful_logical_ids(synthesized):
    resources = synthesized.template("dev", "Foundation")["Resources"]
    for logical_id in ("PlatformKey1C4A1A63", "NetworkVpc7FB7348F", "AlarmsTopic3A2DFEBA"):
        assert logical_id in resources


def test_foundation_exports_do_not_depend_on_models(synthesized):
    outputs = synthesized.template("dev", "Foundation")["Outputs"]
    exported = {o["Export"]["Name"].split(":", 1)[1] for o in outputs.values() if "Export" in o}
    assert any("NetworkVpc" in name and "CidrBlock" in name for name in exported)
    assert sum("privateSubnet" in name for name in exported) == 2


@pytest.mark.parametrize("env,retention", [("dev", 14), ("staging", 30), ("prod", 365)])
def test_every_serving_stack_has_an_encrypted_log_group(synthesized, project, env, retention):
    for unit in project.image_units(env):  # each model's own stack, each neuron-cores fleet's
        template = Template.from_json(synthesized.template(env, unit.name))
        template.has_resource_properties(
            "AWS::Logs::LogGroup",
            {"RetentionInDays": retention, "KmsKeyId": {"Fn::ImportValue": Match.string_like_regexp("PlatformKey")}},
        )


def test_stacks_carry_environment_and_model_tags(synthesized):
    template = Template.from_json(synthesized.template("staging", "t5-spelling"))
    template.has_resource_properties(
        "AWS::Logs::LogGroup",
        {
            "Tags": Match.array_with(
                [
                    {"Key": "inferstack:environment", "Value": "staging"},
                    {"Key": "inferstack:model", "Value": "t5-spelling"},
                ]
            )
        },
    )
    fleet = Template.from_json(synthesized.template("staging", "intent-pack"))
    fleet.has_resource_properties(
        "AWS::Logs::LogGroup",
        {
            "Tags": Match.array_with(
                [
                    {"Key": "inferstack:environment", "Value": "staging"},
                    {"Key": "inferstack:fleet", "Value": "intent-pack"},
                ]
            )
        },
    )
