"""The Application Load Balancer in front of the tasks: who may reach it (the VPC's range, or the internet over
TLS only), its access-log bucket, and its one listener, HTTPS whenever there is a certificate. What the listener
forwards where is routing's."""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_s3 as s3
from constructs import Construct

from inferstack.constructs import checkov, nag

HTTP_PORT = 80
HTTPS_PORT = 443
# TLS 1.2 and 1.3 only, forward-secret ciphers (an HTTPS listener without a policy would admit TLS 1.0).
TLS_POLICY = elbv2.SslPolicy.RECOMMENDED_TLS
PLAIN_HTTP_REASON = (
    "internal load balancer without a certificate (defaults.certificate_arn): it listens only inside "
    "the VPC, admitting the VPC's range alone; setting a certificate makes this listener HTTPS"
)


@dataclass(frozen=True)
class LoadBalancer:
    """What add_load_balancer makes: the port its listener will take (443 with a certificate, else 80), its
    security group, the load balancer, its access-log bucket, and the service's base URL."""

    listener_port: int
    security_group: ec2.SecurityGroup
    load_balancer: elbv2.ApplicationLoadBalancer
    access_logs: s3.Bucket
    url: str


def add_load_balancer(
    scope: Construct,
    vpc: ec2.IVpc,
    vpc_cidr: str,
    subnets: ec2.SubnetSelection,
    public: bool,
    certificate_arn: str | None,
    access_log_retention: cdk.Duration,
    removal_policy: cdk.RemovalPolicy,
) -> LoadBalancer:
    # Public load balancers always have a certificate; internal ones serve HTTPS when the environment has one.
    tls = certificate_arn is not None
    port = HTTPS_PORT if tls else HTTP_PORT
    scheme = "HTTPS" if tls else "HTTP"
    security_group = ec2.SecurityGroup(
        scope,
        "LoadBalancerSecurityGroup",
        vpc=vpc,
        allow_all_outbound=False,
        description=("HTTPS from the internet" if public else f"{scheme} from inside the VPC")
        + " to the model load balancer",
    )
    if public:
        security_group.add_ingress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(port), "HTTPS from clients")
        nag.acknowledge(
            security_group, "EC23", "configured as a public endpoint: HTTPS (TLS only) from any client is the purpose"
        )
    else:
        security_group.add_ingress_rule(ec2.Peer.ipv4(vpc_cidr), ec2.Port.tcp(port), f"{scheme} from the VPC")
    load_balancer = elbv2.ApplicationLoadBalancer(
        scope,
        "LoadBalancer",
        vpc=vpc,
        internet_facing=public,
        vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PUBLIC) if public else subnets,
        security_group=security_group,
        drop_invalid_header_fields=True,
    )

    # ALB log delivery writes only to SSE-S3 buckets (not SSE-KMS).
    auto_delete = removal_policy == cdk.RemovalPolicy.DESTROY
    access_logs = s3.Bucket(
        scope,
        "AccessLogs",
        encryption=s3.BucketEncryption.S3_MANAGED,
        enforce_ssl=True,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        lifecycle_rules=[s3.LifecycleRule(expiration=access_log_retention)],
        removal_policy=removal_policy,
        auto_delete_objects=auto_delete,
    )
    if auto_delete:
        _lint_ignore_cdk_provider(scope, "Custom::S3AutoDeleteObjectsCustomResourceProvider")
        checkov.skip_provider_handler(scope, "Custom::S3AutoDeleteObjectsCustomResourceProvider")
    nag.acknowledge(
        access_logs,
        "S1",
        "this bucket is the load balancer's access-log destination; logging access to the "
        "log bucket itself would need another bucket, and so on",
    )
    checkov.skip(
        access_logs,
        "CKV_AWS_18",
        "this bucket is the load balancer's access-log destination; logging access to the log "
        "bucket itself would need another bucket, and so on",
    )
    checkov.skip(
        access_logs,
        "CKV_AWS_21",
        "load balancer logs are written once under unique keys and never overwritten; the lifecycle "
        "rule deletes them at the environment's log retention, which versioning would defeat by "
        "keeping them as noncurrent versions",
    )
    load_balancer.log_access_logs(access_logs)
    url = f"{scheme.lower()}://{load_balancer.load_balancer_dns_name}"
    return LoadBalancer(port, security_group, load_balancer, access_logs, url)


def add_listener(load_balancer: LoadBalancer, certificate_arn: str | None, default: dict) -> elbv2.ApplicationListener:
    """The listener on the load balancer's `listener_port`, with `default` (its default action or target
    groups)."""
    if certificate_arn is not None:
        return load_balancer.load_balancer.add_listener(
            "Listener",
            port=load_balancer.listener_port,
            protocol=elbv2.ApplicationProtocol.HTTPS,
            open=False,
            certificates=[elbv2.ListenerCertificate.from_arn(certificate_arn)],
            ssl_policy=TLS_POLICY,
            **default,
        )
    listener = load_balancer.load_balancer.add_listener(
        "Listener", port=load_balancer.listener_port, protocol=elbv2.ApplicationProtocol.HTTP, open=False, **default
    )
    checkov.skip(listener, "CKV_AWS_2", PLAIN_HTTP_REASON)
    checkov.skip(listener, "CKV_AWS_103", PLAIN_HTTP_REASON)
    return listener


def _lint_ignore_cdk_provider(scope: Construct, provider_id: str) -> None:
    """CDK's custom-resource provider handlers declare a DependsOn their role that a GetAtt already
    implies; cfn-lint warns (W3005). The template is CDK's, so silence that check on that resource only."""
    provider = cdk.Stack.of(scope).node.try_find_child(provider_id)
    handler = provider.node.try_find_child("Handler") if provider else None
    if isinstance(handler, cdk.CfnResource):
        handler.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3005"]}})
