"""The SageMaker user: a signed InvokeEndpoint (built by botocore, sent by FastHttpUser, pointed at moto's server by
AWS_ENDPOINT_URL) of an endpoint and inference component, every reply checked like smoke's. moto answers with
canned replies (its endpoint-results queue): a right one proves the call (endpoint, component, body) and the
answer check; a wrong one is counted, every time, as an error of kind "invalid answer: ...". moto checks no
signature: a server of the tests' own does, over TLS, with botocore's SigV4 code and the secret the client was
given, and answers some requests with SageMaker's ModelError reply; its self-signed certificate is trusted only
through AWS_CA_BUNDLE, as boto3 would trust it. An emulator's latency says nothing about a model: the verdict's
latency part is not asserted, the counts are."""

from __future__ import annotations

import dataclasses
import hmac
import json
import re
import ssl
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from inferstack import config
from inferstack.loadtest import runner, shape
from inferstack.loadtest.spec import Target
from tests.support.emulator import REGION, seed_reply
from tests.support.paths import CONFIG_DIR
from tests.support.threaded_server import JsonHandler, serving
from tests.support.tls import self_signed

pytestmark = pytest.mark.loadtest
MODEL = "bert-large-classifier"
PROJECT = config.load(CONFIG_DIR)


def spec_for(endpoint: str, component: str | None):
    spec = shape.spec_for(
        PROJECT.model(MODEL),
        "dev",
        PROJECT.environments["dev"],
        target=Target(kind="sagemaker", endpoint=endpoint, component=component, region=REGION),
        rate=10.0,
        hold=4.0,
        fractions=(1.0,),
        timeout_s=5.0,
    )
    return dataclasses.replace(spec, p99_slo_ms=1000.0)


def bind_reply(aws, spec, outputs: list[dict]) -> None:
    """Seed a reply and hand it to this spec's request (same endpoint, component and body as Locust's)."""
    seed_reply(aws, {"model_name": MODEL, "outputs": outputs})
    extra = {"InferenceComponentName": spec.target.component} if spec.target.component else {}
    boto3.client("sagemaker-runtime", region_name=REGION).invoke_endpoint(
        EndpointName=spec.target.endpoint,
        ContentType="application/json",
        Accept="application/json",
        Body=spec.body_bytes()[0],
        **extra,
    )


def outputs_of(spec, change=None) -> list[dict]:
    outputs = []
    for o in spec.outputs:
        shape_ = list(change(o) if change else o.shape)
        count = 1
        for n in shape_:
            count *= n
        outputs.append({"name": o.name, "datatype": o.datatype, "shape": shape_, "data": [0] * count})
    return outputs


def test_signed_invocations_of_a_component_with_right_answers_count_no_errors(emulator, tmp_path):
    spec = spec_for("dev-shared", "bert-large-ic")
    bind_reply(emulator, spec, outputs_of(spec))
    result = runner.run_local(spec, tmp_path)
    (step,) = result.steps
    # A request without the component (or with another body) would have got moto's default reply, not JSON.
    assert step.errors == {} and step.failures == 0
    assert step.offered >= 0.9 * step.offered_rps * step.seconds
    assert result.target == "endpoint dev-shared component bert-large-ic"
    assert [g.name for g in result.generators] == ["local"]


def test_a_wrong_answer_is_an_error_of_kind_invalid_answer(emulator, tmp_path):
    spec = spec_for("dev-bert-large", None)
    bind_reply(emulator, spec, outputs_of(spec, change=lambda o: (*o.shape[:-1], o.shape[-1] + 1)))
    result = runner.run_local(spec, tmp_path)
    (step,) = result.steps
    name, expected = spec.outputs[0].name, list(spec.outputs[0].shape)
    wrong = [*expected[:-1], expected[-1] + 1]
    assert step.errors == {f"invalid answer: output {name}: shape {wrong}, expected {expected}": step.offered}
    assert step.offered > 0 and step.failures == step.offered and step.p99_ms is None
    assert result.verdict == "fail"


# -- the signature, as SageMaker checks it ---------------------------------------------------------------------
# moto does not check signatures; this server does, with botocore's SigV4 code and the secret the client was given.

ACCESS_KEY, SECRET = "AKIDLOADTEST", "load-test-secret"
AUTH = re.compile(
    r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
    r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$"
)


def signature_valid(method: str, path: str, headers: dict[str, str], body: bytes, secret: str = SECRET) -> bool:
    """SigV4 recomputed from the request as received (the headers it names as signed, its date): what AWS does."""
    lower = {name.lower(): value for name, value in headers.items()}
    match = AUTH.match(lower.get("authorization", ""))
    if match is None or match.group(1) != ACCESS_KEY:
        return False
    _, day, region, service, signed, signature = match.groups()
    names = signed.split(";")
    if not {"host", "x-amz-date"} <= set(names) or not lower["x-amz-date"].startswith(day):
        return False
    request = AWSRequest(
        method=method,
        url=f"http://{lower['host']}{path}",
        data=body,
        headers={name: lower[name] for name in names if name in lower},
    )
    request.context["timestamp"] = lower["x-amz-date"]
    auth = SigV4Auth(Credentials(ACCESS_KEY, secret), service, region)
    expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
    return hmac.compare_digest(expected, signature)


@dataclass
class Checked:
    """What the checking server saw: requests by how they went, and the paths and components asked for."""

    every: int = 10  # every `every`-th good request is answered with a ModelError, as a failing model would be
    outcomes: Counter = field(default_factory=Counter)
    targets: set = field(default_factory=set)


@pytest.fixture
def checking_server(monkeypatch, tmp_path_factory) -> Iterator[Checked]:
    """Over TLS with a self-signed certificate, which the client trusts only through AWS_CA_BUNDLE (set here)."""
    state, lock = Checked(), threading.Lock()
    spec = spec_for("dev-shared", "bert-large-ic")
    good = json.dumps({"model_name": MODEL, "outputs": outputs_of(spec)}).encode()

    class Handler(JsonHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            valid = signature_valid("POST", self.path, dict(self.headers.items()), body)
            with lock:
                state.targets.add((self.path, self.headers.get("X-Amzn-SageMaker-Inference-Component")))
                state.outcomes["valid" if valid else "invalid"] += 1
                model_error = valid and state.outcomes["valid"] % state.every == 0
            if not valid:
                self.aws_error(403, "InvalidSignatureException", {"message": "The request signature does not match"})
            elif model_error:
                self.aws_error(424, "ModelError", {"Message": "Received server error (500) from model"})
            else:
                self.reply(200, good)

        def aws_error(self, status: int, code: str, content: dict) -> None:
            self.reply(
                status,
                json.dumps(content).encode(),
                {"x-amzn-ErrorType": f"{code}:http://internal.amazon.com/coral/com.amazon.sage/"},
            )

    cert_file, key_file = self_signed(tmp_path_factory.mktemp("tls"))
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert_file, key_file)
    with serving(Handler, tls) as port:
        for key, value in {
            "AWS_ENDPOINT_URL": f"https://127.0.0.1:{port}",
            "AWS_CA_BUNDLE": str(cert_file),
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": "/nonexistent",
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        }.items():
            monkeypatch.setenv(key, value)
        for key in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME"):
            monkeypatch.delenv(key, raising=False)
        yield state


def test_every_invocation_is_signed_as_sagemaker_checks_and_an_aws_error_counts_by_its_code(checking_server, tmp_path):
    # Over TLS: the server's certificate is checked against AWS_CA_BUNDLE, as boto3 checks it.
    spec = spec_for("dev-shared", "bert-large-ic")
    result = runner.run_local(spec, tmp_path)
    (step,) = result.steps
    assert checking_server.outcomes["invalid"] == 0 and checking_server.outcomes["valid"] > 0, step.errors
    assert checking_server.targets == {("/endpoints/dev-shared/invocations", "bert-large-ic")}
    # Every tenth request got SageMaker's ModelError reply: counted by its AWS error code, as boto3 would name it.
    assert set(step.errors) == {"ModelError"} and step.failures == step.errors["ModelError"] > 0
    assert step.offered >= 0.9 * step.offered_rps * step.seconds


def test_the_checking_server_refuses_a_signature_made_with_another_secret_or_over_another_body():
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    request = AWSRequest(method="POST", url="http://127.0.0.1:9/endpoints/e/invocations", data=b"{}", headers=headers)
    SigV4Auth(Credentials(ACCESS_KEY, SECRET), "sagemaker", REGION).add_auth(request)
    sent = {**dict(request.headers.items()), "Host": "127.0.0.1:9"}
    assert signature_valid("POST", "/endpoints/e/invocations", sent, b"{}")
    assert not signature_valid("POST", "/endpoints/e/invocations", sent, b"{}", secret="another secret")
    assert not signature_valid("POST", "/endpoints/e/invocations", sent, b'{"x": 1}')
    assert not signature_valid("POST", "/endpoints/f/invocations", sent, b"{}")


def test_a_certificate_the_ca_bundle_does_not_vouch_for_fails_every_request(checking_server, tmp_path, monkeypatch):
    # botocore's own bundle, as on AWS: the self-signed certificate is refused and nothing reaches the server.
    monkeypatch.delenv("AWS_CA_BUNDLE")
    result = runner.run_local(spec_for("dev-shared", "bert-large-ic"), tmp_path)
    (step,) = result.steps
    assert step.offered > 0 and step.failures == step.offered
    assert set(step.errors) == {"SSLCertVerificationError"}
    assert sum(checking_server.outcomes.values()) == 0


def test_no_credentials_stops_locust_in_one_line_before_a_request(checking_server, tmp_path, monkeypatch):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)
    with pytest.raises(
        runner.LoadTestError,
        match=r"^Locust local exited 1: .*inferstack locustfile: no AWS "
        r"credentials to sign InvokeEndpoint of dev-shared with",
    ):
        runner.run_local(spec_for("dev-shared", "bert-large-ic"), tmp_path / "out")
    assert sum(checking_server.outcomes.values()) == 0 and list((tmp_path / "out").iterdir()) == []
