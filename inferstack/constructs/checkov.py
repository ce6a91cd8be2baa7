"""checkov acknowledgements: a check skipped on one resource through its CloudFormation metadata
(`Metadata.checkov.skip`), one check id at a time, each with a reason a reviewer can accept. The scan
itself runs on the synthesized templates (tests/constructs/test_checkov.py)."""

from __future__ import annotations

import re

import aws_cdk as cdk
from constructs import IConstruct

CHECK_ID = re.compile(r"^CKV2?_[A-Z0-9]+_\d+$")
MIN_REASON = 20

# CDK's custom-resource provider handlers (one per stack and kind, code and role written by the CDK):
# CloudFormation invokes them and waits for the answer during a deploy, and they call only AWS APIs.
PROVIDER_HANDLER_SKIPS = {
    "CKV_AWS_116": "CloudFormation invokes this CDK provider and waits for its answer; a failure fails the "
    "stack operation and shows in its events, so there is no asynchronous event to dead-letter",
    "CKV_AWS_117": "this CDK provider calls only AWS APIs on this stack's own resources during a deploy; in the "
    "VPC it would need NAT or endpoints for nothing it reaches there",
    "CKV_AWS_115": "this CDK provider runs only during this stack's deploys, once per custom resource; reserving "
    "concurrency would take it from the account's shared pool without bounding anything",
}


def skip(construct: IConstruct, check_id: str, reason: str) -> None:
    """Skip one checkov check (e.g. "CKV_AWS_18") on `construct`'s CloudFormation resource (the construct
    itself, or its default child), keeping metadata already there."""
    if not CHECK_ID.match(check_id):
        raise ValueError(f"pass one checkov check id (e.g. 'CKV_AWS_18'), got {check_id!r}")
    if len(reason.strip()) < MIN_REASON:
        raise ValueError(f"skipping {check_id} needs a real reason, got {reason!r}")
    resource = _cfn_resource(construct)
    metadata = resource.get_metadata("checkov") or {}
    skips = list(metadata.get("skip", []))
    if any(entry["id"] == check_id for entry in skips):
        raise ValueError(f"{check_id} is already skipped on {resource.node.path}")
    skips.append({"id": check_id, "comment": reason.strip()})
    resource.add_metadata("checkov", {**metadata, "skip": skips})


def skip_provider_handler(scope: IConstruct, provider_id: str) -> None:
    """The checks a CDK-owned provider handler (e.g. "Custom::S3AutoDeleteObjectsCustomResourceProvider") in
    `scope`'s stack fails by design; no-op when the stack has no such provider."""
    provider = cdk.Stack.of(scope).node.try_find_child(provider_id)
    handler = provider.node.try_find_child("Handler") if provider else None
    if not isinstance(handler, cdk.CfnResource):
        return
    already = {entry["id"] for entry in (handler.get_metadata("checkov") or {}).get("skip", [])}
    for check_id, reason in PROVIDER_HANDLER_SKIPS.items():
        if check_id not in already:  # one provider serves every construct of the stack that needs it
            skip(handler, check_id, reason)


def _cfn_resource(construct: IConstruct) -> cdk.CfnResource:
    if isinstance(construct, cdk.CfnResource):
        return construct
    child = construct.node.default_child
    if not isinstance(child, cdk.CfnResource):
        raise TypeError(f"{construct.node.path} has no CloudFormation resource of its own to carry a checkov skip")
    return child
