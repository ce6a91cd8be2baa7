"""`inferstack profile MODEL --env ENV` without --target: the deployed model measured from the environment's own
Fargate generators (inferstack/loadtest/fargate.py, replaced here by a stand-in that returns a result), its
target and instance count read from its stack and service (stubbed AWS clients), the count checked again
after the run."""

from __future__ import annotations

import datetime

import boto3
import pytest
from botocore.stub import Stubber

from inferstack import cli, config
from inferstack.aws import aws_sessions
from inferstack.loadtest import fargate
from tests.support.run_results import run, step

NOW = datetime.datetime(2025, 3, 4, tzinfo=datetime.UTC)
ENDPOINT = "staging-bert-large-classifier"


def client(name):
    return boto3.client(name, region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")


class FakeSession:
    region_name = "us-east-1"

    def __init__(self, counts):
        self.clients = {"cloudformation": client("cloudformation"), "sagemaker": client("sagemaker")}
        self.stubs = {name: Stubber(c) for name, c in self.clients.items()}
        for count in counts:  # one look before the run, one after
            self.stubs["cloudformation"].add_response(
                "describe_stacks",
                {
                    "Stacks": [
                        {
                            "StackName": ENDPOINT,
                            "CreationTime": NOW,
                            "StackStatus": "UPDATE_COMPLETE",
                            "Outputs": [{"OutputKey": "EndpointName", "OutputValue": ENDPOINT}],
                        }
                    ]
                },
                {"StackName": ENDPOINT},
            )
            self.stubs["sagemaker"].add_response(
                "describe_endpoint",
                {
                    "EndpointName": ENDPOINT,
                    "EndpointArn": f"arn:aws:sagemaker:us-east-1:222222222222:endpoint/{ENDPOINT}",
                    "EndpointConfigName": "EndpointConfig-AbC",
                    "EndpointStatus": "InService",
                    "CreationTime": NOW,
                    "LastModifiedTime": NOW,
                    "ProductionVariants": [{"VariantName": "AllTraffic", "CurrentInstanceCount": count}],
                },
                {"EndpointName": ENDPOINT},
            )
        for stub in self.stubs.values():
            stub.activate()

    def client(self, name):
        return self.clients[name]


@pytest.fixture
def environment_run(monkeypatch):
    """Install a session whose endpoint has `counts` instances (before, after) and a Fargate stand-in whose
    run returns `result`; returns what the stand-in was called with."""
    calls = {}

    def install(counts, result):
        session = FakeSession(counts)
        monkeypatch.setattr(aws_sessions, "session_for", lambda *a, **k: session)

        def run_in_environment(session_, env_name, environment, spec, **kwargs):
            calls.update(env=env_name, spec=spec, **kwargs)
            return result

        monkeypatch.setattr(fargate, "run_in_environment", run_in_environment)
        return calls

    return install


STORED = "s3://staging-loadtest-results/0123456789ab/bert-large-classifier/run-1/"


def test_the_deployed_endpoint_is_measured_on_the_environments_generators(config_copy, environment_run, capsys):
    calls = environment_run(
        [2, 2],
        run(
            step(40, 150.0),
            step(80, 210.0),
            step(120, 420.0),
            instances=2,
            slo_ms=300,
            model="bert-large-classifier",
            location=STORED + "result.json",
        ),
    )
    assert (
        cli.main(
            [
                "profile",
                "bert-large-classifier",
                "--env",
                "staging",
                "--release",
                "0123456789ab",
                "--config-dir",
                str(config_copy),
            ]
        )
        == 0
    )
    spec = calls["spec"]
    assert (spec.target.kind, spec.target.endpoint, spec.instances, spec.environment) == (
        "sagemaker",
        ENDPOINT,
        2,
        "staging",
    )
    # 1.5 x the estimate's 53.2/s x 2 instances, in five steps
    assert spec.steps[-1].rate == pytest.approx(159.6) and len(spec.steps) == 5
    assert calls["workers"] == fargate.workers_for(159.6, 2000, 20) and calls["release"] == "0123456789ab"
    assert calls["timeout"] == fargate.run_timeout(spec, calls["workers"])
    point = config.load(config_copy).model("bert-large-classifier").throughput_profile["ml.g4dn.xlarge"]
    assert point.throughput_per_second == 40 and point.p99_latency_ms == 210  # 80 req/s held over 2 instances
    assert point.measured.environment == "staging" and point.measured.results == STORED + "result.json"
    assert "wrote throughput_profile.ml.g4dn.xlarge" in capsys.readouterr().out


def test_a_fleet_that_autoscaled_during_the_run_is_refused(config_copy, environment_run, capsys):
    environment_run(
        [2, 3],
        run(step(40, 210.0), instances=2, slo_ms=300, model="bert-large-classifier", location=STORED + "result.json"),
    )
    before = (config_copy / "bert-large-classifier.yaml").read_bytes()
    assert (
        cli.main(
            [
                "profile",
                "bert-large-classifier",
                "--env",
                "staging",
                "--release",
                "r1",
                "--config-dir",
                str(config_copy),
            ]
        )
        == 1
    )
    assert capsys.readouterr().err == (
        "profile: error: bert-large-classifier went from 2 to 3 instances during the run (autoscaling): the rate "
        "per instance is unknown, nothing written; hold min = max for the test\n"
    )
    assert (config_copy / "bert-large-classifier.yaml").read_bytes() == before


@pytest.mark.parametrize(
    "args,expected",
    [
        (
            ["profile", "bert-large-classifier", "--env", "prod", "--release", "r1"],
            "profile: error: --env: prod has no load_test: (environments.yaml), so no generators inside it",
        ),
        (
            ["profile", "intent-bert", "--env", "staging", "--release", "r1"],
            "profile: error: --env: fleet intent-pack carries intent-bert in staging",
        ),
        (
            ["profile", "bert-large-classifier", "--env", "staging"],
            "profile: error: --release: staging deploys no pinned release with a commit",
        ),
    ],
)
def test_environment_mode_usage_errors(config_copy, capsys, args, expected):
    assert cli.main([*args, "--config-dir", str(config_copy)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("\n") == 1
