"""Start the real `tritonserver` (2.51.0, from the PyPI wheel nvidia-pytriton==0.7.0) on a Triton model
repository exactly as SageMaker's Triton container starts it, for tests on a machine without a GPU or
Docker.

The container's entrypoint is `docker/sagemaker/serve` of triton-inference-server/server at release
r24.09 (the script of the `sagemaker-tritonserver:24.09-py3` image). `serve_command()` re-implements it
for single-model endpoints: the same pre-checks (config.pbtxt at the root, the default model folder),
the same flags in the same order, each from the same `SAGEMAKER_*` variable of the Model's
`Environment`, the same word splitting of the result. Multi-model mode (`SAGEMAKER_MULTI_MODEL=true`)
is not mirrored.

What differs from the container, and why (each is visible in `TritonServer.command`):

- the repository is the directory you pass (a CPU copy, see `cpu_copy`), not `/opt/ml/model/`;
- the port: the launcher sets the serve script's own `SAGEMAKER_BIND_TO_PORT` to a free loopback port
  (the script turns it into `--sagemaker-port`), instead of SageMaker's 8080;
- loopback only: the SageMaker front end always binds 0.0.0.0 (2.51 has no `--sagemaker-address`), so
  the server runs with `loopback_bind.c` preloaded, which turns wildcard binds into 127.0.0.1 / ::1;
- appended after the script's flags: `--backend-directory` (a prepared directory: pytriton's Python
  backend, the stub for the side environment's Python, and the `onnxruntime` stand-in) and
  `--cache-directory` (pytriton's caches), which the container has at /opt/tritonserver/;
- the Python backend stub runs in the side environment `.venv-triton` (numpy < 2, onnxruntime): its
  `bin/` first on PATH (the embedded interpreter finds its prefix from the `python3` on PATH, as
  pytriton does), the interpreter's libpython directory and the wheel's `nvidia_pytriton.libs` on
  LD_LIBRARY_PATH (a copied stub loses its `$ORIGIN` RPATH, and without the first entry the stub would
  load the OS's libpython3.X instead of the side environment's).

Stand-ins, because this machine cannot run NVIDIA's container:

- `cpu_copy()` copies the repository and rewrites `KIND_GPU` instance groups to `KIND_CPU` (Triton fails
  KIND_GPU groups when it finds no GPU); nothing else in config.pbtxt changes;
- `onnxruntime_standin.py` is the `onnxruntime` backend: the real one (libtriton_onnxruntime.so) ships
  only in NVIDIA's containers. It runs the same model.onnx with the onnxruntime Python package.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIDE_ENV = ROOT / ".venv-triton"
HERE = Path(__file__).resolve().parent
STANDIN_BACKEND = HERE / "onnxruntime_standin.py"
LOOPBACK_SHIM_SOURCE = HERE / "loopback_bind.c"
LOOPBACK_SHIM = "lib/loopback_bind.so"  # inside the side environment
# The stand-in appends one JSON line per execute() to this file (see onnxruntime_standin.py).
BATCH_LOG_ENV = "INFERSTACK_STANDIN_BATCH_LOG"

SERVE_SCRIPT = "triton-inference-server/server r24.09 docker/sagemaker/serve"
CONTAINER_REPOSITORY = "/opt/ml/model/"
SAGEMAKER_PORT = 8080
DEFAULT_SHM_BYTES = "16777216"  # the serve script's defaults
DEFAULT_SHM_GROWTH_BYTES = "1048576"
LOG_TAIL_LINES = 15


class ServeScriptExit(Exception):
    """The serve script would `exit 1` with this message before starting tritonserver."""


class TritonStartError(RuntimeError):
    """tritonserver exited or did not answer /ping with 200 in time (one line, with the log's tail)."""


# ---------------------------------------------------------------- the serve script, in Python


@dataclass(frozen=True)
class ServeCommand:
    args: tuple[str, ...]  # after "tritonserver"
    exported: dict[str, str]  # variables the script exports to tritonserver's environment


def serve_command(
    environment: Mapping[str, str], repository: str | Path = CONTAINER_REPOSITORY, *, gpu_count: int = 0
) -> ServeCommand:
    """The tritonserver argument list SageMaker's r24.09 serve script builds for a container started
    with `environment` (the Model's Environment) and the model repository at `repository`.

    Mirrors the script line by line: a variable counts when set and non-empty (`[ -n "$V" ]`), the flags
    are collected in the script's order into one string that bash splits on whitespace (the script
    expands $SAGEMAKER_ARGS unquoted), SAGEMAKER_TRITON_ADDITIONAL_ARGS comes before --load-model. Not
    mirrored: multi-model mode, and pathname expansion of the unquoted words. `gpu_count` stands for
    `nvidia-smi -L | wc -l` (only read with SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT)."""
    env = {key: value for key, value in environment.items() if value != ""}
    if env.get("SAGEMAKER_MULTI_MODEL") == "true":
        raise NotImplementedError("SAGEMAKER_MULTI_MODEL=true (multi-model endpoints) is not mirrored")
    repo = str(repository)
    if not repo.endswith("/"):
        repo += "/"  # the script's SAGEMAKER_SINGLE_MODEL_REPO=/opt/ml/model/ ends with a slash

    parts = [f"--model-repository={repo}"]
    parts.append(f"--model-namespacing={env.get('SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING', 'true')}")
    if "SAGEMAKER_BIND_TO_PORT" in env:
        parts.append(f"--sagemaker-port={env['SAGEMAKER_BIND_TO_PORT']}")
    if "SAGEMAKER_SAFE_PORT_RANGE" in env:
        parts.append(f"--sagemaker-safe-port-range={env['SAGEMAKER_SAFE_PORT_RANGE']}")
    parts.append(f"--allow-grpc={env.get('SAGEMAKER_TRITON_ALLOW_GRPC', 'false')}")
    parts.append(f"--allow-metrics={env.get('SAGEMAKER_TRITON_ALLOW_METRICS', 'false')}")
    if "SAGEMAKER_TRITON_METRICS_PORT" in env:
        parts.append(f"--metrics-port={env['SAGEMAKER_TRITON_METRICS_PORT']}")
    if "SAGEMAKER_TRITON_GRPC_PORT" in env:
        parts.append(f"--grpc-port={env['SAGEMAKER_TRITON_GRPC_PORT']}")
    if "SAGEMAKER_TRITON_BUFFER_MANAGER_THREAD_COUNT" in env:
        parts.append(f"--buffer-manager-thread-count={env['SAGEMAKER_TRITON_BUFFER_MANAGER_THREAD_COUNT']}")
    if "SAGEMAKER_TRITON_THREAD_COUNT" in env:
        parts.append(f"--sagemaker-thread-count={env['SAGEMAKER_TRITON_THREAD_COUNT']}")
    # Verbose logging unless the variable says otherwise.
    parts.append(f"--log-verbose={env.get('SAGEMAKER_TRITON_LOG_VERBOSE', 'true')}")
    for variable, flag in (
        ("SAGEMAKER_TRITON_LOG_INFO", "--log-info"),
        ("SAGEMAKER_TRITON_LOG_WARNING", "--log-warning"),
        ("SAGEMAKER_TRITON_LOG_ERROR", "--log-error"),
    ):
        if variable in env:
            parts.append(f"{flag}={env[variable]}")
    parts.append(
        "--backend-config=python,shm-default-byte-size="
        + env.get("SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE", DEFAULT_SHM_BYTES)
    )
    parts.append(
        "--backend-config=python,shm-growth-byte-size="
        + env.get("SAGEMAKER_TRITON_SHM_GROWTH_BYTE_SIZE", DEFAULT_SHM_GROWTH_BYTES)
    )
    if "SAGEMAKER_TRITON_TENSORFLOW_VERSION" in env:
        parts.append(f"--backend-config=tensorflow,version={env['SAGEMAKER_TRITON_TENSORFLOW_VERSION']}")
    if "SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT" in env:
        for gpu in range(gpu_count):
            parts.append(f"--model-load-gpu-limit {gpu}:{env['SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT']}")
    if "SAGEMAKER_TRITON_ADDITIONAL_ARGS" in env:
        parts.append(env["SAGEMAKER_TRITON_ADDITIONAL_ARGS"])

    root = Path(repo)
    if (root / "config.pbtxt").is_file():
        raise ServeScriptExit(
            "ERROR: Incorrect directory structure. Model directory needs to contain the top level folder"
        )
    exported: dict[str, str] = {}
    default = env.get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME")
    if default is not None:
        if not (root / default).is_dir():
            raise ServeScriptExit(
                f"ERROR: Directory with provided SAGEMAKER_TRITON_DEFAULT_MODEL_NAME {default} does not exist"
            )
    else:
        # find -mindepth 1 -maxdepth 1 -type d: directories (hidden ones too), not links to them.
        dirs = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.is_symlink()) if root.is_dir() else []
        if not dirs:
            raise ServeScriptExit("ERROR: No model found in model repository")
        if len(dirs) > 1:
            raise ServeScriptExit(
                "ERROR: More than 1 model directory found in model repository. Either provide a "
                "single directory or set SAGEMAKER_TRITON_DEFAULT_MODEL_NAME to run the ensemble "
                f"backend. Directories found in model repository: {' '.join(dirs)}"
            )
        default = dirs[0]
        exported["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"] = default  # the script exports it
    parts.append(f"--load-model={default}")

    args = ("--allow-sagemaker=true", "--allow-http=false", "--model-control-mode=explicit", *" ".join(parts).split())
    return ServeCommand(args, exported)


# ---------------------------------------------------------------- the CPU copy (stand-in (a))


def cpu_copy(repository: Path, target: Path) -> list[str]:
    """Copy `repository` to `target` with every KIND_GPU instance group rewritten to KIND_CPU (and
    nothing else changed in config.pbtxt); return "<folder>: instance_group[i]" for each rewrite.
    Needs tritonclient's model_config_pb2 (the project's environment has it)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    shutil.copytree(repository, target, symlinks=True)
    rewritten = []
    for config_path in sorted(target.glob("*/config.pbtxt")):
        config = text_format.Parse(config_path.read_text(encoding="utf-8"), pb.ModelConfig())
        changed = False
        for index, group in enumerate(config.instance_group):
            if group.kind == pb.ModelInstanceGroup.KIND_GPU:
                group.kind = pb.ModelInstanceGroup.KIND_CPU
                rewritten.append(f"{config_path.parent.name}: instance_group[{index}]")
                changed = True
        if changed:
            config_path.write_text(text_format.MessageToString(config), encoding="utf-8")
    return rewritten


# ---------------------------------------------------------------- the side environment


@dataclass(frozen=True)
class TritonInstall:
    """tritonserver and its Python backend from the nvidia-pytriton wheel in a side environment."""

    side_env: Path
    python_version: str  # "3.11": picks the stub
    python_libdir: Path  # where the side environment's libpython3.X.so lives
    tritonserver: Path
    python_backend: Path  # libtriton_python.so, triton_python_backend_utils.py
    stub: Path
    libs: Path  # nvidia_pytriton.libs
    caches: Path
    loopback_shim: Path

    @classmethod
    def locate(cls, side_env: Path | str = SIDE_ENV) -> TritonInstall:
        """FileNotFoundError naming what is missing (create the environment with `make .make/triton`)."""
        side_env = Path(side_env).absolute()
        python = side_env / "bin" / "python"
        if not python.exists():
            raise FileNotFoundError(f"{python} is missing: create the side environment with `make .make/triton`")
        probe = subprocess.run(
            [
                str(python),
                "-c",
                "import json, sys, sysconfig; print(json.dumps({'purelib': sysconfig.get_paths()"
                "['purelib'], 'version': '%d.%d' % sys.version_info[:2], "
                "'libdir': sysconfig.get_config_var('LIBDIR')}))",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        found = json.loads(probe.stdout)
        site = Path(found["purelib"])
        server = site / "pytriton" / "tritonserver"
        install = cls(
            side_env=side_env,
            python_version=found["version"],
            python_libdir=Path(found["libdir"]),
            tritonserver=server / "bin" / "tritonserver",
            python_backend=server / "backends" / "python",
            stub=server / "python_backend_stubs" / found["version"] / "triton_python_backend_stub",
            libs=site / "nvidia_pytriton.libs",
            caches=server / "caches",
            loopback_shim=side_env / LOOPBACK_SHIM,
        )
        missing = [
            str(p)
            for p in (install.tritonserver, install.python_backend / "libtriton_python.so", install.stub, install.libs)
            if not p.exists()
        ]
        if missing:
            raise FileNotFoundError(
                f"not in the side environment (nvidia-pytriton==0.7.0 for Python "
                f"{install.python_version}?): {', '.join(missing)}"
            )
        if not install.loopback_shim.exists():
            build_loopback_shim(install.loopback_shim)
        return install

    def prepare_backends(self, target: Path) -> Path:
        """A --backend-directory: python/ (pytriton's Python backend plus the stub for this Python)
        and onnxruntime/model.py (the stand-in)."""
        python = target / "python"
        shutil.copytree(self.python_backend, python, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(self.stub, python / "triton_python_backend_stub")
        (target / "onnxruntime").mkdir(parents=True)
        shutil.copy2(STANDIN_BACKEND, target / "onnxruntime" / "model.py")
        return target

    def process_environment(self, base: Mapping[str, str]) -> dict[str, str]:
        env = dict(base)
        env["PATH"] = os.pathsep.join([str(self.side_env / "bin"), env.get("PATH", os.defpath)])
        libs = [str(self.python_libdir), str(self.libs)]
        if env.get("LD_LIBRARY_PATH"):
            libs.append(env["LD_LIBRARY_PATH"])
        env["LD_LIBRARY_PATH"] = os.pathsep.join(libs)
        env["LD_PRELOAD"] = " ".join(filter(None, [str(self.loopback_shim), env.get("LD_PRELOAD", "")]))
        env.pop("PYTHONPATH", None)  # the stub's interpreter is the side environment's, nothing else
        env.pop("PYTHONHOME", None)
        return env


def build_loopback_shim(out: Path, *, compiler: str | None = None) -> Path:
    cc = compiler or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise FileNotFoundError(
            f"{out} is missing and no C compiler is on PATH to build it from {LOOPBACK_SHIM_SOURCE}"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.{os.getpid()}")
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O2", "-o", str(partial), str(LOOPBACK_SHIM_SOURCE), "-ldl"],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    partial.replace(out)
    return out


# ---------------------------------------------------------------- the server


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def container_environment(
    model_environment: Mapping[str, str], base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The process environment: ours without any SAGEMAKER_* variable, plus the Model's Environment
    (what SageMaker puts in the container)."""
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if not k.startswith("SAGEMAKER_")}
    env.update(model_environment)
    return env


@dataclass
class TritonServer:
    """`with TritonServer(repository, environment, work_dir=...) as server:` starts tritonserver as the
    serve script does, waits (at most `startup_timeout` s) for /ping 200 and stops it by pid on exit."""

    repository: Path
    environment: Mapping[str, str]  # the Model's Environment
    work_dir: Path  # backends/ and tritonserver.log go here
    install: TritonInstall | None = None
    startup_timeout: float = 120.0
    extra_env: Mapping[str, str] = field(default_factory=dict)  # e.g. BATCH_LOG_ENV for the stand-in
    # Tests only: Triton's KServe v2 HTTP front end on a loopback port too, to call any loaded model by name
    # (/v2/models/<name>/infer). SageMaker cannot reach it: its /invocations goes to the default model only.
    http_front_end: bool = False
    http_port: int = 0
    port: int = 0
    command: list[str] = field(default_factory=list)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "tritonserver.log"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> TritonServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        install = self.install or TritonInstall.locate()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        backends = self.work_dir / "backends"
        if not backends.exists():
            install.prepare_backends(backends)
        self.port = self.port or free_loopback_port()
        model_env = {**self.environment, "SAGEMAKER_BIND_TO_PORT": str(self.port)}
        serve = serve_command(model_env, self.repository)  # ServeScriptExit: nothing started
        self.command = [
            str(install.tritonserver),
            *serve.args,
            f"--backend-directory={backends}",
            f"--cache-directory={install.caches}",
        ]
        if self.http_front_end:
            # After the script's --allow-http=false: Triton takes the last value of a flag.
            self.http_port = self.http_port or free_loopback_port()
            self.command += ["--allow-http=true", "--http-address=127.0.0.1", f"--http-port={self.http_port}"]
        env = install.process_environment({**container_environment(model_env), **serve.exported, **self.extra_env})
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.work_dir, start_new_session=True
            )
        deadline = time.monotonic() + self.startup_timeout
        while True:
            code = self.process.poll()
            if code is not None:
                self._fail(f"tritonserver exited with code {code} before /ping answered 200")
            if self.ping() == 200:
                return
            if time.monotonic() > deadline:
                self.stop()
                self._fail(f"tritonserver did not answer /ping with 200 within {self.startup_timeout:g} s")
            time.sleep(0.1)

    def _fail(self, what: str) -> None:
        tail = [line.strip() for line in self.log().splitlines() if line.strip()][-LOG_TAIL_LINES:]
        raise TritonStartError(f"{what} (log {self.log_path}); log tail: {' | '.join(tail) or '(empty)'}")

    def stop(self, timeout: float = 40.0) -> int | None:
        """SIGTERM (Triton unloads its models, up to its 30 s exit timeout), then SIGKILL; then any
        process left in its session (the Python backend stubs) by process group id."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        return process.returncode

    # ------------------------------------------------------------ the SageMaker contract over HTTP

    def ping(self, timeout: float = 2.0) -> int | None:
        """/ping's status, or None when nothing answers."""
        try:
            with urllib.request.urlopen(self.url + "/ping", timeout=timeout) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except (urllib.error.URLError, OSError):
            return None

    def invoke(
        self, body: bytes | str | dict, *, content_type: str = "application/json", timeout: float = 60.0
    ) -> tuple[int, bytes]:
        """POST /invocations as SageMaker's InvokeEndpoint does; (status, body), also for errors."""
        if isinstance(body, dict):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        request = urllib.request.Request(
            self.url + "/invocations", data=body, method="POST", headers={"Content-Type": content_type}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def infer(self, model: str, body: bytes | str | dict, *, timeout: float = 60.0) -> tuple[int, bytes]:
        """POST /v2/models/<model>/infer on the HTTP front end (http_front_end=True); (status, body)."""
        if not self.http_port:
            raise RuntimeError("started without http_front_end")
        if isinstance(body, dict):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.http_port}/v2/models/{model}/infer",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def model_states(self) -> dict[str, str]:
        """Model -> status from the table Triton logs once its startup models are loaded (with model
        namespacing the names carry '<repository>::'). The SageMaker front end has no per-model
        readiness route; /ping (ready mode) is 200 only when every loaded model is ready."""
        states: dict[str, str] = {}
        lines = self.log().splitlines()
        for index, line in enumerate(lines):
            if line.startswith("| Model ") and "| Status" in line:
                for row in lines[index + 2 :]:
                    if not row.startswith("|"):
                        break
                    cells = [c.strip() for c in row.strip("|").split("|")]
                    if len(cells) >= 3:
                        states[cells[0].rsplit("::", 1)[-1]] = cells[2]
        return states


def read_batch_log(path: Path) -> list[dict]:
    """The stand-in's records: {"model", "instance", "requests", "rows"} per execute()."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def main(argv: Sequence[str] | None = None, *, out: Callable[[str], None] = print) -> int:
    """`python -m rehearsal.triton_server REPOSITORY ENV_JSON`: print the tritonserver command
    the serve script would run (no server is started)."""
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2:
        out("usage: python -m rehearsal.triton_server REPOSITORY '<Environment JSON>'")
        return 2
    try:
        command = serve_command(json.loads(argv[1]), argv[0])
    except ServeScriptExit as exc:
        out(str(exc))
        return 1
    out(" ".join(["tritonserver", *command.args]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
