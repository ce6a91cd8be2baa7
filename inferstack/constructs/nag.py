"""cdk-nag (v3) wiring: the AwsSolutions pack runs as a CDK policy-validation plugin, so any finding
that is not acknowledged fails `cdk synth` (app.py overrides the CLI, which would only report it).
Acknowledgements go on the smallest construct, one rule id at a time, each with a reason a reviewer can accept."""

from __future__ import annotations

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct

PACK = "AwsSolutions"


def add_checks(app: cdk.App) -> None:
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))


def acknowledge(construct: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge one AwsSolutions rule (e.g. "IAM4", or "IAM5[Resource::*]") on `construct`."""
    if not rule or rule.startswith(PACK):
        raise ValueError(f"pass the bare rule id (e.g. 'IAM5'), got {rule!r}")
    if len(reason.strip()) < 20:
        raise ValueError(f"acknowledging {rule} needs a real reason, got {reason!r}")
    cdk.Validations.of(construct).acknowledge(cdk.Acknowledgment(id=f"{PACK}::{PACK}-{rule}", reason=reason))


def rendered(stack: cdk.Stack, value: str) -> str:
    """`value` (an ARN) as it renders in the template, which is how cdk-nag names an IAM5 finding's resource."""
    resolved = stack.resolve(value)
    if not isinstance(resolved, str):  # a partition CDK cannot name at synth would render as a token
        raise ValueError(f"expected a literal ARN for the cdk-nag acknowledgement, got {resolved}")
    return resolved
