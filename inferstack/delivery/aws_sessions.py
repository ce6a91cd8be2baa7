"""One boto3 session per environment: the environment's `deploy_role_arn` (or a role the caller names)
assumed from the ambient credentials when set (source and target accounts differ), else the ambient credentials themselves
(AWS_PROFILE, environment variables, instance or OIDC role), always in the environment's region."""

from __future__ import annotations

import boto3
import botocore.exceptions

from inferstack.config import Environment

# Read-only errors a user can cause or fix (no credentials, a role they may not assume): one line each.
AWS_ERRORS = (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError)


class SessionError(Exception):
    """Credentials for an environment cannot be obtained."""


def session_for(env_name: str, environment: Environment, *, purpose: str,
                role_arn: str | None = None) -> boto3.Session:
    """`role_arn`: assume this role instead of the environment's deploy_role_arn (the pipeline's smoke role)."""
    role_arn = role_arn or environment.deploy_role_arn
    try:
        ambient = boto3.Session(region_name=environment.region)
    except AWS_ERRORS as exc:
        raise SessionError(f"{env_name}: cannot create an AWS session: {' '.join(str(exc).split())}") from None
    if role_arn is None:
        return ambient
    try:
        credentials = ambient.client("sts").assume_role(
            RoleArn=role_arn, RoleSessionName=f"inferstack-{purpose}-{env_name}"[:64],
        )["Credentials"]
    except AWS_ERRORS as exc:
        raise SessionError(f"{env_name}: cannot assume {role_arn}: "
                           f"{' '.join(str(exc).split())}") from None
    return boto3.Session(aws_access_key_id=credentials["AccessKeyId"],
                         aws_secret_access_key=credentials["SecretAccessKey"],
                         aws_session_token=credentials["SessionToken"], region_name=environment.region)
