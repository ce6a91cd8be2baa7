"""`invoke` calls a deployed model with the text contract: the Neuron path against the real serving app
(container/neuron/serving/serve.py with a tiny CPU artifact) over HTTP, its URL from a stand-in for the fleet stack's
outputs; the SageMaker path as a signed InvokeEndpoint against moto (the body and headers moto received
asserted), SageMaker's error answers (ModelError, no capacity, ServiceUnavailable) made by botocore's own parser
from wire responses a before-send hook returns. Every error path ends in one line and a non-zero exit."""

from __future__ import annotations

import base64
import io
import json
import socket

import pytest
from botocore.awsrequest import AWSResponse
from moto.sagemakerruntime.models import sagemakerruntime_backends

from inferstack import cli
from inferstack.aws import aws_sessions, stack_outputs
from inferstack.delivery import invoke
from inferstack.loadtest import text_contract
from tests.support import aws_fakes
from tests.support.neuron_server import LABELS, ServerProcess
from tests.support.smoke_stacks import FLEET, deploy_url, edit_model, queue_replies
from tests.support.threaded_server import JsonHandler, serving

MAX_TEXT = 64  # the test server's SERVER_MAX_TEXT_CHARS: a text past it is refused with the contract's error


def invoke_cli(capsys, config_dir, *args: str) -> tuple[int, list[str], list[str]]:
    code = cli.main(["invoke", "--env", "dev", "--config-dir", str(config_dir), "--timeout", "20", *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


@pytest.fixture
def no_sleep(monkeypatch) -> list[float]:
    """The waits between tries, recorded instead of slept."""
    waits: list[float] = []
    monkeypatch.setattr(invoke.time, "sleep", waits.append)
    return waits


# ----------------------------------------------------------------------------- Neuron: the real server over HTTP


@pytest.fixture(scope="module")
def server(artifact):
    process = ServerProcess(
        artifact, args=("--model-name", "intent-bert"), env={"SERVER_MAX_TEXT_CHARS": str(MAX_TEXT)}
    )
    process.wait_ready()
    yield process
    process.stop()


@pytest.fixture
def neuron_config(aws, config_copy):
    aws_fakes.with_deploy_roles(config_copy)
    edit_model(config_copy, "intent-bert", lambda d: d["source"].update(labels=list(LABELS)))
    return config_copy


def test_a_batch_of_texts_gets_one_line_each_from_the_real_server(server, neuron_config, capsys):
    deploy_url(server.url)
    code, out, err = invoke_cli(capsys, neuron_config, "intent-bert", "--text", "hello there", "--text", "a second one")
    assert (code, err) == (0, [])
    assert len(out) == 2
    for line in out:
        label, scores = line.split(" ", 1)
        assert label in LABELS
        # Every label's logit, highest first, the label answered among them.
        names = [part.split()[0] for part in scores.strip("()").split(", ")]
        assert sorted(names) == sorted(LABELS) and label in names


def test_json_prints_the_reply_as_received(server, neuron_config, capsys):
    deploy_url(server.url)
    code, out, _ = invoke_cli(capsys, neuron_config, "intent-bert", "--json", "--text", "one", "--text", "two")
    assert code == 0
    reply = json.loads("\n".join(out))
    shapes = {o["name"]: (o["datatype"], o["shape"]) for o in reply["outputs"]}
    assert shapes == {"logits": ("FP32", [2, len(LABELS)]), "label": ("BYTES", [2])}


def test_the_servers_refusal_is_one_line_with_its_status_and_field(server, neuron_config, capsys):
    deploy_url(server.url)
    code, out, err = invoke_cli(capsys, neuron_config, "intent-bert", "--text", "ok", "--text", "x" * (MAX_TEXT + 1))
    assert (code, out) == (1, [])
    assert err == [
        (
            f"invoke: error: {server.url}/v2/models/intent-bert/infer: HTTP 400: inputs[0].data[1]: text of "
            f"{MAX_TEXT + 1} characters exceeds the limit of {MAX_TEXT}"
        )
    ]


def test_a_model_of_its_own_stack_is_called_at_its_own_path(server, neuron_config, capsys):
    from tests.support.config_edits import without_fleets

    without_fleets(neuron_config)
    aws_fakes.create_stack(aws_fakes.session("dev"), "dev-intent-bert", {"Url": server.url})
    code, out, _ = invoke_cli(capsys, neuron_config, "intent-bert", "--text", "hi")
    assert code == 0 and out[0].split()[0] in LABELS


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_url_says_the_load_balancer_is_internal(neuron_config, capsys):
    url = f"http://127.0.0.1:{_closed_port()}"
    deploy_url(url)
    code, _, err = invoke_cli(capsys, neuron_config, "intent-bert", "--text", "hi")
    assert code == 1
    (line,) = err
    assert line.startswith(f"invoke: error: {url}/v2/models/intent-bert/infer: unreachable: ")
    assert "an internal load balancer answers only inside its VPC" in line


def test_a_missing_stack_or_output_names_it(neuron_config, capsys):
    code, _, err = invoke_cli(capsys, neuron_config, "intent-bert", "--text", "hi")
    assert (code, err) == (1, [f"invoke: error: {FLEET}: stack dev-{FLEET} not found (is dev deployed?)"])
    aws_fakes.create_stack(aws_fakes.session("dev"), f"dev-{FLEET}", {"Url": "http://127.0.0.1:9"})
    code, _, err = invoke_cli(capsys, neuron_config, "intent-bert", "--text", "hi")
    assert (code, err) == (1, [f"invoke: error: {FLEET}: stack dev-{FLEET} has no output {stack_outputs.MODEL_PATHS}"])


class _Busy(JsonHandler):
    """A load balancer in front of an overloaded (or starting) model: 503 with Retry-After `after`, then, from the
    `answer_at`-th request on, a valid answer."""

    after, answer_at, seen = "2", 3, 0

    def do_POST(self):  # http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).seen += 1
        if type(self).seen < self.answer_at:
            self.reply(
                503,
                json.dumps({"error": "overloaded: would not be answered within the SLO"}).encode(),
                {"Retry-After": self.after} if self.after is not None else {},
            )
            return
        outputs = [
            {"name": "logits", "datatype": "FP32", "shape": [1, 3], "data": [0.1, 0.7, 0.2]},
            {"name": "label", "datatype": "BYTES", "shape": [1], "data": ["neutral"]},
        ]
        self.reply(200, json.dumps({"outputs": outputs}).encode())


def _busy(after: str | None, answer_at: int) -> type[_Busy]:
    return type("Busy", (_Busy,), {"after": after, "answer_at": answer_at, "seen": 0})


def test_503_is_tried_again_after_retry_after(neuron_config, capsys, no_sleep):
    handler = _busy("2", answer_at=3)
    with serving(handler) as port:
        deploy_url(f"http://127.0.0.1:{port}")
        code, out, err = invoke_cli(capsys, neuron_config, "intent-bert", "--text", "hi")
    assert (code, out, handler.seen, no_sleep) == (
        0,
        ["neutral (neutral 0.700, positive 0.200, negative 0.100)"],
        3,
        [2.0, 2.0],
    )
    assert len(err) == 2 and err[0].endswith(
        "HTTP 503: overloaded: would not be answered within the SLO: trying again in 2 s (1 of 2)"
    )


def test_503_without_retry_after_backs_off_and_gives_up_with_advice(neuron_config, capsys, no_sleep):
    handler = _busy(None, answer_at=99)
    with serving(handler) as port:
        deploy_url(f"http://127.0.0.1:{port}")
        code, out, err = invoke_cli(capsys, neuron_config, "intent-bert", "--text", "hi", "--retries", "3")
    assert (code, out, handler.seen) == (1, [], 4)
    assert no_sleep == [invoke.BACKOFF_S, 2 * invoke.BACKOFF_S, 4 * invoke.BACKOFF_S]
    assert err[-1].startswith("invoke: error: ") and "HTTP 503" in err[-1]
    assert "(after 4 tries; the model is overloaded, or starting" in err[-1]
    assert err[-1].endswith("retry later or raise --retries)")


def test_retries_zero_gives_up_at_once(neuron_config, capsys, no_sleep):
    handler = _busy("1", answer_at=99)
    with serving(handler) as port:
        deploy_url(f"http://127.0.0.1:{port}")
        code, _, err = invoke_cli(capsys, neuron_config, "intent-bert", "--text", "hi", "--retries", "0")
    assert (code, handler.seen, no_sleep, len(err)) == (1, 1, [], 1)
    assert "(after 1 try;" in err[0]


def test_a_server_that_never_answers_times_out(neuron_config, capsys):
    with socket.socket() as listener:  # accepts (the kernel does), never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        deploy_url(f"http://127.0.0.1:{listener.getsockname()[1]}")
        code = cli.main(
            [
                "invoke",
                "--env",
                "dev",
                "--config-dir",
                str(neuron_config),
                "intent-bert",
                "--text",
                "hi",
                "--timeout",
                "0.5",
            ]
        )
    err = capsys.readouterr().err.splitlines()
    assert code == 1 and err[0].endswith("/v2/models/intent-bert/infer: no answer within 0.5 s (--timeout)")


def test_a_reply_outside_the_contract_fails(neuron_config, capsys):
    class Wrong(JsonHandler):
        def do_POST(self):  # http.server's naming
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.reply(
                200,
                json.dumps(
                    {"outputs": [{"name": "logits", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]}
                ).encode(),
            )

    with serving(Wrong) as port:
        deploy_url(f"http://127.0.0.1:{port}")
        code, _, err = invoke_cli(capsys, neuron_config, "intent-bert", "--text", "hi")
    assert code == 1
    assert err[0].endswith("not an answer of the text contract: output label missing (got logits)")


# ----------------------------------------------------------------------------- SageMaker: signed InvokeEndpoint on moto


@pytest.fixture
def triton_config(aws, config_copy):
    aws_fakes.with_deploy_roles(config_copy)
    for name in ("bert-large-classifier", "t5-spelling"):
        aws_fakes.deploy_triton(
            aws_fakes.session("dev"), "dev", name, f"111111111111.dkr.ecr.us-east-1.amazonaws.com/repo:{name}"
        )
    return config_copy


class Wire:
    """botocore's before-send hook on every session invoke creates: records each InvokeEndpoint request as sent
    (signed), and answers with the queued wire responses (status, headers, body) before moto does; once the
    queue is empty moto answers."""

    def __init__(self) -> None:
        self.requests: list = []
        self.responses: list[tuple[int, dict, bytes]] = []

    def __call__(self, request, **_kwargs):
        self.requests.append(request)
        if self.responses:
            status, headers, body = self.responses.pop(0)
            raw = _Raw(body)
            return AWSResponse(request.url, status, headers, raw)
        return None


class _Raw(io.BytesIO):
    def stream(self, **_kwargs):
        yield self.read()


@pytest.fixture
def wire(monkeypatch) -> Wire:
    hook = Wire()
    real = aws_sessions.session_for

    def session_for(*args, **kwargs):
        session = real(*args, **kwargs)
        session.events.register_first("before-send.sagemaker-runtime.InvokeEndpoint", hook)
        return session

    monkeypatch.setattr(invoke.aws_sessions, "session_for", session_for)
    return hook


def header(request, name: str) -> str:
    value = request.headers[name]
    return value.decode() if isinstance(value, bytes) else value


def moto_bodies() -> list:
    """The request bodies moto's sagemaker-runtime received, as JSON (it keys its answers by them; moto 5.2.5 files
    them under no endpoint name: the name is asserted on the request as sent)."""
    backend = sagemakerruntime_backends[aws_fakes.ACCOUNTS["dev"]]["us-east-1"]
    return [json.loads(json.loads(base64.b64decode(key))["Body"]) for keys in backend.results.values() for key in keys]


TEXTS = ("the service was great", "it broke on day one")
BERT_BATCH = {
    "model_name": "bert-large-classifier",
    "outputs": [
        {"name": "logits", "datatype": "FP32", "shape": [2, 2], "data": [[-1.5, 2.0], [0.25, -0.5]]},
        {"name": "label", "datatype": "BYTES", "shape": [2], "data": ["positive", "negative"]},
    ],
}


def test_a_classifier_on_sagemaker_gets_the_contract_body_signed_and_prints_labels(triton_config, wire, capsys):
    queue_replies(BERT_BATCH)
    code, out, err = invoke_cli(capsys, triton_config, "bert-large-classifier", "--text", TEXTS[0], "--text", TEXTS[1])
    assert (code, err) == (0, [])
    assert out == ["positive (positive 2.000, negative -1.500)", "negative (negative 0.250, positive -0.500)"]
    body = json.dumps(text_contract.request_body(list(TEXTS))).encode()
    assert moto_bodies() == [json.loads(body)]
    (request,) = wire.requests
    assert request.url.endswith("/endpoints/dev-bert-large-classifier/invocations")
    assert request.body == body
    assert header(request, "Content-Type") == "application/json"
    authorization = header(request, "Authorization")
    assert (
        authorization.startswith("AWS4-HMAC-SHA256 Credential=")
        and "/us-east-1/sagemaker/aws4_request" in authorization
    )
    assert json.loads(body) == {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2], "data": list(TEXTS)}]}


def test_text2text_prints_the_generated_text_and_json_the_raw_reply(triton_config, wire, capsys):
    reply = {
        "model_name": "t5-spelling",
        "outputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["this is spelled right"]}],
    }
    queue_replies(reply)
    code, out, _ = invoke_cli(capsys, triton_config, "t5-spelling", "--text", "ths is speled rigth")
    assert (code, out) == (0, ["this is spelled right"])
    code, out, _ = invoke_cli(capsys, triton_config, "t5-spelling", "--json", "--text", "ths is speled rigth")
    assert (code, json.loads("\n".join(out))) == (0, reply)


def test_a_component_on_a_shared_endpoint_is_named_in_the_call(aws, config_copy, wire, capsys):
    from rehearsal import moto_patches

    aws_fakes.with_deploy_roles(config_copy)
    with moto_patches.applied("sagemaker-variant-without-model", "sagemaker-inference-components"):
        aws_fakes.deploy_triton_component(
            aws_fakes.session("dev"),
            "dev",
            "bert-large-classifier",
            "111111111111.dkr.ecr.us-east-1.amazonaws.com/repo:b",
            "triton-shared",
        )
        queue_replies(
            {
                "outputs": [
                    {"name": "logits", "datatype": "FP32", "shape": [1, 2], "data": [0, 1]},
                    {"name": "label", "datatype": "BYTES", "shape": [1], "data": ["positive"]},
                ]
            }
        )
        code, out, _ = invoke_cli(capsys, config_copy, "bert-large-classifier", "--text", "fine")
    assert (code, out) == (0, ["positive (positive 1.000, negative 0.000)"])
    (request,) = wire.requests
    assert request.url.endswith("/endpoints/dev-triton-shared/invocations")
    assert header(request, "X-Amzn-SageMaker-Inference-Component") == "dev-bert-large-classifier"


def model_error(status: int, error: str) -> tuple[int, dict, bytes]:
    """InvokeEndpoint's answer when the container answered `status`: a 424 ModelError carrying it."""
    body = {
        "ErrorCode": "CLIENT_ERROR_FROM_MODEL" if status < 500 else "SERVER_ERROR_FROM_MODEL",
        "OriginalStatusCode": status,
        "OriginalMessage": json.dumps({"error": error}),
        "Message": f'Received client error ({status}) from primary with message "...".',
        "LogStreamArn": "arn:aws:logs:us-east-1:111111111111:log-group:/aws/sagemaker/Endpoints/x",
    }
    return (
        424,
        {"x-amzn-ErrorType": "ModelError:http://internal.amazon.com/coral/com.amazon.sagemaker/"},
        json.dumps(body).encode(),
    )


def aws_error(status: int, code: str, message: str) -> tuple[int, dict, bytes]:
    return (
        status,
        {"x-amzn-ErrorType": f"{code}:http://internal.amazon.com/coral/com.amazon.sagemaker/"},
        json.dumps({"message": message}).encode(),
    )


def test_a_model_error_is_one_line_with_the_containers_status_and_error(triton_config, wire, capsys, no_sleep):
    error = "inputs[0].data[0]: text of 9000 characters exceeds the limit of 8192"
    wire.responses.append(model_error(400, error))
    code, out, err = invoke_cli(capsys, triton_config, "bert-large-classifier", "--text", "x" * 9000)
    assert (code, out, no_sleep) == (1, [], [])
    assert err == [
        f"invoke: error: endpoint dev-bert-large-classifier: the model answered HTTP 400: {error} (ModelError)"
    ]


def test_a_containers_503_is_tried_again_with_backoff(triton_config, wire, capsys, no_sleep):
    queue_replies(
        {
            "outputs": [
                {"name": "logits", "datatype": "FP32", "shape": [1, 2], "data": [0.5, 0.25]},
                {"name": "label", "datatype": "BYTES", "shape": [1], "data": ["negative"]},
            ]
        }
    )
    wire.responses += [model_error(503, "overloaded")] * 2
    code, out, err = invoke_cli(capsys, triton_config, "bert-large-classifier", "--text", "hi")
    assert (code, out) == (0, ["negative (negative 0.500, positive 0.250)"]), err
    assert (len(wire.requests), no_sleep) == (3, [invoke.BACKOFF_S, 2 * invoke.BACKOFF_S])


NO_CAPACITY = (
    "Inference Component has no capacity to process this request. ApplicationAutoScaling may be in-progress "
    "(if configured) or try to increase the capacity by invoking UpdateInferenceComponentRuntimeConfig API."
)


def test_a_component_scaled_to_zero_is_waited_for_then_advised(triton_config, wire, capsys, no_sleep):
    wire.responses += [aws_error(400, "ValidationError", NO_CAPACITY)] * 3
    code, out, err = invoke_cli(capsys, triton_config, "t5-spelling", "--text", "hi", "--retries", "2")
    assert (code, out, len(wire.requests)) == (1, [], 3)
    assert no_sleep == [invoke.BACKOFF_S, 2 * invoke.BACKOFF_S]
    line = err[-1]
    assert "no copy of the model is running (its inference component scaled to zero)" in line
    assert "the request has started a copy, which takes minutes" in line and "(after 3 tries;" in line


def test_service_unavailable_and_throttling_are_tried_again(triton_config, wire, capsys, no_sleep):
    queue_replies({"outputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["ok"]}]})
    wire.responses += [
        aws_error(503, "ServiceUnavailable", "try again"),
        aws_error(400, "ThrottlingException", "slow down"),
    ]
    code, out, _ = invoke_cli(capsys, triton_config, "t5-spelling", "--text", "hi")
    assert (code, out, len(wire.requests), len(no_sleep)) == (0, ["ok"], 3, 2)


def test_other_sagemaker_errors_are_not_retried(triton_config, wire, capsys, no_sleep):
    wire.responses.append(
        aws_error(400, "ValidationError", "Endpoint dev-t5-spelling of account 111111111111 not found.")
    )
    code, _, err = invoke_cli(capsys, triton_config, "t5-spelling", "--text", "hi")
    assert (code, no_sleep) == (1, [])
    assert err == [
        "invoke: error: endpoint dev-t5-spelling: ValidationError: Endpoint dev-t5-spelling of account "
        "111111111111 not found."
    ]


def test_no_credentials_is_one_line(config_copy, capsys, monkeypatch, tmp_path):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    aws_fakes.with_deploy_roles(config_copy)
    code, _, err = invoke_cli(capsys, config_copy, "t5-spelling", "--text", "hi")
    assert code == 1 and len(err) == 1 and err[0].startswith("invoke: error: dev: cannot assume ")


# ----------------------------------------------------------------------------- --list


def test_list_prints_every_model_and_where_it_answers(triton_config, capsys):
    paths = {m: f"/v2/models/{m}" for m in ("intent-bert", "duplicate-bert")}
    aws_fakes.create_stack(
        aws_fakes.session("dev"),
        f"dev-{FLEET}",
        {"Url": "http://internal-lb.example", stack_outputs.MODEL_PATHS: stack_outputs.model_paths_value(paths)},
    )
    code, out, _ = invoke_cli(capsys, triton_config, "--list")
    header, *rows = out
    assert header.split() == ["MODEL", "KIND", "TASK", "SERVED", "AT"]
    table = {row.split()[0]: row for row in rows}
    assert table["bert-large-classifier"].split()[1:] == [
        "triton-sagemaker",
        "text-classification",
        "endpoint",
        "dev-bert-large-classifier",
    ]
    assert table["t5-spelling"].split()[1:3] == ["triton-sagemaker", "text2text-generation"]
    assert table["intent-bert"].endswith("http://internal-lb.example/v2/models/intent-bert/infer")
    assert table["duplicate-bert"].endswith("http://internal-lb.example/v2/models/duplicate-bert/infer")
    # intent-bert-inf2 has no stack here: named in its row, and the exit status says so.
    assert table["intent-bert-inf2"].endswith("not found: stack dev-intent-bert-inf2 not found (is dev deployed?)")
    assert code == 1 and len(rows) == 5


# ----------------------------------------------------------------------------- bad arguments: exit 2, one line


@pytest.mark.parametrize(
    "args, message",
    [
        (["nope", "--text", "x"], "unknown model 'nope'; known: bert-large-classifier, "),
        (["t5-spelling"], "--text: give at least one text (repeat --text for a batch)"),
        (["t5-spelling", "--text", "a", "--text", "  "], "--text #2: empty text"),
        ([], "MODEL: name the model to call (or --list to see them)"),
        (["--list", "t5-spelling"], "--list: lists every model of --env; give no MODEL nor --text with it"),
        (["t5-spelling", "--text", "a", "--retries", "-1"], "--retries: must be within 0..60, got -1"),
        (["t5-spelling", "--text", "a", "--timeout", "0"], "--timeout: must be a number of seconds > 0, got 0"),
        (
            ["t5-spelling", "--text", "a", "--role-arn", "arn:aws:iam::222222222222:role/x"],
            "--role-arn: arn:aws:iam::222222222222:role/x is in account 222222222222, not dev's account 111111111111",
        ),
    ],
)
def test_bad_arguments_are_one_line_exit_2(args, message, capsys):
    code = cli.main(["invoke", "--env", "dev", *args])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"invoke: error: {message}")


def test_unknown_environment_and_undeployed_model_are_exit_2(config_copy, capsys):
    assert cli.main(["invoke", "--env", "qa", "t5-spelling", "--text", "a"]) == 2
    assert capsys.readouterr().err.startswith("invoke: error: --env: unknown environment 'qa'")

    def staging_only(data: dict) -> None:
        data["deploy_in"] = ["staging"]
        data.get("environments", {}).pop("dev", None)

    edit_model(config_copy, "intent-bert-inf2", staging_only)
    assert (
        cli.main(["invoke", "--env", "dev", "--config-dir", str(config_copy), "intent-bert-inf2", "--text", "a"]) == 2
    )
    assert capsys.readouterr().err.startswith("invoke: error: intent-bert-inf2 is not deployed in dev")


# ----------------------------------------------------------------------------- the contract's pieces


def test_the_contract_reads_flat_or_nested_tensors_and_refuses_a_bare_string():
    from types import SimpleNamespace

    classifier = SimpleNamespace(name="c", source=SimpleNamespace(task="text-classification", labels=("a", "b", "c")))
    flat = {
        "outputs": [
            {"name": "logits", "datatype": "FP32", "shape": [2, 3], "data": [0, 1, 2, 5, 4, 3]},
            {"name": "label", "datatype": "BYTES", "shape": [2], "data": ["c", "a"]},
        ]
    }
    nested = {
        "outputs": [
            {**flat["outputs"][0], "data": [[0, 1, 2], [5, 4, 3]]},
            {**flat["outputs"][1], "data": [["c"], ["a"]]},
        ]
    }
    for reply in (flat, nested):
        answers = text_contract.read_reply(json.dumps(reply).encode(), classifier, 2)
        assert [a.line(top=2) for a in answers] == ["c (c 2.000, b 1.000)", "a (a 5.000, b 4.000)"]
    with pytest.raises(TypeError, match="not one string"):
        text_contract.request_body("one text")
    assert text_contract.request_body(["x"], outputs=["label"])["outputs"] == [{"name": "label"}]
    unknown = SimpleNamespace(name="u", source=SimpleNamespace(task="summarization", labels=()))
    with pytest.raises(ValueError, match="no text contract for task 'summarization'"):
        text_contract.expected_outputs(unknown, 1)


@pytest.mark.parametrize("value, seconds", [("3", 3.0), ("0", 0.0), ("soon", None), (None, None), ("-2", 0.0)])
def test_retry_after_reads_seconds_and_ignores_what_it_cannot_read(value, seconds):
    assert invoke._retry_after(value) == seconds


def test_retry_after_as_an_http_date_and_waits_are_capped(no_sleep):
    import email.utils
    import time

    later = email.utils.formatdate(time.time() + 120, usegmt=True)
    assert 100 < invoke._retry_after(later) <= 120
    calls = []

    def call(body: bytes) -> bytes:
        calls.append(body)
        if len(calls) == 1:
            raise invoke.Retryable("busy", retry_after=3600.0)
        return b"ok"

    assert invoke.with_retries(call, b"{}", 1) == b"ok"
    assert no_sleep == [invoke.MAX_DELAY_S]
