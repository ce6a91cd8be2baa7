"""Deploy rehearsal: every synthesized stack of dev created in moto's CloudFormation, in dependency order
(the foundation's exports before the serving stacks' Fn::ImportValue), then the created resources checked
against the config and inferstack.capacity.planning, for what moto models.

What moto cannot do is handled in the open, and reported in the warnings summary (a RehearsalReport):
- resource types moto's CloudFormation does not model (not in moto.cloudformation.parsing.get_model_map()):
  moto skips them with a warning; the rehearsal checks that it skipped exactly those and lists them;
- custom resources (Custom::*): moto would invoke their Lambda in Docker and wait for the response, so
  they are removed from a copy of the template, with the reason printed;
- a moto defect that fails a stack outright is worked around by the named patch the CLI rehearsal applies too
  (rehearsal/moto_patches.py; each shown failing on plain moto in tests/rehearsal/test_cli_deploy.py):
  listener-forward-config, for the weighted default action of a Neuron service that shifts traffic, and
  ecs-service-load-balancers, so the service keeps the target groups and production rules it names;
- the template's parameters are SSM-typed (the CDK bootstrap version, the Neuron AMI id): they are created
  in moto's SSM first, as `cdk bootstrap` and AWS would have, and the file assets the Lambda functions use
  are uploaded to the bootstrap bucket from cdk.out, as the pipeline's Assets stage would;
- SageMaker inference components and an endpoint for them: moto 5.2.5 models neither, the CLI rehearsal's
  named patches do (rehearsal/moto_patches.py, each tested on plain moto in
  tests/rehearsal/test_cli_deploy.py); they are applied here too."""

from __future__ import annotations

import copy
import io
import json
import re
import warnings
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import pytest
from moto import mock_aws
from moto.cloudformation.parsing import get_model_map

from inferstack.capacity import packing, planning, schedule
from inferstack.config import NeuronEcsModel, TritonSageMakerModel
from inferstack.neuron import deployment as neuron_deployment
from inferstack.schema import instances
from rehearsal import moto_patches
from stacks.stage import InferenceStage

ENV = "dev"
BOOTSTRAP_VERSION_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
BOOTSTRAP_VERSION = "30"  # what a current `cdk bootstrap` writes; the templates require >= 6
# moto's own defects this rehearsal meets (the CLI rehearsal applies every named patch).
PATCHES = ("sagemaker-endpoint-name", "sagemaker-variant-without-model", "sagemaker-inference-components")
# Custom resources are created by invoking their provider Lambda and waiting for its response.
UNRUNNABLE_PREFIX = "Custom::"
UNRUNNABLE_REASON = "moto runs a custom resource by invoking its Lambda in Docker and waiting for the reply"
# live-values: the deploy-time readers (Custom::LiveValue) run in moto's process, their own read function.
MOTO_PATCHES = ("listener-forward-config", "ecs-service-load-balancers", "live-values")


# moto warns on every access to a resource it skipped; the report lists them once (and a test checks the
# list against moto's own warnings at create time).
pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse .* not supported by moto:UserWarning")


class RehearsalReport(UserWarning):
    """What the rehearsal could not exercise in moto; shown in pytest's warnings summary."""


@dataclass
class Rehearsal:
    region: str
    stack_names: list[str]
    statuses: dict[str, str]
    physical_ids: dict[str, dict[str, tuple[str, str]]]  # stack -> logical id -> (type, physical id)
    removed: dict[str, list[str]] = field(default_factory=dict)  # stack -> "LogicalId (Type)"
    unmodeled: dict[str, list[str]] = field(default_factory=dict)  # type -> stacks
    moto_skipped: set[str] = field(default_factory=set)  # types moto itself warned it skipped
    ssm_values: dict[str, str] = field(default_factory=dict)  # SSM parameter path -> value it resolved to
    clients: dict = field(default_factory=dict)

    def of_type(self, stack: str, resource_type: str) -> list[str]:
        return [pid for t, pid in self.physical_ids[stack].values() if t == resource_type]

    def client(self, service: str):
        return self.clients.setdefault(service, boto3.client(service, region_name=self.region))


def deploy_order(stage: InferenceStage) -> list:
    """The stage's stacks, each after the stacks it depends on."""
    ordered: list = []
    pending = [stage.foundation, *stage.fleets.values(), *stage.serving.values()]
    while pending:
        ready = [s for s in pending if all(d in ordered for d in s.dependencies)]
        assert ready, f"dependency cycle among {[s.stack_name for s in pending]}"
        ordered += ready
        pending = [s for s in pending if s not in ready]
    return ordered


def _kms_tags_for_moto(properties: dict) -> str | None:
    if "Tags" not in properties:
        return None
    properties["Tags"] = [{"TagKey": t["Key"], "TagValue": t["Value"]} for t in properties["Tags"]]
    return "tags rewritten as TagKey/TagValue: moto 5.2.5 reads a key's CloudFormation tags in the KMS API's shape"


# Same meaning, in the shape moto's (buggy) CloudFormation handler of that type needs.
ADAPTATIONS = {"AWS::KMS::Key": _kms_tags_for_moto}


def references(node) -> Iterator[tuple[str, str | None]]:
    """(logical id, attribute or None for Ref) of every Ref, Fn::GetAtt and Fn::Sub reference in `node`."""
    if isinstance(node, dict):
        if "Ref" in node and isinstance(node["Ref"], str):
            yield node["Ref"], None
        if "Fn::GetAtt" in node:
            target = node["Fn::GetAtt"]
            target = target.split(".", 1) if isinstance(target, str) else target
            yield target[0], target[1]
        if "Fn::Sub" in node:
            text = node["Fn::Sub"] if isinstance(node["Fn::Sub"], str) else node["Fn::Sub"][0]
            for name in re.findall(r"\$\{([^!}][^}]*)\}", text):
                logical, _, attribute = name.partition(".")
                yield logical, attribute or None
        for value in node.values():
            yield from references(value)
    elif isinstance(node, list):
        for value in node:
            yield from references(value)


def runnable_copy(template: dict, model_map: dict) -> tuple[dict, list[str]]:
    """A copy moto can create, and a line per change: custom resources removed; resources that read an
    attribute of a type moto does not model removed (moto fails on Fn::GetAtt of a resource it skipped;
    a Ref to one merely drops the property); whatever references a removed resource removed with it;
    properties moto misreads adapted."""
    copied = copy.deepcopy(template)
    resources = copied["Resources"]
    unmodeled = {k for k, r in resources.items() if r["Type"] not in model_map}
    removed = {
        k: UNRUNNABLE_REASON
        for k, r in resources.items()
        if r["Type"].startswith(UNRUNNABLE_PREFIX) and r["Type"] != moto_patches.LIVE_VALUE
    }
    changed = True
    while changed:
        changed = False
        for key, resource in resources.items():
            if key in removed:
                continue
            for target, attribute in references({k: v for k, v in resource.items() if k != "DependsOn"}):
                if target in removed:
                    removed[key] = f"references {target}, which was removed"
                elif target in unmodeled and attribute is not None and not target.startswith("AWS::"):
                    removed[key] = (
                        f"reads {attribute} of {target} ({resources[target]['Type']}), which moto does not model"
                    )
                else:
                    continue
                changed = True
                break
    notes = [f"removed {k} ({resources[k]['Type']}): {reason}" for k, reason in sorted(removed.items())]
    for key in removed:
        del resources[key]
    for resource in resources.values():
        depends = resource.get("DependsOn")
        if depends:
            resource["DependsOn"] = [
                d for d in ([depends] if isinstance(depends, str) else depends) if d not in removed
            ]
    for name, output in list(copied.get("Outputs", {}).items()):
        gone = [t for t, _ in references(output) if t in removed]
        if gone:
            del copied["Outputs"][name]
            notes.append(f"removed output {name}: its value references {', '.join(gone)}")
    for key, resource in resources.items():
        adapt = ADAPTATIONS.get(resource["Type"])
        note = adapt(resource.get("Properties", {})) if adapt else None
        if note:
            notes.append(f"adapted {key} ({resource['Type']}): {note}")
    return copied, notes


def upload_file_assets(outdir: Path, assets_manifest: Path) -> None:
    """Put every zip-packaged file asset of a stack where its template expects it (the bootstrap bucket)."""
    s3 = boto3.client("s3", region_name="us-east-1")
    manifest = json.loads(assets_manifest.read_text())
    for asset in manifest["files"].values():
        if asset["source"]["packaging"] != "zip":
            continue  # the stack's own template: CloudFormation gets it as TemplateBody here
        directory = (assets_manifest.parent / asset["source"]["path"]).resolve()
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            for path in sorted(directory.rglob("*")):
                if path.is_file():
                    archive.write(path, path.relative_to(directory))
        for destination in asset["destinations"].values():
            bucket = destination["bucketName"]
            existing = {b["Name"] for b in s3.list_buckets()["Buckets"]}
            if bucket not in existing:
                s3.create_bucket(Bucket=bucket)  # us-east-1: no location constraint
            s3.put_object(Bucket=bucket, Key=destination["objectKey"], Body=buffer.getvalue())


def ssm_parameters(template: dict) -> dict[str, str]:
    """Default SSM path of every SSM-typed parameter."""
    return {
        name: p["Default"]
        for name, p in template.get("Parameters", {}).items()
        if p["Type"].startswith("AWS::SSM::Parameter::Value")
    }


@pytest.fixture(scope="module")
def rehearsal(synthesized, project) -> Iterator[Rehearsal]:
    environment = project.environments[ENV]
    stage = synthesized.stages[ENV]
    stacks = deploy_order(stage)
    templates = {s.stack_name: synthesized.template(ENV, s.node.id) for s in stacks}

    with pytest.MonkeyPatch.context() as patch, moto_patches.applied(*PATCHES):
        # Custom::LiveValue is created by the live-values patch (its reader runs in moto's process).
        model_map = {**get_model_map(), moto_patches.LIVE_VALUE: None}
        # The templates name dev's account in ARNs and bucket names: let moto be that account.
        patch.setenv("MOTO_ACCOUNT_ID", environment.account)
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
            patch.delenv(name, raising=False)
        with mock_aws(), moto_patches.applied(*MOTO_PATCHES):
            result = Rehearsal(
                region=environment.region, stack_names=[s.stack_name for s in stacks], statuses={}, physical_ids={}
            )
            # The bootstrap version is what `cdk bootstrap` writes; AWS's public parameters (the Neuron AMI
            # id) ship with moto. Anything else unresolvable fails here, by name.
            ssm = result.client("ssm")
            ssm.put_parameter(Name=BOOTSTRAP_VERSION_PARAMETER, Value=BOOTSTRAP_VERSION, Type="String")
            for template in templates.values():
                for path in ssm_parameters(template).values():
                    result.ssm_values[path] = ssm.get_parameter(Name=path)["Parameter"]["Value"]

            cloudformation = result.client("cloudformation")
            for stack in stacks:
                upload_file_assets(
                    synthesized.outdir, synthesized.outdir / f"assembly-{ENV}" / f"{stack.artifact_id}.assets.json"
                )
                body, removed = runnable_copy(templates[stack.stack_name], model_map)
                result.removed[stack.stack_name] = removed
                for resource in body["Resources"].values():
                    if resource["Type"] not in model_map:
                        result.unmodeled.setdefault(resource["Type"], [])
                        if stack.stack_name not in result.unmodeled[resource["Type"]]:
                            result.unmodeled[resource["Type"]].append(stack.stack_name)
                parameters = [{"ParameterKey": k, "ParameterValue": v} for k, v in ssm_parameters(body).items()]
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    cloudformation.create_stack(
                        StackName=stack.stack_name,
                        TemplateBody=json.dumps(body),
                        Parameters=parameters,
                        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"],
                    )
                for warning in caught:
                    message = str(warning.message)
                    if message.startswith("Tried to parse ") and "not supported by moto" in message:
                        result.moto_skipped.add(message.split()[3])
                (described,) = cloudformation.describe_stacks(StackName=stack.stack_name)["Stacks"]
                result.statuses[stack.stack_name] = described["StackStatus"]
                summaries = cloudformation.list_stack_resources(StackName=stack.stack_name)["StackResourceSummaries"]
                result.physical_ids[stack.stack_name] = {
                    r["LogicalResourceId"]: (r["ResourceType"], r["PhysicalResourceId"]) for r in summaries
                }

            warnings.warn(RehearsalReport(report(result)), stacklevel=1)
            yield result


def report(result: Rehearsal) -> str:
    lines = [f"moto deploy rehearsal of {ENV} ({', '.join(result.stack_names)}):"]
    for stack, notes in result.removed.items():
        lines += [f"  {stack}: {note}" for note in notes]
    lines.append("  not modeled by moto's CloudFormation (skipped, nothing created, nothing checked):")
    for resource_type, stacks in sorted(result.unmodeled.items()):
        lines.append(f"    {resource_type} (in {', '.join(stacks)})")
    return "\n".join(lines)


def private_subnets(rehearsal: Rehearsal) -> list[str]:
    ec2 = rehearsal.client("ec2")
    subnets = ec2.describe_subnets(SubnetIds=rehearsal.of_type(f"{ENV}-Foundation", "AWS::EC2::Subnet"))["Subnets"]
    private = sorted(
        s["SubnetId"] for s in subnets if {"Key": "aws-cdk:subnet-type", "Value": "Private"} in s.get("Tags", [])
    )
    zones = {s["AvailabilityZone"] for s in subnets}
    assert zones and len(private) == len(zones)  # one private subnet per zone
    return private


def model_plans(project):
    """Stack name (without the environment) -> (its model, or its neuron-cores fleet's first member; its
    plan: the model's CapacityPlan, or the fleet's NeuronFleetPlan)."""
    environment = project.environments[ENV]
    plans = {}
    for unit in project.image_units(ENV):
        if unit.fleet:
            plans[unit.name] = (
                unit.models[0],
                packing.plan_fleet(unit.name, project.fleets[unit.name], unit.models, ENV, environment),
            )
        else:
            (model,) = unit.models
            plans[unit.name] = (model, planning.plan(model, ENV, environment))
    return plans


# ----------------------------------------------------------------------------- the deploy itself


def test_every_stack_is_created_foundation_first(rehearsal, project):
    fleets = [f"{ENV}-{f}" for f in project.fleets_in(ENV)]
    assert rehearsal.stack_names[0] == f"{ENV}-Foundation"
    # image units (a model's own stack, a neuron-cores fleet's) and an inference-components fleet's stack
    assert sorted(rehearsal.stack_names[1:]) == sorted(
        {f"{ENV}-{u.name}" for u in project.image_units(ENV)} | set(fleets)
    )
    for fleet in fleets:  # before its members
        for member in project.fleets[fleet.removeprefix(f"{ENV}-")].models:
            if f"{ENV}-{member}" in rehearsal.stack_names:
                assert rehearsal.stack_names.index(fleet) < rehearsal.stack_names.index(f"{ENV}-{member}")
    assert rehearsal.statuses == {name: "CREATE_COMPLETE" for name in rehearsal.stack_names}


def test_serving_stacks_import_the_foundation_exports(rehearsal, project):
    cloudformation = rehearsal.client("cloudformation")
    exports = {e["Name"]: e for e in cloudformation.list_exports()["Exports"]}
    # an inference-components fleet's stack exports its endpoint's role and security group to its members
    exporters = {
        f"{ENV}-Foundation",
        *(f"{ENV}-{f}" for f in project.fleets_in(ENV) if project.fleets[f].kind == "sagemaker-inference-components"),
    }
    assert exports and {e["ExportingStackId"].split("/")[1] for e in exports.values()} == exporters
    vpc_ids = rehearsal.of_type(f"{ENV}-Foundation", "AWS::EC2::VPC")
    assert [
        e["Value"] for e in exports.values() if "NetworkVpc" in e["Name"] and e["Value"].startswith("vpc-")
    ] == vpc_ids


def test_moto_skipped_exactly_the_types_its_model_map_lacks(rehearsal):
    # The printed list is derived from get_model_map(); moto's own warnings must agree with it.
    assert rehearsal.moto_skipped == set(rehearsal.unmodeled)
    assert (
        "AWS::ApplicationAutoScaling::ScalableTarget" in rehearsal.unmodeled
        or "AWS::ApplicationAutoScaling::ScalableTarget" in get_model_map()
    )
    removed = [r for rs in rehearsal.removed.values() for r in rs]
    assert any("Custom::VpcRestrictDefaultSG" in r for r in removed)


def test_unmodeled_resources_were_not_created(rehearsal):
    for stack, resources in rehearsal.physical_ids.items():
        created_types = {t for t, _ in resources.values()}
        assert not created_types & set(rehearsal.unmodeled), stack


# ----------------------------------------------------------------------------- foundation


def test_foundation_network_key_and_logs(rehearsal, project):
    environment = project.environments[ENV]
    foundation = f"{ENV}-Foundation"
    ec2 = rehearsal.client("ec2")
    (vpc_id,) = rehearsal.of_type(foundation, "AWS::EC2::VPC")
    (vpc,) = ec2.describe_vpcs(VpcIds=[vpc_id])["Vpcs"]
    assert vpc["CidrBlock"] == environment.network.create.cidr
    subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["Subnets"]
    assert sorted({s["AvailabilityZone"] for s in subnets}) == sorted(environment.availability_zones)
    assert not any(s["MapPublicIpOnLaunch"] for s in subnets)
    assert len(rehearsal.of_type(foundation, "AWS::EC2::NatGateway")) == environment.network.create.nat_gateways

    kms = rehearsal.client("kms")
    (key_id,) = rehearsal.of_type(foundation, "AWS::KMS::Key")
    assert kms.get_key_rotation_status(KeyId=key_id)["KeyRotationEnabled"] is True

    logs = rehearsal.client("logs")
    for name in rehearsal.of_type(foundation, "AWS::Logs::LogGroup"):
        (group,) = [
            g for g in logs.describe_log_groups(logGroupNamePrefix=name)["logGroups"] if g["logGroupName"] == name
        ]
        assert group["retentionInDays"] == environment.defaults.log_retention_days


# ----------------------------------------------------------------------------- serving


def _model_in_the_vpc(rehearsal: Rehearsal, project, sagemaker, stack: str) -> dict:
    (model_id,) = rehearsal.of_type(stack, "AWS::SageMaker::Model")
    described_model = sagemaker.describe_model(ModelName=model_id.rsplit("/", 1)[-1])
    # moto keeps the Model's role, container and VPC config (not EnableNetworkIsolation): the subnets
    # arrived through Fn::ImportValue from the foundation's exports
    assert sorted(described_model["VpcConfig"]["Subnets"]) == private_subnets(rehearsal)
    assert described_model["PrimaryContainer"]["Image"].startswith(
        f"{project.environments[ENV].account}.dkr.ecr.{rehearsal.region}.amazonaws.com/cdk-hnb659fds-container-assets-"
    )
    return described_model


def test_sagemaker_endpoints_carry_the_planned_variant(rehearsal, project):
    sagemaker = rehearsal.client("sagemaker")
    checked = 0
    for name, (model, plan) in model_plans(project).items():
        if not isinstance(model, TritonSageMakerModel) or project.fleet_of(name, ENV) is not None:
            continue
        stack = f"{ENV}-{name}"
        (endpoint_id,) = rehearsal.of_type(stack, "AWS::SageMaker::Endpoint")
        endpoint = sagemaker.describe_endpoint(EndpointName=endpoint_id.rsplit("/", 1)[-1])
        assert endpoint["EndpointStatus"] == "InService"
        config = sagemaker.describe_endpoint_config(EndpointConfigName=endpoint["EndpointConfigName"])
        (variant,) = config["ProductionVariants"]
        assert variant["InstanceType"] == plan.instance_type
        assert variant["InitialInstanceCount"] == plan.min_capacity
        # the endpoint config of this stack, not another model's
        (config_id,) = rehearsal.of_type(stack, "AWS::SageMaker::EndpointConfig")
        assert endpoint["EndpointConfigName"] == config_id.rsplit("/", 1)[-1]
        described_model = _model_in_the_vpc(rehearsal, project, sagemaker, stack)
        assert variant["ModelName"] == described_model["ModelName"]
        checked += 1
    assert checked == sum(
        isinstance(m, TritonSageMakerModel) and project.fleet_of(m.name, ENV) is None for m in project.models
    )


def test_fleet_members_are_components_on_the_shared_endpoint(rehearsal, project):
    """The fleet's endpoint (its variant names no model), and each member's component on it, naming the
    Model of the member's stack, with the copies the fleet plan starts it with."""
    sagemaker = rehearsal.client("sagemaker")
    fleets = [f for f in project.fleets_in(ENV) if project.fleets[f].kind == "sagemaker-inference-components"]
    assert fleets
    for fleet in fleets:
        plan = packing.plan_fleet(
            fleet, project.fleets[fleet], project.fleet_members(fleet), ENV, project.environments[ENV]
        )
        (endpoint_id,) = rehearsal.of_type(f"{ENV}-{fleet}", "AWS::SageMaker::Endpoint")
        endpoint = sagemaker.describe_endpoint(EndpointName=endpoint_id.rsplit("/", 1)[-1])
        (variant,) = sagemaker.describe_endpoint_config(EndpointConfigName=endpoint["EndpointConfigName"])[
            "ProductionVariants"
        ]
        assert "ModelName" not in variant
        assert (variant["InstanceType"], variant["InitialInstanceCount"]) == (
            plan.instance_type,
            plan.initial_instances,
        )
        for name in project.fleets[fleet].models:
            stack = f"{ENV}-{name}"
            (component_arn,) = rehearsal.of_type(stack, moto_patches.INFERENCE_COMPONENT)
            component = sagemaker.describe_inference_component(InferenceComponentName=component_arn.rsplit("/", 1)[-1])
            assert component["EndpointName"] == endpoint["EndpointName"]
            assert (
                component["Specification"]["ModelName"]
                == _model_in_the_vpc(rehearsal, project, sagemaker, stack)["ModelName"]
            )
            assert component["RuntimeConfig"]["DesiredCopyCount"] == plan.share(name).initial_copies


def test_ecs_service_runs_the_neuron_task_on_its_cluster(rehearsal, project):
    ecs = rehearsal.client("ecs")
    autoscaling = rehearsal.client("autoscaling")
    checked = 0
    for name, (model, plan) in model_plans(project).items():
        if not isinstance(model, NeuronEcsModel):
            continue
        stack = f"{ENV}-{name}"
        (cluster,) = rehearsal.of_type(stack, "AWS::ECS::Cluster")
        (service_id,) = rehearsal.of_type(stack, "AWS::ECS::Service")
        (service,) = ecs.describe_services(cluster=cluster, services=[service_id])["services"]
        assert service["status"] == "ACTIVE"
        definition = ecs.describe_task_definition(taskDefinition=service["taskDefinition"])["taskDefinition"]
        (container,) = definition["containerDefinitions"]
        spec = instances.get(plan.instance_type)
        assert container["linuxParameters"]["devices"] == [
            {"hostPath": path, "containerPath": path, "permissions": ["read", "write"]} for path in spec.device_paths
        ]
        # moto keeps a task definition's containers (not its compatibilities or placement constraints)
        environment = {e["name"]: e["value"] for e in container["environment"]}
        if isinstance(plan, packing.NeuronFleetPlan):  # every member on its own cores and port
            served = json.loads(environment["SERVER_MODELS"])
            assert [(s["name"], s["port"], s["visible_cores"]) for s in served] == [
                (s.model, s.port, s.visible_cores) for s in plan.shares
            ]
            assert sorted(p["containerPort"] for p in container["portMappings"]) == [s.port for s in plan.shares]
        else:
            assert environment["MODEL_NAME"] == name
        assert environment["NEURON_RT_VISIBLE_CORES"] == f"0-{spec.neuron_cores - 1}"
        # the instance group: min from the plan, room for a 200 % deployment at max
        (group_name,) = rehearsal.of_type(stack, "AWS::AutoScaling::AutoScalingGroup")
        (group,) = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group_name])["AutoScalingGroups"]
        assert (group["MinSize"], group["MaxSize"]) == (plan.min_capacity, plan.max_capacity * 2)
        launch = rehearsal.client("ec2").describe_launch_template_versions(
            LaunchTemplateId=group["LaunchTemplate"]["LaunchTemplateId"]
        )["LaunchTemplateVersions"][0]
        assert launch["LaunchTemplateData"]["InstanceType"] == plan.instance_type
        # the AMI is whatever the AL2023 Neuron SSM parameter resolved to at deploy
        assert (
            launch["LaunchTemplateData"]["ImageId"]
            == rehearsal.ssm_values["/aws/service/ecs/optimized-ami/amazon-linux-2023/neuron/recommended/image_id"]
        )
        checked += 1
    assert checked == sum(isinstance(m, NeuronEcsModel) for m, _ in model_plans(project).values()) > 0


def test_groups_follow_their_off_hours_windows(rehearsal, project):
    """The group's minimum follows the service's off-hours window (dev's fleet and intent-bert-inf2 close at
    night). moto keys Auto Scaling scheduled actions by name account-wide (AWS: per group) and its
    CloudFormation names them by logical id, so stacks with the same construct layout overwrite each other's
    actions: every action moto holds must be one its group's windows ask for, and one group holds them all."""
    autoscaling = rehearsal.client("autoscaling")
    expected = {}
    for name, (model, plan) in model_plans(project).items():
        if not isinstance(model, NeuronEcsModel):
            continue
        windows = plan.windows if isinstance(plan, packing.NeuronFleetPlan) else model.off_hours_for(ENV)
        (group_name,) = rehearsal.of_type(f"{ENV}-{name}", "AWS::AutoScaling::AutoScalingGroup")
        expected[group_name] = sorted(
            [(schedule.unix_recurrence(w.start), w.min) for w in windows]
            + [(schedule.unix_recurrence(w.end), plan.min_capacity) for w in windows]
        )
    assert sum(bool(actions) for actions in expected.values()) >= 1
    held: dict[str, list] = {}
    for action in autoscaling.describe_scheduled_actions()["ScheduledUpdateGroupActions"]:
        held.setdefault(action["AutoScalingGroupName"], []).append((action["Recurrence"], action["MinSize"]))
    assert held and all(sorted(actions) == expected[group] for group, actions in held.items()), (held, expected)


def test_load_balancer_is_internal_with_the_readiness_health_check(rehearsal, project):
    """Each served model's target group (two with a traffic-shifting rollout: dev's fleet and intent-bert-inf2
    replace everything at once, blue/green) on its port and readiness path, and the listener rules: a rolling
    fleet's path rule per model; a traffic-shifting service's production rule per model forwarding to both its
    groups, the first model's taking every path."""
    elbv2 = rehearsal.client("elbv2")
    for name, (model, plan) in model_plans(project).items():
        if not isinstance(model, NeuronEcsModel):
            continue
        stack = f"{ENV}-{name}"
        fleet = isinstance(plan, packing.NeuronFleetPlan)
        deployment = (project.fleets[name] if fleet else model).deployment_for(ENV)
        shifting = neuron_deployment.rollout(deployment).shifts_traffic
        (arn,) = rehearsal.of_type(stack, "AWS::ElasticLoadBalancingV2::LoadBalancer")
        (balancer,) = elbv2.describe_load_balancers(LoadBalancerArns=[arn])["LoadBalancers"]
        assert balancer["Scheme"] == "internal"
        group_arns = rehearsal.of_type(stack, "AWS::ElasticLoadBalancingV2::TargetGroup")
        groups = elbv2.describe_target_groups(TargetGroupArns=group_arns)["TargetGroups"]
        served = (
            [(s.model, s.port, f"/v2/models/{s.model}/ready") for s in plan.shares]
            if fleet
            else [(name, model.serving.port, "/v2/health/ready")]
        )
        assert sorted((g["Port"], g["HealthCheckPath"]) for g in groups) == sorted(
            (port, path) for _, port, path in served for _ in range(2 if shifting else 1)
        )
        (listener_arn,) = rehearsal.of_type(stack, "AWS::ElasticLoadBalancingV2::Listener")
        rules = [r for r in elbv2.describe_rules(ListenerArn=listener_arn)["Rules"] if not r["IsDefault"]]
        port_of = {g["TargetGroupArn"]: g["Port"] for g in groups}
        routed = {
            tuple(sorted(c["Values"] if "Values" in c else c["PathPatternConfig"]["Values"])): sorted(
                port_of[t["TargetGroupArn"]]
                for a in r["Actions"]
                for t in (a["ForwardConfig"]["TargetGroups"] if "ForwardConfig" in a else [a])
            )
            for r in rules
            for c in r["Conditions"]
        }
        if shifting:
            (first, first_port, _), *others = served
            assert routed == {
                ("/*",): [first_port] * 2,
                **{(f"/v2/models/{m}", f"/v2/models/{m}/*"): [port] * 2 for m, port, _ in others},
            }
        elif fleet:
            assert routed == {(f"/v2/models/{m}", f"/v2/models/{m}/*"): [port] for m, port, _ in served}
        else:
            assert routed == {}


def test_services_name_their_target_groups_and_production_rules(rehearsal, project):
    """The ECS service's load balancers as created: each served model's port on its target group and, with a
    traffic-shifting rollout, its alternate group and the production rule forwarding to both, with the role
    ECS shifts them with. (moto models no DeploymentConfiguration: the strategy itself is checked on the
    templates, tests/constructs/test_neuron_rollouts.py.)"""
    ecs, elbv2, iam = rehearsal.client("ecs"), rehearsal.client("elbv2"), rehearsal.client("iam")
    for name, (model, plan) in model_plans(project).items():
        if not isinstance(model, NeuronEcsModel):
            continue
        stack = f"{ENV}-{name}"
        fleet = isinstance(plan, packing.NeuronFleetPlan)
        shifting = neuron_deployment.rollout(
            (project.fleets[name] if fleet else model).deployment_for(ENV)
        ).shifts_traffic
        (cluster,) = rehearsal.of_type(stack, "AWS::ECS::Cluster")
        (service_id,) = rehearsal.of_type(stack, "AWS::ECS::Service")
        (service,) = ecs.describe_services(cluster=cluster, services=[service_id])["services"]
        groups = {
            g["TargetGroupArn"]: g["Port"]
            for g in elbv2.describe_target_groups(
                TargetGroupArns=rehearsal.of_type(stack, "AWS::ElasticLoadBalancingV2::TargetGroup")
            )["TargetGroups"]
        }
        ports = [s.port for s in plan.shares] if fleet else [model.serving.port]
        balancers = service["loadBalancers"]
        assert sorted((lb["containerPort"], groups[lb["targetGroupArn"]]) for lb in balancers) == [
            (p, p) for p in sorted(ports)
        ]
        if not shifting:
            assert not any("advancedConfiguration" in lb for lb in balancers)
            continue
        (listener_arn,) = rehearsal.of_type(stack, "AWS::ElasticLoadBalancingV2::Listener")
        rules = {r["RuleArn"]: r for r in elbv2.describe_rules(ListenerArn=listener_arn)["Rules"]}
        role_names = {arn.split("/")[-1] for arn in rehearsal.of_type(stack, "AWS::IAM::Role")}
        for lb in balancers:
            advanced = lb["advancedConfiguration"]
            assert groups[advanced["alternateTargetGroupArn"]] == lb["containerPort"]
            assert advanced["alternateTargetGroupArn"] != lb["targetGroupArn"]
            (action,) = rules[advanced["productionListenerRule"]]["Actions"]
            assert [(t["TargetGroupArn"], t["Weight"]) for t in action["ForwardConfig"]["TargetGroups"]] == [
                (lb["targetGroupArn"], 100),
                (advanced["alternateTargetGroupArn"], 0),
            ]
            role = iam.get_role(RoleName=advanced["roleArn"].split("/")[-1])["Role"]
            assert role["RoleName"] in role_names
            assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "ecs.amazonaws.com"}


def test_scalable_targets_when_moto_models_them(rehearsal, project):
    """Application Auto Scaling: checked against the plan where moto creates the targets; where it does not
    (moto 5.2.5), the rehearsal must say so in its report instead of passing silently."""
    scalable = "AWS::ApplicationAutoScaling::ScalableTarget"
    if scalable in rehearsal.unmodeled:
        assert scalable in report(rehearsal)
        client = rehearsal.client("application-autoscaling")
        for namespace in ("ecs", "sagemaker"):
            assert client.describe_scalable_targets(ServiceNamespace=namespace)["ScalableTargets"] == []
        return
    client = rehearsal.client("application-autoscaling")
    targets = client.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
    targets += client.describe_scalable_targets(ServiceNamespace="ecs")["ScalableTargets"]
    for name, (_, plan) in model_plans(project).items():
        (target,) = [t for t in targets if name in t["ResourceId"] or t["ResourceId"].endswith(name)]
        assert (target["MinCapacity"], target["MaxCapacity"]) == (plan.min_capacity, plan.max_capacity)


def test_report_names_what_was_not_exercised(rehearsal):
    text = report(rehearsal)
    assert "Custom::VpcRestrictDefaultSG" in text and UNRUNNABLE_REASON in text
    for resource_type in rehearsal.unmodeled:
        assert resource_type in text
