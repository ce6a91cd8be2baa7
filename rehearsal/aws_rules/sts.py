"""STS rules AWS enforces that moto 5.2.5 does not: role chaining's one-hour cap, and temporary credentials that
stop working when they expire.

Nobody waits an hour in a test, so the expired-temporary-credentials rule gives the emulator a clock of its own:
moto's STS issues and expires credentials by it, and it runs ahead of the wall clock by an offset set over HTTP,

    POST /moto-api/aws-rules/sts-clock  {"offset_seconds": 3700}   -> {"offset_seconds": 3700}
    GET  /moto-api/aws-rules/sts-clock                              -> {"offset_seconds": 3700}

(`pass_time(endpoint, seconds)` below), or in-process with `set_offset(seconds)` under `mock_aws()`. A client
that decides when to renew by its own clock (botocore) must have its clock moved by as much."""

from __future__ import annotations

import datetime
import json
import types
import urllib.request

from rehearsal.emulator_patch import Patch, Undo, replace

CHAINED_MAX_DURATION_S = 3600
CLOCK_PATH = "/moto-api/aws-rules/sts-clock"
_offset = datetime.timedelta(0)  # how far the emulator's STS clock runs ahead of the wall clock


def set_offset(seconds: float) -> None:
    global _offset
    _offset = datetime.timedelta(seconds=seconds)


def offset() -> float:
    return _offset.total_seconds()


def now() -> datetime.datetime:
    """The emulator's STS time (naive UTC, as moto keeps it)."""
    from moto.core.utils import utcnow

    return utcnow() + _offset


def pass_time(endpoint: str, seconds: float) -> None:
    """Move the clock of the emulator at `endpoint` (its server runs this rule) to `seconds` ahead of the wall."""
    request = urllib.request.Request(
        f"{endpoint}{CLOCK_PATH}",
        method="POST",
        data=json.dumps({"offset_seconds": seconds}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        json.load(answer)


def datetime_ahead(seconds: float) -> types.ModuleType:
    """A `datetime` module whose datetime.now() is `seconds` ahead: in place of botocore.credentials' own, it moves
    the clock botocore decides to renew credentials by (its `_local_now`, which refreshable credentials and the
    assume-role fetcher read) as pass_time moves the emulator's, and nothing else in the process."""
    real = datetime.datetime

    class AnyDatetime(type):
        def __instancecheck__(cls, value) -> bool:  # botocore asks isinstance(value, datetime.datetime)
            return isinstance(value, real)

    class Later(real, metaclass=AnyDatetime):
        @classmethod
        def now(cls, tz=None):
            return real.now(tz) + datetime.timedelta(seconds=seconds)

    module = types.ModuleType("datetime")
    module.__dict__.update({k: v for k, v in vars(datetime).items() if not k.startswith("__")})
    module.datetime = Later
    return module


def assumed_role(access_key: str, region: str):
    """moto's record of the AssumeRole that issued `access_key`, or None (a user's key, an account key)."""
    from moto.iam import models as iam_models
    from moto.sts.models import sts_backends
    from moto.utilities.utils import get_partition

    # moto keeps an assumed role in the STS backend of the role's account, the account its key acts as.
    return sts_backends[iam_models.get_account_id_from(access_key)][
        get_partition(region)
    ].get_assumed_role_from_access_key(access_key)


# ----------------------------------------------------------------------------- role-chaining-duration


def _role_chaining_duration() -> Undo:
    """AssumeRole made with credentials that are themselves an assumed role's is role chaining, which limits the
    new session to one hour: a DurationSeconds above 3600 then fails with ValidationError ("The requested
    DurationSeconds exceeds the 1 hour session limit for roles assumed by role chaining."); moto issues the
    longer session.
    https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_terms-and-concepts.html#iam-term-role-chaining,
    https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRole.html (DurationSeconds)."""
    from moto.sts.exceptions import STSValidationError
    from moto.sts.responses import TokenResponse

    original = TokenResponse.__dict__["assume_role"]

    def assume_role(self):
        duration = self._get_int_param("DurationSeconds", CHAINED_MAX_DURATION_S)
        if duration > CHAINED_MAX_DURATION_S and assumed_role(self.get_access_key(), self.region) is not None:
            raise STSValidationError(
                "The requested DurationSeconds exceeds the 1 hour session limit for roles assumed by role chaining."
            )
        return original(self)

    return replace(TokenResponse, "assume_role", assume_role)


# ----------------------------------------------------------------------------- expired-temporary-credentials

EXPIRED_MESSAGE = "The security token included in the request is expired"


def expired_answer(protocol: str) -> tuple[int, str, str, str]:
    """(HTTP status, content type, body, error code) of AWS's answer to expired credentials in `protocol`."""
    if protocol == "rest-xml":  # S3: https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html
        return (
            400,
            "application/xml",
            (
                '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>ExpiredToken</Code>'
                "<Message>The provided token has expired.</Message></Error>"
            ),
            "ExpiredToken",
        )
    if protocol == "ec2":  # https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html
        return (
            400,
            "text/xml",
            (
                "<Response><Errors><Error><Code>RequestExpired</Code><Message>Request has expired."
                "</Message></Error></Errors><RequestID>0</RequestID></Response>"
            ),
            "RequestExpired",
        )
    if protocol in ("json", "rest-json"):  # ECS, ECR, SSM, KMS, Logs, SageMaker
        return (
            403,
            "application/x-amz-json-1.1",
            json.dumps({"__type": "ExpiredTokenException", "message": EXPIRED_MESSAGE}),
            "ExpiredTokenException",
        )
    body = (
        f"<ErrorResponse><Error><Type>Sender</Type><Code>ExpiredToken</Code><Message>{EXPIRED_MESSAGE}</Message>"
        f"</Error><RequestId>0</RequestId></ErrorResponse>"
    )
    return 403, "text/xml", body, "ExpiredToken"  # query: STS, CloudFormation


def _expired_temporary_credentials() -> Undo:
    """Temporary credentials stop working at their Expiration: every request signed with them is refused,
    ExpiredToken (query APIs, S3), ExpiredTokenException (JSON APIs) or RequestExpired (EC2).
    https://docs.aws.amazon.com/IAM/latest/UserGuide/id_credentials_temp.html,
    https://docs.aws.amazon.com/STS/latest/APIReference/CommonErrors.html,
    https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html. moto records each assumed role's
    Expiration and never reads it again. Refused where moto checks a request's credentials (every API's
    action, S3's too), by the emulator's STS clock (module docstring)."""
    from moto.core.authorization import ActionAuthenticatorMixin
    from moto.core.utils import get_service_model
    from moto.moto_api._internal import urls as moto_api_urls
    from moto.sts import models as sts_models
    from werkzeug.exceptions import HTTPException

    class ExpiredToken(HTTPException):
        def __init__(self, protocol: str) -> None:
            self.code, self.content_type, body, self.error_type = expired_answer(protocol)
            super().__init__(description=body)

        def get_body(self, *args, **kwargs) -> str:
            return self.description

        def get_headers(self, *args, **kwargs) -> list[tuple[str, str]]:
            return [("Content-Type", self.content_type), ("X-Amzn-ErrorType", self.error_type)]

    original = ActionAuthenticatorMixin.__dict__["_authenticate_and_authorize_action"]

    def authenticate(self, iam_request_cls, resource: str = "*") -> None:
        role = assumed_role(self.get_access_key(), self.region)
        if role is not None and now() >= role.expiration:
            try:
                protocol = get_service_model(self.boto3_service_name).protocol
            except Exception:  # a service botocore has no model of: the query shape
                protocol = "query"
            raise ExpiredToken(protocol)
        return original(self, iam_request_cls, resource)

    def clock(request, full_url: str, headers) -> tuple[int, dict, str]:
        if request.method == "POST":
            set_offset(float(json.loads(request.get_data() or b"{}")["offset_seconds"]))
        return 200, {"Content-Type": "application/json"}, json.dumps({"offset_seconds": offset()})

    route = "{0}" + CLOCK_PATH
    undo = [
        replace(ActionAuthenticatorMixin, "_authenticate_and_authorize_action", authenticate),
        replace(sts_models, "utcnow", now),
    ]
    moto_api_urls.url_paths[route] = clock

    def undo_all() -> None:
        del moto_api_urls.url_paths[route]
        for restore in reversed(undo):
            restore()
        set_offset(0)

    return undo_all


RULES: tuple[Patch, ...] = (
    Patch(
        "role-chaining-duration",
        "AssumeRole with an assumed role's credentials (role chaining) and DurationSeconds above 3600 issues the "
        "longer session; AWS refuses it (ValidationError: 1 hour session limit for role chaining)",
        _role_chaining_duration,
    ),
    Patch(
        "expired-temporary-credentials",
        "credentials from AssumeRole keep working after their Expiration; AWS refuses every request signed with "
        "them (ExpiredToken / ExpiredTokenException)",
        _expired_temporary_credentials,
    ),
)
