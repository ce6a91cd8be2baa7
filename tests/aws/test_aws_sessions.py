"""session_for against moto with the STS rules AWS enforces (rehearsal/aws_rules/sts.py): from credentials that
are a role's (CodeBuild's), assuming the environment's role is role chaining, capped at one hour; the session
must outlive that hour, as a load test does."""

from __future__ import annotations

import os

import boto3
import botocore.credentials
import pytest
from moto import mock_aws

from inferstack import config
from inferstack.aws import aws_sessions
from rehearsal import moto_patches
from rehearsal.aws_rules import sts
from tests.support.paths import CONFIG_DIR

ENV = "staging"
ENVIRONMENT = config.load(CONFIG_DIR).environments[ENV]
ROLE = f"arn:aws:iam::{ENVIRONMENT.account}:role/inferstack-loadtest"
CODEBUILD_ROLE = "arn:aws:iam::444444444444:role/inferstack-pipeline-LoadTest"
CODEBUILD_SESSION_S = 8 * 3600  # the step's own credentials outlast the run (CodeBuild renews its role's)
HOUR_AND_MORE = 3700


@pytest.fixture
def chained(monkeypatch):
    """moto with the STS rules, and ambient credentials that are an assumed role's, as in a CodeBuild step."""
    for key in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "MOTO_ACCOUNT_ID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", ENVIRONMENT.region)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "444444444444")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    with (
        mock_aws(),
        moto_patches.applied("account-from-access-key", "role-chaining-duration", "expired-temporary-credentials"),
    ):
        step = boto3.client("sts").assume_role(
            RoleArn=CODEBUILD_ROLE, RoleSessionName="codebuild", DurationSeconds=CODEBUILD_SESSION_S
        )["Credentials"]
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", step["AccessKeyId"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", step["SecretAccessKey"])
        monkeypatch.setenv("AWS_SESSION_TOKEN", step["SessionToken"])
        yield


def pass_time(monkeypatch, seconds: float) -> None:
    """`seconds` pass for the emulator's STS and for botocore's credential clock alike."""
    sts.set_offset(seconds)
    monkeypatch.setattr(botocore.credentials, "datetime", sts.datetime_ahead(seconds))


def assumed_roles() -> list:
    from moto.sts.models import sts_backends

    return [r for r in sts_backends[ENVIRONMENT.account]["aws"].assumed_roles if r.role_arn == ROLE]


def test_a_session_outlives_its_first_credentials(chained, monkeypatch):
    session = aws_sessions.session_for(ENV, ENVIRONMENT, purpose="loadtest", role_arn=ROLE)
    ecs = session.client("ecs")  # created once and held, as the Fargate run holds its client
    ecs.create_cluster(clusterName="loadtest")
    (first,) = assumed_roles()
    assert first.session_name == f"inferstack-loadtest-{ENV}"
    assert 3500 < (first.expiration - sts.now()).total_seconds() <= 3600  # an hour: what role chaining allows

    pass_time(monkeypatch, HOUR_AND_MORE)  # the first credentials are refused from here on
    assert [c.split("/")[-1] for c in ecs.list_clusters()["clusterArns"]] == ["loadtest"]
    assert session.client("s3").list_buckets()["Buckets"] == []
    assert len(assumed_roles()) == 2  # assumed again, once

    pass_time(monkeypatch, 2 * HOUR_AND_MORE)  # and again: a two-hour run
    ecs.describe_clusters(clusters=["loadtest"])
    assert len(assumed_roles()) == 3


def test_the_role_is_assumed_again_before_its_credentials_expire(chained, monkeypatch):
    """Within 15 minutes of expiry botocore renews them before the request, so no request meets the refusal."""
    session = aws_sessions.session_for(ENV, ENVIRONMENT, purpose="loadtest", role_arn=ROLE)
    ecs = session.client("ecs")
    pass_time(monkeypatch, 3600 - 14 * 60)
    ecs.list_clusters()
    assert len(assumed_roles()) == 2


def test_a_role_that_cannot_be_assumed_is_one_line_at_once(chained, monkeypatch):
    pass_time(monkeypatch, CODEBUILD_SESSION_S + 1)  # the step's own credentials expired: AssumeRole is refused
    with pytest.raises(aws_sessions.SessionError) as caught:
        aws_sessions.session_for(ENV, ENVIRONMENT, purpose="loadtest", role_arn=ROLE)
    assert str(caught.value) == (
        f"{ENV}: cannot assume {ROLE}: An error occurred (ExpiredToken) when calling the "
        f"AssumeRole operation: The security token included in the request is expired"
    )


def test_no_credentials_is_one_line(monkeypatch, tmp_path):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(aws_sessions.SessionError) as caught:
        aws_sessions.session_for(ENV, ENVIRONMENT.model_copy(update={"deploy_role_arn": ROLE}), purpose="promote")
    assert str(caught.value) == f"{ENV}: cannot assume {ROLE}: Unable to locate credentials"


def test_a_renewal_that_fails_is_one_line_every_caller_reports(chained, monkeypatch):
    """Renewal happens inside a client call: its failure is one of AWS_ERRORS (what the callers report in one
    line, and what stop_all logs and goes on past) and a SessionError, naming the environment and the role."""
    session = aws_sessions.session_for(ENV, ENVIRONMENT, purpose="loadtest", role_arn=ROLE)
    pass_time(monkeypatch, CODEBUILD_SESSION_S + 1)  # the step's credentials expired too: no AssumeRole now
    with pytest.raises(aws_sessions.AWS_ERRORS) as caught:
        session.client("ecs").list_clusters()
    assert isinstance(caught.value, aws_sessions.SessionError)
    assert str(caught.value) == (
        f"{ENV}: cannot assume {ROLE} again: An error occurred (ExpiredToken) when calling "
        f"the AssumeRole operation: The security token included in the request is expired"
    )


def test_without_a_role_the_ambient_credentials_are_used(chained):
    session = aws_sessions.session_for(ENV, ENVIRONMENT, purpose="promote")
    assert ENVIRONMENT.deploy_role_arn is None
    assert (
        session.client("sts")
        .get_caller_identity()["Arn"]
        .startswith("arn:aws:sts::444444444444:assumed-role/inferstack-pipeline-LoadTest/")
    )
    assert session.region_name == ENVIRONMENT.region


def test_sessions_share_botocore_data_and_nothing_else(aws, monkeypatch):
    """Two sessions on the shared loader: one parse of the service model between them, boto3's data directory
    listed once however many sessions appended it, and credentials and region each session's own."""
    monkeypatch.delenv("AWS_DATA_PATH", raising=False)
    first = aws_sessions.new_session(region_name="us-east-1")
    second = aws_sessions.new_session(
        region_name="eu-west-1", aws_access_key_id="other", aws_secret_access_key="other-secret"
    )
    loader = first._session.get_component("data_loader")
    assert second._session.get_component("data_loader") is loader
    assert len(loader.search_paths) == len(set(loader.search_paths))
    assert first.client("sts").meta.service_model is not None
    parsed = loader.load_service_model("sts", "service-2")
    assert second.client("sts").meta.service_model._service_description is parsed  # cached, not parsed again
    assert (first.region_name, second.region_name) == ("us-east-1", "eu-west-1")
    assert first.get_credentials().access_key == os.environ["AWS_ACCESS_KEY_ID"]  # the ambient ones
    assert second.get_credentials().access_key == "other"
    assert first.client("sts").get_caller_identity()["Account"]  # a working client, against moto


def test_another_data_path_gets_its_own_loader(tmp_path, monkeypatch):
    """AWS_DATA_PATH adds model directories: sessions with a different one must not see the default loader's."""
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path))
    loader = aws_sessions.core_session().get_component("data_loader")
    assert str(tmp_path) in loader.search_paths
    monkeypatch.delenv("AWS_DATA_PATH")
    assert str(tmp_path) not in aws_sessions.core_session().get_component("data_loader").search_paths


def test_session_for_is_on_the_shared_loader(aws):
    session = aws_sessions.session_for(ENV, ENVIRONMENT, purpose="test")
    assert session._session.get_component("data_loader") is aws_sessions.shared_loader(None)
