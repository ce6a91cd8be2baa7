"""The network models run in: a new VPC (public subnets for NAT only, private subnets for workloads)
or an existing VPC imported by ids, plus the VPC endpoints that keep image pulls, logs and SageMaker
runtime calls off the internet."""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from inferstack.constructs import checkov
from inferstack.schema.environments import Network

# Interface endpoints every serving path needs from private subnets.
INTERFACE_ENDPOINTS: dict[str, ec2.InterfaceVpcEndpointAwsService] = {
    "EcrApi": ec2.InterfaceVpcEndpointAwsService.ECR,
    "EcrDocker": ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
    "Logs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    "SageMakerRuntime": ec2.InterfaceVpcEndpointAwsService.SAGEMAKER_RUNTIME,
}


class InferenceNetwork(Construct):
    """Exposes `vpc`, `private_subnets` and `vpc_owner_account` (the account in the VPC's ARN: another
    account's for a VPC shared with this one); creates endpoints for a new VPC, or for an imported one
    when the config asks for them and this account owns it."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        network: Network,
        availability_zones: Sequence[str],
        key: kms.IKey,
        log_retention: logs.RetentionDays,
        removal_policy: cdk.RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        account = cdk.Stack.of(self).account
        self.vpc_owner_account = network.vpc_owner(account)
        if network.create is not None:
            self.vpc: ec2.IVpc = ec2.Vpc(
                self,
                "Vpc",
                ip_addresses=ec2.IpAddresses.cidr(network.create.cidr),
                availability_zones=list(availability_zones),
                nat_gateways=network.create.nat_gateways,
                subnet_configuration=[
                    ec2.SubnetConfiguration(
                        name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24, map_public_ip_on_launch=False
                    ),
                    ec2.SubnetConfiguration(
                        name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=20
                    ),
                ],
            )
            # Zones are committed in environments.yaml on purpose: synth stays offline and deterministic.
            cdk.Validations.of(self.vpc).acknowledge(
                cdk.Acknowledgment(
                    id="CloudFormation-Validate::W3010",
                    reason="availability zones are pinned in environments.yaml so synth needs no AWS lookup",
                )
            )
            flow_logs = logs.LogGroup(
                self, "FlowLogs", encryption_key=key, retention=log_retention, removal_policy=removal_policy
            )
            self.vpc.add_flow_log(
                "FlowLog",
                destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
                traffic_type=ec2.FlowLogTrafficType.ALL,
            )
            _lint_ignore_cdk_provider(self.vpc)
            checkov.skip_provider_handler(self.vpc, "Custom::VpcRestrictDefaultSGCustomResourceProvider")
            create_endpoints = True
            cidr = network.create.cidr
        else:
            imported = network.import_
            assert imported is not None  # the schema guarantees exactly one of create/import
            self.vpc = ec2.Vpc.from_vpc_attributes(
                self,
                "Vpc",
                vpc_id=imported.vpc_id,
                vpc_cidr_block=imported.vpc_cidr,
                availability_zones=list(availability_zones),
                private_subnet_ids=list(imported.private_subnet_ids),
                private_subnet_route_table_ids=list(imported.private_subnet_route_table_ids),
                public_subnet_ids=list(imported.public_subnet_ids) or None,
            )
            create_endpoints = imported.create_endpoints
            cidr = imported.vpc_cidr
            # The owner of a shared VPC manages its endpoints and route tables; a participant cannot
            # (https://docs.aws.amazon.com/vpc/latest/userguide/vpc-share-limitations.html). The config
            # check reports this first; here it keeps the construct from being wired wrong.
            if create_endpoints and self.vpc_owner_account != account:
                raise ValueError(
                    f"VPC {imported.vpc_id} is shared from account {self.vpc_owner_account}: "
                    f"only its owner can create VPC endpoints or change its route tables"
                )

        self.private_subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        self.endpoint_security_group: ec2.SecurityGroup | None = None
        if create_endpoints:
            self._add_endpoints(cidr)

    def _add_endpoints(self, vpc_cidr: str) -> None:
        self.vpc.add_gateway_endpoint("S3", service=ec2.GatewayVpcEndpointAwsService.S3, subnets=[self.private_subnets])
        sg = ec2.SecurityGroup(
            self,
            "EndpointSecurityGroup",
            vpc=self.vpc,
            allow_all_outbound=False,
            description="HTTPS from inside the VPC to interface endpoints",
        )
        sg.add_ingress_rule(ec2.Peer.ipv4(vpc_cidr), ec2.Port.tcp(443), "HTTPS from the VPC")
        self.endpoint_security_group = sg
        for name, service in INTERFACE_ENDPOINTS.items():
            ec2.InterfaceVpcEndpoint(
                self,
                name,
                vpc=self.vpc,
                service=service,
                subnets=self.private_subnets,
                private_dns_enabled=True,
                security_groups=[sg],
                open=False,
            )


def _lint_ignore_cdk_provider(vpc: ec2.Vpc) -> None:
    """The CDK-owned provider that empties the default security group declares a DependsOn that a GetAtt
    already implies; cfn-lint warns (W3005). The template is CDK's, so silence it on that resource only."""
    provider = cdk.Stack.of(vpc).node.try_find_child("Custom::VpcRestrictDefaultSGCustomResourceProvider")
    handler = provider.node.try_find_child("Handler") if provider else None
    if isinstance(handler, cdk.CfnResource):
        handler.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3005"]}})
