"""NeuronEcsService in tests: the logical ids its stacks pin, the shipped neuron-cores fleet, a certificate for
public variants, and the construct built on its own in a stack of its own (`build_direct`)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from aws_cdk.assertions import Template

from inferstack.capacity.planning import CapacityPlan
from inferstack.constructs.neuron_service import ImageBuild, NeuronEcsService
from inferstack.neuron import image as neuron_image
from tests.support.synth import cdk_json_context

# Stateful or referenced by name elsewhere (smoke tool, dashboards): these must never move.
PINNED_IDS = {
    "AWS::ECS::Service": "NeuronService9A85BE22",
    "AWS::AutoScaling::AutoScalingGroup": "NeuronCapacityASG52BF15C3",
    "AWS::ElasticLoadBalancingV2::LoadBalancer": "NeuronLoadBalancerB697AB81",
}
CERT = "arn:aws:acm:us-east-1:111111111111:certificate/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
# The shipped neuron-cores fleet (environments.yaml `fleets:`).
FLEET = "intent-pack"


def build_direct(model, instance_type: str, **overrides) -> Template:
    app = cdk.App(context=cdk_json_context())
    stack = cdk.Stack(app, "Direct", env=cdk.Environment(account="111111111111", region="us-east-1"))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0123456789abcdef0",
        vpc_cidr_block="10.0.0.0/16",
        availability_zones=["us-east-1a", "us-east-1b"],
        private_subnet_ids=["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"],
    )
    plan = CapacityPlan(
        model=model.name,
        environment="test",
        instance_type=instance_type,
        throughput_per_instance=500,
        profile_p99_ms=8,
        slo_p99_ms=10,
        peak_tps=400,
        safety_factor=0.5,
        instances_at_peak=2,
        min_capacity=1,
        max_capacity=3,
    )
    args = dict(
        models=[model],
        capacity=plan,
        vpc=vpc,
        vpc_cidr="10.0.0.0/16",
        subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
        log_group=logs.LogGroup(stack, "Logs"),
        alarm_topic_arn="arn:aws:sns:us-east-1:111111111111:alarms",
        public=False,
        certificate_arn=None,
        image=ImageBuild(str(neuron_image.DIRECTORY)),
        access_log_retention=cdk.Duration.days(7),
        removal_policy=cdk.RemovalPolicy.RETAIN,
        metrics_service="test-direct",
    )
    NeuronEcsService(stack, "Neuron", **(args | overrides))
    return Template.from_stack(stack)
