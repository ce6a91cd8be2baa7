"""The Fargate stand-in (rehearsal/fargate_standin.py) on moto's server: tasks RunTask starts run as
processes with the image's entrypoint and ENV, the definition's command and RunTask's overrides; a task's
container port is reached at its private IP and nothing listens beyond loopback; exit codes reach DescribeTasks
as the ECS agent reports them; StopTask ends a task; a task runs as its image's user on the volumes Fargate would
give it (an empty bind mount root's 0755 unless the image declares a VOLUME there; a read-only root file system).
Plain Python commands, not the load test: the contract of the stand-in itself."""

from __future__ import annotations

import time
from pathlib import Path

import boto3
import pytest

from rehearsal import cli_deploy
from rehearsal.fargate_standin import Directory, FargateStandIn, Image, StandInError, leftover_processes

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
        return boto3.client(
            service, endpoint_url=endpoint, region_name=REGION, aws_access_key_id=ACCOUNT, aws_secret_access_key="test"
        )

    return client("ecs"), client("ec2")


def network(ec2) -> dict:
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.1.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="g", Description="g", VpcId=vpc)["GroupId"]
    return {"awsvpcConfiguration": {"subnets": [subnet], "securityGroups": [group], "assignPublicIp": "DISABLED"}}


def register(ecs, family: str, code: str, port: int | None = None) -> str:
    container = {
        "name": family.capitalize(),
        "image": "example",
        "command": [code],
        "environment": [{"name": "ROLE", "value": "from the definition"}],
    }
    if port:
        container["portMappings"] = [{"containerPort": port}]
    return ecs.register_task_definition(
        family=family,
        networkMode="awsvpc",
        requiresCompatibilities=["FARGATE"],
        cpu="256",
        memory="512",
        containerDefinitions=[container],
    )["taskDefinition"]["taskDefinitionArn"]


def run(ecs, definition: str, net: dict, **overrides) -> dict:
    container = ecs.describe_task_definition(taskDefinition=definition)["taskDefinition"]["containerDefinitions"][0]
    environment = [{"name": k, "value": v} for k, v in overrides.items()]
    return ecs.run_task(
        cluster=CLUSTER,
        taskDefinition=definition,
        launchType="FARGATE",
        networkConfiguration=net,
        overrides={"containerOverrides": [{"name": container["name"], "environment": environment}]},
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
    dockerfile.write_text(
        'FROM python:3.12\nENV A=1 \\\n    B=/opt/app/lib\nWORKDIR /tmp\nENTRYPOINT ["python", "-m", "pkg.task"]\n'
    )
    image = Image.from_dockerfile(dockerfile, {"/opt/app": Path("/checkout")})
    assert image.entrypoint == ("python", "-m", "pkg.task") and image.workdir == "/tmp"
    assert image.env == {"A": "1", "B": "/opt/app/lib"}
    assert image.local(image.env["B"]) == "/checkout/lib" and image.local("/opt/other") == "/opt/other"


# ----------------------------------------------------------------------------- the task's user and file system

# What the load-test master does first (inferstack.loadtest.task): a scratch directory; then it writes in its volume
# and tries the rest of the file system, reporting what it could write.
SCRATCH = """
import os, tempfile
print("uid", os.getuid(), os.getgid(), flush=True)
for place in ("/tmp/written-through-the-path", os.path.expanduser("~/x"), os.path.join(os.getcwd(), "x")):
    try:
        open(place, "w").close()
        print("wrote", place)
    except OSError as exc:
        print("refused", place, exc.strerror)
with tempfile.TemporaryDirectory() as scratch:
    print("scratch", scratch, flush=True)
"""
IMAGE_WITH_VOLUME = """FROM python:3.12
RUN groupadd --gid 10001 app && useradd --uid 10001 --gid 10001 app
RUN install -d -o 10001 -g 10001 -m 0700 /tmp
VOLUME ["/tmp"]
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["python", "-c"]
"""


def register_with_scratch(ecs, family: str, code: str, *, read_only_root: bool = True) -> str:
    container = {
        "name": family.capitalize(),
        "image": "example",
        "command": [code],
        "readonlyRootFilesystem": read_only_root,
        "mountPoints": [{"sourceVolume": "scratch", "containerPath": "/tmp", "readOnly": False}],
    }
    return ecs.register_task_definition(
        family=family,
        networkMode="awsvpc",
        requiresCompatibilities=["FARGATE"],
        cpu="256",
        memory="512",
        volumes=[{"name": "scratch", "host": {}}],
        containerDefinitions=[container],
    )["taskDefinition"]["taskDefinitionArn"]


@pytest.mark.parametrize("declared", [True, False], ids=["image-declares-the-volume", "empty-bind-mount"])
def test_a_task_runs_as_the_image_user_on_fargate_volumes(emulator, tmp_path, declared):
    """An empty bind mount is root's, mode 0755: the image's non-root user cannot write its scratch directory there
    unless the image declares a VOLUME at that path (then the volume has the image's owner and mode). With a
    read-only root file system nothing else is writable, the machine's own /tmp included."""
    dockerfile = tmp_path / "Dockerfile"
    text = IMAGE_WITH_VOLUME if declared else IMAGE_WITH_VOLUME.replace('VOLUME ["/tmp"]\n', "")
    dockerfile.write_text(text)
    image = Image.from_dockerfile(dockerfile, {})
    ecs, ec2 = clients(emulator)
    ecs.create_cluster(clusterName=CLUSTER)
    with FargateStandIn(emulator, ACCOUNT, REGION, CLUSTER, image, tmp_path / "standin", poll_s=0.1) as stand_in:
        task = run(ecs, register_with_scratch(ecs, "scratch", SCRATCH), network(ec2))
        ended = wait_until(lambda: stopped(ecs, task["taskArn"]), "the task to stop")
        output = stand_in.output(task["taskArn"])
        volume = stand_in.tasks[task["taskArn"]].mounts["/tmp"]
    assert "uid 10001 10001" in output
    assert "refused /tmp/written-through-the-path Read-only file system" in output  # the machine's /tmp
    assert "refused /x" in output  # HOME is / for a user the stand-in finds no passwd entry for
    if declared:
        assert ended["containers"][0]["exitCode"] == 0, output
        assert f"wrote {volume}/x" in output and f"scratch {volume}/" in output
        assert (volume.stat().st_uid, volume.stat().st_mode & 0o7777) == (10001, 0o700)
    else:
        assert ended["containers"][0]["exitCode"] == 1, output
        assert f"refused {volume}/x Permission denied" in output
        assert "No usable temporary directory found" in output
        assert (volume.stat().st_uid, volume.stat().st_mode & 0o7777) == (0, 0o755)
    assert leftover_processes(stand_in) == []


@pytest.mark.parametrize(
    "text, error",
    [
        ("USER app\n", "user 'app': write it as numbers, uid:gid"),
        ("USER 10001\n", "user '10001': write it as numbers, uid:gid"),
        ('VOLUME ["/data"]\n', "VOLUME /data: the stand-in cannot tell the owner and mode"),
        ("RUN install -d -m 0700 /data\n", "install -d without a numeric -o, -g and -m"),
    ],
)
def test_an_image_the_stand_in_cannot_read_exactly_is_refused(tmp_path, text, error):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f'FROM python:3.12\n{text}ENTRYPOINT ["python"]\n')
    with pytest.raises(StandInError, match=error):
        Image.from_dockerfile(dockerfile, {})


def test_the_load_test_image_declares_its_scratch_volume_for_its_user():
    """The shipped generator image: a non-root user, and /tmp (the LoadTest stack's scratch mount point) declared
    as a VOLUME that user owns, so Fargate's bind mount there is writable (tests/loadtest/test_fargate_run.py runs
    it)."""
    from inferstack.constructs.load_test import SCRATCH_PATH
    from rehearsal.fargate_standin import ROOT

    image = Image.from_dockerfile(ROOT / "container" / "loadtest" / "Dockerfile", {})
    assert image.user[0] != 0
    assert image.volumes[SCRATCH_PATH] == Directory(image.user[0], image.user[1], 0o700)
