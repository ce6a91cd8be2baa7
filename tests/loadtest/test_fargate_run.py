"""Load test runs on Fargate, rehearsed: staging's synthesized LoadTest template created in moto's server
(patched, inferstack/rehearsal/moto_patches.py), `run_in_environment` starting its tasks there, and the Fargate
stand-in (inferstack/rehearsal/fargate_standin.py) running each task's real container command, so the master is
`python -m inferstack.loadtest.task master` with the real Locust, its workers connect to it at the private IP
moto gave its network interface, they load a real HTTP server answering the KServe v2 shape on 127.0.0.1, and the
result read back from moto's S3 is the one that run stored. What the foundation would export (VPC, subnets,
platform key) is created with the EC2 and KMS APIs and exported by a stand-in foundation stack."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest

from inferstack import config
from inferstack.delivery import stack_outputs
from inferstack.loadtest import fargate, results
from inferstack.loadtest.spec import ExpectedOutput, LoadTestSpec, Step, Target
from inferstack.rehearsal import cli_deploy
from inferstack.rehearsal.fargate_standin import ROOT, FargateStandIn, Image, leftover_processes
from tests.conftest import CONFIG_DIR
from tests.infra.synth import synth

ENV = "staging"
PROJECT = config.load(CONFIG_DIR)
ENVIRONMENT = PROJECT.environments[ENV]
ACCOUNT, REGION = ENVIRONMENT.account, ENVIRONMENT.region
DOCKERFILE = ROOT / "container" / "loadtest" / "Dockerfile"
# The image's /opt/inferstack is this checkout (the image build rehearsal checks what the image really holds).
IMAGE_PATHS = {"/opt/inferstack": ROOT}
MODEL = "tiny-classifier"
ANSWER = {"model_name": MODEL, "outputs": [{"name": "logits", "datatype": "FP32", "shape": [1, 2],
                                             "data": [0.25, 0.75]}]}


def stack_template(tmp_path_factory) -> dict:
    synthesized = synth(PROJECT, [ENV], tmp_path_factory.mktemp("cdk.out"), pipeline=False)
    return synthesized.template(ENV, stack_outputs.LOAD_TEST)


def imports_of(node) -> set[str]:
    if isinstance(node, dict):
        if set(node) == {"Fn::ImportValue"}:
            return {node["Fn::ImportValue"]}
        return set().union(*(imports_of(v) for v in node.values())) if node else set()
    if isinstance(node, list):
        return set().union(*(imports_of(v) for v in node)) if node else set()
    return set()


def foundation_stand_in(template: dict, vpc: str, subnets: list[str], key_arn: str) -> dict:
    """A stack named like the foundation exporting what the LoadTest template imports, and its PrivateSubnets."""
    outputs = {stack_outputs.PRIVATE_SUBNETS: {"Value": ",".join(subnets)}}
    for number, name in enumerate(sorted(imports_of(template))):
        if "PlatformKey" in name and "Arn" in name:
            value = key_arn
        elif "NetworkVpc" in name and "Subnet" not in name:
            value = vpc
        else:
            raise AssertionError(f"the LoadTest template imports {name}: give the stand-in foundation a value for it")
        outputs[f"Export{number}"] = {"Value": value, "Export": {"Name": name}}
    return {"Resources": {"Marker": {"Type": "AWS::SSM::Parameter",
                                     "Properties": {"Name": "/rehearsal/foundation-stand-in", "Type": "String",
                                                    "Value": "stand-in foundation"}}},
            "Outputs": outputs}


class KServeHandler(BaseHTTPRequestHandler):
    answered = 0
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802 - http.server's naming
        length = int(self.headers.get("Content-Length") or 0)
        json.loads(self.rfile.read(length) or b"{}")
        body = json.dumps(ANSWER).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with KServeHandler.lock:
            KServeHandler.answered += 1

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def target():
    server = ThreadingHTTPServer(("127.0.0.1", 0), KServeHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v2/models/{MODEL}/infer"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """moto's server with staging's LoadTest stack created from its synthesized template; yields (endpoint,
    stack name)."""
    template = stack_template(tmp_path_factory)
    workdir = tmp_path_factory.mktemp("emulator")
    with cli_deploy.emulator(workdir, cli_deploy.Clock(600)) as endpoint:
        aws = cli_deploy.Aws(endpoint, ACCOUNT, REGION)
        ec2, kms, ssm = aws.client("ec2"), aws.client("kms"), aws.client("ssm")
        vpc = ec2.create_vpc(CidrBlock=ENVIRONMENT.network.cidr)["Vpc"]["VpcId"]
        ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
        subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.20.{16 * i}.0/20", AvailabilityZone=zone)["Subnet"]
                   ["SubnetId"] for i, zone in enumerate(ENVIRONMENT.availability_zones)]
        key_arn = kms.create_key(Description="platform key stand-in")["KeyMetadata"]["Arn"]
        bootstrap = template.get("Parameters", {}).get("BootstrapVersion", {}).get("Default")
        if bootstrap:
            ssm.put_parameter(Name=bootstrap, Type="String", Value="30")
        cloudformation = aws.client("cloudformation")
        for name, body in ((stack_outputs.stack_name(ENV, stack_outputs.FOUNDATION),
                            foundation_stand_in(template, vpc, subnets, key_arn)),
                           (stack_outputs.stack_name(ENV, stack_outputs.LOAD_TEST), template)):
            cloudformation.create_stack(StackName=name, TemplateBody=json.dumps(body),
                                        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"])
            status = cloudformation.describe_stacks(StackName=name)["Stacks"][0]["StackStatus"]
            assert status == "CREATE_COMPLETE", (name, status)
        yield endpoint, subnets


@pytest.fixture
def session(deployed, monkeypatch):
    endpoint, _ = deployed
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    return boto3.Session(aws_access_key_id=ACCOUNT, aws_secret_access_key=cli_deploy.SECRET, region_name=REGION)


def test_the_deployed_stack_names_everything_a_run_starts_from(session, deployed):
    _, subnets = deployed
    stack = fargate.read_stack(session.client("cloudformation"), ENV)
    assert stack.subnets == tuple(subnets)
    ecs = session.client("ecs")
    for definition, container, command in ((stack.master_task_definition, stack.master_container, ["master"]),
                                           (stack.worker_task_definition, stack.worker_container, ["worker"])):
        described = ecs.describe_task_definition(taskDefinition=definition)["taskDefinition"]
        assert described["requiresCompatibilities"] == ["FARGATE"] and described["networkMode"] == "awsvpc"
        (spec,) = described["containerDefinitions"]
        assert (spec["name"], spec["command"]) == (container, command)
    assert session.client("s3").head_bucket(Bucket=stack.results_bucket)
