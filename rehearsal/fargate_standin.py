"""A stand-in for Fargate's container runtime (and the ECS agent in it) on moto's server: the tasks RunTask
starts in one cluster run for real, as processes on this machine.

moto answers RunTask with a task record and runs nothing. While the stand-in watches a cluster, each task there
that is to run (desiredStatus RUNNING) is started the way its container would start:
- the command: the image's ENTRYPOINT (read from its Dockerfile) followed by the task definition's command (or
  RunTask's command override); `python` is this Python, the image's /opt/inferstack is this checkout;
- the environment: the image's ENV, the container definition's environment, RunTask's overrides, and what
  Fargate gives a task: AWS_REGION, AWS_DEFAULT_REGION, credentials (here: the emulator's endpoint and a key
  naming the account; a Fargate task gets its task role's through the container credentials endpoint);
- the working directory: a scratch directory per task (the image's WORKDIR is the task's writable volume);
- the network: each task's interface is loopback. Its container ports are published on free loopback ports and
  a connection to another task's private IP (moto's, from the task's ENI attachment) and container port is
  routed there, by an LD_PRELOAD shim (task_network.c), so nothing listens beyond 127.0.0.1;
- StopTask (desiredStatus STOPPED): SIGTERM to the process group, SIGKILL after the container's stopTimeout;
- how it ended: reported as the ECS agent reports it (SubmitTaskStateChange: STOPPED, the container's exit code,
  "Essential container in task exited"; moto patch ecs-agent-state-changes), so DescribeTasks shows it.
moto's own task lifecycle (a task advances towards STOPPED each time it is described) is switched off through
moto's state manager while the stand-in runs: a task's state is what its process does.

Every process it starts leads its own process group and is ended, by its process id, when the stand-in stops."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rehearsal import dockerfile as df

ROOT = Path(__file__).resolve().parents[1]
NETWORK_SHIM_SOURCE = Path(__file__).resolve().parent / "task_network.c"
PORTS_ENV = "INFERSTACK_TASK_PORTS"
ROUTES_ENV = "INFERSTACK_TASK_ROUTES"
# moto's state manager: a task advances one state per DescribeTasks by default; this many keeps it where it is.
NEVER = 10**9
DEFAULT_STOP_TIMEOUT_S = 30.0  # ECS's, when the container definition sets none
SECRET = "fargate-standin"  # moto accepts any secret key


class StandInError(Exception):
    pass


@dataclass(frozen=True)
class Image:
    """What the stand-in needs of an image: its ENTRYPOINT, ENV and WORKDIR (final stage), and where its files
    are on this machine (`paths`: image directory -> local directory)."""

    entrypoint: tuple[str, ...]
    env: Mapping[str, str]
    workdir: str
    paths: Mapping[str, Path]

    @classmethod
    def from_dockerfile(cls, path: Path, paths: Mapping[str, Path]) -> "Image":
        _, stages = df.read(path)
        entrypoint: tuple[str, ...] = ()
        env: dict[str, str] = {}
        workdir = "/"
        for instruction in stages[-1].instructions:
            if instruction.keyword == "ENTRYPOINT":
                entrypoint = tuple(json.loads(instruction.arguments))
            elif instruction.keyword == "ENV":
                for word in instruction.words(env):
                    key, _, value = word.partition("=")
                    env[key] = value
            elif instruction.keyword == "WORKDIR":
                workdir = instruction.words(env)[0]
        if not entrypoint:
            raise StandInError(f"{path}: no ENTRYPOINT in JSON form in its last stage")
        return cls(entrypoint, env, workdir, dict(paths))

    def local(self, value: str) -> str:
        """An image path (or a list of them, os.pathsep-separated) as a path on this machine."""
        parts = []
        for part in value.split(os.pathsep):
            for image_dir, local_dir in self.paths.items():
                if part == image_dir or part.startswith(image_dir.rstrip("/") + "/"):
                    part = str(local_dir) + part[len(image_dir.rstrip("/")):]
                    break
            parts.append(part)
        return os.pathsep.join(parts)


@dataclass
class StandInTask:
    arn: str
    container: str
    argv: list[str]
    env: dict[str, str]  # as the container saw it (before the stand-in's own additions)
    private_ip: str
    published: dict[int, int]  # container port -> loopback port
    log: Path
    process: subprocess.Popen
    stop_timeout_s: float
    exit_code: int | None = None
    stop_requested_at: float | None = None
    reported: bool = False
    # Every process seen under this task's, by (pid, start time): ended at the stand-in's exit even when its
    # parent is gone (an orphan leaves the tree).
    seen: set[tuple[int, float]] = field(default_factory=set)

    @property
    def pid(self) -> int:
        return self.process.pid


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def build_network_shim(out: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise StandInError(f"no C compiler on PATH to build {NETWORK_SHIM_SOURCE.name}")
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(NETWORK_SHIM_SOURCE), "-ldl"],
                   check=True, capture_output=True, text=True, timeout=120)
    return out


@dataclass
class FargateStandIn:
    """Watch `cluster` on the emulator at `endpoint` (as `account` in `region`) and run its tasks; use as a
    context manager. `tasks`: every task started, by ARN, with its process and how it ended."""

    endpoint: str
    account: str
    region: str
    cluster: str
    image: Image
    workdir: Path
    poll_s: float = 0.2
    log: Callable[[str], None] = lambda _line: None
    tasks: dict[str, StandInTask] = field(default_factory=dict)

    def __post_init__(self) -> None:
        import boto3

        self._ecs = boto3.client("ecs", endpoint_url=self.endpoint, region_name=self.region,
                                 aws_access_key_id=self.account, aws_secret_access_key=SECRET)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.errors: list[str] = []
        self.shim = build_network_shim(self.workdir / "task_network.so")

    # -- lifecycle
    def __enter__(self) -> "FargateStandIn":
        self._moto_transition({"progression": "manual", "times": NEVER})
        self._thread = threading.Thread(target=self._watch, name="fargate-standin", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        for task in self.tasks.values():
            _end(task, grace_s=5)
        self._moto_transition({"progression": "manual", "times": 1})  # moto's default for ecs::task

    def _moto_transition(self, transition: dict) -> None:
        request = urllib.request.Request(f"{self.endpoint}/moto-api/state-manager/set-transition", method="POST",
                                         data=json.dumps({"model_name": "ecs::task", "transition": transition}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10):
            pass

    # -- the agent's loop
    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except Exception as exc:  # noqa: BLE001 - a stand-in failure is reported to the test, not swallowed
                self.errors.append(f"{type(exc).__name__}: {' '.join(str(exc).split())}")
                self.log(f"stand-in error: {self.errors[-1]}")
            self._stop.wait(self.poll_s)

    def _tick(self) -> None:
        wanted = self._ecs.list_tasks(cluster=self.cluster, desiredStatus="RUNNING")["taskArns"]
        for arn in wanted:
            if arn not in self.tasks:
                self._start(arn)
        running = [t for t in self.tasks.values() if not t.reported]
        if not running:
            return
        described = {t["taskArn"]: t for t in self._ecs.describe_tasks(
            cluster=self.cluster, tasks=[t.arn for t in running])["tasks"]}
        for task in running:
            _remember_family(task)
            if described.get(task.arn, {}).get("desiredStatus") == "STOPPED" and task.stop_requested_at is None:
                task.stop_requested_at = time.monotonic()
                self.log(f"{task.container} {_short(task.arn)}: StopTask -> SIGTERM")
                _signal(task.process, signal.SIGTERM)
            if task.stop_requested_at is not None and task.process.poll() is None and \
                    time.monotonic() - task.stop_requested_at > task.stop_timeout_s:
                _signal(task.process, signal.SIGKILL)
            code = task.process.poll()
            if code is not None:
                self._report_stopped(task, code)

    def _start(self, arn: str) -> None:
        (task,) = self._ecs.describe_tasks(cluster=self.cluster, tasks=[arn])["tasks"]
        definition = self._ecs.describe_task_definition(taskDefinition=task["taskDefinitionArn"])["taskDefinition"]
        (container,) = definition["containerDefinitions"]  # the load test's task definitions hold one each
        override = next((o for o in (task.get("overrides") or {}).get("containerOverrides") or []
                         if o.get("name") == container["name"]), {})
        env = {**self.image.env}
        env.update({e["name"]: e["value"] for e in container.get("environment") or []})
        env.update({e["name"]: e["value"] for e in override.get("environment") or []})
        command = override.get("command") or container.get("command") or []
        argv = [*self.image.entrypoint, *command]
        if argv[0] in ("python", "python3"):
            argv[0] = sys.executable
        private_ip = _private_ip(task)
        published = {m["containerPort"]: free_port() for m in container.get("portMappings") or []}
        scratch = self.workdir / _short(arn)
        scratch.mkdir(parents=True)
        process_env = {key: self.image.local(value) for key, value in env.items()}
        process_env.update({
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": str(scratch), "TMPDIR": str(scratch), "LANG": "C.UTF-8",
            "AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region, "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.account, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_EC2_METADATA_DISABLED": "true",
            "LD_PRELOAD": str(self.shim),
            PORTS_ENV: ",".join(f"{port}={local}" for port, local in published.items()),
            ROUTES_ENV: ",".join(f"{t.private_ip}:{port}={local}" for t in self.tasks.values()
                                 for port, local in t.published.items()),
        })
        log = scratch / "container.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(argv, cwd=scratch, env=process_env, stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        with self._lock:
            self.tasks[arn] = StandInTask(arn, container["name"], argv, env, private_ip, published, log, process,
                                          float(container.get("stopTimeout") or DEFAULT_STOP_TIMEOUT_S))
        self.log(f"{container['name']} {_short(arn)}: pid {process.pid}, {' '.join(argv[1:])}, ENI {private_ip}"
                 + (f", published {published}" if published else ""))

    def _report_stopped(self, task: StandInTask, returncode: int) -> None:
        # A container killed by a signal exits 128 + its number, as Docker and ECS report it (SIGTERM: 143).
        code = 128 - returncode if returncode < 0 else returncode
        task.exit_code = code
        # A task that exited by itself stopped because its essential container did; one stopped by StopTask keeps
        # the reason StopTask gave.
        reason = {} if task.stop_requested_at is not None else {"reason": "Essential container in task exited"}
        self._ecs.submit_task_state_change(
            cluster=self.cluster, task=task.arn, status="STOPPED", **reason,
            containers=[{"containerName": task.container, "exitCode": code, "status": "STOPPED",
                         "reason": f"exit code {code}"}])
        task.reported = True
        self.log(f"{task.container} {_short(task.arn)}: exited {code}")

    def output(self, arn: str) -> str:
        return self.tasks[arn].log.read_text(errors="replace")


def _private_ip(task: dict) -> str:
    for attachment in task.get("attachments") or []:
        for detail in attachment.get("details") or []:
            if detail.get("name") == "privateIPv4Address":
                return detail["value"]
    raise StandInError(f"task {task.get('taskArn')} has no ENI address (not an awsvpc task?)")


def _short(arn: str) -> str:
    return arn.rsplit("/", 1)[-1][:12]


def _signal(process: subprocess.Popen, number: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, number)


def _remember_family(task: StandInTask) -> None:
    import psutil

    with contextlib.suppress(psutil.NoSuchProcess):
        root = psutil.Process(task.pid)
        for member in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                task.seen.add((member.pid, member.create_time()))


def _end(task: StandInTask, *, grace_s: float) -> None:
    """Terminate the task's process and every process seen under it (some lead process groups of their own,
    some may have lost their parent), each by its process id and start time: SIGTERM, then SIGKILL to whatever
    is left after `grace_s`."""
    import psutil

    _remember_family(task)
    family = []
    for pid, started in task.seen:
        with contextlib.suppress(psutil.NoSuchProcess):
            member = psutil.Process(pid)
            if member.create_time() == started:  # the same process, not a later one given its id
                family.append(member)
    for member in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.terminate()
    _, alive = psutil.wait_procs(family, timeout=grace_s)
    for member in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    psutil.wait_procs(alive, timeout=10)
    with contextlib.suppress(subprocess.TimeoutExpired):
        task.process.wait(timeout=10)


def leftover_processes(stand_in: "FargateStandIn") -> list[int]:
    """Process ids of anything the stand-in's tasks started that still runs."""
    import psutil

    alive = []
    for task in stand_in.tasks.values():
        for pid, started in task.seen:
            with contextlib.suppress(psutil.NoSuchProcess):
                process = psutil.Process(pid)
                if process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
    return sorted(alive)
