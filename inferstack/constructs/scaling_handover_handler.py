"""The source of the Custom::ScalingHandover handler (inferstack.constructs.scaling_handover), apart from the
construct so that what runs it elsewhere (tests, the emulator) loads no CDK: `load()` gives its
`hand_over(request, client, request_type)`, the function the Lambda runs on Create and Update."""

from __future__ import annotations

from collections.abc import Callable

# Inline (under Lambda's 4 KB ZipFile limit). One function for both resources of a handover, one before the
# Endpoint and one after it: the live endpoint decides what to do, so the order CloudFormation runs them in (an
# update, or the rollback of one) does not matter.
# - the live variant runs another instance type than the one requested: an UpdateEndpoint is coming that AWS
#   refuses while the variant is a registered scalable target, so deregister it (its policies and scheduled
#   actions go with it);
# - it runs the requested type and the target is missing: register it again, with the range it had when the
#   resource before the Endpoint released it (that one answers it; otherwise the template's range), and the
#   template's scheduled actions and policies. Not on the Create of a new stack, where CloudFormation's own
#   ScalableTarget, created after, registers it (unless the resource before the Endpoint just released it).
# Delete does nothing: deleting the endpoint deregisters its targets, and the ScalableTarget is CloudFormation's.
# CloudFormation passes a custom resource's numbers and booleans as strings: `typed` restores the API's types
# (and a target's Tags, a list of Key/Value in the template, are a map in the API).
HANDLER = """
import json, urllib.request
import boto3

INTS = ("MinCapacity", "MaxCapacity", "ScaleInCooldown", "ScaleOutCooldown")

def typed(value, key=""):
    if isinstance(value, dict):
        return {k: typed(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    if key in INTS:
        return int(value)
    if key == "TargetValue":
        return float(value)
    if key == "DisableScaleIn":
        return str(value).lower() == "true"
    return value

def live_instance_type(sagemaker, r):
    try:
        endpoint = sagemaker.describe_endpoint(EndpointName=r["EndpointName"])
    except sagemaker.exceptions.ClientError as exc:
        if "Could not find" in str(exc):
            return None
        raise
    config = sagemaker.describe_endpoint_config(EndpointConfigName=endpoint["EndpointConfigName"])
    return next((v.get("InstanceType") for v in config["ProductionVariants"]
                 if v["VariantName"] == r["VariantName"]), None)

def hand_over(request, client=boto3.client, request_type="Update"):
    r = typed(request)
    target = r["Target"]
    key = {k: target[k] for k in ("ServiceNamespace", "ResourceId", "ScalableDimension")}
    scaling = client("application-autoscaling")
    live = live_instance_type(client("sagemaker"), r)
    found = scaling.describe_scalable_targets(
        ServiceNamespace=key["ServiceNamespace"], ResourceIds=[key["ResourceId"]],
        ScalableDimension=key["ScalableDimension"])["ScalableTargets"]
    low, high = (found[0] if found else target)["MinCapacity"], (found[0] if found else target)["MaxCapacity"]
    answer = {"Released": "false", "MinCapacity": str(low), "MaxCapacity": str(high)}
    if live is None:
        return {**answer, "Action": "no endpoint"}
    if live != r["InstanceType"]:
        if found:
            scaling.deregister_scalable_target(**key)
        return {**answer, "Action": "released" if found else "none registered", "Released": str(bool(found)).lower()}
    released = r.get("Released") == "true"
    if found or (request_type == "Create" and not released):
        return {**answer, "Action": "kept"}
    if released:  # the range it had when the release took it
        low, high = r["ReleasedRange"]
    extra = {k: target[k] for k in ("RoleARN", "SuspendedState") if k in target}
    if target.get("Tags"):
        extra["Tags"] = {t["Key"]: t["Value"] for t in target["Tags"]}
    scaling.register_scalable_target(**key, MinCapacity=int(low), MaxCapacity=int(high), **extra)
    for action in target.get("ScheduledActions", []):
        scaling.put_scheduled_action(**key, **action)
    for policy in r["Policies"]:
        scaling.put_scaling_policy(**key, **policy)
    return {**answer, "Action": "restored", "MinCapacity": str(low), "MaxCapacity": str(high)}

def handler(event, context):
    status, reason, data = "SUCCESS", "", {}
    try:
        if event["RequestType"] != "Delete":
            data = hand_over(event["ResourceProperties"], request_type=event["RequestType"])
            print(json.dumps({"LogicalResourceId": event["LogicalResourceId"], "HandOver": data}))
    except Exception as exc:
        status, reason = "FAILED", f"{type(exc).__name__}: {exc}"[:500]
    body = json.dumps({"Status": status, "Reason": reason or "see " + context.log_stream_name, "Data": data,
                       "PhysicalResourceId": event.get("PhysicalResourceId") or event["LogicalResourceId"],
                       "StackId": event["StackId"], "RequestId": event["RequestId"],
                       "LogicalResourceId": event["LogicalResourceId"]})
    request = urllib.request.Request(event["ResponseURL"], data=body.encode(), method="PUT",
                                     headers={"Content-Type": ""})
    urllib.request.urlopen(request, timeout=30)
"""


def load() -> Callable[..., dict]:
    """The handler's `hand_over(request, client=boto3.client, request_type="Update")`, executed from the same
    source the Lambda runs."""
    namespace: dict = {}
    exec(compile(HANDLER, "scaling_handover_handler.HANDLER", "exec"), namespace)  # our own source
    return namespace["hand_over"]
