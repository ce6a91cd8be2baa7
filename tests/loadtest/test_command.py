"""`inferstack loadtest` and the spec it builds from config: smoke's request and answer, the environment's SLO,
steps up to the planned per-instance target x instances; every bad argument is one line naming its flag, exit
2, before any Locust process starts. The load test spec's own JSON rejects what it cannot run."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferstack import cli, config
from inferstack.capacity import planning
from inferstack.command_line import UsageError
from inferstack.loadtest import command, probes, shape, targets
from inferstack.loadtest.spec import LoadTestSpec, SpecError, Step, Target
from tests.support.paths import CONFIG_DIR

PROJECT = config.load(CONFIG_DIR)
URL = Target(kind="http", url="http://127.0.0.1:8080/v2/models/intent-bert/infer")


def test_spec_for_uses_smokes_request_the_slo_and_the_planned_rate_times_the_instances():
    model, environment = PROJECT.model("intent-bert"), PROJECT.environments["staging"]
    spec = shape.spec_for(model, "staging", environment, target=URL, instances=3, release="r7")
    probe = probes.probe_for(model)
    assert (spec.bodies, spec.outputs) == ((probe.body,), probe.outputs)
    assert spec.p99_slo_ms == model.slo_for("staging").p99_latency_ms
    full = planning.plan(model, "staging", environment).target_per_instance_per_second * 3
    assert [s.rate for s in spec.steps] == pytest.approx([full * f for f in (0.25, 0.5, 0.75, 1.0)])
    # Held long enough to read a p99 (500 requests), and at least 30 s.
    assert all(s.seconds == max(30.0, 500 / s.rate) for s in spec.steps)
    # A run against a URL does not know what serves it: the plan's instance type is what the rate is for.
    assert (spec.environment, spec.release, spec.instances, spec.instance_type) == ("staging", "r7", 3, None)
    assert (spec.full_rate, spec.planned_rate) == (pytest.approx(full, abs=1e-3), pytest.approx(full, abs=1e-3))
    assert spec.plan_basis == "3 x inf1.6xlarge in staging"
    assert LoadTestSpec.from_json(spec.to_json()) == spec


def test_spec_for_records_the_planned_rate_beside_a_rate_given_and_steps_may_go_above_it():
    model, environment = PROJECT.model("intent-bert"), PROJECT.environments["staging"]
    spec = shape.spec_for(model, "staging", environment, target=URL, rate=10.0, fractions=(0.5, 1, 1.5, 2))
    assert [s.rate for s in spec.steps] == [5.0, 10.0, 15.0, 20.0]
    assert spec.full_rate == 10.0 and spec.judged_rate == 10.0
    assert spec.planned_rate == pytest.approx(
        planning.plan(model, "staging", environment).target_per_instance_per_second, abs=1e-3
    )


def test_spec_for_a_triton_model_asks_for_its_default_models_outputs():
    model = PROJECT.model("bert-large-classifier")
    spec = shape.spec_for(
        model, "dev", PROJECT.environments["dev"], target=URL, rate=12.0, hold=5.0, fractions=(0.5, 1.0)
    )
    assert spec.steps == (Step(rate=6.0, seconds=5.0), Step(rate=12.0, seconds=5.0))
    assert [o.name for o in spec.outputs] == [o.name for o in probes.probe_for(model).outputs]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"rate": 0.0}, "rate: must be a number > 0"),
        ({"rate": float("nan")}, "rate: must be a number > 0"),
        ({"instances": 0}, "instances: must be a whole number >= 1"),
        ({"hold": -1.0}, "hold: must be a number of seconds > 0"),
        ({"fractions": (0.5, 0.25, 1.0)}, "steps: fractions must rise and include 1 (the full rate)"),
        ({"fractions": (0.5, 0.75)}, "steps: fractions must rise and include 1 (the full rate)"),
        ({"fractions": (0.0, 1.0)}, "steps: every fraction must be within (0, 4]"),
        ({"fractions": (1.0, 5.0)}, "steps: every fraction must be within (0, 4]"),
    ],
)
def test_spec_for_rejects_bad_values_naming_them(kwargs, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)").replace("]", r"\]")):
        shape.spec_for(PROJECT.model("intent-bert"), "dev", PROJECT.environments["dev"], target=URL, **kwargs)


@pytest.mark.parametrize(
    "text, message",
    [
        ("not json", "load test spec: JSONDecodeError"),
        (json.dumps({"schema_version": 99}), "schema_version: 99, this tool reads 2"),
        ("{}", "schema_version: None"),
    ],
)
def test_a_spec_that_is_not_one_is_rejected_in_one_line(text, message):
    with pytest.raises(SpecError, match=message):
        LoadTestSpec.from_json(text)


def test_a_spec_that_cannot_run_is_rejected():
    spec = shape.spec_for(PROJECT.model("intent-bert"), "dev", PROJECT.environments["dev"], target=URL, rate=10.0)
    data = json.loads(spec.to_json())
    data["steps"][1]["rate"] = -5
    with pytest.raises(SpecError, match=r"steps\[1\]: rate and seconds must be > 0"):
        LoadTestSpec.from_json(json.dumps(data))
    data = json.loads(spec.to_json())
    data["target"] = {"kind": "sagemaker", "endpoint": "e"}
    with pytest.raises(SpecError, match="target.endpoint: a sagemaker target needs an endpoint and a region"):
        LoadTestSpec.from_json(json.dumps(data))


@pytest.mark.parametrize(
    "target, expected",
    [
        ("http://10.0.0.5", Target(kind="http", url="http://10.0.0.5/v2/models/intent-bert/infer")),
        (
            "https://lb.example.com:8443/",
            Target(kind="http", url="https://lb.example.com:8443/v2/models/intent-bert/infer"),
        ),
        ("http://127.0.0.1:9000/invocations", Target(kind="http", url="http://127.0.0.1:9000/invocations")),
        ("sagemaker:dev-bert-large", Target(kind="sagemaker", endpoint="dev-bert-large", region="eu-west-1")),
        (
            "sagemaker:shared-ep/bert-ic",
            Target(kind="sagemaker", endpoint="shared-ep", component="bert-ic", region="eu-west-1"),
        ),
    ],
)
def test_targets_are_urls_or_sagemaker_endpoints(target, expected):
    assert targets.parse_target(target, "intent-bert", "eu-west-1") == expected


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "nope", "--target", "http://x"], "loadtest: error: --model: no model named 'nope'"),
        (["--env", "qa"], "loadtest: error: --env: unknown environment 'qa'"),
        (["--target", "ftp://x"], "loadtest: error: --target: 'ftp://x' is neither an http(s) URL nor sagemaker:"),
        (["--target", "http://x:99999"], "loadtest: error: --target: bad port in 'http://x:99999'"),
        (
            ["--target", "sagemaker:bad_name"],
            "loadtest: error: --target: endpoint name 'bad_name' is not a SageMaker name",
        ),
        (["--target", "http://x", "--rate", "0"], "loadtest: error: --rate: must be a number > 0, got 0"),
        (["--target", "http://x", "--rate", "inf"], "loadtest: error: --rate: must be a number > 0, got inf"),
        (["--target", "http://x", "--hold", "-3"], "loadtest: error: --hold: must be a number > 0, got -3"),
        (["--target", "http://x", "--instances", "0"], "loadtest: error: --instances: must be >= 1, got 0"),
        (["--target", "http://x", "--workers", "-1"], "loadtest: error: --workers: must be within 0..64, got -1"),
        (
            ["--target", "http://x", "--steps", "0.5,x"],
            "loadtest: error: --steps: '0.5,x' is not a comma-separated list",
        ),
        (["--target", "http://x", "--steps", "1,0.5"], "loadtest: error: --steps: fractions must rise and include 1"),
        (
            ["--target", "http://x", "--steps", "0.5,0.75"],
            "loadtest: error: --steps: fractions must rise and include 1",
        ),
        (
            ["--target", "http://x", "--payload", "/nonexistent/p.jsonl"],
            "loadtest: error: --payload: /nonexistent/p.jsonl: No such file or directory",
        ),
        ([], "loadtest: error: --env: dev has no load_test in environments.yaml (no generators there); give --target"),
        (
            ["--env", "staging", "--release", "r1"],
            "loadtest: error: --release: in an environment the release is the image digest the model runs there",
        ),
        (
            ["--target", "http://x", "--role-arn", "arn:aws:iam::111111111111:role/x"],
            "loadtest: error: --role-arn: applies to environment runs (no --target)",
        ),
    ],
)
def test_bad_arguments_exit_2_with_one_line_naming_the_flag(capsys, tmp_path, args, message):
    base = {"--model": "intent-bert", "--env": "dev"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    argv = ["loadtest", "--config-dir", str(CONFIG_DIR), "--out", str(tmp_path / "out")]
    for flag, value in base.items():
        argv += [flag, value]
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and err.startswith(message), err
    assert not (tmp_path / "out").exists()  # nothing started, nothing written


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--env", "staging"], "loadtest: error: --model: give one model, or --all-models (environment runs only)"),
        (
            ["--env", "staging", "--model", "intent-bert", "--all-models"],
            "loadtest: error: --model: give one model, or --all-models",
        ),
        (
            ["--env", "staging", "--all-models", "--target", "http://x"],
            "loadtest: error: --all-models: tests an environment's deployed models from inside it; not with --target",
        ),
    ],
)
def test_model_or_all_models(capsys, argv, message):
    assert cli.main(["loadtest", "--config-dir", str(CONFIG_DIR), *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and err.startswith(message), err


def test_out_must_be_a_directory(capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    assert (
        cli.main(
            [
                "loadtest",
                "--config-dir",
                str(CONFIG_DIR),
                "--model",
                "intent-bert",
                "--env",
                "dev",
                "--target",
                "http://127.0.0.1:1",
                "--out",
                str(tmp_path / "file"),
            ]
        )
        == 2
    )
    assert capsys.readouterr().err == f"loadtest: error: --out: {tmp_path / 'file'} exists and is not a directory\n"


GOOD_BODY = '{"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["book a flight"]}]}'


@pytest.mark.parametrize(
    "content, message",
    [
        (f"{GOOD_BODY}\n\n{{not json\n", "p.jsonl:3: not JSON (Expecting property name enclosed in double quotes)"),
        ("[1, 2]\n", 'p.jsonl:1: a request body is a JSON object with a non-empty "inputs" list (KServe v2)'),
        ('{"inputs": []}\n', 'p.jsonl:1: a request body is a JSON object with a non-empty "inputs" list'),
        ("# only a comment\n\n", "p.jsonl: no request in it (one JSON body per line)"),
        (b"\xff\xfe{}\n", "p.jsonl: not UTF-8 text"),
        ("[" * 100_000 + "\n", "p.jsonl:1: nested too deeply to be a request"),
    ],
)
def test_a_bad_payload_file_is_one_line_naming_the_file_and_line(capsys, tmp_path, content, message):
    payload = tmp_path / "p.jsonl"
    payload.write_bytes(content if isinstance(content, bytes) else content.encode())
    argv = [
        "loadtest",
        "--config-dir",
        str(CONFIG_DIR),
        "--model",
        "intent-bert",
        "--env",
        "dev",
        "--target",
        "http://127.0.0.1:9",
        "--payload",
        str(payload),
        "--out",
        str(tmp_path / "out"),
    ]
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(f"loadtest: error: --payload: {tmp_path}/{message}"), err
    assert not (tmp_path / "out").exists()


def test_a_payload_file_gives_the_spec_its_requests_in_order(tmp_path):
    payload = tmp_path / "p.jsonl"
    second = GOOD_BODY.replace("book a flight", "cancel my order")
    payload.write_text(f"# production mix\n{GOOD_BODY}\n\n{second}\n")
    bodies = command.read_payload(payload)
    assert [b["inputs"][0]["data"] for b in bodies] == [["book a flight"], ["cancel my order"]]
    spec = shape.spec_for(
        PROJECT.model("intent-bert"), "dev", PROJECT.environments["dev"], target=URL, rate=4.0, bodies=bodies
    )
    assert [json.loads(b) for b in spec.body_bytes()] == list(bodies)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400))
@pytest.mark.fuzz
def test_any_payload_file_is_read_or_refused_in_one_line(tmp_path, content):
    payload = tmp_path / "fuzz.jsonl"
    payload.write_bytes(content)
    try:
        bodies = command.read_payload(payload)
    except UsageError as exc:
        assert str(exc).startswith(f"--payload: {payload}") and "\n" not in str(exc)
    else:
        assert bodies and all(isinstance(b, dict) and b["inputs"] for b in bodies)


def test_an_environment_run_without_credentials_is_one_line_exit_1(capsys, monkeypatch):
    """The role cannot be assumed (here: no credentials at all): one line naming the environment and the role."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code = cli.main(
        [
            "loadtest",
            "--config-dir",
            str(CONFIG_DIR),
            "--model",
            "intent-bert",
            "--env",
            "staging",
            "--role-arn",
            "arn:aws:iam::222222222222:role/loadtest",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith("loadtest: error: staging: cannot assume arn:aws:iam::222222222222:role/loadtest: ")
    assert "Unable to locate credentials" in err[0]
