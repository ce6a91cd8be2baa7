"""The Inference Recommender job a Triton model gets: its figures come from the SLO, botocore's model of the
SageMaker API accepts it (and rejects broken ones, so the check can fail), a stubbed client takes it, and the
deployed SageMaker Model's name is read from the endpoint that serves it."""

from __future__ import annotations

import datetime
import gzip
import io
import json
import tarfile

import boto3
import botocore.session
import botocore.validate
import pytest
from botocore.stub import Stubber

from inferstack import cli, config
from inferstack.aws import aws_sessions
from inferstack.loadtest import probes
from inferstack.profile import deployed, recommender, recommender_command
from tests.support.paths import CONFIG_DIR

ROLE = "arn:aws:iam::222222222222:role/inferstack-recommender"
PAYLOAD = "s3://inferstack-payloads/bert-large-classifier/payload.tar.gz"


@pytest.fixture(scope="module")
def bert_large():
    return config.load(CONFIG_DIR).model("bert-large-classifier")


def request_for(model, env="staging", **overrides):
    options = {
        "model_name": "Model-1a2B3c4D5e6F",
        "role_arn": ROLE,
        "instance_types": ["ml.g4dn.xlarge", "ml.g5.xlarge"],
        "payload_url": PAYLOAD,
        "name": "bert-large-classifier-staging-20250304100000",
        **overrides,
    }
    return recommender.build(model, env, **options)


def input_shape():
    service = botocore.session.get_session().get_service_model("sagemaker")
    return service.operation_model("CreateInferenceRecommendationsJob").input_shape


def test_the_request_is_an_advanced_job_sized_from_the_slo(bert_large):
    request = request_for(bert_large)
    # staging: p99 300 ms, peak 50/s
    assert request["JobType"] == "Advanced" and request["RoleArn"] == ROLE
    assert request["InputConfig"]["ModelName"] == "Model-1a2B3c4D5e6F"
    assert [c["InstanceType"] for c in request["InputConfig"]["EndpointConfigurations"]] == [
        "ml.g4dn.xlarge",
        "ml.g5.xlarge",
    ]
    # the SLO's p99 is the threshold, judged at P95: the only percentile a custom load test takes
    assert request["StoppingConditions"] == {
        "MaxInvocations": 3000,  # one instance answering the whole 50/s peak, per minute
        "ModelLatencyThresholds": [{"Percentile": "P95", "ValueInMilliseconds": 300}],
    }
    (phase,) = request["InputConfig"]["TrafficPattern"]["Phases"]
    assert request["InputConfig"]["TrafficPattern"]["TrafficType"] == "PHASES"
    # 50/s at 300 ms needs 15 users: 2 at first, the other 13 over the 25-minute phase
    assert phase == {"InitialNumberOfUsers": 2, "SpawnRate": 1, "DurationInSeconds": 1500}
    assert request["InputConfig"]["ContainerConfig"]["PayloadConfig"] == {
        "SamplePayloadUrl": PAYLOAD,
        "SupportedContentTypes": ["application/json"],
    }


def test_prod_slo_gives_prod_figures(bert_large):
    request = request_for(bert_large, env="prod")  # p99 300 ms, peak 200/s
    assert request["StoppingConditions"]["MaxInvocations"] == 12000
    (phase,) = request["InputConfig"]["TrafficPattern"]["Phases"]
    assert recommender.users_for(200, 300) == 60 and phase["SpawnRate"] == 3  # 58 more users over 25 minutes


def test_botocore_accepts_the_request(bert_large):
    request = request_for(bert_large)
    botocore.validate.validate_parameters(request, input_shape())  # raises on any violation


@pytest.mark.parametrize(
    "break_it,expected",
    [
        (lambda r: r.pop("RoleArn"), 'Missing required parameter in input: "RoleArn"'),
        (
            lambda r: r["InputConfig"]["TrafficPattern"]["Phases"][0].update(InitialNumberOfUsers="2"),
            "Invalid type for parameter InputConfig.TrafficPattern.Phases[0].InitialNumberOfUsers",
        ),
        (
            lambda r: r["InputConfig"]["TrafficPattern"]["Phases"][0].update(InitialNumberOfUsers=0),
            "Invalid value for parameter InputConfig.TrafficPattern.Phases[0].InitialNumberOfUsers",
        ),
        (lambda r: r["InputConfig"].update(Colour="red"), 'Unknown parameter in InputConfig: "Colour"'),
        (lambda r: r.update(JobType="Deluxe"), "request.JobType: 'Deluxe' is not one of the API's values"),
        (
            lambda r: r["InputConfig"]["EndpointConfigurations"][0].update(InstanceType="inf1.xlarge"),
            "request.InputConfig.EndpointConfigurations[0].InstanceType: 'inf1.xlarge' is not one of the API's values",
        ),
        (
            lambda r: r.update(RoleArn="arn:aws:iam::2222:role/short-account"),
            "request.RoleArn: 'arn:aws:iam::2222:role/short-account' does not match the API's pattern",
        ),
        (lambda r: r.update(JobName="x" * 65), "request.JobName: 65 characters, at most 64"),
        (
            lambda r: r["InputConfig"].update(EndpointConfigurations=[{"InstanceType": "ml.g4dn.xlarge"}] * 11),
            "request.InputConfig.EndpointConfigurations: 11 items, at most 10",
        ),
    ],
)
def test_a_broken_request_fails_the_service_models_rules(bert_large, break_it, expected):
    request = request_for(bert_large)
    break_it(request)
    with pytest.raises(recommender.RequestInvalid) as caught:
        recommender.validate(request)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_an_advanced_job_is_judged_at_p95_which_botocore_cannot_check(bert_large):
    """The API reference (API_ModelLatencyThreshold): "Acceptable values are P95 and P99. For custom load tests,
    specify the value as P95." botocore models Percentile as a free string, so it takes a P99 on an Advanced job
    (a custom load test); validate holds the rule."""
    request = request_for(bert_large)
    assert request["JobType"] == "Advanced"
    assert [t["Percentile"] for t in request["StoppingConditions"]["ModelLatencyThresholds"]] == ["P95"]
    request["StoppingConditions"]["ModelLatencyThresholds"][0]["Percentile"] = "P99"
    botocore.validate.validate_parameters(request, input_shape())  # botocore alone: accepted
    with pytest.raises(recommender.RequestInvalid) as caught:
        recommender.validate(request)
    assert str(caught.value) == (
        "request.StoppingConditions.ModelLatencyThresholds[0].Percentile: 'P99' on an Advanced job: a custom load "
        "test takes P95 only (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ModelLatencyThreshold.html)"
    )


# (JobType, Percentile, what validate says: None where the API takes it)
PERCENTILE_RULE = [
    ("Advanced", "P95", None),
    ("Advanced", "P99", "'P99' on an Advanced job: a custom load test takes P95 only"),
    ("Advanced", "p95", "'p95' is not a percentile the API takes for JobType Advanced (P95: "),
    ("Default", "P95", None),
    ("Default", "P99", None),  # where the job runs its own load test, if inferstack ever builds one
    ("Default", "P90", "'P90' is not a percentile the API takes for JobType Default (P95 or P99: "),
]


def test_the_percentile_rule_per_job_type(bert_large):
    said = {}
    for job_type, percentile, _ in PERCENTILE_RULE:
        request = request_for(bert_large)
        request["JobType"] = job_type
        request["StoppingConditions"]["ModelLatencyThresholds"][0]["Percentile"] = percentile
        try:
            recommender.validate(request)
        except recommender.RequestInvalid as exc:
            said[job_type, percentile] = str(exc)
        else:
            said[job_type, percentile] = None
    for job_type, percentile, problem in PERCENTILE_RULE:
        message = said[job_type, percentile]
        if problem is None:
            assert message is None, (job_type, percentile, message)
        else:
            assert message is not None and message.startswith(
                f"request.StoppingConditions.ModelLatencyThresholds[0].Percentile: {problem}"
            ), (job_type, percentile)


def test_a_stubbed_client_takes_the_request_and_returns_the_job(bert_large):
    request = request_for(bert_large)
    client = boto3.client(
        "sagemaker", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    arn = "arn:aws:sagemaker:us-east-1:222222222222:inference-recommendations-job/" + request["JobName"]
    with Stubber(client) as stub:
        stub.add_response("create_inference_recommendations_job", {"JobArn": arn}, expected_params=request)
        assert recommender_command.start(client, request) == arn
        stub.assert_no_pending_responses()


def test_the_stubbed_client_validates_too(bert_large):
    request = request_for(bert_large)
    request["InputConfig"]["JobDurationInSeconds"] = "an hour"
    client = boto3.client(
        "sagemaker", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    with Stubber(client) as stub:
        stub.add_response("create_inference_recommendations_job", {"JobArn": "x"}, expected_params=request)
        with pytest.raises(botocore.validate.ParamValidationError, match="JobDurationInSeconds"):
            recommender_command.start(client, request)


def test_the_job_name_fits_the_api(bert_large):
    name = recommender.job_name("a" * 70, "staging", datetime.datetime(2025, 3, 4, 10, 0, tzinfo=datetime.UTC))
    assert len(name) == 64 and name.endswith("-staging-20250304100000")
    assert request_for(bert_large, name=name)["JobName"] == name  # build() validated it against the API's pattern


def test_the_deployed_model_name_is_read_from_the_serving_endpoint():
    cloudformation = boto3.client(
        "cloudformation", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    sagemaker = boto3.client(
        "sagemaker", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    now = datetime.datetime(2025, 3, 4, tzinfo=datetime.UTC)
    with Stubber(cloudformation) as cfn, Stubber(sagemaker) as sm:
        cfn.add_response(
            "describe_stacks",
            {
                "Stacks": [
                    {
                        "StackName": "staging-bert-large-classifier",
                        "CreationTime": now,
                        "StackStatus": "UPDATE_COMPLETE",
                        "Outputs": [{"OutputKey": "EndpointName", "OutputValue": "staging-bert-large-classifier"}],
                    }
                ]
            },
            {"StackName": "staging-bert-large-classifier"},
        )
        sm.add_response(
            "describe_endpoint",
            {
                "EndpointName": "staging-bert-large-classifier",
                "EndpointArn": "arn:aws:sagemaker:us-east-1:222222222222:endpoint/staging-bert-large-classifier",
                "EndpointConfigName": "EndpointConfig-AbC",
                "EndpointStatus": "InService",
                "CreationTime": now,
                "LastModifiedTime": now,
            },
            {"EndpointName": "staging-bert-large-classifier"},
        )
        sm.add_response(
            "describe_endpoint_config",
            {
                "EndpointConfigName": "EndpointConfig-AbC",
                "EndpointConfigArn": "arn:aws:sagemaker:us-east-1:222222222222:endpoint-config/endpointconfig-abc",
                "CreationTime": now,
                "ProductionVariants": [{"VariantName": "AllTraffic", "ModelName": "Model-1a2B3c4D5e6F"}],
            },
            {"EndpointConfigName": "EndpointConfig-AbC"},
        )
        assert (
            deployed.model_name(cloudformation, sagemaker, "staging", "bert-large-classifier") == "Model-1a2B3c4D5e6F"
        )


def test_the_payload_archive_holds_the_smoke_request_and_is_deterministic(bert_large):
    body = probes.probe_for(bert_large).body
    archive = recommender.payload_archive(body)
    assert archive == recommender.payload_archive(body)
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(archive))) as tar:
        (member,) = tar.getmembers()
        assert json.loads(tar.extractfile(member).read()) == body


ARGS = [
    "profile",
    "bert-large-classifier",
    "--env",
    "staging",
    "--recommender",
    "--role-arn",
    ROLE,
    "--payload-url",
    PAYLOAD,
]


def test_cli_prints_the_request(capsys):
    assert cli.main([*ARGS, "--print-request", "--model-name", "Model-1a2B3c4D5e6F", "--job-name", "job-1"]) == 0
    request = json.loads(capsys.readouterr().out)
    botocore.validate.validate_parameters(request, input_shape())
    assert request["StoppingConditions"]["ModelLatencyThresholds"] == [
        {"Percentile": "P95", "ValueInMilliseconds": 300}
    ]
    # default instance types: the one staging runs, then the profile's other SageMaker types
    assert [c["InstanceType"] for c in request["InputConfig"]["EndpointConfigurations"]] == ["ml.g4dn.xlarge"]
    assert request["JobName"] == "job-1"


def test_cli_applies_through_the_environments_session(capsys, monkeypatch):
    client = boto3.client(
        "sagemaker", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )

    class Session:
        def client(self, name):
            assert name == "sagemaker"
            return client

    monkeypatch.setattr(aws_sessions, "session_for", lambda *a, **k: Session())
    with Stubber(client) as stub:
        stub.add_response(
            "create_inference_recommendations_job",
            {"JobArn": "arn:aws:sagemaker:us-east-1:222222222222:inference-recommendations-job/job-1"},
        )
        assert (
            cli.main(
                [
                    *ARGS,
                    "--apply",
                    "--model-name",
                    "Model-1a2B3c4D5e6F",
                    "--job-name",
                    "job-1",
                    "--instance-types",
                    "ml.g4dn.xlarge,ml.g5.xlarge",
                ]
            )
            == 0
        )
        stub.assert_no_pending_responses()
    out = capsys.readouterr().out
    assert out.startswith("started arn:aws:sagemaker:us-east-1:222222222222:inference-recommendations-job/job-1")
    assert "--from-recommendations job-1.json" in out


@pytest.mark.parametrize(
    "args,expected",
    [
        (
            ["profile", "intent-bert-inf2", "--env", "staging", "--recommender", "--print-request"],
            "profile: error: --recommender: intent-bert-inf2 is a neuron-ecs model; Inference Recommender tests "
            "SageMaker models",
        ),
        (
            ["profile", "bert-large-classifier", "--env", "staging", "--recommender", "--print-request"],
            "profile: error: --recommender needs --role-arn and --payload-url",
        ),
        ([*ARGS], "profile: error: --recommender: say --print-request (show the request) or --apply (start the job)"),
        (
            [*ARGS, "--print-request", "--model-name", "m", "--role-arn", "role/x"],
            "profile: error: --recommender: the request breaks the SageMaker API's rules: Parameter validation failed: "
            "Invalid length for parameter RoleArn",
        ),
        (
            [*ARGS, "--print-request", "--model-name", "m", "--instance-types", "ml.g9.huge"],
            "profile: error: unknown instance type 'ml.g9.huge'",
        ),
        (
            [
                "profile",
                "bert-large-classifier",
                "--env",
                "dev",
                "--recommender",
                "--print-request",
                "--role-arn",
                ROLE,
                "--payload-url",
                PAYLOAD,
            ],
            "profile: error: --recommender: in dev bert-large-classifier is an inference component on fleet "
            "triton-shared's endpoint",
        ),
    ],
)
def test_cli_usage_errors_are_one_line(capsys, args, expected):
    assert cli.main(args) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(expected), captured.err
    assert captured.err.count("\n") == 1 and captured.out == ""
