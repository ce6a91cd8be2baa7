"""`inferstack diff` for CI: change classes (--fail-on), environments synthesized on one side only (--env),
what added and removed stacks run, and what a removal keeps. Hand-written templates in tiny cloud
assemblies (tests/support/review_assemblies.write_assembly): each builds the few resources a class is about."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from inferstack.capacity import pricing
from inferstack.review import assembly, diff, render_markdown
from tests.support import review_assemblies as ra
from tests.support.cli import run

LB = "AWS::ElasticLoadBalancingV2::LoadBalancer"
LISTENER = "AWS::ElasticLoadBalancingV2::Listener"
RULE = "AWS::ElasticLoadBalancingV2::ListenerRule"
TARGET_GROUP = "AWS::ElasticLoadBalancingV2::TargetGroup"


def weighted(primary: int = 100, alternate: int = 0) -> list[dict]:
    return [
        {
            "Type": "forward",
            "ForwardConfig": {
                "TargetGroups": [
                    {"TargetGroupArn": {"Ref": "Targets"}, "Weight": primary},
                    {"TargetGroupArn": {"Ref": "AlternateTargets"}, "Weight": alternate},
                ]
            },
        }
    ]


def target_group(port: int = 8080) -> dict:
    return {
        "Type": TARGET_GROUP,
        "Properties": {"Port": port, "Protocol": "HTTP", "TargetType": "ip", "VpcId": "vpc-1"},
    }


def ecs() -> dict:
    """A blue/green ECS fleet as NeuronEcsService builds it: a listener whose default action and production
    rule forward weighted to two target groups, the service naming the rule, its task-count target, an
    Auto Scaling group on a launch template, a retained log group and a task policy."""
    return {
        "Resources": {
            "LaunchTemplate": {
                "Type": "AWS::EC2::LaunchTemplate",
                "Properties": {"LaunchTemplateData": {"InstanceType": "inf1.xlarge"}},
            },
            "Asg": {
                "Type": "AWS::AutoScaling::AutoScalingGroup",
                "Properties": {
                    "MinSize": "1",
                    "MaxSize": "3",
                    "LaunchTemplate": {
                        "LaunchTemplateId": {"Ref": "LaunchTemplate"},
                        "Version": {"Fn::GetAtt": ["LaunchTemplate", "LatestVersionNumber"]},
                    },
                },
            },
            "Lb": {"Type": LB, "Properties": {"Name": "dev-intent", "Scheme": "internal"}},
            "Targets": target_group(),
            "AlternateTargets": target_group(),
            "Listener": {
                "Type": LISTENER,
                "Properties": {
                    "LoadBalancerArn": {"Ref": "Lb"},
                    "Port": 80,
                    "Protocol": "HTTP",
                    "DefaultActions": weighted(),
                },
            },
            "Route": {
                "Type": RULE,
                "Properties": {
                    "ListenerArn": {"Ref": "Listener"},
                    "Priority": 50000,
                    "Actions": weighted(),
                    "Conditions": [{"Field": "path-pattern", "PathPatternConfig": {"Values": ["/*"]}}],
                },
            },
            "Service": {
                "Type": "AWS::ECS::Service",
                "Properties": {
                    "Cluster": "cluster",
                    "TaskDefinition": "task:1",
                    "LoadBalancers": [
                        {
                            "ContainerName": "Server",
                            "ContainerPort": 8080,
                            "TargetGroupArn": {"Ref": "Targets"},
                            "AdvancedConfiguration": {
                                "AlternateTargetGroupArn": {"Ref": "AlternateTargets"},
                                "ProductionListenerRule": {"Ref": "Route"},
                                "RoleArn": "arn:aws:iam::111111111111:role/lb",
                            },
                        }
                    ],
                },
            },
            "TaskCount": {
                "Type": "AWS::ApplicationAutoScaling::ScalableTarget",
                "Properties": {
                    "MinCapacity": 1,
                    "MaxCapacity": 4,
                    "ScalableDimension": "ecs:service:DesiredCount",
                    "ServiceNamespace": "ecs",
                    "ResourceId": {"Fn::Join": ["", ["service/cluster/", {"Fn::GetAtt": ["Service", "Name"]}]]},
                },
            },
            "Logs": {
                "Type": "AWS::Logs::LogGroup",
                "Properties": {"RetentionInDays": 30},
                "DeletionPolicy": "Retain",
                "UpdateReplacePolicy": "Retain",
            },
            "TaskPolicy": {
                "Type": "AWS::IAM::Policy",
                "Properties": {
                    "PolicyName": "task",
                    "Roles": ["task-role"],
                    "PolicyDocument": {
                        "Statement": [
                            {"Effect": "Allow", "Action": ["logs:PutLogEvents", "ecr:BatchGetImage"], "Resource": "*"},
                            {"Effect": "Allow", "Action": "logs:PutLogEvents", "Resource": "*"},
                        ]
                    },
                },
            },
        }
    }


def endpoint(*, instance: str = "ml.g4dn.xlarge", retain: bool | None = None) -> dict:
    """A dedicated SageMaker endpoint: Model, EndpointConfig, Endpoint (optionally retaining variant
    properties), its instance-count target."""
    props: dict = {"EndpointName": "dev-bert", "EndpointConfigName": {"Fn::GetAtt": ["Config", "EndpointConfigName"]}}
    if retain is not None:
        props["RetainAllVariantProperties"] = retain
    return {
        "Resources": {
            "Model": {
                "Type": "AWS::SageMaker::Model",
                "Properties": {
                    "ExecutionRoleArn": "arn:aws:iam::111111111111:role/x",
                    "PrimaryContainer": {"Image": "repo:1"},
                },
            },
            "Config": {
                "Type": "AWS::SageMaker::EndpointConfig",
                "Properties": {
                    "ProductionVariants": [
                        {
                            "ModelName": {"Fn::GetAtt": ["Model", "ModelName"]},
                            "VariantName": "AllTraffic",
                            "InitialInstanceCount": 2,
                            "InstanceType": instance,
                        }
                    ]
                },
            },
            "Endpoint": {"Type": "AWS::SageMaker::Endpoint", "Properties": props},
            "Scaling": {
                "Type": "AWS::ApplicationAutoScaling::ScalableTarget",
                "Properties": {
                    "MinCapacity": 2,
                    "MaxCapacity": 6,
                    "ResourceId": "endpoint/dev-bert/variant/AllTraffic",
                    "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
                    "ServiceNamespace": "sagemaker",
                },
            },
        }
    }


def component(*, image: str = "repo:1", copies: object = 1) -> dict:
    return {
        "Resources": {
            "Model": {
                "Type": "AWS::SageMaker::Model",
                "Properties": {
                    "ExecutionRoleArn": "arn:aws:iam::111111111111:role/x",
                    "PrimaryContainer": {"Image": image},
                },
            },
            "Reader": {"Type": "Custom::LiveValue", "Properties": {"ServiceToken": "arn:aws:lambda:::function:f"}},
            "Component": {
                "Type": "AWS::SageMaker::InferenceComponent",
                "Properties": {
                    "InferenceComponentName": "dev-bert",
                    "EndpointName": "dev-shared",
                    "VariantName": "AllTraffic",
                    "Specification": {"ModelName": {"Fn::GetAtt": ["Model", "ModelName"]}},
                    "RuntimeConfig": {"CopyCount": copies},
                },
            },
            "Copies": {
                "Type": "AWS::ApplicationAutoScaling::ScalableTarget",
                "Properties": {
                    "MinCapacity": 0,
                    "MaxCapacity": 3,
                    "ResourceId": "inference-component/dev-bert",
                    "ScalableDimension": "sagemaker:inference-component:DesiredCopyCount",
                    "ServiceNamespace": "sagemaker",
                },
            },
        }
    }


def write(directory: Path, environments: dict[str, dict[str, dict]]) -> Path:
    return ra.write_assembly(directory, copy.deepcopy(environments))


def compare(tmp_path: Path, base: dict[str, dict], head: dict[str, dict], env: str = "dev") -> diff.Report:
    return diff.diff(
        assembly.load(write(tmp_path / "base", {env: base})), assembly.load(write(tmp_path / "head", {env: head}))
    )


def changes(report: diff.Report, stack: str | None = None) -> dict[str, diff.ResourceChange]:
    return {r.logical_id: r for r in report.resources if stack is None or r.stack == stack}


def classes(report: diff.Report, stack: str | None = None) -> dict[str, list[str]]:
    return {lid: r.classes for lid, r in changes(report, stack).items()}


def cli(base: Path, head: Path, *args: str):
    return run("-m", "inferstack", "diff", str(base), str(head), *args)


# --- replaces-serving-resource and interrupts-traffic ----------------------------------------------


def test_replaced_load_balancer_listener_and_rule(tmp_path):
    head = ecs()
    head["Resources"]["Lb"]["Properties"]["Name"] = "dev-intent-2"  # create-only: a new load balancer
    report = compare(tmp_path, {"fleet": ecs()}, {"fleet": head})
    found = changes(report)
    assert found["Lb"].classes == ["replaces-serving-resource", "interrupts-traffic"]
    assert (
        found["Lb"]
        .class_reasons["interrupts-traffic"]
        .startswith("replaced (Properties.Name is create-only (/properties/Name)): a new load balancer")
    )
    # The listener and its rule follow (their LoadBalancerArn / ListenerArn are create-only).
    assert found["Listener"].classes == ["replaces-serving-resource", "interrupts-traffic"]
    assert found["Route"].classes == ["replaces-serving-resource", "touches-production-rule"]
    assert found["Route"].class_reasons["touches-production-rule"].startswith("production listener rule replaced")
    assert diff.class_counts(report.resources) == {
        "replaces-serving-resource": 3,
        "interrupts-traffic": 2,
        "resets-scaled-count": 0,
        "pauses-autoscaling": 0,
        "touches-production-rule": 1,
        "adds": 0,
        "removes": 0,
    }


def test_target_group_replacement_interrupts_only_when_something_forwards_to_it(tmp_path):
    base = ecs()
    base["Resources"]["Spare"] = target_group()  # nothing forwards to it or registers in it
    head = copy.deepcopy(base)
    head["Resources"]["Targets"]["Properties"]["Port"] = 9090
    head["Resources"]["Spare"]["Properties"]["Port"] = 9090
    found = changes(compare(tmp_path, {"fleet": base}, {"fleet": head}))
    assert (found["Targets"].replacement, found["Spare"].replacement) == ("always", "always")
    assert found["Targets"].classes == ["replaces-serving-resource", "interrupts-traffic"]
    assert found["Spare"].classes == []


def test_endpoint_config_replacement_is_the_normal_update_path_not_an_interruption(tmp_path):
    report = compare(
        tmp_path, {"model": endpoint(retain=True)}, {"model": endpoint(instance="ml.g5.xlarge", retain=True)}
    )
    found = changes(report)
    assert found["Config"].replacement == "always"
    assert found["Config"].classes == []
    assert found["Endpoint"].classes == []  # updated in place, keeping the autoscaled count
    # ... but not while its variant is a registered scalable target and nothing deregisters it first
    (warning,) = report.environments[0].warnings
    assert warning.startswith(
        "model: Endpoint: variant AllTraffic moves from ml.g4dn.xlarge to ml.g5.xlarge while "
        "it is a registered scalable target, and no scaling handover deregisters it first: AWS "
        "refuses the UpdateEndpoint and CloudFormation rolls the stack back"
    )


def test_removing_a_service_while_its_stack_stays_interrupts_traffic(tmp_path):
    head = ecs()
    del head["Resources"]["Service"], head["Resources"]["TaskCount"]
    found = changes(compare(tmp_path, {"fleet": ecs()}, {"fleet": head}))
    assert found["Service"].classes == ["interrupts-traffic", "removes"]
    assert found["Service"].class_reasons["interrupts-traffic"].startswith("removed while its stack stays")
    assert found["TaskCount"].classes == ["removes"]


# --- resets-scaled-count ---------------------------------------------------------------------------


def test_service_gaining_a_desired_count_resets_it(tmp_path):
    head = ecs()
    head["Resources"]["Service"]["Properties"]["DesiredCount"] = 2
    found = changes(compare(tmp_path / "gains", {"fleet": ecs()}, {"fleet": head}))
    assert found["Service"].classes == ["resets-scaled-count"]
    assert "DesiredCount set to 2" in found["Service"].class_reasons["resets-scaled-count"]
    # Dropping DesiredCount leaves the running count alone.
    assert classes(compare(tmp_path / "drops", {"fleet": head}, {"fleet": ecs()}))["Service"] == []


def test_auto_scaling_group_desired_capacity_resets_it(tmp_path):
    head = ecs()
    head["Resources"]["Asg"]["Properties"]["DesiredCapacity"] = "2"
    assert classes(compare(tmp_path, {"fleet": ecs()}, {"fleet": head}))["Asg"] == ["resets-scaled-count"]


def test_scalable_target_literal_range_change_resets_it_a_live_value_does_not(tmp_path):
    head = ecs()
    head["Resources"]["TaskCount"]["Properties"]["MaxCapacity"] = 8
    found = changes(compare(tmp_path / "literal", {"fleet": ecs()}, {"fleet": head}))
    assert found["TaskCount"].classes == ["resets-scaled-count"]
    assert found["TaskCount"].class_reasons["resets-scaled-count"].startswith("MaxCapacity set to 8")
    live = ecs()
    live["Resources"]["Reader"] = {"Type": "Custom::LiveValue", "Properties": {"ServiceToken": "arn:x"}}
    live["Resources"]["TaskCount"]["Properties"]["MaxCapacity"] = {"Fn::GetAtt": ["Reader", "Max"]}
    assert classes(compare(tmp_path / "live", {"fleet": ecs()}, {"fleet": live}))["TaskCount"] == []


@pytest.mark.parametrize(
    "retain,exclude,reset",
    [
        (None, None, True),  # RetainAllVariantProperties absent: the count goes back to InitialInstanceCount
        (True, None, False),
        (True, "DesiredInstanceCount", True),  # retained, except the count
        (True, "DataCaptureConfig", False),
    ],
)
def test_endpoint_with_a_new_config_resets_unless_variant_properties_are_retained(tmp_path, retain, exclude, reset):
    base, head = endpoint(retain=retain), endpoint(instance="ml.g5.xlarge", retain=retain)
    if exclude:
        for template in (base, head):
            template["Resources"]["Endpoint"]["Properties"]["ExcludeRetainedVariantProperties"] = [
                {"VariantPropertyType": exclude}
            ]
    found = changes(compare(tmp_path, {"model": base}, {"model": head}))
    assert found["Endpoint"].caused_by == [{"path": "Properties.EndpointConfigName", "logical_id": "Config"}]
    assert found["Endpoint"].classes == (["resets-scaled-count"] if reset else [])


def test_component_with_a_literal_copy_count_resets_on_any_update(tmp_path):
    # A new image: the Model is replaced and the component updated in place to name it.
    found = changes(compare(tmp_path / "literal", {"bert": component()}, {"bert": component(image="repo:2")}))
    assert found["Component"].replacement is None
    assert found["Component"].classes == ["resets-scaled-count"]
    assert "CopyCount is the literal 1" in found["Component"].class_reasons["resets-scaled-count"]
    live = {"Fn::GetAtt": ["Reader", "CopyCount"]}  # read live at deploy time (constructs/live_values.py)
    assert (
        classes(
            compare(
                tmp_path / "live", {"bert": component(copies=live)}, {"bert": component(image="repo:2", copies=live)}
            )
        )["Component"]
        == []
    )


# --- pauses-autoscaling (an autoscaled variant's instance type) ------------------------------------


def handed_over(template: dict, *, variant: str = "AllTraffic") -> dict:
    """`template` with a scaling handover (inferstack.constructs.scaling_handover) the Endpoint waits for."""
    template = copy.deepcopy(template)
    props = template["Resources"]["Endpoint"]["Properties"]
    (config_variant,) = template["Resources"]["Config"]["Properties"]["ProductionVariants"]
    template["Resources"]["Release"] = {
        "Type": "Custom::ScalingHandover",
        "Properties": {
            "ServiceToken": "arn:aws:lambda:us-east-1:111111111111:function:handover",
            "EndpointName": props["EndpointName"],
            "VariantName": variant,
            "InstanceType": config_variant["InstanceType"],
            "Target": template["Resources"]["Scaling"]["Properties"],
        },
    }
    template["Resources"]["Endpoint"]["DependsOn"] = ["Release"]
    return template


@pytest.mark.parametrize("head_instance,variant", [("ml.g5.xlarge", "AllTraffic"), ("ml.g5.xlarge", "G5")])
def test_an_autoscaled_variants_new_instance_type_pauses_autoscaling_with_a_handover(tmp_path, head_instance, variant):
    """The handover deregisters the target before UpdateEndpoint and registers it again after: the class says what
    the update does meanwhile and that the scaled count is kept. A new variant name removes the autoscaled one:
    the same rule."""
    head = endpoint(instance=head_instance, retain=True)
    head["Resources"]["Config"]["Properties"]["ProductionVariants"][0]["VariantName"] = variant
    report = compare(
        tmp_path, {"model": handed_over(endpoint(retain=True))}, {"model": handed_over(head, variant=variant)}
    )
    found = changes(report)
    assert found["Endpoint"].classes == ["pauses-autoscaling"]
    reason = found["Endpoint"].class_reasons["pauses-autoscaling"]
    moved = (
        "variant AllTraffic moves from ml.g4dn.xlarge to ml.g5.xlarge"
        if variant == "AllTraffic"
        else "variant AllTraffic (ml.g4dn.xlarge) is removed"
    )
    assert reason.startswith(
        f"{moved}: the scaling handover deregisters its scalable target (policies and scheduled "
        "actions with it) before UpdateEndpoint; SageMaker starts the new instances at the "
        "variant's current count (RetainAllVariantProperties)"
    )
    assert reason.endswith(
        "registered again with the range it had and the template's policies and schedule, and "
        "the template's range (2-6) does not change. The scaled count is kept, within that range"
    )
    head["Resources"]["Scaling"]["Properties"]["MaxCapacity"] = 4  # the new instance type's plan: a smaller fleet
    wider = changes(
        compare(
            tmp_path / "range",
            {"model": handed_over(endpoint(retain=True))},
            {"model": handed_over(head, variant=variant)},
        )
    )
    assert (
        "CloudFormation's target then sets the template's new range (2-4). The scaled count is kept, within "
        "that range" in wider["Endpoint"].class_reasons["pauses-autoscaling"]
    )
    assert wider["Scaling"].classes == ["resets-scaled-count"]  # the range itself, as for any new range
    assert report.environments[0].warnings == []
    assert report.environments[0].to_json()["class_counts"]["pauses-autoscaling"] == 1


def test_no_pause_without_an_autoscaled_instance_type_change(tmp_path):
    """A new model on the same instance type ("If you change the model for a variant that is configured for auto
    scaling, Amazon SageMaker auto scaling allows the update"), or a variant no scalable target registers."""
    base = handed_over(endpoint(retain=True))
    head = copy.deepcopy(base)
    head["Resources"]["Model"]["Properties"]["PrimaryContainer"]["Image"] = "repo:2"
    report = compare(tmp_path / "model", {"model": base}, {"model": head})
    assert changes(report)["Endpoint"].caused_by  # the Endpoint moves to the new config...
    assert changes(report)["Endpoint"].classes == [] and report.environments[0].warnings == []  # ...freely
    unscaled = endpoint(retain=True)
    del unscaled["Resources"]["Scaling"]
    moved = copy.deepcopy(unscaled)
    moved["Resources"]["Config"]["Properties"]["ProductionVariants"][0]["InstanceType"] = "ml.g5.xlarge"
    report = compare(tmp_path / "unscaled", {"model": unscaled}, {"model": moved})
    assert changes(report)["Endpoint"].classes == [] and report.environments[0].warnings == []


def test_fail_on_pauses_autoscaling(tmp_path):
    base = write(tmp_path / "base", {"dev": {"model": handed_over(endpoint(retain=True))}})
    head = write(tmp_path / "head", {"dev": {"model": handed_over(endpoint(instance="ml.g5.xlarge", retain=True))}})
    result = cli(base, head, "--fail-on", "pauses-autoscaling")
    assert result.returncode == 3
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("fail-on: ")]
    assert line.startswith(
        "fail-on: dev/model/Endpoint (AWS::SageMaker::Endpoint): pauses-autoscaling: variant "
        "AllTraffic moves from ml.g4dn.xlarge to ml.g5.xlarge"
    )


# --- touches-production-rule -----------------------------------------------------------------------


def test_weights_of_a_production_rule_and_a_weighted_default_action(tmp_path):
    head = ecs()
    head["Resources"]["Route"]["Properties"]["Actions"] = weighted(0, 100)
    head["Resources"]["Listener"]["Properties"]["DefaultActions"] = weighted(0, 100)
    found = changes(compare(tmp_path, {"fleet": ecs()}, {"fleet": head}))
    assert found["Route"].classes == ["touches-production-rule"]
    assert (
        found["Route"]
        .class_reasons["touches-production-rule"]
        .startswith("Properties.Actions[0].ForwardConfig.TargetGroups[0].Weight changes on a production listener rule")
    )
    assert found["Listener"].classes == ["touches-production-rule"]


def test_production_rule_named_by_the_service_alone(tmp_path):
    """A rule with a single-target forward is a production rule when a service names it (here by
    Fn::GetAtt); an equal rule no service names is not."""

    def stack(port: int) -> dict:
        template = ecs()
        res = template["Resources"]
        single = [{"Type": "forward", "TargetGroupArn": {"Ref": "Targets"}}]
        res["Route"]["Properties"]["Actions"] = copy.deepcopy(single)
        res["Service"]["Properties"]["LoadBalancers"][0]["AdvancedConfiguration"]["ProductionListenerRule"] = {
            "Fn::GetAtt": ["Route", "RuleArn"]
        }
        res["Other"] = target_group(port)
        res["PlainRoute"] = {
            "Type": RULE,
            "Properties": {
                "ListenerArn": {"Ref": "Listener"},
                "Priority": 10,
                "Actions": copy.deepcopy(single),
                "Conditions": [{"Field": "path-pattern", "PathPatternConfig": {"Values": ["/plain"]}}],
            },
        }
        return template

    head = stack(8080)
    for rule in ("Route", "PlainRoute"):
        head["Resources"][rule]["Properties"]["Actions"][0]["TargetGroupArn"] = {"Ref": "AlternateTargets"}
    found = changes(compare(tmp_path, {"fleet": stack(8080)}, {"fleet": head}))
    assert found["Route"].classes == ["touches-production-rule"]
    assert found["PlainRoute"].classes == []


def test_production_rule_priority_change_is_not_touching_its_actions_but_removal_is(tmp_path):
    head = ecs()
    head["Resources"]["Route"]["Properties"]["Priority"] = 49999
    assert classes(compare(tmp_path / "priority", {"fleet": ecs()}, {"fleet": head}))["Route"] == []
    removed = ecs()
    del removed["Resources"]["Route"]
    removed["Resources"]["Service"]["Properties"]["LoadBalancers"][0]["AdvancedConfiguration"].pop(
        "ProductionListenerRule"
    )
    found = changes(compare(tmp_path / "removed", {"fleet": ecs()}, {"fleet": removed}))
    assert found["Route"].classes == ["touches-production-rule", "removes"]


# --- adds and removes; whole stacks -----------------------------------------------------------------


def test_adds_and_removes_resources_and_stacks(tmp_path):
    head_fleet = ecs()
    del head_fleet["Resources"]["TaskPolicy"]
    head_fleet["Resources"]["Spare"] = target_group()
    report = compare(tmp_path, {"fleet": ecs(), "old": component()}, {"fleet": head_fleet, "new": endpoint()})
    assert classes(report, "fleet") == {"Spare": ["adds"], "TaskPolicy": ["removes"]}
    stacks = {s.name: s for s in report.environments[0].stacks}
    assert (stacks["new"].status, stacks["new"].classes) == ("added", ["adds"])
    assert (stacks["old"].status, stacks["old"].classes) == ("removed", ["removes"])
    # A retired model's component and rule are removed with their stack: not an interruption to flag.
    assert {lid: r.classes for lid, r in changes(report, "old").items()}["Component"] == ["removes"]
    assert diff.class_counts(report.resources)["adds"] == 1 + len(endpoint()["Resources"])


def test_a_model_retired_and_another_added_are_not_a_move(tmp_path):
    """Sibling model stacks share logical IDs: the new stack's component is an addition, not a replacement
    of the retired one's (which would flag it as interrupting traffic)."""
    report = compare(tmp_path, {"bert-a": component()}, {"bert-b": component()})
    new = changes(report, "bert-b")
    component_change = new["Component"]
    assert (component_change.replaces, component_change.replacement, component_change.classes) == (None, None, ["adds"])
    assert {r.classes[0] for r in changes(report, "bert-a").values()} == {"removes"}


# --- --fail-on ------------------------------------------------------------------------------------


@pytest.fixture
def reset_pair(tmp_path) -> tuple[Path, Path]:
    head = ecs()
    head["Resources"]["Service"]["Properties"]["DesiredCount"] = 2
    head["Resources"]["Spare"] = target_group()
    return write(tmp_path / "base", {"dev": {"fleet": ecs()}}), write(tmp_path / "head", {"dev": {"fleet": head}})


def test_fail_on_exits_3_with_one_line_per_offending_change(reset_pair):
    base, head = reset_pair
    result = cli(base, head, "--fail-on", "resets-scaled-count")
    assert result.returncode == 3, result.stderr
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("fail-on: ")]
    assert line.startswith("fail-on: dev/fleet/Service (AWS::ECS::Service): resets-scaled-count: DesiredCount set to 2")
    both = cli(base, head, "--fail-on", "adds,touches-production-rule", "--fail-on", "resets-scaled-count")
    assert both.returncode == 3
    assert sorted(x.split(" ")[1] for x in both.stderr.splitlines() if x.startswith("fail-on: ")) == [
        "dev/fleet/Service",
        "dev/fleet/Spare",
    ]
    assert cli(base, head, "--fail-on", "any").returncode == 3


def test_fail_on_passes_when_nothing_matches_and_the_default_exit_is_unchanged(reset_pair):
    base, head = reset_pair
    result = cli(base, head, "--fail-on", "interrupts-traffic,removes")
    assert result.returncode == 0, result.stderr
    assert "fail-on:" not in result.stderr
    assert cli(base, head).returncode == 0  # classes found, no --fail-on: exit 0 as before


def test_bad_fail_on_value_is_a_one_line_usage_error(reset_pair):
    base, head = reset_pair
    result = cli(base, head, "--fail-on", "adds,replaces")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert (
        "--fail-on: unknown class 'replaces'; valid: replaces-serving-resource, interrupts-traffic, "
        "resets-scaled-count, pauses-autoscaling, touches-production-rule, adds, removes, any" in line
    )


# --- environments on one side; --env --------------------------------------------------------------


@pytest.fixture
def dev_only_head(tmp_path) -> tuple[Path, Path]:
    """The issue "Adding a model": a full synth against a dev-only one."""
    base = write(tmp_path / "full", {"dev": {"fleet": ecs()}, "staging": {"fleet": ecs(), "bert": endpoint()}})
    head_fleet = ecs()
    head_fleet["Resources"]["Spare"] = target_group()
    return base, write(tmp_path / "dev", {"dev": {"fleet": head_fleet}})


def test_environment_synthesized_on_one_side_only_is_reported_not_counted(dev_only_head):
    base, head = dev_only_head
    report = diff.diff(assembly.load(base), assembly.load(head))
    dev, staging = report.environments
    assert (staging.name, staging.status, staging.compared) == ("staging", "only-in-base", False)
    assert staging.note == "environment staging: only in base (not synthesized in head?)"
    assert staging.resources == [] and [s.status for s in staging.stacks] == ["only-in-base"] * 2
    assert diff.counts(report.resources)["removed"] == 0 and report.protected_replacements() == []
    assert [r.logical_id for r in report.resources] == ["Spare"]
    # listed and summarised all the same
    bert = next(s for s in staging.stacks if s.name == "bert")
    assert bert.summary.capacity[0].instance_type == "ml.g4dn.xlarge"
    markdown = render_markdown.render(report)
    assert "### environment staging: only in base (not synthesized in head?)" in markdown
    assert (
        "> - environment staging: only in base (not synthesized in head?): not compared, its 2 stack(s) "
        "not counted" in markdown
    )
    assert "| fleet | removed |" not in markdown
    result = cli(base, head, "--fail-on", "removes,replaces-serving-resource", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert "environment staging: only in base (not synthesized in head?): its 2 stack(s) not compared" in result.stderr
    data = json.loads(result.stdout)
    assert (data["environments_only_in_base"], data["counts"]["removed"]) == (["staging"], 0)
    assert data["environments"][1]["status"] == "only-in-base"


def test_env_restricts_the_diff_and_an_unknown_env_is_a_one_line_error(dev_only_head):
    base, head = dev_only_head
    report = diff.diff(assembly.load(base), assembly.load(head), ["dev"])
    assert [e.name for e in report.environments] == ["dev"] and report.selected == ["dev"]
    result = cli(base, head, "--env", "dev", "--format", "json", "--fail-on", "adds")
    assert result.returncode == 3
    assert "staging" not in result.stderr
    assert [e["name"] for e in json.loads(result.stdout)["environments"]] == ["dev"]
    assert json.loads(result.stdout)["selected_environments"] == ["dev"]
    bad = cli(base, head, "--env", "dev", "--env", "prod")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    (line,) = bad.stderr.strip().splitlines()
    assert "--env prod: in neither assembly; environments: dev, staging" in line


# --- stack summaries; retirement -------------------------------------------------------------------


def test_added_stack_summary_capacity_iam_and_cost(tmp_path):
    report = compare(tmp_path, {}, {"fleet": ecs(), "bert": endpoint(), "shared-bert": component()})
    stacks = {s.name: s for s in report.environments[0].stacks}
    fleet = stacks["fleet"].summary
    assert [(c.resource, c.kind, c.instance_type, c.min, c.max, c.unit) for c in fleet.capacity] == [
        ("Asg", "EC2 Auto Scaling group", "inf1.xlarge", 1, 3, "instances"),
        ("TaskCount", "ECS service autoscaling", None, 1, 4, "tasks"),
    ]
    assert fleet.iam_actions == ["ecr:BatchGetImage", "logs:PutLogEvents"]  # deduplicated, sorted
    hourly = pricing.PRICES["inf1.xlarge"].usd_per_hour * pricing.HOURS_PER_MONTH
    assert fleet.cost == {"usd_per_month_min": round(hourly, 2), "usd_per_month_max": round(3 * hourly, 2)}
    bert = stacks["bert"].summary
    assert [(c.resource, c.instance_type, c.min, c.max, c.on) for c in bert.capacity] == [
        ("Scaling", "ml.g4dn.xlarge", 2, 6, "dev-bert")
    ]
    shared = stacks["shared-bert"].summary
    assert [(c.unit, c.min, c.max, c.on) for c in shared.capacity] == [("copies", 0, 3, "dev-shared")]
    assert shared.cost is None and "endpoint dev-shared" in shared.cost_note
    markdown = render_markdown.render(report)
    assert "#### New stacks (3)" in markdown
    assert f"- `fleet` (`dev-fleet`), {len(ecs()['Resources'])} resources" in markdown
    assert "  - capacity: `Asg` (EC2 Auto Scaling group): `inf1.xlarge`, 1–3 instances" in markdown
    assert "  - IAM actions granted (2): `ecr:BatchGetImage`, `logs:PutLogEvents`" in markdown


def test_managed_instance_scaling_is_the_capacity_of_a_fleet_endpoint():
    from inferstack.review import summary

    resources = endpoint()["Resources"]
    del resources["Scaling"]
    resources["Config"]["Properties"]["ProductionVariants"][0]["ManagedInstanceScaling"] = {
        "Status": "ENABLED",
        "MinInstanceCount": 1,
        "MaxInstanceCount": 4,
    }
    (found,) = summary.capacity(resources)
    assert (found.kind, found.instance_type, found.min, found.max) == (
        "managed instance scaling",
        "ml.g4dn.xlarge",
        1,
        4,
    )


def test_retired_stack_lists_what_is_deleted_and_what_retain_keeps(tmp_path):
    old = ecs()
    old["Resources"]["Captures"] = {"Type": "AWS::S3::Bucket", "DeletionPolicy": "RetainExceptOnCreate"}
    old["Resources"]["Key"] = {"Type": "AWS::KMS::Key", "DeletionPolicy": "Delete", "UpdateReplacePolicy": "Retain"}
    # The fleet's last member leaves: the fleet stack goes like any stack.
    report = compare(tmp_path, {"intent-pack": old, "keep": ecs()}, {"keep": ecs()})
    (env,) = report.environments
    retirement = env.retirement()
    assert retirement["removed_stacks"] == ["intent-pack"]
    assert retirement["kept"] == [
        {
            "stack": "intent-pack",
            "logical_id": "Captures",
            "type": "AWS::S3::Bucket",
            "policy": "DeletionPolicy: RetainExceptOnCreate",
        },
        {
            "stack": "intent-pack",
            "logical_id": "Logs",
            "type": "AWS::Logs::LogGroup",
            "policy": "DeletionPolicy: Retain",
        },
    ]
    assert retirement["deleted"] == len(old["Resources"]) - 2  # the key's UpdateReplacePolicy does not keep it
    markdown = render_markdown.render(report)
    assert f"#### Removed: what goes and what is kept ({len(old['Resources']) - 2} deleted, 2 kept)" in markdown
    assert (
        "_ECR images are never deleted by a stack removal: they live in the bootstrap and promoted "
        "repositories, which no stack here owns._" in markdown
    )
    assert (
        f"- `intent-pack` (`dev-intent-pack`), {len(old['Resources'])} resources: stack removed: "
        f"{len(old['Resources']) - 2} deleted, 2 kept (Retain)"
    ) in markdown
    assert "  - kept (Retain): `intent-pack/Logs` (AWS::Logs::LogGroup): DeletionPolicy: Retain" in markdown
    assert "| intent-pack | removed |" in markdown


def test_resource_removed_from_a_stack_that_stays_is_kept_or_deleted_by_its_policy(tmp_path):
    head = ecs()
    del head["Resources"]["Logs"], head["Resources"]["TaskPolicy"]
    report = compare(tmp_path, {"fleet": ecs()}, {"fleet": head})
    found = changes(report)
    assert (found["Logs"].kept_by_policy, found["TaskPolicy"].kept_by_policy) == ("DeletionPolicy: Retain", None)
    assert found["Logs"].class_reasons["removes"] == "removed, kept by DeletionPolicy: Retain"
    markdown = render_markdown.render(report)
    assert "  - `fleet/Logs` (AWS::Logs::LogGroup): kept (Retain): DeletionPolicy: Retain" in markdown
    assert "  - `fleet/TaskPolicy` (AWS::IAM::Policy): deleted" in markdown
