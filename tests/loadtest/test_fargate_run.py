"""Load test runs on Fargate, rehearsed: staging's synthesized LoadTest template created in moto's server
(patched, rehearsal/moto_patches.py), `run_in_environment` starting its tasks there, and the Fargate
stand-in (rehearsal/fargate_standin.py) running each task's real container command, so the master is
`python -m inferstack.loadtest.task master` with the real Locust, its workers connect to it at the private IP
moto gave its network interface, they load a real HTTP server answering the KServe v2 shape on 127.0.0.1, and the
result read back from moto's S3 is the one that run stored. What the foundation would export (VPC, subnets,
platform key) is created with the EC2 and KMS APIs and exported by a stand-in foundation stack."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler

import boto3
import botocore.credentials
import pytest

from inferstack import config
from inferstack.aws import aws_sessions, stack_outputs
from inferstack.loadtest import fargate, results, runner
from inferstack.loadtest.spec import ExpectedOutput, LoadTestSpec, Step, Target
from rehearsal import cli_deploy
from rehearsal.aws_rules import sts
from rehearsal.fargate_standin import ROOT, FargateStandIn, Image, leftover_processes
from tests.support.paths import CONFIG_DIR
from tests.support.synth import synth
from tests.support.threaded_server import serving as http_serving  # the module has a fixture named serving

# The real Locust in the stand-in's tasks.
pytestmark = pytest.mark.loadtest

ENV = "staging"
PROJECT = config.load(CONFIG_DIR)
ENVIRONMENT = PROJECT.environments[ENV]
ACCOUNT, REGION = ENVIRONMENT.account, ENVIRONMENT.region
DOCKERFILE = ROOT / "container" / "loadtest" / "Dockerfile"
# The image's /opt/inferstack is this checkout (the image build rehearsal checks what the image really holds).
IMAGE_PATHS = {"/opt/inferstack": ROOT}
MODEL = "tiny-classifier"
ANSWER = {
    "model_name": MODEL,
    "outputs": [{"name": "logits", "datatype": "FP32", "shape": [1, 2], "data": [0.25, 0.75]}],
}


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
    return {
        "Resources": {
            "Marker": {
                "Type": "AWS::SSM::Parameter",
                "Properties": {
                    "Name": "/rehearsal/foundation-stand-in",
                    "Type": "String",
                    "Value": "stand-in foundation",
                },
            }
        },
        "Outputs": outputs,
    }


class KServeHandler(BaseHTTPRequestHandler):
    answered = 0
    lock = threading.Lock()

    def do_POST(self):  # http.server's naming
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
    with http_serving(KServeHandler) as port:
        yield f"http://127.0.0.1:{port}/v2/models/{MODEL}/infer"


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
        subnets = [
            ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.20.{16 * i}.0/20", AvailabilityZone=zone)["Subnet"]["SubnetId"]
            for i, zone in enumerate(ENVIRONMENT.availability_zones)
        ]
        key_arn = kms.create_key(Description="platform key stand-in")["KeyMetadata"]["Arn"]
        bootstrap = template.get("Parameters", {}).get("BootstrapVersion", {}).get("Default")
        if bootstrap:
            ssm.put_parameter(Name=bootstrap, Type="String", Value="30")
        cloudformation = aws.client("cloudformation")
        for name, body in (
            (
                stack_outputs.stack_name(ENV, stack_outputs.FOUNDATION),
                foundation_stand_in(template, vpc, subnets, key_arn),
            ),
            (stack_outputs.stack_name(ENV, stack_outputs.LOAD_TEST), template),
        ):
            cloudformation.create_stack(
                StackName=name, TemplateBody=json.dumps(body), Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"]
            )
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
    for definition, container, command in (
        (stack.master_task_definition, stack.master_container, ["master"]),
        (stack.worker_task_definition, stack.worker_container, ["worker"]),
    ):
        described = ecs.describe_task_definition(taskDefinition=definition)["taskDefinition"]
        assert described["requiresCompatibilities"] == ["FARGATE"] and described["networkMode"] == "awsvpc"
        (spec,) = described["containerDefinitions"]
        assert (spec["name"], spec["command"]) == (container, command)
    assert session.client("s3").head_bucket(Bucket=stack.results_bucket)


# ----------------------------------------------------------------------------- runs


def spec_for(url: str, steps: tuple[tuple[float, float], ...], **changes) -> LoadTestSpec:
    return LoadTestSpec(
        model=MODEL,
        target=Target(kind="http", url=url),
        bodies=({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["hi"]}]},),
        outputs=(ExpectedOutput("logits", "FP32", (1, 2)),),
        steps=tuple(Step(rate=rate, seconds=seconds) for rate, seconds in steps),
        p99_slo_ms=1000,
        environment=ENV,
        release="r1",
        **changes,
    )


@pytest.fixture
def stand_in(deployed, session, tmp_path):
    endpoint, _ = deployed
    cluster = fargate.read_stack(session.client("cloudformation"), ENV).cluster
    image = Image.from_dockerfile(DOCKERFILE, IMAGE_PATHS)
    with FargateStandIn(endpoint, ACCOUNT, REGION, cluster, image, tmp_path / "tasks", poll_s=0.2) as running:
        yield running
    assert running.errors == []
    assert leftover_processes(running) == []


def run_task_calls(session: boto3.Session) -> list[dict]:
    """Every RunTask the orchestrator makes through `session`, as it made it."""
    calls: list[dict] = []
    session.events.register("provide-client-params.ecs.RunTask", lambda params, **_: calls.append(dict(params)))
    return calls


def environment_of(call: dict) -> dict[str, str]:
    (override,) = call["overrides"]["containerOverrides"]
    return {e["name"]: e["value"] for e in override["environment"]}


def stopped_tasks(session: boto3.Session, stack: fargate.LoadTestStack, arns) -> dict[str, dict]:
    tasks = session.client("ecs").describe_tasks(cluster=stack.cluster, tasks=list(arns))["tasks"]
    return {t["taskArn"]: t for t in tasks}


def test_a_run_on_fargate_returns_what_the_real_run_stored(session, stand_in, target, deployed):
    _, subnets = deployed
    calls = run_task_calls(session)
    answered_before = KServeHandler.answered
    spec = spec_for(target, ((8, 6), (12, 6)))
    result = fargate.run_in_environment(
        session, ENV, ENVIRONMENT, spec, workers=2, release="r1", run_id="run-ok", timeout=300, poll_s=0.5
    )

    stack = fargate.read_stack(session.client("cloudformation"), ENV)
    key = results.results_key("r1", MODEL, "run-ok")
    assert result.results_location == f"s3://{stack.results_bucket}/{key}"
    s3 = session.client("s3")
    stored = results.RunResult.from_json(s3.get_object(Bucket=stack.results_bucket, Key=key)["Body"].read().decode())
    assert stored == result  # what the master wrote, read back unchanged
    picture = s3.get_object(
        Bucket=stack.results_bucket, Key=results.results_key("r1", MODEL, "run-ok", results.PICTURE_FILE)
    )
    assert picture["Body"].read(8) == b"\x89PNG\r\n\x1a\n"
    assert s3.head_object(
        Bucket=stack.results_bucket, Key=results.results_key("r1", MODEL, "run-ok", results.REPORT_FILE)
    )
    # Measured by the real run: every request it counted reached the target, and the two workers sent them.
    counted = sum(step.offered for step in result.steps)
    assert counted > 0 and KServeHandler.answered - answered_before >= counted
    assert [s.offered_rps for s in result.steps] == [8, 12] and result.workers == 2
    assert (result.model, result.environment, result.release) == (MODEL, ENV, "r1")

    # One master, then two workers: Fargate, the private subnets, no public IP, each side's security group.
    master_call, worker_call = calls
    assert (master_call["taskDefinition"], master_call["count"]) == (stack.master_task_definition, 1)
    assert (worker_call["taskDefinition"], worker_call["count"]) == (stack.worker_task_definition, 2)
    for call, group in ((master_call, stack.master_security_group), (worker_call, stack.worker_security_group)):
        assert call["launchType"] == "FARGATE"
        assert call["networkConfiguration"] == {
            "awsvpcConfiguration": {"subnets": subnets, "securityGroups": [group], "assignPublicIp": "DISABLED"}
        }
    master_env, worker_env = environment_of(master_call), environment_of(worker_call)
    assert master_env[fargate.WORKERS_ENV] == "2"
    assert master_env[fargate.RESULTS_ENV] == f"s3://{stack.results_bucket}/r1/{MODEL}/run-ok/"
    assert (
        LoadTestSpec.from_json(master_env[fargate.SPEC_ENV])
        == spec
        == LoadTestSpec.from_json(worker_env[fargate.SPEC_ENV])
    )
    # The workers were given the master's address on its network interface, as moto assigned it.
    (master,) = [t for t in stand_in.tasks.values() if t.container == stack.master_container]
    workers = [t for t in stand_in.tasks.values() if t.container == stack.worker_container]
    assert worker_env[fargate.MASTER_HOST_ENV] == master.private_ip and len(workers) == 2
    assert all(t.env[fargate.MASTER_HOST_ENV] == master.private_ip for t in workers)
    # Every task ended and is STOPPED; the master exited 0.
    tasks = stopped_tasks(session, stack, stand_in.tasks)
    assert {t["lastStatus"] for t in tasks.values()} == {"STOPPED"}
    assert master.exit_code == 0 and tasks[master.arn]["containers"][0]["exitCode"] == 0


def test_a_master_that_exits_non_zero_fails_the_run_and_stops_every_task(session, stand_in, target):
    # A spec of another schema version: the real master refuses it (exit 2) before Locust starts.
    spec = spec_for(target, ((5, 5),), schema_version=99)
    with pytest.raises(fargate.FargateRunError) as caught:
        fargate.run_in_environment(
            session, ENV, ENVIRONMENT, spec, workers=2, release="r1", run_id="run-bad", timeout=120, poll_s=0.5
        )
    assert str(caught.value).startswith("the master exited with code 2: Essential container in task exited")
    stack = fargate.read_stack(session.client("cloudformation"), ENV)
    (master,) = [t for t in stand_in.tasks.values() if t.container == stack.master_container]
    assert "schema_version" in stand_in.output(master.arn)
    wait_for_reports(stand_in)
    tasks = stopped_tasks(session, stack, stand_in.tasks)
    assert len(tasks) == 3 and {t["lastStatus"] for t in tasks.values()} == {"STOPPED"}
    listed = session.client("s3").list_objects_v2(Bucket=stack.results_bucket, Prefix=f"r1/{MODEL}/run-bad/")
    assert listed["KeyCount"] == 0  # nothing stored


def test_a_run_past_its_timeout_stops_every_task(session, stand_in, target):
    spec = spec_for(target, ((5, 600),))  # ten minutes of load; the run may take seconds
    with pytest.raises(fargate.FargateRunError, match=r"^timed out waiting for the master to finish the run"):
        fargate.run_in_environment(
            session, ENV, ENVIRONMENT, spec, workers=2, release="r1", run_id="run-slow", timeout=15, poll_s=0.5
        )
    stack = fargate.read_stack(session.client("cloudformation"), ENV)
    wait_for_reports(stand_in)
    tasks = stopped_tasks(session, stack, stand_in.tasks)
    assert len(tasks) == 3
    assert {t["desiredStatus"] for t in tasks.values()} == {"STOPPED"}  # StopTask, each of them
    assert all(t["stoppedReason"].startswith("inferstack loadtest: timed out") for t in tasks.values())
    assert all(task.stop_requested_at is not None for task in stand_in.tasks.values())


def wait_for_reports(stand_in: FargateStandIn, timeout: float = 60.0) -> None:
    """Until the stand-in has ended and reported every task (as the ECS agent would, after StopTask)."""
    give_up = time.monotonic() + timeout
    while not all(t.reported for t in stand_in.tasks.values()):
        assert time.monotonic() < give_up, "the stand-in did not report every task's end"
        time.sleep(0.2)


# ----------------------------------------------------------------------------- `loadtest --env`, then the gate

NEURON_MODEL = "intent-bert-inf2"  # a Neuron model with its own stack in staging
PLANNED_RATE = 40


@pytest.fixture
def serving(session, tmp_path):
    """staging's intent-bert-inf2 as the loadtest CLI finds it: its stack's outputs (the internal load balancer's
    URL: here a real HTTP server on 127.0.0.1 answering the model's interface), its ECS service and the task
    definition's image in ECR, by tag as CDK deploys it. Yields (config dir with a p99 SLO the shared machine
    holds, the digest staging runs)."""
    import shutil

    import yaml

    from inferstack.loadtest import probes
    from tests.support import aws_fakes

    config_dir = tmp_path / "model_configs"
    shutil.copytree(CONFIG_DIR, config_dir)
    path = config_dir / f"{NEURON_MODEL}.yaml"
    data = yaml.safe_load(path.read_text())
    data.setdefault("environments", {}).setdefault(ENV, {}).setdefault("slo", {})["p99_latency_ms"] = 500
    # A profile the test's server carries: the plan then asks 40 req/s of one instance (safety factor 0.5).
    data["throughput_profile"]["inf2.xlarge"]["throughput_per_second"] = PLANNED_RATE * 2
    for slo in [data["slo"], *(e["slo"] for e in data["environments"].values() if "slo" in e)]:
        slo["peak_tps"] = PLANNED_RATE  # within what the capacity bounds carry at that profile
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    model = config.load(config_dir).model(NEURON_MODEL)
    answer = json.dumps(
        {
            "model_name": NEURON_MODEL,
            "outputs": [
                {
                    "name": o.name,
                    "datatype": o.datatype,
                    "shape": list(o.shape),
                    "data": ["label"] * o.shape[-1] if o.datatype == "BYTES" else [0.5] * (o.shape[0] * o.shape[-1]),
                }
                for o in probes.probe_for(model).outputs
            ],
        }
    ).encode()

    class Model(BaseHTTPRequestHandler):
        def do_POST(self):  # http.server's naming
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    with http_serving(Model) as port:
        image = aws_fakes.push_image(
            session, aws_fakes.ASSET_REPOSITORY.format(account=ACCOUNT, region=REGION), seed=NEURON_MODEL
        )
        ecs = session.client("ecs")
        cluster = f"{ENV}-{NEURON_MODEL}-cluster"
        ecs.create_cluster(clusterName=cluster)
        definition = ecs.register_task_definition(
            family=f"{ENV}-{NEURON_MODEL}",
            containerDefinitions=[{"name": "Server", "image": image.uri, "memory": 1024}],
        )["taskDefinition"]["taskDefinitionArn"]
        ecs.create_service(
            cluster=cluster, serviceName=f"{NEURON_MODEL}-service", taskDefinition=definition, desiredCount=1
        )
        aws_fakes.create_stack(
            session,
            stack_outputs.stack_name(ENV, NEURON_MODEL),
            {
                "ClusterName": cluster,
                "ServiceName": f"{NEURON_MODEL}-service",
                "Url": f"http://127.0.0.1:{port}",
            },
        )
        yield config_dir, image.digest


def test_loadtest_in_the_environment_stores_a_result_named_by_the_digest_that_passes_the_gate(
    session, stand_in, serving, monkeypatch, capsys
):
    """`inferstack loadtest --env staging --model M` (no --target): the digest staging runs read from its ECS
    service, the target from the stack's outputs, Fargate tasks run by the stand-in (the real Locust), the result
    stored under <digest>/<model>/<run id>/; promotion's gate then finds it and accepts it."""
    from inferstack import cli
    from inferstack.delivery import load_test_gate

    config_dir, digest = serving
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCOUNT)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", cli_deploy.SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    # At the planned rate (no --rate): a pass at a lower one would not open the gate.
    code = cli.main(
        [
            "loadtest",
            "--env",
            ENV,
            "--model",
            NEURON_MODEL,
            "--hold",
            "4",
            "--steps",
            "0.5,1",
            "--config-dir",
            str(config_dir),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, out + err
    stack = fargate.read_stack(session.client("cloudformation"), ENV)
    (stored,) = [line.removeprefix("stored ") for line in out.splitlines() if line.startswith("stored ")]
    assert stored.startswith(f"s3://{stack.results_bucket}/{digest}/{NEURON_MODEL}/") and stored.endswith(
        "/result.json"
    )
    # the plan's minimum in staging (one instance), two workers (40 req/s needs fewer: a run is distributed)
    assert f"  {NEURON_MODEL}: {digest} on 1 inf2.xlarge instance(s), 2 steps through 40 req/s, 2 workers" in out
    key = stored.removeprefix(f"s3://{stack.results_bucket}/")
    result = results.RunResult.from_json(
        session.client("s3").get_object(Bucket=stack.results_bucket, Key=key)["Body"].read().decode()
    )
    assert (result.model, result.environment, result.release, result.workers) == (NEURON_MODEL, ENV, digest, 2)
    assert result.verdict == results.PASS and sum(s.offered for s in result.steps) > 0

    project = config.load(config_dir)
    (finding,) = load_test_gate.evaluate(session, project, ENV, {NEURON_MODEL: digest})
    assert finding.passed and finding.evidence is not None and finding.evidence.location == stored


# ----------------------------------------------------------------------------- a run that outlives its session

PIPELINE = PROJECT.pipeline
LOAD_TEST_ROLE = f"arn:aws:iam::{ACCOUNT}:role/{PIPELINE.load_test_role_name}"
STEP_ROLE = f"arn:aws:iam::{PIPELINE.account}:role/inferstack-pipeline-LoadTest"
STEP_SESSION_S = 8 * 3600  # the step's own credentials (CodeBuild renews its role's) outlast the run
HOUR_AND_MORE = 3700


@pytest.fixture
def step_session(deployed, monkeypatch):
    """The orchestrator's session as the pipeline's load test step gets it: session_for assumes the environment's
    load test role from the step's own credentials, which are a role's, so it is role chaining (an hour at most:
    the emulator's rules refuse more, and refuse credentials past their expiry). The emulator's clock is set
    back after."""
    endpoint, _ = deployed
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    step = (
        cli_deploy.Aws(endpoint, PIPELINE.account, REGION)
        .client("sts")
        .assume_role(RoleArn=STEP_ROLE, RoleSessionName="codebuild", DurationSeconds=STEP_SESSION_S)["Credentials"]
    )
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", step["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", step["SecretAccessKey"])
    monkeypatch.setenv("AWS_SESSION_TOKEN", step["SessionToken"])
    try:
        yield aws_sessions.session_for(ENV, ENVIRONMENT, purpose="loadtest", role_arn=LOAD_TEST_ROLE)
    finally:
        sts.pass_time(endpoint, 0)


def an_hour_passes(endpoint: str, monkeypatch) -> None:
    """For the emulator's STS and for botocore's credential clock alike: the session's first credentials expire."""
    sts.pass_time(endpoint, HOUR_AND_MORE)
    monkeypatch.setattr(botocore.credentials, "datetime", sts.datetime_ahead(HOUR_AND_MORE))


def test_a_run_that_outlives_its_first_credentials_finishes(
    step_session, session, stand_in, target, deployed, monkeypatch
):
    """An hour passes once the workers run: the master's end is still read (DescribeTasks), its result too
    (GetObject), and every task stopped, with the role assumed again."""
    endpoint, _ = deployed
    first_key = step_session.get_credentials().get_frozen_credentials().access_key

    def log(line: str) -> None:
        if "workers started" in line:
            an_hour_passes(endpoint, monkeypatch)

    result = fargate.run_in_environment(
        step_session,
        ENV,
        ENVIRONMENT,
        spec_for(target, ((5, 3),)),
        workers=2,
        release="r1",
        run_id="run-long",
        timeout=120,
        poll_s=0.5,
        log=log,
    )
    stack = fargate.read_stack(session.client("cloudformation"), ENV)
    assert result.results_location == f"s3://{stack.results_bucket}/{results.results_key('r1', MODEL, 'run-long')}"
    assert sum(step.offered for step in result.steps) > 0
    assert step_session.get_credentials().get_frozen_credentials().access_key != first_key  # assumed again
    wait_for_reports(stand_in)
    tasks = stopped_tasks(session, stack, stand_in.tasks)
    assert len(tasks) == 3 and {t["lastStatus"] for t in tasks.values()} == {"STOPPED"}


def test_sigterm_after_the_first_credentials_expired_still_stops_every_task(
    step_session, session, stand_in, target, deployed, monkeypatch
):
    """SIGTERM an hour into a run (the step's timeout, a cancelled build): StopTask of every task it started, with
    credentials assumed again, not the expired ones."""
    endpoint, _ = deployed
    started: list[str] = []
    step_session.events.register(
        "after-call.ecs.RunTask", lambda parsed, **_: started.extend(t["taskArn"] for t in parsed.get("tasks") or [])
    )

    def log(line: str) -> None:
        if "workers started" in line:
            give_up = time.monotonic() + 30
            while len(stand_in.tasks) < 3:  # the stand-in runs the master and both workers
                assert time.monotonic() < give_up, "the stand-in did not start every task"
                time.sleep(0.1)
            an_hour_passes(endpoint, monkeypatch)
            os.kill(os.getpid(), signal.SIGTERM)

    spec = spec_for(target, ((5, 600),))  # ten minutes of load: only StopTask ends it within the test
    with pytest.raises(runner.Terminated), runner.stopped_on_sigterm():
        fargate.run_in_environment(
            step_session,
            ENV,
            ENVIRONMENT,
            spec,
            workers=2,
            release="r1",
            run_id="run-term",
            timeout=120,
            poll_s=0.5,
            log=log,
        )
    stack = fargate.read_stack(session.client("cloudformation"), ENV)
    tasks = stopped_tasks(session, stack, started)
    assert len(tasks) == 3 and sorted(stand_in.tasks) == sorted(started)
    assert all(
        (t.get("desiredStatus"), t.get("stoppedReason")) == ("STOPPED", "inferstack loadtest: interrupted")
        for t in tasks.values()
    )
    wait_for_reports(stand_in)
    assert all(task.stop_requested_at is not None for task in stand_in.tasks.values())
