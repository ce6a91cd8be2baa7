"""One boto3 session per environment: the environment's `deploy_role_arn` (or a role the caller names)
assumed from the ambient credentials when set (source and target accounts differ), else the ambient credentials
themselves (AWS_PROFILE, environment variables, instance or OIDC role), always in the environment's region. An
assumed role's credentials are renewed before they expire, so a session outlives them (a load test may run for
hours).

Every session of the process shares one botocore data loader (``new_session``): a fresh botocore session parses
the endpoint rules and each service's model from botocore's JSON again (a session with ECR and CloudFormation
clients: 0.06-0.25 s of CPU, against 0.02 s on the shared loader), which a command that reaches several
environments (promote, rollback, smoke) paid for each of them, and a test suite on moto for every test."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import botocore.exceptions

from inferstack.command_line import Failure
from inferstack.config import Environment

if TYPE_CHECKING:  # boto3 and botocore's credentials load in a command that calls AWS, not in every one
    import boto3
    import botocore.credentials
    import botocore.loaders
    import botocore.session

# Read-only errors a user can cause or fix (no credentials, a role they may not assume): one line each.
AWS_ERRORS = (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError)

# Each AssumeRole asks for one hour: from credentials that are themselves a role's (CodeBuild's, a CI's OIDC role)
# this is role chaining, which AWS caps at one hour and refuses a longer DurationSeconds for
# (https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_terms-and-concepts.html#iam-term-role-chaining).
ROLE_SESSION_S = 3600


class SessionError(Failure):
    """Credentials for an environment cannot be obtained."""


class RenewalError(SessionError, botocore.exceptions.BotoCoreError):
    """The role could not be assumed again when its credentials neared expiry. Raised from within a client call,
    so it is also a BotoCoreError: every caller that reports AWS_ERRORS in one line reports it too."""

    fmt = "{message}"

    def __init__(self, message: str) -> None:
        # BotoCoreError's keyword arguments fill `fmt` (Failure, first in the MRO, has no __init__ of its own).
        botocore.exceptions.BotoCoreError.__init__(self, message=message)


ASSUMED_METHOD = "assume-role"


def _resolver(credentials: botocore.credentials.RefreshableCredentials) -> botocore.credentials.CredentialResolver:
    """A credential chain of one link: the role's renewing credentials."""
    import botocore.credentials

    class Assumed(botocore.credentials.CredentialProvider):
        METHOD = ASSUMED_METHOD

        def load(self) -> botocore.credentials.RefreshableCredentials:
            return credentials

    return botocore.credentials.CredentialResolver([Assumed()])


class _SearchPaths(list):
    """A shared loader's search paths: boto3 appends its own data directory once per session it creates."""

    def append(self, path: str) -> None:
        if path not in self:
            super().append(path)


@functools.cache
def shared_loader(search_path_string: str | None = None) -> botocore.loaders.Loader:
    """botocore's data loader for ``search_path_string`` (AWS_DATA_PATH, as botocore.loaders.create_loader takes
    it), one per process. Its files are read-only data and the loader caches what it parsed, so sessions that share
    it differ in nothing but the parsing they skip."""
    import botocore.loaders

    loader = botocore.loaders.create_loader(search_path_string)
    loader._search_paths = _SearchPaths(loader.search_paths)  # the list the property hands out (botocore 1.x)
    return loader


def core_session() -> botocore.session.Session:
    """A new botocore session (its own credentials, region and clients) on the process's shared data loader."""
    import botocore.session

    core = botocore.session.Session()
    core.register_component("data_loader", shared_loader(core.get_config_variable("data_path")))
    return core


def new_session(**kwargs) -> boto3.Session:
    """``boto3.Session(**kwargs)`` on the process's shared data loader."""
    import boto3

    return boto3.Session(botocore_session=core_session(), **kwargs)


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def session_for(env_name: str, environment: Environment, *, purpose: str, role_arn: str | None = None) -> boto3.Session:
    """`role_arn`: assume this role instead of the environment's deploy_role_arn (the pipeline's smoke role)."""
    import boto3
    import botocore.credentials

    role_arn = role_arn or environment.deploy_role_arn
    try:
        ambient = new_session(region_name=environment.region)
    except AWS_ERRORS as exc:
        raise SessionError(f"{env_name}: cannot create an AWS session: {_one_line(exc)}") from None
    if role_arn is None:
        return ambient
    try:
        source = ambient.get_credentials()
    except AWS_ERRORS as exc:
        raise SessionError(f"{env_name}: cannot assume {role_arn}: {_one_line(exc)}") from None
    if source is None:
        raise SessionError(f"{env_name}: cannot assume {role_arn}: {botocore.exceptions.NoCredentialsError()}")
    # botocore's own assume-role fetcher; the credentials below call it again 15 minutes before they expire.
    fetcher = botocore.credentials.AssumeRoleCredentialFetcher(
        ambient.client,
        source,
        role_arn,
        extra_args={"RoleSessionName": f"inferstack-{purpose}-{env_name}"[:64], "DurationSeconds": ROLE_SESSION_S},
    )

    def renewed() -> dict:
        try:
            return fetcher.fetch_credentials()
        except AWS_ERRORS as exc:
            raise RenewalError(message=f"{env_name}: cannot assume {role_arn} again: {_one_line(exc)}") from None

    try:
        first = fetcher.fetch_credentials()  # now, so that a role the caller may not assume fails here
    except AWS_ERRORS as exc:
        raise SessionError(f"{env_name}: cannot assume {role_arn}: {_one_line(exc)}") from None
    credentials = botocore.credentials.RefreshableCredentials.create_from_metadata(
        first, refresh_using=renewed, method=ASSUMED_METHOD
    )
    # Every client of the session (one created once and held too) signs each request with credentials it has
    # renewed when due.
    core = core_session()
    core.register_component("credential_provider", _resolver(credentials))
    return boto3.Session(botocore_session=core, region_name=environment.region)
