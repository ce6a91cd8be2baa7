"""Each rule of rehearsal/aws_rules.py shown at the moto-backend level: plain moto accepts what AWS refuses; with
the rule, the emulator refuses it as AWS does (and still accepts what AWS accepts)."""

from __future__ import annotations

import pytest
from moto import mock_aws

from rehearsal import aws_rules, moto_patches

ACCOUNT, REGION = "111111111111", "us-east-1"


@pytest.fixture
def moto_env(monkeypatch):
    for key in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_SESSION_TOKEN", "MOTO_ACCOUNT_ID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)


def test_every_rule_is_named_sourced_and_tested_here():
    tested = {name.removeprefix("test_rule_").split("__")[0].replace("_", "-")
              for name in globals() if name.startswith("test_rule_")}
    assert tested == {r.name for r in aws_rules.RULES}
    assert all(r.defect and r.apply.__doc__ and "docs.aws.amazon.com" in r.apply.__doc__ for r in aws_rules.RULES)
    assert all(r.name in moto_patches.BY_NAME for r in aws_rules.RULES)  # the server applies them
