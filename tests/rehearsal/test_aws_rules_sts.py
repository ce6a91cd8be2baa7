"""The STS rules (rehearsal/aws_rules/sts.py) at the moto-backend level: plain moto accepting what AWS refuses,
and the rule refusing it as AWS does."""

from __future__ import annotations

import datetime

import boto3
import botocore.exceptions
import pytest
import requests
from moto import mock_aws

from rehearsal import moto_patches
from rehearsal.aws_rules import sts

REGION = "us-east-1"
ROLE = "arn:aws:iam::222222222222:role/inferstack-loadtest"
CODEBUILD_ROLE = "arn:aws:iam::444444444444:role/inferstack-pipeline-LoadTest"


def assumed(role: str = ROLE, client=None, **params) -> dict:
    """Credentials of `role`, assumed by `client` (default: the account's own keys, so not chained)."""
    client = client or boto3.client("sts", region_name=REGION)
    return client.assume_role(RoleArn=role, RoleSessionName="test", **params)["Credentials"]


def signed_by(credentials: dict) -> boto3.Session:
    return boto3.Session(
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
        region_name=REGION,
    )


# ----------------------------------------------------------------------------- role-chaining-duration


def test_rule_role_chaining_duration(moto_env):
    with mock_aws():
        chained = signed_by(assumed(CODEBUILD_ROLE)).client("sts")  # a role's credentials, as CodeBuild's are
        plain = assumed(client=chained, DurationSeconds=7200)
        assert plain["Expiration"] - datetime.datetime.now(datetime.UTC) > datetime.timedelta(hours=1.9)
        with moto_patches.applied("role-chaining-duration"):
            with pytest.raises(botocore.exceptions.ClientError) as refused:
                assumed(client=chained, DurationSeconds=7200)
            assert refused.value.response["Error"] == {
                "Type": "Sender",
                "Code": "ValidationError",
                "Message": "The requested DurationSeconds exceeds the 1 hour session limit for roles assumed by role "
                "chaining.",
            }
            assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
            assert assumed(client=chained, DurationSeconds=3600)  # an hour is allowed when chained
            assert assumed(client=chained)  # the default is an hour
            assert assumed(DurationSeconds=43200)  # from an account's own keys: not chaining


# ----------------------------------------------------------------------------- expired-temporary-credentials


def expire(credentials: dict) -> None:
    """What moto records of these credentials: expired a second ago (nobody waits an hour)."""
    from moto.core.utils import utcnow

    role = sts.assumed_role(credentials["AccessKeyId"], REGION)
    role.expiration = utcnow() - datetime.timedelta(seconds=1)


def calls(session: boto3.Session) -> dict:
    """One call of each protocol the load test's orchestrator speaks (and EC2's)."""
    return {
        "sts": lambda: session.client("sts").get_caller_identity(),  # query
        "cloudformation": lambda: session.client("cloudformation").describe_stacks(),  # query
        "ecs": lambda: session.client("ecs").list_clusters(),  # json
        "s3": lambda: session.client("s3").get_object(Bucket="results", Key="r1/result.json"),  # rest-xml
        "ec2": lambda: session.client("ec2").describe_vpcs(),  # ec2
    }


REFUSALS = {  # service: (HTTP status, error code), as AWS answers
    "sts": (403, "ExpiredToken"),
    "cloudformation": (403, "ExpiredToken"),
    "ecs": (403, "ExpiredTokenException"),
    "s3": (400, "ExpiredToken"),
    "ec2": (400, "RequestExpired"),
}


def test_rule_expired_temporary_credentials(moto_env):
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket="results")
        s3.put_object(Bucket="results", Key="r1/result.json", Body=b"{}")
        credentials = assumed()
        expire(credentials)
        for call in calls(signed_by(credentials)).values():
            call()  # plain moto: every call answered, the credentials expired
        with moto_patches.applied("expired-temporary-credentials"):
            for service, call in calls(signed_by(credentials)).items():
                with pytest.raises(botocore.exceptions.ClientError) as refused:
                    call()
                error = refused.value.response
                assert (error["ResponseMetadata"]["HTTPStatusCode"], error["Error"]["Code"]) == REFUSALS[service]
            for call in calls(signed_by(assumed())).values():
                call()  # fresh credentials, and the account's own keys, still work
            for call in calls(boto3.Session(region_name=REGION)).values():
                call()


def test_rule_expired_temporary_credentials__by_the_emulators_clock(moto_env):
    """An hour passes on the rule's clock (set over moto's API, as a test sets the server's): the credentials
    expire; credentials issued after that expire an hour after it."""
    with mock_aws(), moto_patches.applied("expired-temporary-credentials"):
        first = assumed()
        ecs = signed_by(first).client("ecs")
        ecs.list_clusters()
        answer = requests.post(
            f"http://motoapi.amazonaws.com{sts.CLOCK_PATH}", json={"offset_seconds": 3540}, timeout=5
        )
        assert answer.json() == {"offset_seconds": 3540}
        ecs.list_clusters()  # a minute left
        sts.set_offset(3600)
        with pytest.raises(
            botocore.exceptions.ClientError,
            match=r"\(ExpiredTokenException\).*The security token "
            r"included in the request is expired",
        ):
            ecs.list_clusters()
        later = assumed()
        assert (later["Expiration"] - first["Expiration"]).total_seconds() >= 3600  # issued by the moved clock
        signed_by(later).client("ecs").list_clusters()
        assert requests.get(f"http://motoapi.amazonaws.com{sts.CLOCK_PATH}", timeout=5).json() == {
            "offset_seconds": 3600
        }
    assert sts.offset() == 0  # undone with the rule
