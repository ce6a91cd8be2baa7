"""A stand-in for Fargate's container runtime (and the ECS agent in it) on moto's server: the tasks RunTask
starts in one cluster run for real, as processes on this machine.

moto answers RunTask with a task record and runs nothing. While the stand-in watches a cluster, each task there
that is to run (desiredStatus RUNNING) is started the way its container would start:
- the command: the image's ENTRYPOINT (read from its Dockerfile) followed by the task definition's command (or
  RunTask's command override); `python` is this Python, the image's /opt/inferstack is this checkout;
- the environment: the image's ENV, the container definition's environment, RunTask's overrides, and what
  Fargate gives a task: AWS_REGION, AWS_DEFAULT_REGION, credentials (here: the emulator's endpoint and a key
  naming the account; a Fargate task gets its task role's through the container credentials endpoint);
- the user: the image's USER (or the container definition's `user`), numeric uid:gid, as the container runs;
- the file system, as Fargate (platform 1.4) builds it, in a mount namespace of the task's own: each volume of the
  task definition (an empty bind mount: ECS's "Bind mounts", https://docs.aws.amazon.com/AmazonECS/latest/
  developerguide/bind-mounts.html) is a fresh directory owned by root with mode 0755, unless the image declares a
  `VOLUME` at the mount point's path, when it gets the image's directory there (its owner and mode, which the
  stand-in reads from the `install -d -o UID -g GID -m MODE PATH` that creates it: the one form it reads; any other
  VOLUME it refuses); with `readonlyRootFilesystem` everything but the volumes is read-only. A volume's container
  path maps to its directory (in the environment's values, the working directory and TMPDIR where the volume is
  /tmp); the image's other paths map as `Image.paths` says. The one liberty: the task's process may read every
  file of this machine (CAP_DAC_READ_SEARCH, no other capability), since this Python and checkout stand in for
  the image's files; it writes only where the image's user could;
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
import re
import shlex
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
# A task definition volume with no host, EFS or Docker configuration: Fargate's bind mount, an empty directory.
EMPTY_VOLUME_OWNER, EMPTY_VOLUME_MODE = (0, 0), 0o755
_INSTALL_DIRECTORY = re.compile(r"^install\s+-d\b")
# Mounts a task never sees as the image's root file system (the container gets its own).
_NOT_THE_ROOT_FS = ("/proc", "/sys", "/dev")


class StandInError(Exception):
    pass


@dataclass(frozen=True)
class Directory:
    """A directory of the image: owner and mode."""

    uid: int
    gid: int
    mode: int


@dataclass(frozen=True)
class Image:
    """What the stand-in needs of an image: its ENTRYPOINT, ENV, WORKDIR and USER (final stage), the directories
    it declares as VOLUMEs (with their owner and mode), and where its files are on this machine (`paths`: image
    directory -> local directory)."""

    entrypoint: tuple[str, ...]
    env: Mapping[str, str]
    workdir: str
    paths: Mapping[str, Path]
    user: tuple[int, int] = (0, 0)
    volumes: Mapping[str, Directory] = field(default_factory=dict)

    @classmethod
    def from_dockerfile(cls, path: Path, paths: Mapping[str, Path]) -> Image:
        _, stages = df.read(path)
        entrypoint: tuple[str, ...] = ()
        env: dict[str, str] = {}
        workdir, user = "/", (0, 0)
        created: dict[str, Directory] = {}
        volumes: dict[str, Directory] = {}
        for instruction in stages[-1].instructions:
            where = f"{path}:{instruction.line}"
            if instruction.keyword == "ENTRYPOINT":
                entrypoint = tuple(json.loads(instruction.arguments))
            elif instruction.keyword == "ENV":
                for word in instruction.words(env):
                    key, _, value = word.partition("=")
                    env[key] = value
            elif instruction.keyword == "WORKDIR":
                workdir = instruction.words(env)[0]
            elif instruction.keyword == "USER":
                user = numeric_user(instruction.words(env)[0], where)
            elif instruction.keyword == "RUN":
                created.update(_installed_directories(df.expand(instruction.arguments, env), where))
            elif instruction.keyword == "VOLUME":
                words = (
                    json.loads(instruction.arguments)
                    if instruction.arguments.lstrip().startswith("[")
                    else instruction.words(env)
                )
                for volume in words:
                    if volume not in created:
                        raise StandInError(
                            f"{where}: VOLUME {volume}: the stand-in cannot tell the owner and mode "
                            f"the image gives it; create it with `install -d -o UID -g GID -m MODE "
                            f"{volume}` in this stage"
                        )
                    volumes[volume] = created[volume]
        if not entrypoint:
            raise StandInError(f"{path}: no ENTRYPOINT in JSON form in its last stage")
        return cls(entrypoint, env, workdir, dict(paths), user, volumes)

    def local(self, value: str, mounts: Mapping[str, Path] | None = None) -> str:
        """An image path (or a list of them, os.pathsep-separated) as a path on this machine; `mounts`: the task's
        volumes (container path -> directory), which hide the image's paths beneath them."""
        table = {**self.paths, **(mounts or {})}
        parts = []
        for part in value.split(os.pathsep):
            for image_dir, local_dir in sorted(table.items(), key=lambda item: -len(item[0])):
                if part == image_dir or part.startswith(image_dir.rstrip("/") + "/"):
                    part = str(local_dir) + part[len(image_dir.rstrip("/")) :]
                    break
            parts.append(part)
        return os.pathsep.join(parts)


def numeric_user(value: str, where: str) -> tuple[int, int]:
    """USER (or a container definition's `user`) as (uid, gid). Only `uid:gid` in numbers: a name, or a uid with no
    group, is resolved through the image's /etc/passwd, which the stand-in cannot read."""
    uid, _, gid = value.partition(":")
    if not (uid.isdigit() and gid.isdigit()):
        raise StandInError(
            f"{where}: user {value!r}: write it as numbers, uid:gid (the stand-in cannot read the "
            f"image's /etc/passwd to resolve a name or a uid's group)"
        )
    return int(uid), int(gid)


def _installed_directories(command: str, where: str) -> dict[str, Directory]:
    """The directories `install -d -o UID -g GID -m MODE PATH...` creates in a RUN (each command of a `&&` chain)."""
    found: dict[str, Directory] = {}
    for part in command.split("&&"):
        if not _INSTALL_DIRECTORY.match(part.strip()):
            continue
        words = shlex.split(part)[2:]
        options: dict[str, str] = {}
        targets: list[str] = []
        while words:
            word = words.pop(0)
            if word in ("-o", "-g", "-m"):
                options[word] = words.pop(0)
            else:
                targets.append(word)
        try:
            directory = Directory(int(options["-o"]), int(options["-g"]), int(options["-m"], 8))
        except (KeyError, ValueError):
            raise StandInError(
                f"{where}: install -d without a numeric -o, -g and -m: the stand-in cannot tell the "
                f"directory's owner and mode"
            ) from None
        found.update({target: directory for target in targets})
    return found


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
    mounts: dict[str, Path] = field(default_factory=dict)  # container path -> the volume's directory
    user: tuple[int, int] = (0, 0)
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
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(NETWORK_SHIM_SOURCE), "-ldl"],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
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

        self._ecs = boto3.client(
            "ecs",
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=self.account,
            aws_secret_access_key=SECRET,
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.errors: list[str] = []
        self.shim = build_network_shim(self.workdir / "task_network.so")

    # -- lifecycle
    def __enter__(self) -> FargateStandIn:
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
        request = urllib.request.Request(
            f"{self.endpoint}/moto-api/state-manager/set-transition",
            method="POST",
            data=json.dumps({"model_name": "ecs::task", "transition": transition}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10):
            pass

    # -- the agent's loop
    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except Exception as exc:  # a stand-in failure is reported to the test, not swallowed
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
        described = {
            t["taskArn"]: t
            for t in self._ecs.describe_tasks(cluster=self.cluster, tasks=[t.arn for t in running])["tasks"]
        }
        for task in running:
            _remember_family(task)
            if described.get(task.arn, {}).get("desiredStatus") == "STOPPED" and task.stop_requested_at is None:
                task.stop_requested_at = time.monotonic()
                self.log(f"{task.container} {_short(task.arn)}: StopTask -> SIGTERM")
                _signal(task.process, signal.SIGTERM)
            if (
                task.stop_requested_at is not None
                and task.process.poll() is None
                and time.monotonic() - task.stop_requested_at > task.stop_timeout_s
            ):
                _signal(task.process, signal.SIGKILL)
            code = task.process.poll()
            if code is not None:
                self._report_stopped(task, code)

    def _start(self, arn: str) -> None:
        (task,) = self._ecs.describe_tasks(cluster=self.cluster, tasks=[arn])["tasks"]
        definition = self._ecs.describe_task_definition(taskDefinition=task["taskDefinitionArn"])["taskDefinition"]
        (container,) = definition["containerDefinitions"]  # the load test's task definitions hold one each
        override = next(
            (
                o
                for o in (task.get("overrides") or {}).get("containerOverrides") or []
                if o.get("name") == container["name"]
            ),
            {},
        )
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
        user = (
            numeric_user(container["user"], f"task definition {definition['family']}")
            if container.get("user")
            else self.image.user
        )
        mounts, read_only = self._volumes(definition, container, scratch / "volumes")
        process_env = {key: self.image.local(value, mounts) for key, value in env.items()}
        process_env.update(
            {
                "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
                # Docker's HOME for a user it finds no passwd entry for (the stand-in reads no /etc/passwd).
                "HOME": "/",
                "LANG": "C.UTF-8",
                "AWS_REGION": self.region,
                "AWS_DEFAULT_REGION": self.region,
                "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_ACCESS_KEY_ID": self.account,
                "AWS_SECRET_ACCESS_KEY": SECRET,
                "AWS_EC2_METADATA_DISABLED": "true",
                "LD_PRELOAD": str(self.shim),
                PORTS_ENV: ",".join(f"{port}={local}" for port, local in published.items()),
                ROUTES_ENV: ",".join(
                    f"{t.private_ip}:{port}={local}" for t in self.tasks.values() for port, local in t.published.items()
                ),
            }
        )
        if "/tmp" in mounts:
            # The container's /tmp is this volume: where tempfile looks first there, it looks first here.
            process_env["TMPDIR"] = str(mounts["/tmp"])
        workdir = self.image.local(self.image.workdir, mounts)
        launcher = _launcher(mounts, read_only, bool(container.get("readonlyRootFilesystem")), workdir, user)
        log = scratch / "container.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [*launcher, *argv],
                env=process_env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        with self._lock:
            self.tasks[arn] = StandInTask(
                arn,
                container["name"],
                argv,
                env,
                private_ip,
                published,
                log,
                process,
                float(container.get("stopTimeout") or DEFAULT_STOP_TIMEOUT_S),
                mounts,
                user,
            )
        self.log(
            f"{container['name']} {_short(arn)}: pid {process.pid}, uid {user[0]}, {' '.join(argv[1:])}, "
            f"ENI {private_ip}" + (f", published {published}" if published else "")
        )

    def _volumes(self, definition: dict, container: dict, root: Path) -> tuple[dict[str, Path], set[str]]:
        """Each mount point's volume as Fargate creates it: (container path -> directory, read-only paths)."""
        declared = {v["name"]: v for v in definition.get("volumes") or []}
        mounts: dict[str, Path] = {}
        read_only: set[str] = set()
        for point in container.get("mountPoints") or []:
            name, path = point["sourceVolume"], point["containerPath"]
            volume = declared.get(name)
            if volume is None:
                raise StandInError(
                    f"task definition {definition['family']}: mount point {path} names volume "
                    f"{name!r}, which the task definition does not declare"
                )
            unsupported = set(volume) - {"name", "host"} or (volume.get("host") or {}).get("sourcePath")
            if unsupported:
                raise StandInError(
                    f"task definition {definition['family']}: volume {name!r} is not an empty bind "
                    f"mount (the one kind of Fargate volume the stand-in makes)"
                )
            directory = root / name
            if not directory.exists():
                directory.mkdir(parents=True)
                owner = self.image.volumes.get(path)
                uid, gid, mode = (
                    (owner.uid, owner.gid, owner.mode) if owner else (*EMPTY_VOLUME_OWNER, EMPTY_VOLUME_MODE)
                )
                os.chown(directory, uid, gid)
                os.chmod(directory, mode)
            mounts[path] = directory
            if point.get("readOnly"):
                read_only.add(path)
        return mounts, read_only

    def _report_stopped(self, task: StandInTask, returncode: int) -> None:
        # A container killed by a signal exits 128 + its number, as Docker and ECS report it (SIGTERM: 143).
        code = 128 - returncode if returncode < 0 else returncode
        task.exit_code = code
        # A task that exited by itself stopped because its essential container did; one stopped by StopTask keeps
        # the reason StopTask gave.
        reason = {} if task.stop_requested_at is not None else {"reason": "Essential container in task exited"}
        self._ecs.submit_task_state_change(
            cluster=self.cluster,
            task=task.arn,
            status="STOPPED",
            **reason,
            containers=[
                {"containerName": task.container, "exitCode": code, "status": "STOPPED", "reason": f"exit code {code}"}
            ],
        )
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


def _launcher(
    mounts: Mapping[str, Path], read_only: set[str], read_only_root: bool, workdir: str, user: tuple[int, int]
) -> list[str]:
    """The argv prefix that starts a task's command in a mount namespace of its own: the root file system read-only
    when the task says so (every mount of this machine's but /proc, /sys and /dev, remounted read-only in that
    namespace only), each volume's directory mounted on itself, writable unless its mount point is read-only, and
    the command run from `workdir` as `user`, keeping only CAP_DAC_READ_SEARCH (to read this machine's Python)."""
    script = ["set -e"]
    if read_only_root:
        script += [f"mount -o remount,bind,ro {shlex.quote(m)}" for m in _writable_mounts()]
    for path, directory in mounts.items():
        mode = "ro" if path in read_only else "rw"
        script += [
            f"mount --bind {shlex.quote(str(directory))} {shlex.quote(str(directory))}",
            f"mount -o remount,bind,{mode} {shlex.quote(str(directory))}",
        ]
    script.append(f"cd {shlex.quote(workdir)}")
    uid, gid = user
    drop = (
        ""
        if uid == 0
        else (
            f"setpriv --reuid {uid} --regid {gid} --clear-groups --inh-caps +dac_read_search "
            f"--ambient-caps +dac_read_search -- "
        )
    )
    script.append(f'exec {drop}"$@"')
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", "\n".join(script), "task"]


def _writable_mounts() -> list[str]:
    """This machine's writable mounts that stand for the image's root file system, parents first."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        point, options = fields[4].replace("\\040", " "), fields[5].split(",")
        if "rw" in options and not any(point == p or point.startswith(p + "/") for p in _NOT_THE_ROOT_FS):
            found.append(point)
    return sorted(set(found), key=lambda p: (p.count("/"), p))


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


def leftover_processes(stand_in: FargateStandIn) -> list[int]:
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
