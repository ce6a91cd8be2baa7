"""The Fargate stand-in (rehearsal/fargate_standin.py) on moto's server: tasks RunTask starts run as
processes with the image's entrypoint and ENV, the definition's command and RunTask's overrides; a task's
container port is reached at its private IP and nothing listens beyond loopback; exit codes reach DescribeTasks
as the ECS agent reports them; StopTask ends a task. Plain Python commands, not the load test: the contract of
the stand-in itself."""

from __future__ import annotations

import time
from pathlib import Path

import boto3
import pytest

from rehearsal import cli_deploy
from rehearsal.fargate_standin import FargateStandIn, Image, leftover_processes

ACCOUNT, REGION, CLUSTER = "222222222222", "us-east-1", "generators"
PORT = 5557
# Listens where a container would (every interface, its port), answers one connection with what it was given.
SERVER = """
import os, socket
with socket.socket() as listener:
    listener.bind(("0.0.0.0", 5557))
    listener.listen()
    print("listening on", listener.getsockname(), flush=True)
    connection, _ = listener.accept()
    with connection:
        connection.sendall(f"{os.environ['FROM_IMAGE']} {os.environ['ROLE']}".encode())
"""
# Connects to the server task's private IP, as a worker reaches its master; exits 3 when it got the answer.
CLIENT = """
import os, socket, sys, time
for attempt in range(100):
    try:
        connection = socket.create_connection((os.environ["SERVER"], 5557), timeout=5)
        break
    except OSError:
        time.sleep(0.1)
with connection:
    print("got", connection.recv(100).decode(), flush=True)
sys.exit(3)
"""
SLEEPER = "import time\nwhile True: time.sleep(1)"


def wait_until(condition, what: str, timeout: float = 60.0):
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def emulator(tmp_path, monkeypatch):
    for key in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    with cli_deploy.emulator(tmp_path, cli_deploy.Clock(120)) as endpoint:
        yield endpoint


def clients(endpoint: str):
    def client(service: str):
        return boto3.client(service, endpoint_url=endpoint, region_name=REGION, aws_access_key_id=ACCOUNT,
                            aws_secret_access_key="test")
    return client("ecs"), client("ec2")


def network(ec2) -> dict:
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.1.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="g", Description="g", VpcId=vpc)["GroupId"]
    return {"awsvpcConfiguration": {"subnets": [subnet], "securityGroups": [group], "assignPublicIp": "DISABLED"}}


def register(ecs, family: str, code: str, port: int | None = None) -> str:
    container = {"name": family.capitalize(), "image": "example", "command": [code],
                 "environment": [{"name": "ROLE", "value": "from the definition"}]}
    if port:
        container["portMappings"] = [{"containerPort": port}]
    return ecs.register_task_definition(family=family, networkMode="awsvpc", requiresCompatibilities=["FARGATE"],
                                        cpu="256", memory="512", containerDefinitions=[container]
                                        )["taskDefinition"]["taskDefinitionArn"]


def run(ecs, definition: str, net: dict, **overrides) -> dict:
    container = ecs.describe_task_definition(taskDefinition=definition)["taskDefinition"]["containerDefinitions"][0]
    environment = [{"name": k, "value": v} for k, v in overrides.items()]
    return ecs.run_task(cluster=CLUSTER, taskDefinition=definition, launchType="FARGATE", networkConfiguration=net,
                        overrides={"containerOverrides": [{"name": container["name"], "environment": environment}]}
                        )["tasks"][0]


def eni_ip(task: dict) -> str:
    return next(d["value"] for d in task["attachments"][0]["details"] if d["name"] == "privateIPv4Address")


def stopped(ecs, arn: str) -> dict | None:
    (task,) = ecs.describe_tasks(cluster=CLUSTER, tasks=[arn])["tasks"]
    return task if task["lastStatus"] == "STOPPED" and task["containers"][0].get("reason") else None


def test_tasks_run_reach_each_other_on_loopback_and_report_how_they_ended(emulator, tmp_path):
    ecs, ec2 = clients(emulator)
    ecs.create_cluster(clusterName=CLUSTER)
    net = network(ec2)
    image = Image(entrypoint=("python", "-c"), env={"FROM_IMAGE": "image-env"}, workdir="/tmp", paths={})
    with FargateStandIn(emulator, ACCOUNT, REGION, CLUSTER, image, tmp_path / "standin", poll_s=0.1) as stand_in:
        server = run(ecs, register(ecs, "server", SERVER, port=PORT), net)
        client = run(ecs, register(ecs, "client", CLIENT), net, SERVER=eni_ip(server), ROLE="overridden")
        sleeper = run(ecs, register(ecs, "sleeper", SLEEPER), net)

        ended_client = wait_until(lambda: stopped(ecs, client["taskArn"]), "the client to stop")
        ended_server = wait_until(lambda: stopped(ecs, server["taskArn"]), "the server to stop")
        assert ended_client["containers"][0]["exitCode"] == 3 and ended_server["containers"][0]["exitCode"] == 0
        assert ended_client["stopCode"] == "EssentialContainerExited"
        # The client reached the server at the server task's private IP; the server saw the image's ENV and
        # its definition's environment, the client RunTask's override.
        assert stand_in.output(client["taskArn"]).strip() == "got image-env from the definition"
        assert stand_in.tasks[client["taskArn"]].env["ROLE"] == "overridden"
        published = stand_in.tasks[server["taskArn"]].published[PORT]
        assert stand_in.output(server["taskArn"]).strip() == f"listening on ('127.0.0.1', {published})"

        # StopTask: the process gets SIGTERM and its end is reported.
        wait_until(lambda: sleeper["taskArn"] in stand_in.tasks, "the sleeper to start")
        ecs.stop_task(cluster=CLUSTER, task=sleeper["taskArn"], reason="test")
        ended_sleeper = wait_until(lambda: stopped(ecs, sleeper["taskArn"]), "the sleeper to stop")
        assert ended_sleeper["containers"][0]["exitCode"] == 143  # 128 + SIGTERM, as ECS reports a signalled exit
        assert stand_in.errors == []
    assert leftover_processes(stand_in) == []
    assert all(t.process.poll() is not None for t in stand_in.tasks.values())


def test_an_image_is_read_from_its_dockerfile(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text('FROM python:3.12\nENV A=1 \\\n    B=/opt/app/lib\nWORKDIR /tmp\n'
                          'ENTRYPOINT ["python", "-m", "pkg.task"]\n')
    image = Image.from_dockerfile(dockerfile, {"/opt/app": Path("/checkout")})
    assert image.entrypoint == ("python", "-m", "pkg.task") and image.workdir == "/tmp"
    assert image.env == {"A": "1", "B": "/opt/app/lib"}
    assert image.local(image.env["B"]) == "/checkout/lib" and image.local("/opt/other") == "/opt/other"
