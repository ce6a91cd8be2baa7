"""Updates never move production traffic or reset what autoscaling and schedules set
(inferstack.constructs.live_values): on every synthesized template of every environment, each value ECS,
Application Auto Scaling or an off-hours window owns is read live at deploy time by a Custom::LiveValue whose
trigger is the rest of the resource; the reader itself, run against moto, answers what is live; and the counts
CloudFormation keeps by leaving them out of the template are left out."""

from __future__ import annotations

import re

import boto3
import pytest
from moto import mock_aws

from inferstack.constructs import live_values_handler
from rehearsal import moto_patches
from tests.support.live_values import READER_TYPE, reader_of

REGION = "us-east-1"
read = live_values_handler.load()


def every_template(synthesized):
    for env, templates in synthesized.templates.items():
        for stack, template in templates.items():
            yield f"{env}/{stack}", template


def of_type(template: dict, kind: str) -> dict[str, dict]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def folded(value):
    """Keys without case (the reader's trigger carries the L1's camelCase names, the template PascalCase)."""
    if isinstance(value, dict):
        return {key.lower(): folded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [folded(item) for item in value]
    return value


def production_rules(template: dict) -> dict[str, dict]:
    """The rules ECS services name as production listener rules (ECS moves their weights)."""
    named = {
        balancer["AdvancedConfiguration"]["ProductionListenerRule"]["Ref"]
        for service in of_type(template, "AWS::ECS::Service").values()
        for balancer in service["Properties"].get("LoadBalancers", [])
        if "AdvancedConfiguration" in balancer
    }
    return {k: template["Resources"][k] for k in named}


def test_every_production_rule_and_weighted_listener_writes_the_live_weights(synthesized):
    checked = 0
    for where, template in every_template(synthesized):
        weighted = {
            **production_rules(template),
            **{
                k: r
                for k, r in of_type(template, "AWS::ElasticLoadBalancingV2::Listener").items()
                if "ForwardConfig" in r["Properties"]["DefaultActions"][0]
            },
        }
        for logical_id, resource in weighted.items():
            key = "Actions" if "Actions" in resource["Properties"] else "DefaultActions"
            (action,) = resource["Properties"][key]
            primary, alternate = action["ForwardConfig"]["TargetGroups"]
            found = [reader_of(template, group["Weight"]) for group in (primary, alternate)]
            assert all(found), f"{where} {logical_id}: literal weights {primary['Weight']}/{alternate['Weight']}"
            (reader_id, _, request), (same_id, _, _) = found
            assert reader_id == same_id and [f[1] for f in found] == ["Primary", "Alternate"]
            assert request["Kind"] == "forward-weights" and request["Planned"] == [100, 0]
            assert request["TargetGroupArns"] == [primary["TargetGroupArn"], alternate["TargetGroupArn"]]
            # Found through the load balancer and port the rule's listener has (not the rule: it reads the reader).
            listener = (
                resource
                if key == "DefaultActions"
                else template["Resources"][resource["Properties"]["ListenerArn"]["Ref"]]
            )
            assert (request["LoadBalancerArn"], request["Port"]) == (
                listener["Properties"]["LoadBalancerArn"],
                listener["Properties"]["Port"],
            )
            # Whatever else changes on the rule changes the reader first, which reads the weights again.
            trigger = template["Resources"][reader_id]["Properties"]["Trigger"]
            as_planned = {
                **resource["Properties"],
                key: [
                    {
                        **action,
                        "ForwardConfig": {"TargetGroups": [{**primary, "Weight": 100}, {**alternate, "Weight": 0}]},
                    }
                ],
            }
            assert folded(trigger) == folded(as_planned), f"{where} {logical_id}"
            checked += 1
    # dev, staging and prod each: intent-pack's two members and its listener, intent-bert-inf2's rule and listener
    assert checked == 15


def test_ranges_of_targets_with_off_hours_windows_are_read_live(synthesized):
    checked = 0
    for where, template in every_template(synthesized):
        for logical_id, target in of_type(template, "AWS::ApplicationAutoScaling::ScalableTarget").items():
            props = target["Properties"]
            windows = [
                a["ScalableTargetAction"]
                for a in props.get("ScheduledActions", [])
                if a["ScheduledActionName"].endswith("Start")
            ]
            found = reader_of(template, props["MinCapacity"])
            if not windows:  # nothing can be in effect but the planned range
                assert isinstance(props["MinCapacity"], int) and found is None, f"{where} {logical_id}"
                continue
            assert found is not None, f"{where} {logical_id}: a deploy inside a window would reset its range"
            reader_id, attribute, request = found
            assert attribute == "Min" and props["MaxCapacity"] == {"Fn::GetAtt": [reader_id, "Max"]}
            assert request["Windows"] == [[w["MinCapacity"], w["MaxCapacity"]] for w in windows]
            ends = [
                a["ScalableTargetAction"] for a in props["ScheduledActions"] if a["ScheduledActionName"].endswith("End")
            ]
            assert all([e["MinCapacity"], e["MaxCapacity"]] == request["Planned"] for e in ends)
            assert (request["ServiceNamespace"], request["ResourceId"], request["ScalableDimension"]) == (
                props["ServiceNamespace"],
                props["ResourceId"],
                props["ScalableDimension"],
            )
            trigger = template["Resources"][reader_id]["Properties"]["Trigger"]
            planned = dict(zip(("MinCapacity", "MaxCapacity"), request["Planned"], strict=True))
            assert folded(trigger) == folded({**props, **planned}), f"{where} {logical_id}"
            checked += 1
    assert checked >= 2  # intent-pack and intent-bert-inf2 in dev close at night


def test_inference_components_write_the_live_copy_count(synthesized):
    checked = 0
    for where, template in every_template(synthesized):
        for logical_id, component in of_type(template, "AWS::SageMaker::InferenceComponent").items():
            props = component["Properties"]
            found = reader_of(template, props["RuntimeConfig"]["CopyCount"])
            assert found is not None, f"{where} {logical_id}: an update would reset the copies to the template's"
            reader_id, attribute, request = found
            assert (attribute, request["Kind"], request["InferenceComponentName"]) == (
                "CopyCount",
                "copy-count",
                props["InferenceComponentName"],
            )
            trigger = template["Resources"][reader_id]["Properties"]["Trigger"]
            assert folded(trigger)["inferencecomponentname"] == props["InferenceComponentName"]
            assert folded(trigger)["runtimeconfig"] == {"copycount": request["Planned"]}
            checked += 1
    assert checked == 2  # dev's two fleet members


def test_counts_autoscaling_owns_are_absent_or_retained(synthesized):
    """ECS keeps a service's running count when DesiredCount is absent from an update; an Auto Scaling group
    keeps its desired capacity when DesiredCapacity is absent, and its min and max unless the template changes
    them (AutoScalingScheduledAction.IgnoreUnmodifiedGroupSizeProperties); an endpoint keeps its variants'
    instance counts across endpoint config changes with RetainAllVariantProperties (DesiredInstanceCount not
    excluded)."""
    kinds = set()
    for where, template in every_template(synthesized):
        for logical_id, resource in template["Resources"].items():
            props, kind = resource.get("Properties", {}), resource["Type"]
            if kind == "AWS::ECS::Service":
                assert "DesiredCount" not in props, f"{where} {logical_id}"
            elif kind == "AWS::AutoScaling::AutoScalingGroup":
                assert "DesiredCapacity" not in props, f"{where} {logical_id}"
                assert resource["UpdatePolicy"]["AutoScalingScheduledAction"] == {
                    "IgnoreUnmodifiedGroupSizeProperties": True
                }, f"{where} {logical_id}"
            elif kind == "AWS::SageMaker::Endpoint":
                assert props.get("RetainAllVariantProperties") is True, f"{where} {logical_id}"
                excluded = {p["VariantPropertyType"] for p in props.get("ExcludeRetainedVariantProperties", [])}
                assert not excluded & {"DesiredInstanceCount", "DesiredWeight"}, f"{where} {logical_id}"
            else:
                continue
            kinds.add(kind)
    assert kinds == {"AWS::ECS::Service", "AWS::AutoScaling::AutoScalingGroup", "AWS::SageMaker::Endpoint"}


def test_readers_may_only_read(synthesized):
    for where, template in every_template(synthesized):
        readers = of_type(template, READER_TYPE)
        if not readers:
            continue
        function_ids = {r["Properties"]["ServiceToken"]["Fn::GetAtt"][0] for r in readers.values()}
        for function_id in function_ids:
            role_id = template["Resources"][function_id]["Properties"]["Role"]["Fn::GetAtt"][0]
            policies = [
                r
                for r in of_type(template, "AWS::IAM::Policy").values()
                if {"Ref": role_id} in r["Properties"]["Roles"]
            ]
            actions = {
                a
                for p in policies
                for s in p["Properties"]["PolicyDocument"]["Statement"]
                for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
            }
            assert all(
                re.match(
                    r"^(elasticloadbalancing:Describe|application-autoscaling:Describe|"
                    r"sagemaker:Describe|logs:(CreateLogStream|PutLogEvents)$)",
                    a,
                )
                for a in actions
            ), f"{where}: {sorted(actions)}"


# ----------------------------------------------------------------------------- the reader, against moto


@pytest.fixture
def moto(aws):
    with mock_aws():
        yield


def client(service: str):
    return boto3.client(service, region_name=REGION)


def weighted_listener() -> tuple[str, str, str, str]:
    """A load balancer with a listener on 80 and a production rule, both forwarding 100/0 to two target
    groups, as the stack creates them: (load balancer, rule, primary, alternate)."""
    ec2, elbv2 = client("ec2"), client("elbv2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=f"{REGION}{z}")["Subnet"]["SubnetId"]
        for i, z in enumerate("ab")
    ]
    balancer = elbv2.create_load_balancer(Name="lb", Subnets=subnets, Scheme="internal")["LoadBalancers"][0][
        "LoadBalancerArn"
    ]
    groups = [
        elbv2.create_target_group(Name=n, Protocol="HTTP", Port=8080, VpcId=vpc, TargetType="ip")["TargetGroups"][0][
            "TargetGroupArn"
        ]
        for n in ("primary", "alternate")
    ]
    forward = [
        {
            "Type": "forward",
            "ForwardConfig": {
                "TargetGroups": [
                    {"TargetGroupArn": groups[0], "Weight": 100},
                    {"TargetGroupArn": groups[1], "Weight": 0},
                ]
            },
        }
    ]
    listener = elbv2.create_listener(LoadBalancerArn=balancer, Protocol="HTTP", Port=80, DefaultActions=forward)[
        "Listeners"
    ][0]["ListenerArn"]
    rule = elbv2.create_rule(
        ListenerArn=listener,
        Priority=50000,
        Actions=forward,
        Conditions=[{"Field": "path-pattern", "PathPatternConfig": {"Values": ["/*"]}}],
    )["Rules"][0]["RuleArn"]
    return balancer, rule, groups[0], groups[1]


def test_reader_answers_the_weights_ecs_left_on_the_rule_not_the_listeners(moto):
    balancer, rule, primary, alternate = weighted_listener()
    request = {
        "Kind": "forward-weights",
        "LoadBalancerArn": balancer,
        "Port": 80,
        "TargetGroupArns": [primary, alternate],
        "Planned": [100, 0],
    }
    assert read(request, client) == {"Primary": 100, "Alternate": 0, "Source": rule}
    # What ECS does after a completed blue/green deployment: production is the alternate target group.
    client("elbv2").modify_rule(
        RuleArn=rule,
        Actions=[
            {
                "Type": "forward",
                "ForwardConfig": {
                    "TargetGroups": [
                        {"TargetGroupArn": primary, "Weight": 0},
                        {"TargetGroupArn": alternate, "Weight": 100},
                    ]
                },
            }
        ],
    )
    assert read(request, client) == {"Primary": 0, "Alternate": 100, "Source": rule}
    # Nothing forwards to that pair on another port: the planned weights (a first deploy).
    assert read({**request, "Port": 443}, client) == {"Primary": 100, "Alternate": 0, "Source": "planned"}


def test_reader_keeps_a_windows_range_only_while_the_window_is_in_effect(moto):
    scaling, ecs = client("application-autoscaling"), client("ecs")
    ecs.create_cluster(clusterName="cluster")
    ecs.register_task_definition(
        family="task", containerDefinitions=[{"name": "Server", "image": "server", "memory": 512}]
    )
    ecs.create_service(cluster="cluster", serviceName="svc", taskDefinition="task", desiredCount=1)
    request = {
        "Kind": "scalable-range",
        "ServiceNamespace": "ecs",
        "ResourceId": "service/cluster/svc",
        "ScalableDimension": "ecs:service:DesiredCount",
        "Planned": [1, 3],
        "Windows": [[0, 0]],
    }
    assert read(request, client) == {"Min": 1, "Max": 3, "Source": "planned"}  # nothing registered yet
    scaling.register_scalable_target(
        ServiceNamespace="ecs",
        ResourceId="service/cluster/svc",
        ScalableDimension="ecs:service:DesiredCount",
        MinCapacity=0,
        MaxCapacity=0,
    )
    assert read(request, client) == {"Min": 0, "Max": 0, "Source": "off-hours window in effect"}
    scaling.register_scalable_target(
        ServiceNamespace="ecs",
        ResourceId="service/cluster/svc",
        ScalableDimension="ecs:service:DesiredCount",
        MinCapacity=2,
        MaxCapacity=5,
    )
    # An old planned range (the config changed it): the new planned range applies.
    assert read(request, client) == {"Min": 1, "Max": 3, "Source": "planned"}


def test_reader_answers_the_copies_autoscaling_set(moto):
    sagemaker = client("sagemaker")
    request = {"Kind": "copy-count", "InferenceComponentName": "dev-t5", "Planned": 1}
    with moto_patches.applied("sagemaker-variant-without-model", "sagemaker-inference-components"):
        assert read(request, client) == {"CopyCount": 1, "Source": "planned"}  # not created yet
        sagemaker.create_model(
            ModelName="t5",
            ExecutionRoleArn="arn:aws:iam::123456789012:role/r",
            PrimaryContainer={"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/t5@sha256:" + "0" * 64},
        )
        sagemaker.create_endpoint_config(
            EndpointConfigName="shared",
            ProductionVariants=[
                {"VariantName": "AllTraffic", "InstanceType": "ml.g4dn.xlarge", "InitialInstanceCount": 1}
            ],
        )
        sagemaker.create_endpoint(EndpointName="shared", EndpointConfigName="shared")
        sagemaker.create_inference_component(
            InferenceComponentName="dev-t5",
            EndpointName="shared",
            VariantName="AllTraffic",
            Specification={"ModelName": "t5"},
            RuntimeConfig={"CopyCount": 1},
        )
        sagemaker.update_inference_component_runtime_config(
            InferenceComponentName="dev-t5", DesiredRuntimeConfig={"CopyCount": 0}
        )  # scaled to zero
        assert read(request, client) == {"CopyCount": 0, "Source": "live"}
