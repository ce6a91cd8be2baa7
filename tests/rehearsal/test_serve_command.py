"""serve_command(): SageMaker's r24.09 serve script (triton-inference-server/server,
docker/sagemaker/serve) re-implemented, checked variable by variable. No server: these run in the
default suite, without the side environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from rehearsal.triton_server import ServeScriptExit, container_environment, cpu_copy, serve_command

HEAD = ["--allow-sagemaker=true", "--allow-http=false", "--model-control-mode=explicit"]


def repository(root: Path, *folders: str) -> Path:
    for folder in folders:
        (root / folder / "1").mkdir(parents=True)
        (root / folder / "config.pbtxt").write_text(f'name: "{folder}"\n')
    return root


def test_defaults_for_one_named_model(tmp_path):
    repo = repository(tmp_path / "model", "m")
    command = serve_command({"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "m"}, repo)
    assert list(command.args) == [
        *HEAD,
        f"--model-repository={repo}/",
        "--model-namespacing=true",
        "--allow-grpc=false",
        "--allow-metrics=false",
        "--log-verbose=true",
        "--backend-config=python,shm-default-byte-size=16777216",
        "--backend-config=python,shm-growth-byte-size=1048576",
        "--load-model=m",
    ]
    assert command.exported == {}


def test_every_variable_in_the_scripts_order(tmp_path):
    repo = repository(tmp_path / "model", "m", "m-encoder")
    env = {
        "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "m",
        "SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING": "false",
        "SAGEMAKER_BIND_TO_PORT": "9000",
        "SAGEMAKER_SAFE_PORT_RANGE": "9001-9010",
        "SAGEMAKER_TRITON_ALLOW_GRPC": "true",
        "SAGEMAKER_TRITON_ALLOW_METRICS": "true",
        "SAGEMAKER_TRITON_METRICS_PORT": "9002",
        "SAGEMAKER_TRITON_GRPC_PORT": "9003",
        "SAGEMAKER_TRITON_BUFFER_MANAGER_THREAD_COUNT": "4",
        "SAGEMAKER_TRITON_THREAD_COUNT": "16",
        "SAGEMAKER_TRITON_LOG_VERBOSE": "0",
        "SAGEMAKER_TRITON_LOG_INFO": "false",
        "SAGEMAKER_TRITON_LOG_WARNING": "true",
        "SAGEMAKER_TRITON_LOG_ERROR": "true",
        "SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE": "33554432",
        "SAGEMAKER_TRITON_SHM_GROWTH_BYTE_SIZE": "2097152",
        "SAGEMAKER_TRITON_TENSORFLOW_VERSION": "2",
        "SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT": "0.8",
        "SAGEMAKER_TRITON_ADDITIONAL_ARGS": "--load-model=m-encoder  --exit-timeout-secs=5",
    }
    command = serve_command(env, repo, gpu_count=2)
    assert list(command.args) == [
        *HEAD,
        f"--model-repository={repo}/",
        "--model-namespacing=false",
        "--sagemaker-port=9000",
        "--sagemaker-safe-port-range=9001-9010",
        "--allow-grpc=true",
        "--allow-metrics=true",
        "--metrics-port=9002",
        "--grpc-port=9003",
        "--buffer-manager-thread-count=4",
        "--sagemaker-thread-count=16",
        "--log-verbose=0",
        "--log-info=false",
        "--log-warning=true",
        "--log-error=true",
        "--backend-config=python,shm-default-byte-size=33554432",
        "--backend-config=python,shm-growth-byte-size=2097152",
        "--backend-config=tensorflow,version=2",
        "--model-load-gpu-limit",
        "0:0.8",
        "--model-load-gpu-limit",
        "1:0.8",
        "--load-model=m-encoder",
        "--exit-timeout-secs=5",
        "--load-model=m",
    ]


def test_empty_variables_count_as_unset(tmp_path):
    repo = repository(tmp_path / "model", "m")
    command = serve_command(
        {
            "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "m",
            "SAGEMAKER_TRITON_LOG_VERBOSE": "",
            "SAGEMAKER_TRITON_ADDITIONAL_ARGS": "",
        },
        repo,
    )
    assert "--log-verbose=true" in command.args and command.args[-1] == "--load-model=m"


def test_the_only_folder_becomes_the_default_model_and_is_exported(tmp_path):
    repo = repository(tmp_path / "model", "only")
    command = serve_command({}, repo)
    assert command.args[-1] == "--load-model=only"
    # The front end routes /invocations to this variable: the script exports it to tritonserver.
    assert command.exported == {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "only"}


@pytest.mark.parametrize(
    "env, folders, message",
    [
        ({"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "m"}, ("m",), "Incorrect directory structure"),  # + root config
        (
            {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "missing"},
            ("m",),
            "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME missing does not exist",
        ),
        ({}, ("a", "b"), "More than 1 model directory found in model repository.*a b"),
        ({}, (), "No model found in model repository"),
    ],
    ids=["config-at-root", "default-names-no-folder", "two-folders-no-default", "empty"],
)
def test_the_scripts_pre_checks(tmp_path, env, folders, message):
    repo = repository(tmp_path / "model", *folders)
    if message.startswith("Incorrect"):
        (repo / "config.pbtxt").write_text('name: "m"\n')
    with pytest.raises(ServeScriptExit, match=message):
        serve_command(env, repo)


def test_multi_model_mode_is_not_mirrored(tmp_path):
    with pytest.raises(NotImplementedError):
        serve_command({"SAGEMAKER_MULTI_MODEL": "true"}, repository(tmp_path / "model", "m"))


def test_the_container_environment_is_the_models_not_ours():
    env = container_environment(
        {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "m"},
        base={"PATH": "/bin", "SAGEMAKER_TRITON_ADDITIONAL_ARGS": "--leak"},
    )
    assert env == {"PATH": "/bin", "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "m"}


def test_cpu_copy_rewrites_only_gpu_instance_groups(tmp_path):
    repo = tmp_path / "repo"
    (repo / "a" / "1").mkdir(parents=True)
    (repo / "b" / "1").mkdir(parents=True)
    (repo / "a" / "config.pbtxt").write_text(
        'name: "a"\nbackend: "onnxruntime"\ninstance_group { count: 2 kind: KIND_GPU }\n'
        'optimization { execution_accelerators { gpu_execution_accelerator { name: "tensorrt" } } }\n'
    )
    (repo / "b" / "config.pbtxt").write_text('name: "b"\nbackend: "python"\ninstance_group { kind: KIND_CPU }\n')
    rewrites = cpu_copy(repo, tmp_path / "copy")
    assert rewrites == ["a: instance_group[0]"]
    text = (tmp_path / "copy" / "a" / "config.pbtxt").read_text()
    assert "KIND_CPU" in text and "count: 2" in text and 'name: "tensorrt"' in text
    assert (tmp_path / "copy" / "b" / "config.pbtxt").read_text() == (repo / "b" / "config.pbtxt").read_text()
    assert "KIND_GPU" in (repo / "a" / "config.pbtxt").read_text()  # the original is untouched
