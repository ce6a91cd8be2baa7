"""`smoke` finds endpoints from stack outputs and checks interface and latency: the Neuron path against
the real serving app (container/neuron/serve.py with a tiny CPU artifact) over HTTP, the Triton path
against moto's sagemaker-runtime with configured v2 replies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests
import yaml

from inferstack import cli, smoke
from inferstack.config import load
from tests import aws_fakes
from tests.container.conftest import LABELS, ServerProcess, artifact, tiny_bert  # noqa: F401 (fixtures)
from tests.test_cli import run


def edit_model(config_dir: Path, name: str, change) -> None:
    path = config_dir / f"{name}.yaml"
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


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
def server(artifact):  # noqa: F811 (the fixture imported above)
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


def deploy_url(url: str, model: str = "intent-bert") -> None:
    aws_fakes.create_stack(aws_fakes.session("dev"), f"dev-{model}", {"Url": url})


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


def test_wrong_model_name_fails_with_the_servers_answer(aws, server, neuron_config, capsys):
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
    assert (code, out) == (1, ["intent-bert: FAIL: stack dev-intent-bert not found (is dev deployed?)"])
    deploy_url("http://127.0.0.1:9")  # discard port: nothing listens
    code, out, _ = smoke_cli(capsys, neuron_config, "--model", "intent-bert")
    assert code == 1
    assert out[0].startswith("intent-bert: FAIL: http://127.0.0.1:9/v2/models/intent-bert/infer: ")


# ----------------------------------------------------------------------------- Triton: moto sagemaker-runtime

def queue_replies(*bodies: dict | str) -> None:
    """moto answers InvokeEndpoint from this queue, one entry per distinct request (then repeats it)."""
    results = [{"Body": b if isinstance(b, str) else json.dumps(b), "ContentType": "application/json"}
               for b in bodies]
    response = requests.post("http://motoapi.amazonaws.com/moto-api/static/sagemaker/endpoint-results",
                             json={"account_id": aws_fakes.ACCOUNTS["dev"], "region": "us-east-1",
                                   "results": results}, timeout=10)
    assert response.status_code == 201, response.text


@pytest.fixture
def triton_config(aws, config_copy):
    aws_fakes.with_deploy_roles(config_copy)
    for name in ("bert-large-classifier", "t5-spelling"):
        edit_model(config_copy, name, dev_slo(5000))
        aws_fakes.deploy_triton(aws_fakes.session("dev"), "dev", name,
                                f"111111111111.dkr.ecr.us-east-1.amazonaws.com/repo:{name}")
    return config_copy


BERT_REPLY = {"model_name": "bert-large-classifier", "outputs": [
    {"name": "logits", "datatype": "FP32", "shape": [1, 2], "data": [0.1, 0.9]}]}
T5_REPLY = {"model_name": "t5-spelling", "outputs": [
    {"name": "output_ids", "datatype": "INT64", "shape": [1, 16], "data": list(range(16))}]}


def test_triton_requests_follow_the_tensor_interface(triton_config):
    project = load(triton_config)
    probe = smoke.probe_for(project.model("bert-large-classifier"))
    assert [(i["name"], i["datatype"], i["shape"]) for i in probe.body["inputs"]] == [
        ("input_ids", "INT64", [1, 512]), ("attention_mask", "INT64", [1, 512]), ("token_type_ids", "INT64", [1, 512])]
    assert probe.body["inputs"][0]["data"][:5] == [101, 7592, 2088, 102, 0]
    assert [(o.name, o.datatype, o.shape) for o in probe.outputs] == [("logits", "FP32", (1, 2))]
    t5 = smoke.probe_for(project.model("t5-spelling"))
    assert [(o.name, o.datatype, o.shape) for o in t5.outputs] == [("output_ids", "INT64", (1, 16))]


def test_triton_endpoints_pass_with_valid_v2_replies(triton_config, capsys):
    queue_replies(BERT_REPLY, T5_REPLY)  # models run in name order
    code, out, err = smoke_cli(capsys, triton_config, "--model", "bert-large-classifier", "--model", "t5-spelling")
    assert code == 0, out + err
    assert [line.split(": ok: ")[0] for line in out] == ["bert-large-classifier", "t5-spelling"]
    assert out[0].endswith("(SLO p99 5000 ms), endpoint dev-bert-large-classifier")


def test_triton_wrong_reply_fails_and_the_others_still_run(triton_config, capsys):
    queue_replies({"outputs": [{"name": "logits", "datatype": "FP16", "shape": [1, 2], "data": [0, 1]}]}, T5_REPLY)
    code, out, _ = smoke_cli(capsys, triton_config, "--model", "bert-large-classifier", "--model", "t5-spelling")
    assert code == 1
    assert out[0] == "bert-large-classifier: FAIL: output logits: datatype FP16, expected FP32"
    assert out[1].startswith("t5-spelling: ok: ")


def test_triton_non_json_reply_fails(triton_config, capsys):
    code, out, _ = smoke_cli(capsys, triton_config, "--model", "t5-spelling")  # moto's canned "body"
    assert (code, out) == (1, ["t5-spelling: FAIL: reply is not JSON: b'body'"])


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("args, message", [
    (["--env", "qa"], "smoke: error: --env: unknown environment 'qa'; known: dev, staging, prod"),
    (["--env", "dev", "--timeout", "0"], "smoke: error: --timeout must be > 0 and --requests >= 1"),
    (["--env", "dev", "--model", "nope"], "smoke: error: --model: unknown model(s) nope; known: "
                                          "bert-large-classifier, intent-bert, t5-spelling"),
])
def test_bad_arguments_are_one_line_exit_2(args, message, capsys):
    assert cli.main(["smoke", *args]) == 2
    assert capsys.readouterr().err.splitlines() == [message]


def test_pipeline_command_line_without_credentials_fails_cleanly(tmp_path):
    """Exactly what the pipeline's post-deploy step runs, with no AWS reachable: per-model FAIL lines,
    exit 1, no traceback."""
    env = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_CONFIG_FILE": str(tmp_path / "none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_EC2_METADATA_DISABLED": "true"}
    result = run("-m", "inferstack", "smoke", "--env", "dev", "--timeout", "2", env=env)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["bert-large-classifier", "intent-bert", "t5-spelling"]
    assert all(": FAIL: " in line for line in lines), lines

