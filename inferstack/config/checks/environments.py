"""The environments against each other: accounts and shared VPCs."""

from __future__ import annotations

from collections.abc import Iterator

from inferstack.config.checks.common import Finding
from inferstack.schema.environments import DEFAULT_SMOKE_ROLE_NAME, EnvironmentsFile


def check_networks(env_file: EnvironmentsFile) -> Iterator[Finding]:
    """A VPC shared from another account: its owner creates and manages the VPC endpoints and route
    tables, participants cannot (https://docs.aws.amazon.com/vpc/latest/userguide/vpc-share-limitations.html)."""
    for name, environment in env_file.environments.items():
        imported = environment.network.import_
        owner = environment.network.vpc_owner(environment.account)
        if imported is not None and owner != environment.account and imported.create_endpoints:
            yield (
                ("environments", name, "network", "import", "create_endpoints"),
                (
                    f"the VPC is shared from account {owner}: participants cannot create VPC endpoints or change "
                    f"route tables in a shared VPC; set create_endpoints: false and have the owner add them"
                ),
            )


def check_accounts(env_file: EnvironmentsFile) -> Iterator[Finding]:
    """Each environment's foundation creates the smoke role by its fixed name, and IAM names are unique per
    account (across regions): two environments in one account would collide on it."""
    role = env_file.pipeline.smoke_role_name if env_file.pipeline else DEFAULT_SMOKE_ROLE_NAME
    first: dict[str, str] = {}
    for name, environment in env_file.environments.items():
        other = first.setdefault(environment.account, name)
        if other != name:
            yield (
                ("environments", name, "account"),
                (
                    f"account {environment.account} is also {other}'s: each environment's foundation creates the "
                    f"IAM role {role} (the smoke test's), and role names are unique per account; give each "
                    f"environment its own account"
                ),
            )
