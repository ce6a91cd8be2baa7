"""The source of the Custom::LiveValue handler (inferstack.constructs.live_values), apart from the construct so
that what runs it elsewhere (the emulator's patch in rehearsal/, tests) loads no CDK: `load()`
gives its `read(request, client)`, the function the Lambda runs on Create and Update."""

from __future__ import annotations

from collections.abc import Callable

# Inline (under Lambda's 4 KB ZipFile limit). Create and Update read; Delete does nothing (the reader owns
# nothing). `read(request, client)` is what the emulator's patch runs too (rehearsal).
HANDLER = """
import json, urllib.request
import boto3

def forward_weights(r, client):
    groups = r["TargetGroupArns"]
    for listener in client("elbv2").describe_listeners(LoadBalancerArn=r["LoadBalancerArn"])["Listeners"]:
        if int(listener["Port"]) != int(r["Port"]):
            continue
        rules, page = [], {"NextMarker": None}
        while "NextMarker" in page:
            marker = {"Marker": page["NextMarker"]} if page["NextMarker"] else {}
            page = client("elbv2").describe_rules(ListenerArn=listener["ListenerArn"], **marker)
            rules += page["Rules"]
        # ECS moves the production rule's weights, never the listener's default action: rules first.
        for rule in sorted(rules, key=lambda rule: bool(rule.get("IsDefault"))):
            for action in rule.get("Actions", []):
                live = {g["TargetGroupArn"]: int(g.get("Weight", 1))
                        for g in (action.get("ForwardConfig") or {}).get("TargetGroups") or []}
                if set(live) == set(groups):
                    return {"Primary": live[groups[0]], "Alternate": live[groups[1]], "Source": rule["RuleArn"]}
    return {"Primary": int(r["Planned"][0]), "Alternate": int(r["Planned"][1]), "Source": "planned"}

def scalable_range(r, client):
    found = client("application-autoscaling").describe_scalable_targets(
        ServiceNamespace=r["ServiceNamespace"], ResourceIds=[r["ResourceId"]],
        ScalableDimension=r["ScalableDimension"])["ScalableTargets"]
    planned = [int(v) for v in r["Planned"]]
    if found:
        live = [found[0]["MinCapacity"], found[0]["MaxCapacity"]]
        if live != planned and live in [[int(v) for v in w] for w in r["Windows"]]:
            return {"Min": live[0], "Max": live[1], "Source": "off-hours window in effect"}
    return {"Min": planned[0], "Max": planned[1], "Source": "planned"}

def copy_count(r, client):
    sagemaker = client("sagemaker")
    try:
        found = sagemaker.describe_inference_component(InferenceComponentName=r["InferenceComponentName"])
    except sagemaker.exceptions.ClientError as exc:
        if "Could not find" not in str(exc):
            raise
        return {"CopyCount": int(r["Planned"]), "Source": "planned"}
    return {"CopyCount": found["RuntimeConfig"]["DesiredCopyCount"], "Source": "live"}

READERS = {"forward-weights": forward_weights, "scalable-range": scalable_range, "copy-count": copy_count}

def read(request, client=boto3.client):
    return READERS[request["Kind"]](request, client)

def handler(event, context):
    status, reason, data = "SUCCESS", "", {}
    try:
        if event["RequestType"] != "Delete":
            data = read(event["ResourceProperties"]["Read"])
            print(json.dumps({"LogicalResourceId": event["LogicalResourceId"], "Read": data}))
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
    """The handler's `read(request, client=boto3.client)`, executed from the same source the Lambda runs."""
    namespace: dict = {}
    exec(compile(HANDLER, "live_values_handler.HANDLER", "exec"), namespace)  # our own source
    return namespace["read"]
