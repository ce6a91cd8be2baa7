"""`smoke` finds endpoints from stack outputs and checks interface and latency: the Neuron path against
the real serving app (container/neuron/serving/serve.py with a tiny CPU artifact) over HTTP, the Triton path
against moto's sagemaker-runtime with configured v2 replies. The path through the in-VPC smoke probe runs
the probe's real handler in-process (moto 5 executes Lambda code only in Docker) against the same server.
intent-bert is served by the shipped neuron-cores fleet intent-pack: smoke reaches it through the fleet
stack's Url and its ModelPaths output (and, with the fleet removed, through a stack of its own)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import botocore.exceptions
import pytest
import yaml

from inferstack import cli
from inferstack.aws import stack_outputs
from inferstack.config import load
from inferstack.delivery import smoke
from inferstack.delivery.smoke_probe import handler as probe_handler
from tests.support import aws_fakes
from tests.support.cli import run
from tests.support.config_edits import without_fleets
from tests.support.neuron_server import LABELS, ServerProcess
from tests.support.smoke_stacks import FLEET, deploy_url, edit_model, queue_replies


def dev_slo(p99_ms: float):
    """A dev SLO (and profile) loose enough for a shared CI machine, or impossibly tight."""

    def change(data: dict) -> None:
        data["environments"]["dev"]["slo"] = {**data["environments"]["dev"].get("slo", {}), "p99_latency_ms": p99_ms}
        for point in data["throughput_profile"].values():
            point["p99_latency_ms"] = min(point["p99_latency_ms"], p99_ms)

    return change


def smoke_cli(capsys, config_dir: Path, *args: str) -> tuple[int, list[str], list[str]]:
    code = cli.main(["smoke", "--env", "dev", "--config-dir", str(config_dir), "--timeout", "20", *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


# ----------------------------------------------------------------------------- Neuron: the real server over HTTP


@pytest.fixture(scope="module")
def server(artifact):
    process = ServerProcess(artifact, args=("--model-name", "intent-bert"))
    process.wait_ready()
    yield process
    process.stop()


@pytest.fixture
def neuron_config(config_copy):
    """intent-bert with the tiny artifact's labels; a dev stack whose Url output is the local server."""
    aws_fakes.with_deploy_roles(config_copy)
    edit_model(config_copy, "intent-bert", lambda d: d["source"].update(labels=list(LABELS)))
    edit_model(config_copy, "intent-bert", dev_slo(5000))
    return config_copy


def test_neuron_model_against_the_real_server(aws, server, neuron_config, capsys):
    deploy_url(server.url)
    code, out, err = smoke_cli(capsys, neuron_config, "--model", "intent-bert")
    assert code == 0, out + err
    (line,) = out
    assert line.startswith("intent-bert: ok: p50 ")
    assert f"(SLO p99 5000 ms), {server.url}/v2/models/intent-bert/infer" in line


def test_too_tight_slo_fails_with_the_latencies(aws, server, neuron_config, capsys):
    edit_model(neuron_config, "intent-bert", dev_slo(0.001))
    deploy_url(server.url)
    code, out, _ = smoke_cli(capsys, neuron_config, "--model", "intent-bert")
    assert code == 1
    (line,) = out
    assert line.startswith("intent-bert: FAIL: latency above the SLO: p50 ")
    assert "(SLO p99 0.001 ms)" in line


def test_latency_report_prints_the_latencies_without_failing(aws, server, neuron_config, capsys):
    """--latency report (the CLI rehearsal's, against an emulator): the same too-tight SLO passes, and says
    its latency was not checked."""
    edit_model(neuron_config, "intent-bert", dev_slo(0.001))
    deploy_url(server.url)
    code, out, err = smoke_cli(capsys, neuron_config, "--model", "intent-bert", "--latency", "report")
    assert code == 0, out + err
    (line,) = out
    assert line.startswith("intent-bert: ok: p50 ") and "(SLO p99 0.001 ms)" in line
    assert line.endswith("latency reported, not checked (--latency report)")


def test_wrong_model_name_fails_with_the_servers_answer(aws, server, neuron_config, capsys):
    without_fleets(neuron_config)  # a dedicated model, on a stack of its own
    edit_model(neuron_config, "intent-bert", lambda d: d.update(name="intent-other"))
    deploy_url(server.url, model="intent-other")
    code, out, _ = smoke_cli(capsys, neuron_config, "--model", "intent-other")
    assert code == 1
    (line,) = out
    assert line.startswith(f"intent-other: FAIL: HTTP 404 from {server.url}/v2/models/intent-other/infer")


def test_interface_mismatch_fails(aws, server, config_copy, capsys):
    aws_fakes.with_deploy_roles(config_copy)
    edit_model(config_copy, "intent-bert", dev_slo(5000))  # the shipped 5 labels; the artifact has 3
    deploy_url(server.url)
    code, out, _ = smoke_cli(capsys, config_copy, "--model", "intent-bert")
    assert code == 1
    assert out == ["intent-bert: FAIL: output logits: shape [1, 3], expected [1, 5]"]


def test_missing_stack_and_unreachable_url_fail_per_model(aws, neuron_config, capsys):
    code, out, _ = smoke_cli(capsys, neuron_config, "--model", "intent-bert")
    assert (code, out) == (1, ["intent-bert: FAIL: stack dev-intent-pack not found (is dev deployed?)"])
    deploy_url("http://127.0.0.1:9")  # discard port: nothing listens
    code, out, _ = smoke_cli(capsys, neuron_config, "--model", "intent-bert")
    assert code == 1
    assert out[0].startswith("intent-bert: FAIL: http://127.0.0.1:9/v2/models/intent-bert/infer: ")


def test_every_member_of_a_fleet_is_smoked_through_the_fleets_stack(aws, server, neuron_config, capsys):
    """One stack, one load balancer, a path per member: the test server serves intent-bert only, so
    duplicate-bert's request reaches the same Url under its own path and gets the server's 404."""
    deploy_url(server.url)
    code, out, _ = smoke_cli(capsys, neuron_config, "--model", "intent-bert", "--model", "duplicate-bert")
    assert code == 1
    duplicate, intent = out  # name order
    assert intent.startswith("intent-bert: ok: ") and intent.endswith(f"{server.url}/v2/models/intent-bert/infer")
    assert duplicate.startswith(f"duplicate-bert: FAIL: HTTP 404 from {server.url}/v2/models/duplicate-bert/infer")


def test_a_fleet_stack_without_the_models_path_fails_naming_the_output(aws, neuron_config, capsys):
    aws_fakes.create_stack(aws_fakes.session("dev"), f"dev-{FLEET}", {"Url": "http://127.0.0.1:9"})
    code, out, _ = smoke_cli(capsys, neuron_config, "--model", "intent-bert")
    assert (code, out) == (1, [f"intent-bert: FAIL: stack dev-{FLEET} has no output {stack_outputs.MODEL_PATHS}"])
    aws_fakes.session("dev").client("cloudformation").delete_stack(StackName=f"dev-{FLEET}")
    aws_fakes.create_stack(
        aws_fakes.session("dev"),
        f"dev-{FLEET}",
        {"Url": "http://127.0.0.1:9", stack_outputs.MODEL_PATHS: '{"duplicate-bert": "/v2/models/duplicate-bert"}'},
    )
    code, out, _ = smoke_cli(capsys, neuron_config, "--model", "intent-bert")
    assert code == 1
    assert out[0].startswith(
        f"intent-bert: FAIL: stack dev-{FLEET} output {stack_outputs.MODEL_PATHS} names no path for it"
    )


# ----------------------------------------------------------------------------- Neuron through the smoke probe

PROBE = "dev-Foundation-SmokeProbe19B77F8D-Zx9Yw8Vu7Ts6"


class InProcessLambda:
    """The Lambda client smoke uses, for the probe function only: invoke runs the probe's real handler here
    the way Lambda runs it (event in; the JSON result, or an unhandled exception as FunctionError, out).
    Any other function name gets Lambda's ResourceNotFoundException."""

    def __init__(self, function_name: str) -> None:
        self.function_name = function_name
        self.events: list[dict] = []

    def invoke(self, *, FunctionName: str, InvocationType: str, Payload: bytes) -> dict:  # boto3's names
        assert InvocationType == "RequestResponse"
        if FunctionName != self.function_name:
            raise botocore.exceptions.ClientError(
                {"Error": {"Code": "ResourceNotFoundException", "Message": f"Function not found: {FunctionName}"}},
                "Invoke",
            )
        event = json.loads(Payload)
        self.events.append(event)
        try:
            result = probe_handler.handler(event, None)
        except Exception as exc:  # what Lambda reports for an unhandled exception
            error = {"errorMessage": str(exc), "errorType": type(exc).__name__}
            return {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": io.BytesIO(json.dumps(error).encode())}
        return {"StatusCode": 200, "Payload": io.BytesIO(json.dumps(result).encode())}


@pytest.fixture
def probe_lambda(monkeypatch):
    """The probe as deployed, but allowed to call this machine (its VPC here is the loopback network)."""
    monkeypatch.setenv("PROBE_ALLOWED_HOST_SUFFIXES", "127.0.0.1")
    monkeypatch.setenv("PROBE_ALLOWED_NETWORKS", "127.0.0.0/8")
    fake = InProcessLambda(PROBE)
    monkeypatch.setattr(smoke, "lambda_client", lambda session, timeout: fake)
    return fake


def deploy_foundation(function: str = PROBE) -> None:
    aws_fakes.create_stack(aws_fakes.session("dev"), "dev-Foundation", {stack_outputs.PROBE_FUNCTION_NAME: function})


def test_internal_load_balancer_is_reached_through_the_probe(aws, server, neuron_config, probe_lambda, capsys):
    deploy_url(server.url)
    deploy_foundation()
    code, out, err = smoke_cli(capsys, neuron_config, "--model", "intent-bert")  # --via auto
    assert code == 0, out + err
    (line,) = out
    url = f"{server.url}/v2/models/intent-bert/infer"
    assert line.startswith("intent-bert: ok: p50 ")
    assert line.endswith(f"(SLO p99 5000 ms), {url} via probe {PROBE}")
    assert len(probe_lambda.events) == 1 + smoke.DEFAULT_REQUESTS  # one untimed, then the timed ones
    assert {(e["url"], e["timeout"]) for e in probe_lambda.events} == {(url, 20.0)}
    assert probe_lambda.events[0]["body"] == smoke.probe_for(load(neuron_config).model("intent-bert")).body


def test_latency_is_the_probes_and_checked_against_the_slo(aws, server, neuron_config, probe_lambda, capsys):
    edit_model(neuron_config, "intent-bert", dev_slo(0.001))
    deploy_url(server.url)
    deploy_foundation()
    code, out, _ = smoke_cli(capsys, neuron_config, "--model", "intent-bert", "--via", "lambda")
    assert code == 1
    (line,) = out
    assert line.startswith("intent-bert: FAIL: latency above the SLO: p50 ") and line.endswith(f"via probe {PROBE}")


def test_via_direct_never_invokes_the_probe(aws, server, neuron_config, probe_lambda, capsys):
    deploy_url(server.url)
    deploy_foundation()
    code, out, err = smoke_cli(capsys, neuron_config, "--model", "intent-bert", "--via", "direct")
    assert code == 0, out + err
    assert out[0].endswith(f"{server.url}/v2/models/intent-bert/infer")
    assert probe_lambda.events == []


def test_auto_calls_a_public_load_balancer_directly(aws, server, neuron_config, probe_lambda, capsys):
    path = neuron_config / "environments.yaml"
    data = yaml.safe_load(path.read_text())
    data["environments"]["dev"]["defaults"].update(
        public_load_balancer=True,
        certificate_arn="arn:aws:acm:us-east-1:111111111111:certificate/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b",
    )
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    deploy_url(server.url)
    deploy_foundation()
    code, out, err = smoke_cli(capsys, neuron_config, "--model", "intent-bert")
    assert code == 0, out + err
    assert probe_lambda.events == []


def test_via_lambda_without_a_probe_fails_naming_the_output(aws, server, neuron_config, probe_lambda, capsys):
    deploy_url(server.url)
    code, out, _ = smoke_cli(capsys, neuron_config, "--model", "intent-bert", "--via", "lambda")
    assert (code, out) == (
        1,
        [
            "intent-bert: FAIL: no smoke probe: stack dev-Foundation has no output "
            "SmokeProbeFunctionName (deploy the foundation, or use --via direct from inside the VPC)"
        ],
    )


def test_wrong_model_name_through_the_probe_fails_with_the_status(aws, server, neuron_config, probe_lambda, capsys):
    without_fleets(neuron_config)
    edit_model(neuron_config, "intent-bert", lambda d: d.update(name="intent-other"))
    deploy_url(server.url, model="intent-other")
    deploy_foundation()
    code, out, _ = smoke_cli(capsys, neuron_config, "--model", "intent-other")
    assert code == 1
    (line,) = out
    assert line.startswith(
        f"intent-other: FAIL: HTTP 404 from {server.url}/v2/models/intent-other/infer (via probe {PROBE}): "
    )


def test_the_probe_refusing_the_url_fails_with_its_reason(
    aws, server, neuron_config, probe_lambda, capsys, monkeypatch
):
    monkeypatch.setenv("PROBE_ALLOWED_NETWORKS", "10.10.0.0/16")  # the real dev VPC: not this machine
    deploy_url(server.url)
    deploy_foundation()
    code, out, _ = smoke_cli(capsys, neuron_config, "--model", "intent-bert")
    assert (code, out) == (
        1,
        [
            f"intent-bert: FAIL: probe {PROBE}: host 127.0.0.1 resolves to 127.0.0.1, outside "
            f"the allowed networks (10.10.0.0/16)"
        ],
    )


def test_unreachable_server_through_the_probe_is_one_line(aws, neuron_config, probe_lambda, capsys):
    deploy_url("http://127.0.0.1:9")  # discard port: nothing listens
    deploy_foundation()
    code, out, _ = smoke_cli(capsys, neuron_config, "--model", "intent-bert")
    assert (code, out) == (
        1,
        [
            f"intent-bert: FAIL: probe {PROBE}: http://127.0.0.1:9/v2/models/intent-bert/infer: "
            f"connection refused (127.0.0.1:9)"
        ],
    )


def test_a_missing_or_crashing_probe_function_fails_cleanly(
    aws, server, neuron_config, probe_lambda, capsys, monkeypatch
):
    deploy_url(server.url)
    deploy_foundation("dev-Foundation-SmokeProbe-deleted")
    code, out, _ = smoke_cli(capsys, neuron_config, "--model", "intent-bert")
    assert code == 1
    assert out[0].startswith(
        "intent-bert: FAIL: probe dev-Foundation-SmokeProbe-deleted: An error occurred (ResourceNotFoundException)"
    )

    def crash(*args, **kwargs):
        raise RuntimeError("probe bug")

    monkeypatch.setattr(probe_handler, "post_json", crash)
    aws_fakes.session("dev").client("cloudformation").delete_stack(StackName="dev-Foundation")
    deploy_foundation()
    code, out, _ = smoke_cli(capsys, neuron_config, "--model", "intent-bert")
    assert (code, out) == (1, [f"intent-bert: FAIL: probe {PROBE} failed (Unhandled): probe bug"])


class CannedLambda:
    """For the malformed results no real probe returns: what smoke makes of them."""

    def __init__(self, payload: bytes, function_error: str | None = None) -> None:
        self.response = {"StatusCode": 200, "Payload": io.BytesIO(payload)}
        if function_error:
            self.response["FunctionError"] = function_error

    def invoke(self, **kwargs) -> dict:
        return self.response


@pytest.mark.parametrize(
    "payload, error, message",
    [
        (b"Task timed out", None, "probe p: result is not JSON: b'Task timed out'"),
        (
            b'{"errorMessage": "2026-01-01 Task timed out after 60.00 seconds", "errorType": "Sandbox.Timedout"}',
            "Unhandled",
            "probe p failed (Unhandled): 2026-01-01 Task timed out after 60.00 seconds",
        ),
        (b"[1, 2]", None, "probe p: unexpected result [1, 2]"),
        (b'{"status": "200"}', None, 'probe p: result without status and latency_ms: {"status": "200"}'),
    ],
)
def test_malformed_probe_results_are_one_line_failures(payload, error, message):
    send = smoke.probe_sender(CannedLambda(payload, error), "p", "http://lb/v2/models/m/infer", 5)
    with pytest.raises(smoke.SmokeFailure) as failed:
        send(b"{}")
    assert str(failed.value) == message


def test_role_arn_is_assumed_instead_of_the_deploy_role(aws, server, config_copy, capsys):
    """No deploy roles in the config: only --role-arn reaches the account the stacks are in (moto keeps the
    accounts apart by the assumed role's credentials)."""
    edit_model(config_copy, "intent-bert", lambda d: d["source"].update(labels=list(LABELS)))
    edit_model(config_copy, "intent-bert", dev_slo(5000))
    deploy_url(server.url)
    code, out, _ = smoke_cli(capsys, config_copy, "--model", "intent-bert")
    assert (code, out) == (1, ["intent-bert: FAIL: stack dev-intent-pack not found (is dev deployed?)"])
    code, out, err = smoke_cli(
        capsys, config_copy, "--model", "intent-bert", "--role-arn", "arn:aws:iam::111111111111:role/inferstack-smoke"
    )
    assert code == 0, out + err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--role-arn", "inferstack-smoke"], "smoke: error: --role-arn: not an IAM role ARN: 'inferstack-smoke'"),
        (
            ["--role-arn", "arn:aws:iam::222222222222:role/inferstack-smoke"],
            "smoke: error: --role-arn: arn:aws:iam::222222222222:role/inferstack-smoke is in account 222222222222, "
            "not dev's account 111111111111",
        ),
    ],
)
def test_bad_role_arn_is_one_line_exit_2(args, message, capsys):
    assert cli.main(["smoke", "--env", "dev", *args]) == 2
    assert capsys.readouterr().err.splitlines() == [message]


def test_bad_via_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["smoke", "--env", "dev", "--via", "ssh"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "python -m inferstack smoke: error: argument --via: invalid choice: 'ssh' (choose from 'auto', 'lambda', "
        "'direct')"
    ]


# ----------------------------------------------------------------------------- Triton: moto sagemaker-runtime


@pytest.fixture
def triton_config(aws, config_copy):
    aws_fakes.with_deploy_roles(config_copy)
    for name in ("bert-large-classifier", "t5-spelling"):
        edit_model(config_copy, name, dev_slo(5000))
        aws_fakes.deploy_triton(
            aws_fakes.session("dev"), "dev", name, f"111111111111.dkr.ecr.us-east-1.amazonaws.com/repo:{name}"
        )
    return config_copy


BERT_REPLY = {
    "model_name": "bert-large-classifier",
    "outputs": [
        {"name": "logits", "datatype": "FP32", "shape": [1, 2], "data": [0.1, 0.9]},
        {"name": "label", "datatype": "BYTES", "shape": [1], "data": ["positive"]},
    ],
}
T5_REPLY = {
    "model_name": "t5-spelling",
    "outputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["inferstack smoke test"]}],
}


def test_every_model_is_sent_the_text_contract_and_its_tasks_outputs_are_expected(triton_config):
    """Triton models too: their endpoints default to the ensemble that tokenizes in the server, so smoke (and
    the load tests and profiles built on its request) send what an application sends, not token ids."""
    project = load(triton_config)
    for name in ("bert-large-classifier", "t5-spelling", "intent-bert"):
        assert smoke.probe_for(project.model(name)).body == {
            "inputs": [
                {"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [f"inferstack smoke test of {name}"]}
            ]
        }
    bert = smoke.probe_for(project.model("bert-large-classifier"))
    assert [(o.name, o.datatype, o.shape) for o in bert.outputs] == [
        ("logits", "FP32", (1, 2)),
        ("label", "BYTES", (1,)),
    ]
    t5 = smoke.probe_for(project.model("t5-spelling"))
    assert [(o.name, o.datatype, o.shape) for o in t5.outputs] == [("text", "BYTES", (1,))]
    intent = smoke.probe_for(project.model("intent-bert"))
    assert [(o.name, o.shape) for o in intent.outputs] == [("logits", (1, 5)), ("label", (1,))]


def test_triton_endpoints_pass_with_valid_v2_replies(triton_config, capsys):
    queue_replies(BERT_REPLY, T5_REPLY)  # models run in name order
    code, out, err = smoke_cli(capsys, triton_config, "--model", "bert-large-classifier", "--model", "t5-spelling")
    assert code == 0, out + err
    assert [line.split(": ok: ")[0] for line in out] == ["bert-large-classifier", "t5-spelling"]
    assert out[0].endswith("(SLO p99 5000 ms), endpoint dev-bert-large-classifier")


def test_triton_wrong_reply_fails_and_the_others_still_run(triton_config, capsys):
    queue_replies(
        {
            "outputs": [
                {"name": "logits", "datatype": "FP16", "shape": [1, 2], "data": [0, 1]},
                {"name": "label", "datatype": "BYTES", "shape": [1], "data": ["positive"]},
            ]
        },
        T5_REPLY,
    )
    code, out, _ = smoke_cli(capsys, triton_config, "--model", "bert-large-classifier", "--model", "t5-spelling")
    assert code == 1
    assert out[0] == "bert-large-classifier: FAIL: output logits: datatype FP16, expected FP32"
    assert out[1].startswith("t5-spelling: ok: ")


def test_triton_non_json_reply_fails(triton_config, capsys):
    code, out, _ = smoke_cli(capsys, triton_config, "--model", "t5-spelling")  # moto's canned "body"
    assert (code, out) == (1, ["t5-spelling: FAIL: reply is not JSON: b'body'"])


# ----------------------------------------------------------------------------- Triton on a fleet's shared endpoint


@pytest.fixture
def component_config(aws, config_copy):
    """dev's Triton models as inference components on the triton-shared fleet's endpoint (moto models them
    with rehearsal.moto_patches' named patches, in this process)."""
    from rehearsal import moto_patches

    aws_fakes.with_deploy_roles(config_copy)
    assert load(config_copy).fleet_of("bert-large-classifier", "dev") == "triton-shared"
    with moto_patches.applied("sagemaker-variant-without-model", "sagemaker-inference-components"):
        for name in ("bert-large-classifier", "t5-spelling"):
            edit_model(config_copy, name, dev_slo(5000))
            aws_fakes.deploy_triton_component(
                aws_fakes.session("dev"),
                "dev",
                name,
                f"111111111111.dkr.ecr.us-east-1.amazonaws.com/repo:{name}",
                "triton-shared",
            )
        yield config_copy


def test_components_are_invoked_on_the_shared_endpoint_by_name(component_config, capsys):
    queue_replies(BERT_REPLY, T5_REPLY)  # the wake-up requests come first, in name order, and are the same
    code, out, err = smoke_cli(capsys, component_config, "--model", "bert-large-classifier", "--model", "t5-spelling")
    assert code == 0, out + err
    assert out[0].endswith("(SLO p99 5000 ms), endpoint dev-triton-shared component dev-bert-large-classifier")
    assert out[1].endswith("endpoint dev-triton-shared component dev-t5-spelling")


class _Clock:
    def __init__(self) -> None:
        self.now, self.sleeps = 0.0, []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class _Runtime:
    """sagemaker-runtime for one test: a component answers that it has no copy (the ValidationError of a
    component scaled to zero) until `ready_at[component]` on `clock`, then a valid reply; records each call."""

    def __init__(self, replies: dict[str, dict], ready_at: dict[str, float], clock: _Clock) -> None:
        self.replies, self.ready_at, self.clock, self.calls = replies, ready_at, clock, []

    def invoke_endpoint(self, **kwargs):
        component = kwargs.get("InferenceComponentName")
        self.calls.append((kwargs["EndpointName"], component))
        if self.clock.now < self.ready_at[component]:
            raise botocore.exceptions.ClientError(
                {
                    "Error": {
                        "Code": "ValidationError",
                        "Message": (
                            "Inference Component has no capacity to process this request. "
                            "ApplicationAutoScaling may be in-progress (if configured) or try to increase the capacity "
                            "by invoking UpdateInferenceComponentRuntimeConfig API."
                        ),
                    }
                },
                "InvokeEndpoint",
            )
        return {"Body": io.BytesIO(json.dumps(self.replies[component]).encode())}


class _Session:
    """A boto3 session whose sagemaker-runtime is `runtime`, everything else moto's."""

    def __init__(self, runtime: _Runtime) -> None:
        self.runtime, self.real = runtime, aws_fakes.session("dev")

    def client(self, service: str, **kwargs):
        return self.runtime if service == "sagemaker-runtime" else self.real.client(service, **kwargs)


def test_cold_starts_of_every_component_begin_together_and_are_waited_out(component_config, capsys, monkeypatch):
    """A component scaled to zero answers "no capacity" until a copy is up: every component is sent one
    request before any is checked (their cold starts overlap), then each first answer is awaited."""
    clock = _Clock()
    runtime = _Runtime(
        {"dev-bert-large-classifier": BERT_REPLY, "dev-t5-spelling": T5_REPLY},
        {"dev-bert-large-classifier": 30.0, "dev-t5-spelling": 20.0},
        clock,
    )
    monkeypatch.setattr(smoke.aws_sessions, "session_for", lambda *args, **kwargs: _Session(runtime))
    monkeypatch.setattr(smoke.time, "sleep", clock.sleep)
    monkeypatch.setattr(smoke.time, "monotonic", lambda: clock.now)
    code, out, err = smoke_cli(capsys, component_config, "--model", "bert-large-classifier", "--model", "t5-spelling")
    assert code == 0, out + err
    components = [c for _, c in runtime.calls]
    assert components[:2] == ["dev-bert-large-classifier", "dev-t5-spelling"]  # the wake-up pass
    assert {e for e, _ in runtime.calls} == {"dev-triton-shared"}
    assert clock.sleeps == [smoke.COLD_START_POLL_S] * 2  # bert's copy is up at 30 s; t5's was by then
    assert out[0].endswith(f"first answer after a {2 * smoke.COLD_START_POLL_S:.0f} s cold start")
    assert "cold start" not in out[1]


def test_a_cold_start_longer_than_the_slo_allows_fails(component_config, capsys, monkeypatch):
    clock = _Clock()
    runtime = _Runtime({"dev-t5-spelling": T5_REPLY}, {"dev-t5-spelling": float("inf")}, clock)
    monkeypatch.setattr(smoke.aws_sessions, "session_for", lambda *args, **kwargs: _Session(runtime))
    monkeypatch.setattr(smoke.time, "sleep", clock.sleep)
    monkeypatch.setattr(smoke.time, "monotonic", lambda: clock.now)
    allowed = load(component_config).model("t5-spelling").slo_for("dev").cold_start_seconds
    code, out, _ = smoke_cli(capsys, component_config, "--model", "t5-spelling")
    assert code == 1
    (line,) = out
    assert line.startswith("t5-spelling: FAIL: no copy after ") and f"(cold start allowed: {allowed:g} s)" in line
    assert "has no capacity to process this request" in line
    assert sum(clock.sleeps) <= allowed


def test_without_an_allowed_cold_start_no_capacity_fails_at_once():
    def send(body: bytes):
        raise smoke.NoCapacity("endpoint e component c: Inference Component has no capacity to process this request.")

    sleeps: list[float] = []
    with pytest.raises(smoke.SmokeFailure, match=r"no copy after 0 s \(cold start allowed: 0 s\)"):
        smoke.first_reply(send, b"{}", 0.0, sleep=sleeps.append, clock=lambda: 0.0)
    assert sleeps == []


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env", "qa"], "smoke: error: --env: unknown environment 'qa'; known: dev, staging, prod"),
        (["--env", "dev", "--timeout", "0"], "smoke: error: --timeout must be > 0 and --requests >= 1"),
        (
            ["--env", "dev", "--model", "nope"],
            "smoke: error: --model: unknown model(s) nope; known: "
            "bert-large-classifier, duplicate-bert, intent-bert, intent-bert-inf2, "
            "t5-spelling",
        ),
    ],
)
def test_bad_arguments_are_one_line_exit_2(args, message, capsys):
    assert cli.main(["smoke", *args]) == 2
    assert capsys.readouterr().err.splitlines() == [message]


def test_pipeline_command_line_without_credentials_fails_cleanly(tmp_path):
    """Exactly what the pipeline's post-deploy step runs, with no AWS reachable: per-model FAIL lines,
    exit 1, no traceback."""
    env = {
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    result = run("-m", "inferstack", "smoke", "--env", "dev", "--timeout", "2", env=env)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "bert-large-classifier",
        "duplicate-bert",
        "intent-bert",
        "intent-bert-inf2",
        "t5-spelling",
    ]
    assert all(": FAIL: " in line for line in lines), lines
