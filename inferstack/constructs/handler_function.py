"""The Lambda function behind one of the project's own custom resources: inline Python (no asset, so the code
is in the template a reviewer diffs), arm64, logging to a log group the stack owns, with the checkov checks
such a function fails by design acknowledged on it with the caller's reasons."""

from __future__ import annotations

from collections.abc import Mapping

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from inferstack.constructs import checkov

RUNTIME = lambda_.Runtime.PYTHON_3_14
# Lambda's limit on inline code (CloudFormation's ZipFile).
MAX_INLINE_CHARS = 4096
# A synchronous custom-resource handler fails the stack operation itself when it fails: nothing to dead-letter.
NO_DEAD_LETTER = "CKV_AWS_116"
NO_RESERVED_CONCURRENCY = "CKV_AWS_115"
OUTSIDE_VPC = "CKV_AWS_117"


def handler_function(
    scope: Construct,
    construct_id: str,
    *,
    code: str,
    role: iam.IRole,
    timeout: cdk.Duration,
    log_group: logs.ILogGroup,
    description: str,
    skips: Mapping[str, str],
) -> lambda_.Function:
    """`skips`: checkov check id -> why it does not apply to this function (the three above, at least)."""
    if len(code) > MAX_INLINE_CHARS:
        raise ValueError(f"{construct_id}: inline handler is {len(code)} characters, Lambda takes {MAX_INLINE_CHARS}")
    function = lambda_.Function(
        scope,
        construct_id,
        runtime=RUNTIME,
        architecture=lambda_.Architecture.ARM_64,
        handler="index.handler",
        code=lambda_.Code.from_inline(code),
        role=role,
        timeout=timeout,
        memory_size=128,
        log_group=log_group,
        description=description,
    )
    resource = function.node.default_child
    assert isinstance(resource, cdk.CfnResource)
    # lambda.Function adds a DependsOn on its role that the Role GetAtt already implies.
    resource.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3005"]}})
    for check_id, reason in skips.items():
        checkov.skip(function, check_id, reason)
    return function
