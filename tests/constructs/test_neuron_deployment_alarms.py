"""The alarms a Neuron service's deployments roll back on, and the circular dependency CDK warns they may make.
CDK's Ec2Service.enable_deployment_alarms notes every alarm name that is a token as one that "may cause a circular
dependency error when this stack deploys" (BaseService.enableDeploymentAlarms, aws-cdk-lib aws-ecs): a guess,
printed by every synth, that cannot tell a real cycle from a plain reference. The service writes its deployment
alarms without it (inferstack/constructs/neuron_service/rollout.py), and these tests hold what that rests on: in
every template the deployment alarms lead back to nothing of the service, and no template has a cycle at all."""

from __future__ import annotations

import re

import pytest
from aws_cdk import cx_api

from tests.support.neuron_service import build_direct
from tests.support.templates import only

ENVS = ["dev", "staging", "prod"]
NEURON_STACKS = ["intent-pack", "intent-bert-inf2"]  # the shipped fleet and dedicated model
_SUB_NAME = re.compile(r"\$\{(?!!)([^}.]+)")  # ${Name} or ${Name.Attribute}; ${!Literal} is no reference


def _named(node, out: set[str]) -> set[str]:
    """Every logical id an intrinsic in `node` names (Ref, Fn::GetAtt, Fn::Sub), pseudo parameters included."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Ref" and isinstance(value, str):
                out.add(value)
            elif key == "Fn::GetAtt":
                out.add(value[0] if isinstance(value, list) else value.split(".", 1)[0])
            elif key == "Fn::Sub":
                text, variables = (value, {}) if isinstance(value, str) else value
                out.update(name for name in _SUB_NAME.findall(text) if name not in variables)
                _named(variables, out)
            else:
                _named(value, out)
    elif isinstance(node, list):
        for item in node:
            _named(item, out)
    return out


def dependencies(resources: dict[str, dict]) -> dict[str, set[str]]:
    """Logical id -> the resources CloudFormation must create first (references in Properties, DependsOn)."""
    graph = {}
    for logical_id, resource in resources.items():
        named = _named(resource.get("Properties", {}), set())
        depends_on = resource.get("DependsOn", [])
        named.update([depends_on] if isinstance(depends_on, str) else depends_on)
        graph[logical_id] = named & resources.keys()
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    pending = [start]
    while pending:
        for dependency in graph[pending.pop()] - seen:
            seen.add(dependency)
            pending.append(dependency)
    return seen


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """The resources that depend on themselves, as CloudFormation's "Circular dependency between resources"."""
    return sorted(node for node in graph if node in reachable(graph, node))


def circular_dependency_infos(outdir, env: str, stack: str) -> list[str]:
    """What CDK noted on the stack about deployment alarms and circular dependencies (the CLI prints each)."""
    nested = cx_api.CloudAssembly(str(outdir)).get_nested_assembly(f"assembly-{env}")
    (artifact,) = [s for s in nested.stacks if s.hierarchical_id == f"{env}/{stack}"]
    return [
        f"{m.id}: {m.entry.data}"
        for m in artifact.messages
        if "circular dependency" in str(m.entry.data) or "Deployment alarm (" in str(m.entry.data)
    ]


def deployment_alarms(resources: dict[str, dict]) -> tuple[str, list[str]]:
    """(the service's logical id, the logical ids of the alarms ECS rolls its deployments back on)."""
    ((service_id, service),) = [(k, r) for k, r in resources.items() if r["Type"] == "AWS::ECS::Service"]
    alarms = service["Properties"]["DeploymentConfiguration"]["Alarms"]
    assert alarms["Enable"] is True and alarms["Rollback"] is True
    names = [name["Ref"] for name in alarms["AlarmNames"]]
    assert names and all(resources[n]["Type"] == "AWS::CloudWatch::Alarm" for n in names)
    return service_id, names


# ----------------------------------------------------------------------------- the check itself


def test_the_check_finds_the_cycle_cdk_warns_of():
    """The cycle the CDK README describes: an alarm on the service's own metric (ServiceName: its generated name),
    named in the service's deployment alarms."""
    resources = {
        "Service": {
            "Type": "AWS::ECS::Service",
            "Properties": {
                "DeploymentConfiguration": {
                    "Alarms": {"AlarmNames": [{"Ref": "CpuAlarm"}], "Enable": True, "Rollback": True}
                }
            },
        },
        "CpuAlarm": {
            "Type": "AWS::CloudWatch::Alarm",
            "Properties": {"Dimensions": [{"Name": "ServiceName", "Value": {"Fn::GetAtt": ["Service", "Name"]}}]},
        },
        "Listener": {"Type": "AWS::ElasticLoadBalancingV2::Listener", "Properties": {}},
        "Dashboard": {
            "Type": "AWS::CloudWatch::Dashboard",
            "Properties": {"DashboardBody": {"Fn::Sub": ["${Listener} ${AWS::Region} ${!Service}", {}]}},
        },
    }
    graph = dependencies(resources)
    assert graph["Dashboard"] == {"Listener"}  # ${!Service} is a literal, AWS::Region no resource
    assert cycles(graph) == ["CpuAlarm", "Service"]
    del resources["CpuAlarm"]["Properties"]["Dimensions"]
    assert cycles(dependencies(resources)) == []


# ----------------------------------------------------------------------------- the shipped config


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("stack", NEURON_STACKS)
def test_no_circular_dependency_info_on_any_synth(synthesized, stack, env):
    """`cdk synth` printed one such info per deployment alarm: four on intent-pack (two models) and two on
    intent-bert-inf2, in each environment."""
    assert circular_dependency_infos(synthesized.outdir, env, stack) == []


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("stack", NEURON_STACKS)
def test_deployment_alarms_lead_back_to_nothing_of_the_service(synthesized, stack, env):
    """They read the target groups' metrics (p99, 5xx), which exist before the service: CloudFormation creates
    them, then the service naming them. The task-level alarms do read the service (ServiceName), and are seen to."""
    resources = synthesized.template(env, stack)["Resources"]
    graph = dependencies(resources)
    service_id, alarm_ids = deployment_alarms(resources)
    for alarm_id in alarm_ids:
        assert service_id not in reachable(graph, alarm_id), alarm_id
    (cpu_alarm_id,) = [
        k
        for k, r in resources.items()
        if r["Type"] == "AWS::CloudWatch::Alarm" and ": service CPU above" in r["Properties"]["AlarmDescription"]
    ]
    assert cpu_alarm_id not in alarm_ids and service_id in reachable(graph, cpu_alarm_id)
    assert cycles(graph) == []


# ----------------------------------------------------------------------------- a rolling update


def test_a_rolling_service_too(project):
    """The default rollout (rolling, circuit breaker) on one target group, built directly."""
    template = build_direct(project.model("intent-bert"), "inf1.xlarge").to_json()
    resources = template["Resources"]
    graph = dependencies(resources)
    service_id, alarm_ids = deployment_alarms(resources)
    _, service = only(template, "AWS::ECS::Service")
    assert service["Properties"]["DeploymentConfiguration"]["Strategy"] == "ROLLING"
    assert len(alarm_ids) == 2
    assert not any(service_id in reachable(graph, alarm_id) for alarm_id in alarm_ids)
    assert cycles(graph) == []
