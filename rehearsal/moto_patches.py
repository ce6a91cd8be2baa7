"""Named workarounds for defects of the AWS emulator (moto 5.2.5) that the CLI deploy rehearsal runs
against. Each patch changes moto, in the emulator's own process, before its server starts: never the
templates under test. One patch per defect, each with the moto version it was found on, and a unit test
(tests/rehearsal/test_cli_deploy.py) that fails without it and passes with it at the moto-backend level.

    from rehearsal import moto_patches
    with moto_patches.applied():          # or moto_patches.apply_all() for the life of the process
        ...
"""

from __future__ import annotations

import contextlib
import copy
import re
import threading
from collections.abc import Callable, Iterator

from rehearsal.aws_rules import RULES
from rehearsal.emulator_patch import Patch, Undo, replace

MOTO_VERSION = "5.2.5"  # the version these defects were found on; the server refuses to start on another one

# The deploy-time reader of inferstack.constructs.live_values (patches live-values, new-values-update-readers).
LIVE_VALUE = "Custom::LiveValue"
# inferstack.constructs.scaling_handover's resource type (patch scaling-handover); that module loads the CDK.
SCALING_HANDOVER = "Custom::ScalingHandover"
_replace = replace


# ----------------------------------------------------------------------------- account-from-access-key

ACCOUNT_KEY = re.compile(r"^\d{12}$")
CREDENTIAL = re.compile(r"Credential=(\d{12})/")  # SigV4: Credential=<key id>/<date>/<region>/...


def _account_from_access_key() -> Undo:
    """An access key id of 12 digits that moto's IAM does not know acts as that account, so one emulator
    serves several accounts (dev and staging for promote) and the CDK CLI's STS GetCallerIdentity reports
    the account the stacks are for. moto reads only 20-character key ids from a request's signature and maps
    unknown ones to its default account. Keys moto issued (assume-role credentials) keep their own account."""
    from moto.core.responses import BaseResponse
    from moto.iam import models as iam_models

    original_key = BaseResponse.__dict__["get_access_key"]
    original_account = iam_models.get_account_id_from

    def get_access_key(self) -> str:
        found = CREDENTIAL.search(self.headers.get("Authorization") or "")
        return found.group(1) if found else original_key(self)

    def get_account_id_from(access_key: str) -> str:
        account = original_account(access_key)
        if account == iam_models.DEFAULT_ACCOUNT_ID and ACCOUNT_KEY.fullmatch(access_key or ""):
            return access_key
        return account

    undo_key = _replace(BaseResponse, "get_access_key", get_access_key)
    iam_models.get_account_id_from = get_account_id_from

    def undo() -> None:
        undo_key()
        iam_models.get_account_id_from = original_account

    return undo


# ----------------------------------------------------------------------------- kms-key-cloudformation-tags


def _kms_key_cloudformation_tags() -> Undo:
    """AWS::KMS::Key's `Tags` are CloudFormation tags ({Key, Value}); moto's handler passes them to its KMS
    API code, which reads the KMS API's shape ({TagKey, TagValue}): KeyError: 'TagKey', the change set
    fails. Translate them before the handler runs."""
    from moto.kms.models import Key

    original = Key.__dict__["create_from_cloudformation_json"].__func__

    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        tags = (cloudformation_json.get("Properties") or {}).get("Tags")
        if tags and all("Key" in t for t in tags):
            cloudformation_json = copy.deepcopy(cloudformation_json)
            cloudformation_json["Properties"]["Tags"] = [{"TagKey": t["Key"], "TagValue": t["Value"]} for t in tags]
        return original(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs)

    return _replace(Key, "create_from_cloudformation_json", classmethod(create_from_cloudformation_json))


# ----------------------------------------------------------------------------- change-set-outputs-and-exports


def _change_set_outputs_and_exports() -> Undo:
    """The CDK CLI deploys through change sets. moto's ExecuteChangeSet of a CREATE change set applies the
    resources to a stack that was built with an empty template and no view of the region's exports, and
    never builds its outputs or registers its exports: the stack reports CREATE_COMPLETE with no outputs
    (CDKToolkit has no BootstrapVersion, so the CLI cannot find the bootstrap), and the next stack's
    Fn::ImportValue fails with `No export named ... found`. Execute a CREATE change set the way moto's own
    CreateStack creates a stack (dependency order, the region's exports, outputs, exports registered) and
    rebuild outputs and exports after an UPDATE change set. Every deploy's change set has the same name
    (`cdk-deploy-change-set`), and moto's ExecuteChangeSet by name takes the newest of that name of any stack:
    an update applied another stack's template to the wrong stack. Take the stack's own newest."""
    from moto.cloudformation.models import CloudFormationBackend

    original = CloudFormationBackend.__dict__["execute_change_set"]

    def execute_change_set(self, change_set_name: str, stack_name: str | None = None) -> None:
        # By name, the newest: the CDK CLI names every deploy's change set `cdk-deploy-change-set`, and an
        # update's must not be taken for the create that came first (moto's own lookup also keeps the last).
        change_set = self.change_sets.get(change_set_name) or next(
            (
                c
                for c in reversed(list(self.change_sets.values()))
                if c.change_set_name == change_set_name and stack_name in (None, c.stack_name, c.stack_id)
            ),
            None,
        )
        if change_set is None or change_set.change_set_type != "CREATE":
            # By id: moto's own lookup by name takes the newest change set of that name of ANY stack.
            original(self, change_set.change_set_id if change_set is not None else change_set_name, stack_name)
            if change_set is not None:
                stack = self.stacks[change_set.stack_id]
                stack.output_map = stack._create_output_map()
                for name in [n for n, e in self.exports.items() if e.exporting_stack_id == stack.stack_id]:
                    del self.exports[name]
                self._validate_export_uniqueness(stack)
                self.exports.update({e.name: e for e in stack.exports})
            return
        stack = self.stacks[change_set.stack_id]
        stack.template = change_set.template
        stack._parse_template()
        stack.parameters = change_set.parameters
        stack.cross_stack_resources = self.exports
        stack._add_stack_event("CREATE_IN_PROGRESS", resource_status_reason="User Initiated")
        no_outputs = stack.output_map  # built for the empty template: outputs are evaluated when read
        try:
            stack.resource_map = stack._create_resource_map()
            stack.create_resources()
            stack.output_map = stack._create_output_map()
            self._validate_export_uniqueness(stack)
            self.exports.update({e.name: e for e in stack.exports})
        except Exception as exc:  # moto raised mid-create: a failed stack, as AWS would report it
            stack.output_map = no_outputs
            stack.status = "CREATE_FAILED"
            stack._add_stack_event("CREATE_FAILED", resource_status_reason=f"{type(exc).__name__}: {exc}")
            change_set.execution_status = "EXECUTE_FAILED"
            return
        change_set.execution_status = "EXECUTE_COMPLETE"

    return _replace(CloudFormationBackend, "execute_change_set", execute_change_set)


# ----------------------------------------------------------------------------- change-sets-by-stack


def _change_sets_by_stack() -> Undo:
    """The CDK CLI names every stack's change set `cdk-deploy-change-set` and calls Describe-, Delete- and
    ExecuteChangeSet with that name and the stack's name. moto looks change sets up by name alone, across every
    stack: on a second deploy (an update) it describes, deletes or executes another stack's change set of that
    name, and the CLI waits on the wrong one for ever. Look the name up among the named stack's change sets
    (the newest), and hand moto its id; no such change set there: ChangeSetNotFound, as AWS answers."""
    from moto.cloudformation.exceptions import CloudFormationError
    from moto.cloudformation.models import cloudformation_backends
    from moto.cloudformation.responses import CloudFormationResponse
    from moto.core.responses import EmptyResult

    class ChangeSetNotFound(CloudFormationError):
        code = "ChangeSetNotFound"

    originals = {
        name: CloudFormationResponse.__dict__[name]
        for name in ("describe_change_set", "delete_change_set", "execute_change_set")
    }

    def scoped(original):
        def method(self):
            name, stack = self._get_param("ChangeSetName"), self._get_param("StackName")
            backend = cloudformation_backends[self.current_account][self.region]
            if name and stack and not name.startswith("arn:"):
                found = [
                    c
                    for c in backend.change_sets.values()
                    if c.change_set_name == name and stack in (c.stack_name, c.stack_id)
                ]
                if not found and original is originals["delete_change_set"]:
                    return EmptyResult()  # as AWS: deleting a change set that is not there succeeds
                if not found:  # as AWS answers (the CLI waits for exactly this after deleting one)
                    raise ChangeSetNotFound(f"ChangeSet [{name}] does not exist")
                change_set_id = found[-1].change_set_id
                get_param = self._get_param
                self._get_param = lambda key, *default: (
                    change_set_id if key == "ChangeSetName" else get_param(key, *default)
                )
            return original(self)

        return method

    undos = [_replace(CloudFormationResponse, name, scoped(original)) for name, original in originals.items()]

    def undo() -> None:
        for restore in undos:
            restore()

    return undo


# ----------------------------------------------------------------------------- ssm-parameter-previous-value


def _ssm_parameter_previous_value() -> Undo:
    """A parameter of type AWS::SSM::Parameter::Value<...> (the CDK bootstrap version, the Neuron AMI id) holds
    a parameter name, resolved at each deploy. On an update the CDK CLI passes such a parameter back with
    UsePreviousValue; moto then takes the previous *resolved* value (an AMI id) and looks it up as a parameter
    name: AttributeError, ExecuteChangeSet answers 500 and the update never happens. The previous value of such
    a parameter is the name it was given (as CloudFormation's DescribeStacks shows it beside the ResolvedValue)."""
    from moto.cloudformation.models import Stack

    original = Stack.__dict__["stack_parameters"]

    def stack_parameters(self) -> dict:
        values = dict(original.fget(self))
        resource_map = self.resource_map
        for key, slot in (self.template_dict.get("Parameters") or {}).items():
            if str(slot.get("Type", "")).startswith("AWS::SSM::Parameter::") and key in values:
                values[key] = resource_map.input_parameters.get(key, slot.get("Default"))
        return values

    return _replace(Stack, "stack_parameters", property(stack_parameters))


# ----------------------------------------------------------------------------- template-url-on-loopback

LOOPBACK_HOSTS = ("127.0.0.1", "::1")


def _template_url_on_loopback() -> Undo:
    """With AWS_ENDPOINT_URL set, the CDK CLI uploads the template to the emulator and passes its path-style
    URL (http://127.0.0.1:<port>/<bucket>/<key>) as TemplateURL. moto reads the bucket from the path only for
    `localhost` URLs and otherwise takes the host's first label as the bucket ("127"): NoSuchBucket. Read a
    loopback address like localhost."""
    from urllib.parse import urlsplit, urlunsplit

    from moto.cloudformation.responses import CloudFormationResponse

    original = CloudFormationResponse.__dict__["_get_stack_from_s3_url"]

    def _get_stack_from_s3_url(self, template_url: str) -> str:
        parts = urlsplit(template_url)
        if parts.hostname in LOOPBACK_HOSTS:
            netloc = "localhost" + (f":{parts.port}" if parts.port else "")
            template_url = urlunsplit(parts._replace(netloc=netloc))
        return original(self, template_url)

    return _replace(CloudFormationResponse, "_get_stack_from_s3_url", _get_stack_from_s3_url)


# ----------------------------------------------------------------------------- custom-resources-without-docker

# (stack id, logical id, resource type) of every custom resource marked created without running its handler
CUSTOM_RESOURCES_NOT_RUN: list[tuple[str, str, str]] = []


def _custom_resources_without_docker() -> Undo:
    """moto creates a custom resource (Custom::*, AWS::CloudFormation::CustomResource) by invoking its
    provider Lambda in a Docker container and waiting for the function's reply to the ResponseURL. Without
    a Docker daemon the reply never comes: the stack stays CREATE_IN_PROGRESS and `cdk deploy` waits
    forever. Mark each custom resource created at once, with no attributes, without invoking its Lambda
    (the provider function must still exist), and record it: the rehearsal reports each one as not run."""
    import sys

    from moto.awslambda.utils import get_backend as get_lambda_backend
    from moto.cloudformation import cloudformation_backends
    from moto.cloudformation.custom_model import CustomModel
    from moto.moto_api._internal import mock_random

    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        get_lambda_backend(account_id, region_name).get_function(cloudformation_json["Properties"]["ServiceToken"])
        resource = cls(region_name, str(mock_random.uuid4()), kwargs["LogicalId"], resource_name)
        cloudformation_backends[account_id][region_name].get_stack(kwargs["StackId"]).add_custom_resource(resource)
        resource.set_data({})
        CUSTOM_RESOURCES_NOT_RUN.append((kwargs["StackId"], kwargs["LogicalId"], kwargs["ResourceType"]))
        print(
            f"moto patch custom-resources-without-docker: {kwargs['ResourceType']} {kwargs['LogicalId']} marked "
            f"created, its Lambda not invoked",
            file=sys.stderr,
            flush=True,
        )
        return resource

    return _replace(CustomModel, "create_from_cloudformation_json", classmethod(create_from_cloudformation_json))


# ----------------------------------------------------------------------------- getatt-of-unmodeled-resource


class UnmodeledResource:
    """Stands in for a resource moto's CloudFormation skips, when another resource or an output reads it:
    Ref gives a name and Fn::GetAtt an ARN-shaped value, both marked `unmodeled`, so they are never taken
    for a real resource. Never stored in the stack: nothing lists, describes or deletes it."""

    def __init__(self, stack_name: str, logical_id: str, account_id: str, region_name: str) -> None:
        self.logical_id, self.account_id, self.region_name = logical_id, account_id, region_name
        self.physical_resource_id = f"{stack_name}-{logical_id}-unmodeled"

    def get_cfn_attribute(self, attribute: str) -> str:
        return f"arn:aws:unmodeled:{self.region_name}:{self.account_id}:{self.logical_id}/{attribute}"

    def is_created(self) -> bool:
        return True


def _getatt_of_unmodeled_resource() -> Undo:
    """moto skips a resource type it does not model (AWS::CloudWatch::Alarm, AWS::ECS::CapacityProvider,
    ...) with a warning, but a Fn::GetAtt of such a resource then fails the whole stack (`Template error:
    instance of Fn::GetAtt references undefined resource ...`), and a Ref silently drops the property.
    A CDK template reads alarm ARNs (dashboards, SageMaker auto-rollback) and capacity provider names:
    answer both with marked placeholder values instead."""
    from moto.cloudformation.parsing import ResourceMap, resource_class_from_type

    original = ResourceMap.__dict__["__getitem__"]

    def __getitem__(self, key: str):
        value = original(self, key)
        if value is None:
            resource = (self._resource_json_map or {}).get(key)
            if isinstance(resource, dict) and not resource_class_from_type(resource.get("Type", "")):
                return UnmodeledResource(self["AWS::StackName"], key, self._account_id, self._region_name)
        return value

    return _replace(ResourceMap, "__getitem__", __getitem__)


# ----------------------------------------------------------------------------- target-group-getatt


def _target_group_getatt() -> Undo:
    """moto's AWS::ElasticLoadBalancingV2::TargetGroup has no get_cfn_attribute at all: any Fn::GetAtt of
    it fails the stack with AttributeError. The CDK reads TargetGroupFullName for the ALB request-count
    scaling metric and the alarms. Answer the documented attributes from the target group itself."""
    from moto.elbv2.models import FakeTargetGroup

    def get_cfn_attribute(self, attribute_name: str):
        from moto.cloudformation.exceptions import UnformattedGetAttTemplateException

        values = {
            "TargetGroupFullName": self.arn.split(":")[-1],  # targetgroup/<name>/<id>
            "TargetGroupName": self.name,
            "TargetGroupArn": self.arn,
            "LoadBalancerArns": list(self.load_balancer_arns),
        }
        if attribute_name not in values:
            raise UnformattedGetAttTemplateException()
        return values[attribute_name]

    if "get_cfn_attribute" in FakeTargetGroup.__dict__:  # moto implemented it: leave moto's
        return lambda: None
    FakeTargetGroup.get_cfn_attribute = get_cfn_attribute
    return lambda: delattr(FakeTargetGroup, "get_cfn_attribute")


# ----------------------------------------------------------------------------- listener-forward-config


def _listener_forward_config() -> Undo:
    """An AWS::ElasticLoadBalancingV2::Listener whose default action forwards with a ForwardConfig (weighted
    target groups, no TargetGroupArn: what ECS native blue/green needs on its listener) fails in moto's
    CloudFormation with KeyError: 'TargetGroupArn' (ELBv2Backend.convert_and_validate_properties reads only
    the single-group form), although moto's API and its listener rules take ForwardConfig. Keep a forward
    action as written when it has no TargetGroupArn, as the rules' handler does."""
    from moto.elbv2.models import ELBv2Backend

    original = ELBv2Backend.__dict__["convert_and_validate_properties"]

    def convert_and_validate_properties(self, properties):
        actions = properties["DefaultActions"]
        weighted = {
            i: a
            for i, a in enumerate(actions)
            if a.get("Type") == "forward" and "TargetGroupArn" not in a and "ForwardConfig" in a
        }
        if not weighted:
            return original(self, properties)
        converted = original(
            self, {**properties, "DefaultActions": [a for i, a in enumerate(actions) if i not in weighted]}
        )
        for index in sorted(weighted):
            converted.insert(index, weighted[index])
        return converted

    return _replace(ELBv2Backend, "convert_and_validate_properties", convert_and_validate_properties)


# ----------------------------------------------------------------------------- ecs-service-load-balancers


def _api_shape(value):
    """CloudFormation's PascalCase keys as the ECS API's camelCase (TargetGroupArn -> targetGroupArn)."""
    if isinstance(value, dict):
        return {key[:1].lower() + key[1:]: _api_shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_api_shape(item) for item in value]
    return value


def _ecs_service_load_balancers() -> Undo:
    """moto's AWS::ECS::Service handler passes only the cluster, name, desired count and task definition to
    CreateService (`# TODO: LoadBalancers` in moto's ecs/models.py): the service has no target groups, so
    nothing can read back which target group, alternate target group and production listener rule it was
    given. Keep the template's LoadBalancers on the created service, in the ECS API's shape, as moto's own
    CreateService stores them. (moto models no DeploymentConfiguration at all: the strategy, bake time,
    circuit breaker and deployment alarms stay unmodeled.)"""
    from moto.ecs.models import Service

    original = Service.__dict__["create_from_cloudformation_json"].__func__

    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        service = original(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs)
        balancers = (cloudformation_json.get("Properties") or {}).get("LoadBalancers")
        if balancers and not service.load_balancers:
            service.load_balancers = _api_shape(balancers)
        return service

    return _replace(Service, "create_from_cloudformation_json", classmethod(create_from_cloudformation_json))


# ----------------------------------------------------------------------------- sagemaker-endpoint-name


def _sagemaker_endpoint_name() -> Undo:
    """moto's AWS::SageMaker::Endpoint ignores its EndpointName property (cloudformation_name_type is ""):
    the endpoint gets a generated name, so the stack's EndpointName output names no endpoint and
    DescribeEndpoint/InvokeEndpoint (promote, smoke) fail. Name the endpoint from the property."""
    from moto.sagemaker.models import FakeEndpoint

    return _replace(FakeEndpoint, "cloudformation_name_type", staticmethod(lambda: "EndpointName"))


# ----------------------------------------------------------------------------- route-table-delete


def _route_table_delete() -> Undo:
    """moto's AWS::EC2::RouteTable has no delete: deleting a stack leaves its route tables (with their
    subnet associations), and the VPC's delete then fails with `The vpc ... has dependencies`, so
    `cdk destroy` of the foundation fails. Delete a table as CloudFormation does: its associations first."""
    from moto.ec2.models.route_tables import RouteTable

    if "delete" in RouteTable.__dict__:
        raise RuntimeError("moto's RouteTable has a delete of its own now: re-check the route-table-delete defect")

    def delete(self, account_id: str, region_name: str) -> None:
        for association_id in list(self._associations):
            self.ec2_backend.disassociate_route_table(association_id)
        self.ec2_backend.delete_route_table(self.id)

    RouteTable.delete = delete
    return lambda: delattr(RouteTable, "delete")


# ----------------------------------------------------------------------------- deletes-without-a-handler


def _deletes_without_a_handler() -> Undo:
    """moto's CloudFormation deletes a resource through the model's `delete` or its class's
    `delete_from_cloudformation_json`; these five types have neither, so a deleted stack leaves them
    behind (running NAT gateway, ACTIVE cluster and task definition, target group), and a listener rule an
    update removes stays on its listener (with the target groups it forwards to, which then cannot go). Delete
    them through moto's own API code, which leaves what AWS leaves: a `deleted` NAT gateway, an INACTIVE cluster
    and task definition, no target group, no rule."""
    from moto.ec2.models.nat_gateways import NatGateway
    from moto.ecs.models import Cluster, TaskDefinition, ecs_backends
    from moto.elbv2.models import FakeListenerRule, FakeTargetGroup, elbv2_backends

    deletes = {
        NatGateway: lambda self, account, region: self.ec2_backend.delete_nat_gateway(self.id),
        Cluster: lambda self, account, region: ecs_backends[account][region].delete_cluster(self.arn),
        TaskDefinition: lambda self, account, region: ecs_backends[account][region].deregister_task_definition(
            self.arn
        ),
        FakeTargetGroup: lambda self, account, region: elbv2_backends[account][region].delete_target_group(self.arn),
        FakeListenerRule: lambda self, account, region: elbv2_backends[account][region].delete_rule(self.arn),
    }
    for model in deletes:
        if "delete" in model.__dict__ or "delete_from_cloudformation_json" in model.__dict__:
            raise RuntimeError(f"moto's {model.__name__} deletes itself now: re-check deletes-without-a-handler")
    for model, delete in deletes.items():
        model.delete = delete

    def undo() -> None:
        for model in deletes:
            delattr(model, "delete")

    return undo


# ----------------------------------------------------------------------------- update-removes-unmodeled


def _update_removes_unmodeled() -> Undo:
    """A stack update that removes a resource of a type moto's CloudFormation does not model (an alarm, a scaling
    policy: moto created nothing for it) fails once an earlier update changed it: that update kept None as its
    parsed resource, the removal hands the None to moto's delete, which raises AttributeError on every pass, and
    ExecuteChangeSet answers a 500. Nothing was created, so nothing is deleted: the removal succeeds, as the
    type's real handler's would."""
    from moto.cloudformation.parsing import ResourceMap

    original = ResourceMap.__dict__["_delete_resource"]

    def _delete_resource(self, parsed_resource, resource_json: dict) -> None:
        if parsed_resource is None:
            return
        original(self, parsed_resource, resource_json)

    return _replace(ResourceMap, "_delete_resource", _delete_resource)


# ----------------------------------------------------------------------------- sagemaker-variant-without-model


def _sagemaker_variant_without_model() -> Undo:
    """An endpoint that hosts inference components has a production variant that names no model (each
    component names its own). moto's CreateEndpointConfig, through the API or CloudFormation, reads every
    variant's ModelName to check the model exists: KeyError: 'ModelName', the stack fails. Check only the
    variants that name a model."""
    from moto.sagemaker.models import SageMakerModelBackend

    original = SageMakerModelBackend.__dict__["validate_production_variants"]

    def validate_production_variants(self, production_variants) -> None:
        original(self, [v for v in production_variants if "ModelName" in v])

    return _replace(SageMakerModelBackend, "validate_production_variants", validate_production_variants)


# ----------------------------------------------------------------------------- task-definition-update


def _task_definition_update() -> Undo:
    """moto's AWS::ECS::TaskDefinition create turns the template's container definitions into the ECS API's
    shape (Image -> image, PortMappings -> portMappings); its update registers the revision with the template's
    PascalCase keys as they are: the new revision's containers have no `image`, and DescribeTaskDefinition
    answers nothing ECS would. Shape them as the create does."""
    from moto.core.utils import pascal_to_camelcase, remap_nested_keys
    from moto.ecs.models import TaskDefinition

    original = TaskDefinition.__dict__["update_from_cloudformation_json"].__func__

    def update_from_cloudformation_json(
        cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name
    ):
        properties = dict(cloudformation_json.get("Properties") or {})
        for key in ("ContainerDefinitions", "Volumes"):
            if key in properties:
                properties[key] = remap_nested_keys(properties[key], pascal_to_camelcase)
        return original(
            cls,
            original_resource,
            new_resource_name,
            {**cloudformation_json, "Properties": properties},
            account_id,
            region_name,
        )

    return _replace(TaskDefinition, "update_from_cloudformation_json", classmethod(update_from_cloudformation_json))


# ----------------------------------------------------------------------------- new-values-update-readers

# Types CloudFormation replaces on any property change (every property is create-only), so an update gives
# them a new name or ARN; and the live-value readers, whose answer changes. What references them by Ref or
# Fn::GetAtt gets a new value, so CloudFormation updates it too.
NEW_VALUE_ON_UPDATE = frozenset(
    {"AWS::SageMaker::Model", "AWS::SageMaker::EndpointConfig", "AWS::ECS::TaskDefinition", LIVE_VALUE}
)


def _references_any(value, names: set[str]) -> bool:
    if isinstance(value, dict):
        get_att, ref = value.get("Fn::GetAtt"), value.get("Ref")
        if (isinstance(get_att, list) and get_att and get_att[0] in names) or ref in names:
            return True
        return any(_references_any(item, names) for item in value.values())
    if isinstance(value, list):
        return any(_references_any(item, names) for item in value)
    return False


def _new_values_update_readers() -> Undo:
    """moto updates a resource only when its own template text changed. CloudFormation also updates one whose
    properties resolve differently: a Ref or Fn::GetAtt of a resource that the update replaced (a SageMaker
    Model or EndpointConfig, an ECS task definition revision) or of a live-value reader that read again. Without
    this, a new image reaches a new Model that no inference component and no endpoint config names, and a new
    task definition that the ECS service does not run. Add those readers (transitively, through what is itself
    replaced) to the update, after what they read."""
    from moto.cloudformation.parsing import ResourceMap

    original = ResourceMap.__dict__["build_resource_diff"]

    def build_resource_diff(self, other_template, parameters=None):
        actions = original(self, other_template, parameters)
        new = other_template["Resources"]
        modify = list(actions["Modify"])
        changed = {name for name in modify if new[name].get("Type") in NEW_VALUE_ON_UPDATE}
        while changed:
            readers = [
                name
                for name in new
                if name in self._resource_json_map
                and name not in modify
                and _references_any({k: v for k, v in new[name].items() if k != "DependsOn"}, changed)
            ]
            modify += readers
            changed = {name for name in readers if new[name].get("Type") in NEW_VALUE_ON_UPDATE}
        first = [name for name in modify if new[name].get("Type") in NEW_VALUE_ON_UPDATE]
        actions["Modify"] = first + [name for name in modify if name not in first]
        return actions

    return _replace(ResourceMap, "build_resource_diff", build_resource_diff)


# ----------------------------------------------------------------------------- sagemaker-inference-components

INFERENCE_COMPONENT = "AWS::SageMaker::InferenceComponent"
# Resource types a patch here models although moto's own CloudFormation does not: whoever reads moto's model
# map in another process (the rehearsal's checks) adds these.
MODELED_BY_PATCHES = frozenset({INFERENCE_COMPONENT})
# (account, region) -> component name -> its description, while the patch is applied
INFERENCE_COMPONENTS: dict[tuple[str, str], dict[str, dict]] = {}


def _sagemaker_inference_components() -> Undo:
    """moto 5.2.5 has no SageMaker inference components: its CloudFormation skips
    AWS::SageMaker::InferenceComponent (a fleet member's stack is created without its component), and
    Create/Describe/List/DeleteInferenceComponent and UpdateInferenceComponentRuntimeConfig are not implemented
    (promote cannot read what a component runs). Model what the rehearsal needs: a component is created, by
    CloudFormation or the API, only on an existing endpoint and variant with an existing model (as SageMaker
    checks), is described and listed, and is deleted with its stack. It is InService at once with its requested
    copies; nothing runs."""
    from moto.cloudformation import parsing
    from moto.core.responses import ActionResult, EmptyResult
    from moto.core.utils import utcnow
    from moto.sagemaker.exceptions import ValidationError
    from moto.sagemaker.models import sagemaker_backends
    from moto.sagemaker.responses import SageMakerResponse
    from moto.sagemaker.utils import arn_formatter

    def create(account: str, region: str, name: str, properties: dict) -> dict:
        backend = sagemaker_backends[account][region]
        endpoint_name = properties.get("EndpointName")
        endpoint = backend.endpoints.get(endpoint_name)
        if endpoint is None:
            raise ValidationError(
                message=f"Could not find endpoint '{arn_formatter('endpoint', str(endpoint_name), account, region)}'."
            )
        variants = [v["VariantName"] for v in endpoint.production_variants]
        variant = properties.get("VariantName") or variants[0]
        if variant not in variants:
            raise ValidationError(
                message=f"Endpoint {endpoint_name} has no variant {variant!r} ({', '.join(variants)})."
            )
        specification = dict(properties.get("Specification") or {})
        backend.describe_model(specification.get("ModelName"))  # raises for a missing model, as SageMaker does
        store = INFERENCE_COMPONENTS.setdefault((account, region), {})
        if name in store:
            raise ValidationError(message=f'Cannot create already existing inference component "{name}".')
        copies = int((properties.get("RuntimeConfig") or {}).get("CopyCount", 1))
        now = utcnow()
        store[name] = {
            "InferenceComponentName": name,
            "InferenceComponentArn": arn_formatter("inference-component", name, account, region),
            "EndpointName": endpoint_name,
            "EndpointArn": endpoint.arn,
            "VariantName": variant,
            "Specification": specification,
            "RuntimeConfig": {"DesiredCopyCount": copies, "CurrentCopyCount": copies},
            "InferenceComponentStatus": "InService",
            "CreationTime": now,
            "LastModifiedTime": now,
        }
        return store[name]

    def described(account: str, region: str, name: str) -> dict:
        found = INFERENCE_COMPONENTS.get((account, region), {}).get(name)
        if found is None:
            arn = arn_formatter("inference-component", name, account, region)
            raise ValidationError(message=f"Could not find inference component '{arn}'.")
        return found

    class FakeInferenceComponent:
        """Duck-typed like moto's CloudFormationModel, without subclassing it: moto registers every subclass for
        good, and undoing the patch must leave plain moto."""

        def __init__(self, account: str, region: str, description: dict) -> None:
            self.account, self.region, self.description = account, region, description
            self.physical_resource_id = description["InferenceComponentArn"]  # Ref: the component's ARN

        @staticmethod
        def cloudformation_type() -> str:
            return INFERENCE_COMPONENT

        @staticmethod
        def cloudformation_name_type() -> str:
            return "InferenceComponentName"

        @classmethod
        def has_cfn_attr(cls, attribute: str) -> bool:
            return attribute in (
                "InferenceComponentArn",
                "InferenceComponentName",
                "EndpointArn",
                "InferenceComponentStatus",
            )

        def get_cfn_attribute(self, attribute: str) -> str:
            from moto.cloudformation.exceptions import UnformattedGetAttTemplateException

            if not self.has_cfn_attr(attribute):
                raise UnformattedGetAttTemplateException()
            return self.description[attribute]

        @classmethod
        def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
            properties = cloudformation_json.get("Properties") or {}
            name = properties.get("InferenceComponentName") or resource_name
            return cls(account_id, region_name, create(account_id, region_name, name, properties))

        @classmethod
        def update_from_cloudformation_json(
            cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name
        ):
            original_resource.delete(account_id, region_name)
            return cls.create_from_cloudformation_json(new_resource_name, cloudformation_json, account_id, region_name)

        @classmethod
        def delete_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name):
            INFERENCE_COMPONENTS.get((account_id, region_name), {}).pop(resource_name.rsplit("/", 1)[-1], None)

        def delete(self, account_id: str, region_name: str) -> None:
            INFERENCE_COMPONENTS.get((account_id, region_name), {}).pop(
                self.description["InferenceComponentName"], None
            )

        def is_created(self) -> bool:
            return True

    def create_inference_component(self) -> ActionResult:
        name = self._get_param("InferenceComponentName")
        properties = {
            key: self._get_param(key) for key in ("EndpointName", "VariantName", "Specification", "RuntimeConfig")
        }
        return ActionResult(
            {
                "InferenceComponentArn": create(self.current_account, self.region, name, properties)[
                    "InferenceComponentArn"
                ]
            }
        )

    def describe_inference_component(self) -> ActionResult:
        return ActionResult(described(self.current_account, self.region, self._get_param("InferenceComponentName")))

    def list_inference_components(self) -> ActionResult:
        endpoint = self._get_param("EndpointNameEquals")
        found = [
            c
            for c in INFERENCE_COMPONENTS.get((self.current_account, self.region), {}).values()
            if endpoint in (None, c["EndpointName"])
        ]
        return ActionResult(
            {
                "InferenceComponents": [
                    {
                        key: c[key]
                        for key in (
                            "InferenceComponentName",
                            "InferenceComponentArn",
                            "EndpointName",
                            "EndpointArn",
                            "VariantName",
                            "InferenceComponentStatus",
                            "CreationTime",
                            "LastModifiedTime",
                        )
                    }
                    for c in found
                ]
            }
        )

    def delete_inference_component(self) -> ActionResult:
        name = self._get_param("InferenceComponentName")
        described(self.current_account, self.region, name)
        del INFERENCE_COMPONENTS[(self.current_account, self.region)][name]
        return EmptyResult()

    def update_inference_component_runtime_config(self) -> ActionResult:
        """What Application Auto Scaling calls to set the copies (sagemaker:inference-component:DesiredCopyCount)."""
        component = described(self.current_account, self.region, self._get_param("InferenceComponentName"))
        copies = int((self._get_param("DesiredRuntimeConfig") or {}).get("CopyCount", 0))
        component["RuntimeConfig"] = {"DesiredCopyCount": copies, "CurrentCopyCount": copies}
        component["LastModifiedTime"] = utcnow()
        return ActionResult({"InferenceComponentArn": component["InferenceComponentArn"]})

    handlers = {
        f.__name__: f
        for f in (
            create_inference_component,
            describe_inference_component,
            list_inference_components,
            delete_inference_component,
            update_inference_component_runtime_config,
        )
    }
    if any(name in SageMakerResponse.__dict__ for name in handlers) or INFERENCE_COMPONENT in parsing.get_model_map():
        raise RuntimeError("moto models inference components now: re-check the sagemaker-inference-components defect")
    original_list = parsing.get_model_list

    def get_model_list():
        return [*original_list(), FakeInferenceComponent]

    def clear_caches() -> None:
        for cached in (parsing.get_model_map, parsing.get_name_type_map):
            cached.cache_clear()

    for name, handler in handlers.items():
        setattr(SageMakerResponse, name, handler)
    parsing.get_model_list = get_model_list
    clear_caches()

    def undo() -> None:
        parsing.get_model_list = original_list
        clear_caches()
        for name in handlers:
            delattr(SageMakerResponse, name)
        INFERENCE_COMPONENTS.clear()

    return undo


# ----------------------------------------------------------------------------- deleted-stack-outputs


def _deleted_stack_outputs() -> Undo:
    """moto resolves a stack's outputs and exports each time DescribeStacks serializes them, through its resource
    map, which creates any resource it does not hold. Once the stack is deleted it holds none: describing the
    deleted stack (the CDK CLI does, by stack id, while `cdk destroy` waits) creates again every resource an
    exported output references (a SageMaker endpoint by its fixed name, a security group). A deleted stack has no
    outputs or exports to report: say so, without resolving anything."""
    from moto.cloudformation.models import Stack

    original_outputs, original_exports = Stack.__dict__["outputs"], Stack.__dict__["exports"]

    def deleted(stack) -> bool:
        return str(getattr(stack, "status", "")).startswith("DELETE_COMPLETE")

    undo_outputs = _replace(
        Stack, "outputs", property(lambda self: None if deleted(self) else original_outputs.fget(self))
    )
    undo_exports = _replace(
        Stack, "exports", property(lambda self: [] if deleted(self) else original_exports.fget(self))
    )

    def undo() -> None:
        undo_exports()
        undo_outputs()

    return undo


# ----------------------------------------------------------------------------- custom resources run in process

# The emulator's own URL, set by moto_server before it applies the patches: the handlers' AWS calls go back to it.
# Unset (moto in-process, mock_aws), boto3's calls are moto's anyway.
EMULATOR_URL_ENV = "INFERSTACK_EMULATOR_URL"

# A custom resource's handler as the emulator runs it: (its properties, a boto3 client factory acting as the stack's
# account, "Create" | "Update", its logical id) -> the Data its Lambda would send back.
InProcessHandler = Callable[[dict, Callable, str, str], dict]
# Custom resource type -> its handler, while a patch that runs it is applied (live-values, scaling-handover).
_IN_PROCESS: dict[str, InProcessHandler] = {}
_in_process_undo: list[Undo] = []


def _run_in_process(resource_type: str, handler: InProcessHandler) -> Undo:
    """Run `resource_type`'s handler in the emulator's process on Create and Update, as CloudFormation runs its
    Lambda. One create and one update on moto's CustomModel serve every such type (installed with the first,
    removed with the last): moto has no update for a custom resource at all (its update leaves None as the parsed
    resource), and would create one by invoking its Lambda in Docker (or, patched, not at all:
    custom-resources-without-docker). Custom resources of other types keep what they had on an update: their
    handlers do not run here (the rehearsal reports them as not run)."""
    import os

    import boto3
    from moto.cloudformation import cloudformation_backends
    from moto.cloudformation.custom_model import CustomModel
    from moto.moto_api._internal import mock_random

    def client_for(account_id: str, region_name: str):
        def client(service: str):
            return boto3.client(
                service,
                region_name=region_name,
                endpoint_url=os.environ.get(EMULATOR_URL_ENV),
                aws_access_key_id=account_id,
                aws_secret_access_key="in-process",
            )

        return client

    if not _IN_PROCESS:
        if "update_from_cloudformation_json" in CustomModel.__dict__:
            raise RuntimeError(
                "moto's CustomModel updates itself now: re-check the live-values and scaling-handover patches"
            )
        original_create = CustomModel.__dict__["create_from_cloudformation_json"].__func__

        def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
            kind = kwargs.get("ResourceType")
            if kind not in _IN_PROCESS:
                return original_create(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs)
            resource = cls(region_name, str(mock_random.uuid4()), kwargs["LogicalId"], resource_name)
            resource.in_process_type = kind
            cloudformation_backends[account_id][region_name].get_stack(kwargs["StackId"]).add_custom_resource(resource)
            resource.set_data(
                _IN_PROCESS[kind](
                    cloudformation_json["Properties"],
                    client_for(account_id, region_name),
                    "Create",
                    kwargs["LogicalId"],
                )
            )
            return resource

        def update_from_cloudformation_json(
            cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name
        ):
            kind = getattr(original_resource, "in_process_type", None)
            if kind in _IN_PROCESS:
                original_resource.set_data(
                    _IN_PROCESS[kind](
                        cloudformation_json["Properties"],
                        client_for(account_id, region_name),
                        "Update",
                        original_resource.logical_id,
                    )
                )
            return original_resource

        undo_create = _replace(
            CustomModel, "create_from_cloudformation_json", classmethod(create_from_cloudformation_json)
        )
        CustomModel.update_from_cloudformation_json = classmethod(update_from_cloudformation_json)

        def uninstall() -> None:
            delattr(CustomModel, "update_from_cloudformation_json")
            undo_create()

        _in_process_undo.append(uninstall)
    _IN_PROCESS[resource_type] = handler

    def undo() -> None:
        del _IN_PROCESS[resource_type]
        if not _IN_PROCESS:
            _in_process_undo.pop()()

    return undo


# ----------------------------------------------------------------------------- live-values


def _live_values() -> Undo:
    """A Custom::LiveValue (inferstack.constructs.live_values) reads, at deploy time, the values an update must
    keep (production rule weights, a window's range, copy counts). moto would invoke its Lambda in Docker (or,
    patched, not at all: custom-resources-without-docker) and the reading resources would get no value. Run the
    reader itself in the emulator's process on Create and Update: the Lambda's own `read`, from the same source
    (inferstack.constructs.live_values_handler), with boto3 clients on this emulator, as the stack's account.
    (What reads a reader that was read again is updated by the patch new-values-update-readers.)"""
    from inferstack.constructs.live_values_handler import load

    read = load()
    return _run_in_process(LIVE_VALUE, lambda properties, client, _request, _logical: read(properties["Read"], client))


# ----------------------------------------------------------------------------- scaling-handover

# (logical id, request type, what the handler did) of every scaling handover run, while the patch is applied
SCALING_HANDOVERS: list[tuple[str, str, str]] = []


def _scaling_handover() -> Undo:
    """A Custom::ScalingHandover (inferstack.constructs.scaling_handover) deregisters an autoscaled variant's
    scalable target before CloudFormation updates the Endpoint to another instance type, and registers it again
    after. moto would invoke its Lambda in Docker (or, patched, not at all: custom-resources-without-docker), and
    the Endpoint's update then meets the registered target (rule autoscaled-variant-update refuses it, as
    UpdateEndpoint is refused on AWS). Run the handover itself in the emulator's process on Create and Update: the
    Lambda's own `hand_over`, from the same source (inferstack.constructs.scaling_handover_handler), with boto3
    clients on this emulator, as the stack's account; each run is recorded and logged."""
    import sys

    from inferstack.constructs.scaling_handover_handler import load

    hand_over = load()
    SCALING_HANDOVERS.clear()

    def run(properties: dict, client: Callable, request: str, logical_id: str) -> dict:
        data = hand_over(properties, client, request)
        SCALING_HANDOVERS.append((logical_id, request, data["Action"]))
        print(
            f"moto patch scaling-handover: {request} {logical_id} ({properties['Target']['ResourceId']}): "
            f"{data['Action']}",
            file=sys.stderr,
            flush=True,
        )
        return data

    return _run_in_process(SCALING_HANDOVER, run)


# ----------------------------------------------------------------------------- task-definition-properties

# What moto's CloudFormation leaves out when it registers an AWS::ECS::TaskDefinition: template key ->
# register_task_definition argument.
TASK_DEFINITION_PROPERTIES = {
    "NetworkMode": "network_mode",
    "RequiresCompatibilities": "requires_compatibilities",
    "Cpu": "cpu",
    "TaskRoleArn": "task_role_arn",
    "ExecutionRoleArn": "execution_role_arn",
    "RuntimePlatform": "runtime_platform",
    "EphemeralStorage": "ephemeral_storage",
    "PidMode": "pid_mode",
    "IpcMode": "ipc_mode",
}


def _task_definition_properties() -> Undo:
    """moto 5.2.5's CloudFormation registers an AWS::ECS::TaskDefinition with its family, containers, volumes and
    memory only: NetworkMode, RequiresCompatibilities, Cpu, TaskRoleArn, ExecutionRoleArn and RuntimePlatform are
    dropped, so a Fargate task definition becomes an EC2 one in bridge mode and RunTask gives its tasks no network
    interface (no private IP a worker could reach its master at). Register it, on create and when an update
    registers a revision, with every property the template gives."""
    import threading

    from moto.core.utils import pascal_to_camelcase, remap_nested_keys
    from moto.ecs.models import EC2ContainerServiceBackend, TaskDefinition

    pending = threading.local()  # the template's other properties while CloudFormation registers the definition
    original_register = EC2ContainerServiceBackend.__dict__["register_task_definition"]
    original_create = TaskDefinition.__dict__["create_from_cloudformation_json"].__func__
    original_update = TaskDefinition.__dict__["update_from_cloudformation_json"].__func__

    def register_task_definition(self, *args, **kwargs):
        for key, value in (getattr(pending, "arguments", None) or {}).items():
            if kwargs.get(key) is None:
                kwargs[key] = value
        return original_register(self, *args, **kwargs)

    def with_properties(call):
        def wrapped(cls, *args, **kwargs):
            cloudformation_json = kwargs.get("cloudformation_json") or next(a for a in args if isinstance(a, dict))
            properties = cloudformation_json.get("Properties") or {}
            pending.arguments = {
                argument: remap_nested_keys(properties[key], pascal_to_camelcase)
                if isinstance(properties[key], (dict, list))
                else properties[key]
                for key, argument in TASK_DEFINITION_PROPERTIES.items()
                if key in properties
            }
            try:
                return call(cls, *args, **kwargs)
            finally:
                pending.arguments = None

        return classmethod(wrapped)

    undo = [
        _replace(EC2ContainerServiceBackend, "register_task_definition", register_task_definition),
        _replace(TaskDefinition, "create_from_cloudformation_json", with_properties(original_create)),
        _replace(TaskDefinition, "update_from_cloudformation_json", with_properties(original_update)),
    ]

    def undo_all() -> None:
        for restore in reversed(undo):
            restore()

    return undo_all


# ----------------------------------------------------------------------------- fargate-task-memory


def _fargate_task_memory() -> Undo:
    """RunTask of a Fargate task definition whose containers set no memory of their own (Fargate sizes the task:
    the template's task-level Memory, as CDK writes it) fails in moto 5.2.5 with a 500: TypeError adding None in
    EC2ContainerServiceBackend._calculate_task_resource_requirements, which sums container memory for placing EC2
    tasks. A container without its own memory counts as 0 there (it shares the task's)."""
    from moto.ecs.models import EC2ContainerServiceBackend

    original = EC2ContainerServiceBackend.__dict__["_calculate_task_resource_requirements"].__func__
    keys = ("Memory", "MemoryReservation", "memory", "memoryReservation")

    def calculate(task_definition):
        definitions = task_definition.container_definitions
        if all(any(d.get(k) is not None for k in keys) for d in definitions):
            return original(task_definition)
        sized = copy.copy(task_definition)
        sized.container_definitions = [
            d if any(d.get(k) is not None for k in keys) else {**d, "memory": 0} for d in definitions
        ]
        return original(sized)

    return _replace(EC2ContainerServiceBackend, "_calculate_task_resource_requirements", staticmethod(calculate))


# ----------------------------------------------------------------------------- ecs-agent-state-changes

ECS_TASK_STATES = (
    "PROVISIONING",
    "PENDING",
    "ACTIVATING",
    "RUNNING",
    "DEACTIVATING",
    "STOPPING",
    "DEPROVISIONING",
    "STOPPED",
)


def _ecs_agent_state_changes() -> Undo:
    """moto 5.2.5 implements none of the calls the ECS agent makes to report what a task's containers did
    (SubmitTaskStateChange is answered 404): a task it runs stays as moto set it, and its container's exit code
    is 0 whatever happened. A stand-in for Fargate's container runtime (rehearsal/fargate_standin.py)
    reports, as the agent does, how each task it ran ended. SubmitTaskStateChange sets the task's lastStatus
    (STOPPED also sets desiredStatus, stoppedReason and stopCode EssentialContainerExited) and, for each container
    it names, its lastStatus, exitCode and reason."""
    from moto.core.responses import ActionResult
    from moto.ecs.exceptions import InvalidParameterException
    from moto.ecs.responses import EC2ContainerServiceResponse

    def submit_task_state_change(self) -> ActionResult:
        status = self._get_param("status")
        if status not in ECS_TASK_STATES:
            raise InvalidParameterException(f"status {status!r} is not a task state")
        cluster = self.ecs_backend._get_cluster(self._get_param("cluster", "default"))
        wanted = self._get_param("task") or ""
        tasks = [
            t
            for arn, t in self.ecs_backend.tasks.get(cluster.name, {}).items()
            if wanted in (arn, arn.rsplit("/", 1)[-1])
        ]
        if not tasks:
            raise InvalidParameterException(f"task {wanted} not found in cluster {cluster.name}")
        (task,) = tasks
        task.last_status = status
        if status == "STOPPED":
            task.desired_status = "STOPPED"
            task.stopped_reason = self._get_param("reason") or task.stopped_reason
            task.stop_code = "EssentialContainerExited"
        for change in self._get_param("containers") or []:
            for container in task.containers:
                if container.name == change.get("containerName"):
                    container.last_status = change.get("status", container.last_status)
                    if change.get("exitCode") is not None:
                        container.exitCode = change["exitCode"]
                    container.reason = change.get("reason")
        return ActionResult({"acknowledgment": "ACK"})

    if "submit_task_state_change" in EC2ContainerServiceResponse.__dict__:
        raise RuntimeError("moto implements SubmitTaskStateChange now: re-check the ecs-agent-state-changes defect")
    EC2ContainerServiceResponse.submit_task_state_change = submit_task_state_change
    return lambda: delattr(EC2ContainerServiceResponse, "submit_task_state_change")


# ----------------------------------------------------------------------------- sagemaker-replacements-in-cleanup

_cleanup = threading.local()  # .pending: deletions deferred to the end of the stack update in progress, if any


def _sagemaker_replacements_in_cleanup() -> Undo:
    """CloudFormation replaces an AWS::SageMaker::Model or EndpointConfig whose properties change (every property
    is create-only): it "creates the replacement resource first, changes references from other dependent resources
    to point to the replacement resource, and then deletes the old resource" ("Understand update behaviors of stack
    resources",
    https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-update-behaviors.html),
    in the cleanup phase after every update (UPDATE_COMPLETE_CLEANUP_IN_PROGRESS,
    https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-monitor-stack.html), so
    the Endpoint names an existing config throughout. moto's update handlers delete the old one first, at once:
    until the Endpoint moves, it names a config that is gone, and whatever reads the endpoint's current config
    during the update (the scaling handover before UpdateEndpoint) fails with `Could not find endpoint
    configuration`. Create the new one and delete the old one once the stack's update has done everything else.
    (Rule removals-in-cleanup defers what a template no longer has; a replacement keeps its logical id, so that
    rule never sees the old physical resource.) When the update fails, the old ones are kept."""
    from moto.cloudformation.parsing import ResourceMap
    from moto.sagemaker.models import FakeEndpointConfig, Model

    arns = {Model: lambda resource: resource.arn, FakeEndpointConfig: lambda resource: resource.endpoint_config_arn}

    def deferred(model: type):
        original = model.__dict__["update_from_cloudformation_json"].__func__

        def update_from_cloudformation_json(
            cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name
        ):
            pending = getattr(_cleanup, "pending", None)
            if pending is None:  # not inside a stack update: moto's own
                return original(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name)
            new = cls.create_from_cloudformation_json(new_resource_name, cloudformation_json, account_id, region_name)
            old = arns[model](original_resource)
            pending.append(
                lambda: cls.delete_from_cloudformation_json(old, cloudformation_json, account_id, region_name)
            )
            return new

        return classmethod(update_from_cloudformation_json)

    original_update = ResourceMap.__dict__["update"]

    def update(self, template: dict, parameters: dict | None = None) -> None:
        outer = getattr(_cleanup, "pending", None)
        _cleanup.pending = []
        try:
            original_update(self, template, parameters)
            for delete in _cleanup.pending:
                delete()
        finally:
            _cleanup.pending = outer

    undo = [_replace(model, "update_from_cloudformation_json", deferred(model)) for model in arns]
    undo.append(_replace(ResourceMap, "update", update))

    def undo_all() -> None:
        for restore in reversed(undo):
            restore()

    return undo_all


# ----------------------------------------------------------------------------- updates-in-dependency-order

SUB_REFERENCE = re.compile(r"\$\{([^!}][^}.]*)")  # ${Name} or ${Name.Attribute} in Fn::Sub; ${!Literal} is none


def _references(resource: dict) -> set[str]:
    """The names `resource` depends on (logical ids among them): DependsOn, Ref, Fn::GetAtt, Fn::Sub."""
    depends = resource.get("DependsOn") or []
    found = set([depends] if isinstance(depends, str) else depends)

    def walk(value) -> None:
        if isinstance(value, dict):
            ref, get_att = value.get("Ref"), value.get("Fn::GetAtt")
            if isinstance(ref, str):
                found.add(ref)
            if isinstance(get_att, list) and get_att:
                found.add(get_att[0])
            elif isinstance(get_att, str):
                found.add(get_att.split(".", 1)[0])
            sub = value.get("Fn::Sub")
            text = sub[0] if isinstance(sub, list) and sub else sub
            if isinstance(text, str):
                found.update(SUB_REFERENCE.findall(text))
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(resource.get("Properties") or {})
    return found


def _updates_in_dependency_order() -> Undo:
    """CloudFormation updates a resource after what it depends on: "if the properties of resource A use a !Ref to
    resource B [...] Resource B is updated before resource A", and the same for !GetAtt, !Sub and DependsOn
    ("DependsOn attribute",
    https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-attribute-dependson.html). moto updates
    a stack's changed resources in template order, retrying only those that raise: a resource is updated before one
    it reads (and reads its old value) or before one it must follow (the scaling handover's restore, which depends
    on the Endpoint, runs first, finds the old instance type and deregisters the target instead of registering it
    again). Order the updates so, keeping moto's order among resources that do not depend on each other. Apply it
    after new-values-update-readers, so that what that patch adds is ordered too."""
    from moto.cloudformation.parsing import ResourceMap

    original = ResourceMap.__dict__["build_resource_diff"]

    def build_resource_diff(self, other_template, parameters=None):
        actions = original(self, other_template, parameters)
        new = other_template["Resources"]
        pending, ordered = list(actions["Modify"]), []
        references = {name: _references(new[name]) - {name} for name in pending}
        while pending:
            waiting = set(pending)
            ready = [name for name in pending if not references[name] & waiting]
            ready = ready or pending  # a cycle CloudFormation would refuse: moto's order, as before
            ordered += ready
            pending = [name for name in pending if name not in ready]
        actions["Modify"] = ordered
        return actions

    return _replace(ResourceMap, "build_resource_diff", build_resource_diff)


# ----------------------------------------------------------------------------- deregister-keeps-policies


def _deregister_keeps_policies() -> Undo:
    """On AWS, "deregistering a scalable target deletes the scaling policies and the scheduled actions that are
    associated with it" (DeregisterScalableTarget,
    https://docs.aws.amazon.com/autoscaling/application/APIReference/API_DeregisterScalableTarget.html). moto's
    deletes the target only: its policies and scheduled actions stay, so whoever registers it again (the scaling
    handover after an instance-type change) seems to have put them back whether it did or not. Delete them with the
    target."""
    from moto.applicationautoscaling.models import ApplicationAutoscalingBackend

    original = ApplicationAutoscalingBackend.__dict__["deregister_scalable_target"]

    def deregister_scalable_target(self, namespace: str, r_id: str, dimension: str) -> None:
        original(self, namespace, r_id, dimension)  # raises when there is no such target, as AWS
        for policy in [
            p
            for p in self.policies.values()
            if (p.service_namespace, p.resource_id, p.scalable_dimension) == (namespace, r_id, dimension)
        ]:
            self.delete_scaling_policy(policy.policy_name, namespace, r_id, dimension)
        for action in [
            a
            for a in self.scheduled_actions
            if (a.service_namespace, a.resource_id, a.scalable_dimension) == (namespace, r_id, dimension)
        ]:
            self.delete_scheduled_action(namespace, action.scheduled_action_name, r_id, dimension)

    return _replace(ApplicationAutoscalingBackend, "deregister_scalable_target", deregister_scalable_target)


PATCHES: tuple[Patch, ...] = (
    Patch(
        "account-from-access-key",
        "moto answers every unknown access key as its default account 123456789012 (MOTO_ACCOUNT_ID would "
        "force one account for every caller); the CDK CLI refuses to deploy a stack of 111111111111 then",
        _account_from_access_key,
    ),
    Patch(
        "kms-key-cloudformation-tags",
        "AWS::KMS::Key with Tags fails in moto's CloudFormation (KeyError: 'TagKey' in "
        "kms Key.create_from_cloudformation_json)",
        _kms_key_cloudformation_tags,
    ),
    Patch(
        "change-set-outputs-and-exports",
        "a stack created through a change set (how the CDK CLI deploys) gets no outputs and registers no "
        "exports, and cannot import other stacks' exports: CDKToolkit has no BootstrapVersion output, "
        "serving stacks fail with `No export named ... found`",
        _change_set_outputs_and_exports,
    ),
    Patch(
        "change-sets-by-stack",
        "Describe-, Delete- and ExecuteChangeSet by name (+ stack name, as the CDK CLI calls them) find the newest "
        "change set of that name of any stack: a second `cdk deploy` waits for ever on another stack's change set",
        _change_sets_by_stack,
    ),
    Patch(
        "ssm-parameter-previous-value",
        "an update passing an SSM-typed parameter with UsePreviousValue (how the CDK CLI updates a stack with the "
        "bootstrap version and the Neuron AMI parameters) reuses the resolved value as the parameter's name: "
        "ExecuteChangeSet fails with a 500 (AttributeError in parse_ssm_parameter)",
        _ssm_parameter_previous_value,
    ),
    Patch(
        "template-url-on-loopback",
        "a TemplateURL on the emulator's own loopback endpoint (http://127.0.0.1:<port>/<bucket>/<key>, what "
        'the CLI passes with AWS_ENDPOINT_URL) is read as bucket "127": NoSuchBucket at CreateChangeSet',
        _template_url_on_loopback,
    ),
    Patch(
        "custom-resources-without-docker",
        "a custom resource waits for its provider Lambda, which moto runs only in Docker: without a Docker "
        "daemon the stack stays CREATE_IN_PROGRESS forever; marked created without running the handler",
        _custom_resources_without_docker,
    ),
    Patch(
        "getatt-of-unmodeled-resource",
        "Fn::GetAtt of a resource type moto does not model (CloudWatch alarms read by SageMaker auto-rollback "
        "and dashboards) fails the stack (`Fn::GetAtt references undefined resource`), and a Ref to one "
        "drops the property; both now read a marked placeholder (`...-unmodeled`)",
        _getatt_of_unmodeled_resource,
    ),
    Patch(
        "target-group-getatt",
        "Fn::GetAtt of an AWS::ElasticLoadBalancingV2::TargetGroup (TargetGroupFullName, read by the request-"
        "count scaling metric and alarms) fails the stack: AttributeError, moto's FakeTargetGroup has no "
        "get_cfn_attribute",
        _target_group_getatt,
    ),
    Patch(
        "listener-forward-config",
        "AWS::ElasticLoadBalancingV2::Listener with a weighted default action (forward with ForwardConfig, as "
        "ECS blue/green needs) fails the stack: KeyError: 'TargetGroupArn' in moto's "
        "ELBv2Backend.convert_and_validate_properties",
        _listener_forward_config,
    ),
    Patch(
        "ecs-service-load-balancers",
        "AWS::ECS::Service's LoadBalancers are dropped (moto's handler passes none to CreateService): the "
        "service names no target group, alternate target group or production listener rule",
        _ecs_service_load_balancers,
    ),
    Patch(
        "sagemaker-endpoint-name",
        "AWS::SageMaker::Endpoint's EndpointName property is ignored (a generated name is used), so the stack's "
        "EndpointName output names no endpoint: DescribeEndpoint / InvokeEndpoint fail",
        _sagemaker_endpoint_name,
    ),
    Patch(
        "route-table-delete",
        "AWS::EC2::RouteTable is never deleted with its stack (moto's RouteTable has no delete), so deleting the "
        "VPC fails with `The vpc ... has dependencies and cannot be deleted`: `cdk destroy` of the foundation fails",
        _route_table_delete,
    ),
    Patch(
        "deletes-without-a-handler",
        "AWS::EC2::NatGateway, AWS::ECS::Cluster, AWS::ECS::TaskDefinition, "
        "AWS::ElasticLoadBalancingV2::TargetGroup and ListenerRule have no CloudFormation delete in moto: they "
        "outlive their deleted stack, and a rule an update removes stays on its listener",
        _deletes_without_a_handler,
    ),
    Patch(
        "update-removes-unmodeled",
        "a stack update removing a resource of a type moto's CloudFormation does not model, which an earlier "
        "update changed, fails with a 500 (AttributeError: 'NoneType' object has no attribute 'delete')",
        _update_removes_unmodeled,
    ),
    Patch(
        "sagemaker-variant-without-model",
        "an AWS::SageMaker::EndpointConfig whose variant names no model (an endpoint for inference components) "
        "fails in moto's CreateEndpointConfig (KeyError: 'ModelName')",
        _sagemaker_variant_without_model,
    ),
    Patch(
        "deleted-stack-outputs",
        "DescribeStacks of a deleted stack (what `cdk destroy` polls) resolves its exported outputs again and so "
        "creates again the resources they reference: after the destroy, the shared endpoint exists again",
        _deleted_stack_outputs,
    ),
    Patch(
        "live-values",
        "Custom::LiveValue (the deploy-time reader of live weights, ranges and copy counts) needs its Lambda, which "
        "moto runs only in Docker: the reader's own read function runs in the emulator's process on Create and "
        "Update",
        _live_values,
    ),
    Patch(
        "scaling-handover",
        "Custom::ScalingHandover (deregisters an autoscaled variant's scalable target before an instance-type change "
        "and registers it again after) needs its Lambda, which moto runs only in Docker: the handover's own "
        "function runs in the emulator's process on Create and Update",
        _scaling_handover,
    ),
    Patch(
        "task-definition-update",
        "an updated AWS::ECS::TaskDefinition registers its revision with the template's PascalCase container "
        "definitions (Image, not image): the revision a service runs after an update names no image",
        _task_definition_update,
    ),
    Patch(
        "new-values-update-readers",
        "an update that replaces a SageMaker Model or EndpointConfig or registers a task definition revision, or "
        "re-reads a live value, leaves what references it untouched (moto updates only resources whose template "
        "text changed): the component, endpoint config and ECS service keep naming the old ones",
        _new_values_update_readers,
    ),
    Patch(
        "sagemaker-replacements-in-cleanup",
        "an update replacing a SageMaker Model or EndpointConfig deletes the old one at once, not in the cleanup "
        "phase after every update: until the Endpoint moves, it names a config that is gone (DescribeEndpointConfig "
        "of it fails during the update)",
        _sagemaker_replacements_in_cleanup,
    ),
    Patch(
        "updates-in-dependency-order",
        "an update changes a stack's resources in template order (retrying what raises), not after what each "
        "depends on (DependsOn, Ref, Fn::GetAtt, Fn::Sub): a resource reads the old value of one updated after it, "
        "and the scaling handover's restore runs before the Endpoint it follows",
        _updates_in_dependency_order,
    ),
    Patch(
        "deregister-keeps-policies",
        "DeregisterScalableTarget leaves the target's scaling policies and scheduled actions in place (AWS deletes "
        "them with it): whoever registers the target again seems to have restored them",
        _deregister_keeps_policies,
    ),
    Patch(
        "sagemaker-inference-components",
        "AWS::SageMaker::InferenceComponent is not modeled (skipped by CloudFormation) and the inference-component "
        "API is not implemented: a fleet member's stack gets no component, promote cannot read what it runs; "
        "modeled as created on an existing endpoint, variant and model, described, listed and deleted",
        _sagemaker_inference_components,
    ),
    Patch(
        "task-definition-properties",
        "AWS::ECS::TaskDefinition is registered without its NetworkMode, RequiresCompatibilities, Cpu, TaskRoleArn, "
        "ExecutionRoleArn and RuntimePlatform: a Fargate task definition becomes an EC2 one in bridge mode, and "
        "RunTask gives its tasks no network interface",
        _task_definition_properties,
    ),
    Patch(
        "fargate-task-memory",
        "RunTask of a Fargate task definition whose containers set no memory of their own (the task's Memory "
        "sizes them, as CDK writes it) fails with a 500 (TypeError in _calculate_task_resource_requirements)",
        _fargate_task_memory,
    ),
    Patch(
        "ecs-agent-state-changes",
        "SubmitTaskStateChange (how the ECS agent reports a task's end: its containers' exit codes and reasons) "
        "is not implemented: a task moto runs never stops with the exit code its container had",
        _ecs_agent_state_changes,
    ),
)
# Rules AWS enforces and moto does not (rehearsal/aws_rules.py) are applied after the workarounds.
BY_NAME = {p.name: p for p in (*PATCHES, *RULES)}


def apply_all(names: list[str] | None = None) -> list[Undo]:
    """Apply the named patches (default: all), in order; returns their undo functions."""
    import moto

    if moto.__version__ != MOTO_VERSION:
        raise RuntimeError(
            f"moto {moto.__version__}: these patches were written for moto {MOTO_VERSION}; "
            f"re-check each defect (tests/rehearsal/test_cli_deploy.py) and update MOTO_VERSION"
        )
    return [BY_NAME[name].apply() for name in (names or list(BY_NAME))]


@contextlib.contextmanager
def applied(*names: str) -> Iterator[None]:
    undo = apply_all(list(names) or None)
    try:
        yield
    finally:
        for restore in reversed(undo):
            restore()
