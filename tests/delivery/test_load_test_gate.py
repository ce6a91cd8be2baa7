"""Promotion's load test gate on moto: with dev behind an approval-gated target, promote refuses a release whose
models have no passing load test of the promoted image in dev's results bucket, accepts one whose newest run of
every model passed (and records the evidence in the pin), and records --skip-load-test. Result files here are
RunResult objects written to the bucket: the gate's reading and judging is under test; the results of real
Locust runs are tests/loadtest/'s and the Fargate orchestration's."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from inferstack.config import load
from inferstack.config.release_pin import ReleasePin
from inferstack.loadtest import results
from tests.support import aws_fakes
from tests.support.paths import CONFIG_DIR
from tests.support.promote import promote_cli

PROJECT = load(CONFIG_DIR)
BUCKET = "dev-loadtest-results"
# The models behind each promoted image unit: a neuron-cores fleet's members are tested one by one.
TESTED = {m.name: unit.name for unit in PROJECT.image_units("dev") for m in unit.models}


def gate_staging(config_dir) -> None:
    """staging behind an approval in the pipeline: the gate applies to dev -> staging."""
    path = config_dir / "environments.yaml"
    data = yaml.safe_load(path.read_text())
    data["pipeline"]["approval_before"] = ["staging", "prod"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def result(
    model: str,
    digest: str,
    *,
    p99: float = 7.0,
    errors: int = 0,
    cpu: float = 40.0,
    environment: str = "dev",
    planned: float | None = 100.0,
) -> results.RunResult:
    step = results.StepResult(
        offered_rps=100,
        seconds=60,
        offered=6000,
        late=0,
        late_max_ms=0.0,
        answered=6000 - errors,
        good=5970 - errors,
        rejected=errors,
        timeouts=0,
        failures=errors,
        errors={"HTTP 503": errors} if errors else {},
        p50_ms=3.0,
        p90_ms=5.0,
        p99_ms=p99,
        max_ms=p99 * 2,
    )
    return results.RunResult(
        model=model,
        target="http://internal",
        started="2026-11-24T10:00:00Z",
        finished="2026-11-24T10:05:00Z",
        p99_slo_ms=10,
        error_budget_percent=0.1,
        steps=(step,),
        generators=(results.Generator("master", cpu, cpu / 2),),
        workers=2,
        full_rate=100.0,
        planned_rate=planned,
        plan_basis="1 x inf1.xlarge in dev",
        environment=environment,
        release=digest,
    )


def store(run: results.RunResult, run_id: str) -> str:
    s3 = aws_fakes.session("dev").client("s3")
    key = results.results_key(run.release, run.model, run_id)
    s3.put_object(Bucket=BUCKET, Key=key, Body=run.to_json().encode())
    return f"s3://{BUCKET}/{key}"


@pytest.fixture
def gated(dev):
    config_dir, images = dev
    gate_staging(config_dir)
    sess = aws_fakes.session("dev")
    sess.client("s3").create_bucket(Bucket=BUCKET)
    aws_fakes.create_stack(sess, "dev-LoadTest", {"ResultsBucket": BUCKET})
    return config_dir, images


def store_all(images, **kwargs) -> dict[str, str]:
    return {
        model: store(result(model, images[unit].digest, **kwargs), "20261124T100000Z-aaaaaa")
        for model, unit in sorted(TESTED.items())
    }


def test_without_results_bucket_promote_refuses_and_copies_nothing(dev, capsys):
    config_dir, _ = dev
    gate_staging(config_dir)
    code, out, err = promote_cli(capsys, config_dir, "--apply")
    assert code == 1
    assert "load test gate: staging is deployed after an approval (pipeline.approval_before)" in out
    assert err[-1].startswith("promote: error: load test gate: stack dev-LoadTest")
    assert "dev has no load test results to check" in err[-1]
    assert aws_fakes.session("staging").client("ecr").describe_repositories()["repositories"] == []
    assert not (config_dir / "releases").exists()


def test_no_run_of_the_promoted_image_refuses_naming_each_model(gated, capsys):
    config_dir, images = gated
    # A passing run of another image does not count.
    store(result("intent-bert", "sha256:" + "0" * 64), "20261124T090000Z-ffffff")
    code, out, err = promote_cli(capsys, config_dir)
    assert code == 1
    digest = images["intent-pack"].digest
    assert f"  intent-bert: no load test of {digest} in dev (s3://{BUCKET}/{digest}/intent-bert/)" in out
    assert err[-1].startswith(
        "promote: error: load test gate: no passing load test in dev of the image promoted "
        f"for {', '.join(sorted(TESTED))}"
    )
    assert err[-1].endswith("or pass --skip-load-test (recorded in the pin)")


def test_every_model_passing_promotes_and_the_pin_records_the_evidence(gated, capsys):
    config_dir, images = gated
    where = store_all(images)
    code, out, err = promote_cli(capsys, config_dir, "--apply")
    assert code == 0, err
    for model in TESTED:
        assert (
            f"  {model}: load test pass at 100 req/s offered (100 within the SLO), p99 7.0 ms (SLO 10 ms), "
            f"errors 0.00 %, 2026-11-24T10:05:00Z, {where[model]}"
        ) in out
    pin = ReleasePin.model_validate_json((config_dir / "releases" / "staging.json").read_text())
    assert pin.load_test is not None and not pin.load_test.skipped
    assert pin.load_test.gate == "staging is deployed after an approval (pipeline.approval_before)"
    assert {m: (e.location, e.verdict, e.p99_ms) for m, e in pin.load_test.results.items()} == {
        m: (where[m], "pass", 7.0) for m in TESTED
    }


@pytest.mark.parametrize(
    "newest, reason",
    [
        (dict(p99=12.5), "step 1 (100 req/s, 100 %): p99 12.5 ms above the SLO's 10 ms"),
        (dict(errors=30), "step 1 (100 req/s, 100 %): errors 0.50 % above the budget's 0.1 % (HTTP 503: 30)"),
        (dict(cpu=96.0), "generator master saturated: CPU 96 % (>= 90 %)"),
        # A pass, but at a tenth of the rate the plan asks of the instances: it shows nothing about that rate.
        (
            dict(planned=1000.0),
            "the full rate 100 req/s is 10 % of the planned 1000 req/s (1 x inf1.xlarge in dev): "
            "a pass here does not show the plan holds",
        ),
    ],
)
def test_the_newest_run_decides_a_pass_then_a_miss_refuses(gated, capsys, newest, reason):
    config_dir, images = gated
    store_all(images)
    digest = images[TESTED["t5-spelling"]].digest
    later = store(result("t5-spelling", digest, **newest), "20261124T110000Z-000000")
    code, out, err = promote_cli(capsys, config_dir, "--apply")
    assert code == 1
    (line,) = [line for line in out if line.startswith("  t5-spelling: ")]
    assert later in line and reason in line
    assert err[-1].startswith(
        "promote: error: load test gate: no passing load test in dev of the image promoted for t5-spelling;"
    )
    assert not (config_dir / "releases").exists()


def test_a_result_of_another_environment_is_not_evidence(gated, capsys):
    config_dir, images = gated
    store_all(images)
    digest = images[TESTED["intent-bert"]].digest
    store(dataclasses.replace(result("intent-bert", digest), environment="staging"), "20261124T110000Z-000000")
    code, out, _ = promote_cli(capsys, config_dir)
    assert code == 1
    assert any(
        line.startswith("  intent-bert: s3://")
        and line.endswith(f"is a test of intent-bert {digest} in staging, not of this image")
        for line in out
    )


def test_a_corrupt_result_is_a_one_line_error(gated, capsys):
    config_dir, images = gated
    digest = images[TESTED["intent-bert"]].digest
    key = results.results_key(digest, "intent-bert", "20261124T100000Z-aaaaaa")
    aws_fakes.session("dev").client("s3").put_object(Bucket=BUCKET, Key=key, Body=b'{"schema_version": 2}')
    code, _, err = promote_cli(capsys, config_dir, "--apply")
    assert code == 1
    assert err[-1] == (
        f"promote: error: load test gate: s3://{BUCKET}/{key}: not a load test result: KeyError: 'steps'"
    )


def test_a_closed_loop_result_from_before_the_open_model_is_not_evidence(gated, capsys):
    config_dir, images = gated
    digest = images[TESTED["intent-bert"]].digest
    key = results.results_key(digest, "intent-bert", "20261124T100000Z-aaaaaa")
    old = result("intent-bert", digest).to_dict()
    old["schema_version"] = 1
    aws_fakes.session("dev").client("s3").put_object(Bucket=BUCKET, Key=key, Body=json.dumps(old).encode())
    code, _, err = promote_cli(capsys, config_dir, "--apply")
    assert code == 1
    assert err[-1] == (
        f"promote: error: load test gate: s3://{BUCKET}/{key}: schema_version 1, this tool reads 2 "
        "(version 1 came from closed-loop users that a stalling server could fool: run the load test "
        "again)"
    )


def test_skip_load_test_promotes_and_is_recorded(dev, capsys):
    config_dir, _ = dev
    gate_staging(config_dir)
    code, out, err = promote_cli(capsys, config_dir, "--apply", "--skip-load-test")
    assert code == 0, err
    assert (
        "load test gate: SKIPPED (--skip-load-test, recorded in the pin); it applies because staging is "
        "deployed after an approval (pipeline.approval_before)"
    ) in out
    pin = ReleasePin.model_validate_json((config_dir / "releases" / "staging.json").read_text())
    assert pin.load_test is not None and pin.load_test.skipped and pin.load_test.results == {}


def test_no_gate_between_ungated_environments(dev, capsys):
    """dev -> staging as shipped: staging is not behind an approval and dev runs no load tests."""
    config_dir, _ = dev
    code, out, err = promote_cli(capsys, config_dir, "--apply")
    assert code == 0, err
    assert not any(line.startswith("load test gate") for line in out)
    assert ReleasePin.model_validate_json((config_dir / "releases" / "staging.json").read_text()).load_test is None


def test_run_ids_sort_in_time_order():
    """The gate takes the newest run by id: ids of later starts sort after, within the same second too."""
    import datetime

    start = datetime.datetime(2026, 11, 24, 9, 59, 59, tzinfo=datetime.UTC)
    ids = [results.new_run_id(start + datetime.timedelta(seconds=s)) for s in (0, 1, 3600)]
    assert ids == sorted(ids) and ids[0].startswith("20261124T095959Z-") and len(set(ids)) == 3


def test_the_gate_applies_into_production_and_from_environments_with_load_tests():
    from inferstack.delivery import load_test_gate

    assert load_test_gate.required(PROJECT, "dev", "staging") is None
    assert load_test_gate.required(PROJECT, "staging", "prod") == (
        "prod serves production (environments.prod.production, else the pipeline's last stage)"
    )
    # staging runs load tests (load_test in the shipped environments.yaml): anything promoted from it is gated.
    assert (
        load_test_gate.required(PROJECT, "staging", "dev") == "staging runs load tests (load_test in environments.yaml)"
    )
