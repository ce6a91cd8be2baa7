"""config.pbtxt rendering with Triton's own proto, the repository layout rules of SageMaker's Triton serve
script, and the render-triton CLI."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from inferstack import config
from inferstack.triton import config as triton_config
from inferstack.triton.config import RepositoryError, RepositorySpec
from tests.support.paths import CONFIG_DIR, ROOT


@pytest.fixture(scope="module")
def project() -> config.Project:
    return config.load(CONFIG_DIR)


def parsed(text: str) -> pb.ModelConfig:
    return text_format.Parse(text, pb.ModelConfig())


TRITON_MODELS = ["bert-large-classifier", "t5-spelling"]


@pytest.mark.parametrize("name", TRITON_MODELS)
def test_every_folder_parses_back_with_the_configured_settings(project, name):
    model = project.model(name)
    rendered = triton_config.render_repository(model)
    assert list(rendered)[0] == f"{model.name}-text"  # the default model (the text ensemble) first
    for folder, text in rendered.items():
        if folder in (f"{model.name}-text", f"{model.name}-tokenize", f"{model.name}-postprocess"):
            continue  # test_text_folders
        cfg = parsed(text)
        assert cfg.name == folder
        assert cfg.max_batch_size == model.serving.max_batch_size
        assert cfg.WhichOneof("scheduling_choice") == "dynamic_batching"
        assert cfg.dynamic_batching.max_queue_delay_microseconds == (
            model.serving.dynamic_batching.max_queue_delay_microseconds
        )
        (group,) = cfg.instance_group
        assert group.count == model.serving.instance_group.count
        if cfg.backend == "python":
            assert group.kind == pb.ModelInstanceGroup.KIND_CPU
            assert not cfg.optimization.execution_accelerators.gpu_execution_accelerator
            continue
        assert cfg.backend == "onnxruntime" and cfg.default_model_filename == "model.onnx"
        assert group.kind == pb.ModelInstanceGroup.KIND_GPU
        (trt,) = cfg.optimization.execution_accelerators.gpu_execution_accelerator
        assert trt.name == "tensorrt"
        assert trt.parameters["precision_mode"] == "FP16"
        assert int(trt.parameters["max_workspace_size_bytes"]) == (
            model.serving.tensorrt_acceleration.max_workspace_size_bytes
        )
        # one TensorRT profile for batch 1..max over every input, so no batch size rebuilds the engine
        batch = model.serving.max_batch_size
        for bound, first in (("min", 1), ("opt", batch), ("max", batch)):
            assert trt.parameters[f"trt_profile_{bound}_shapes"] == ",".join(
                f"{i.name}:{'x'.join(map(str, [first, *i.dims]))}" for i in cfg.input
            )
        # warm-up at batch 1 and the largest batch, with zero data matching every input
        assert [w.batch_size for w in cfg.model_warmup] == [1, model.serving.max_batch_size]
        for warmup in cfg.model_warmup:
            assert set(warmup.inputs) == {i.name for i in cfg.input}
            for tensor in cfg.input:
                data = warmup.inputs[tensor.name]
                assert data.zero_data and list(data.dims) == list(tensor.dims)
                assert data.data_type == tensor.data_type


def test_classifier_signature(project):
    model = project.model("bert-large-classifier")
    cfg = parsed(triton_config.render_config(model, folder=triton_config.ids_model_name(model)))
    assert [(i.name, pb.DataType.Name(i.data_type), list(i.dims)) for i in cfg.input] == [
        ("input_ids", "TYPE_INT64", [512]),
        ("attention_mask", "TYPE_INT64", [512]),
        ("token_type_ids", "TYPE_INT64", [512]),
    ]
    assert [(o.name, pb.DataType.Name(o.data_type), list(o.dims)) for o in cfg.output] == [("logits", "TYPE_FP32", [2])]
    assert not cfg.HasField("response_cache")


def test_classifier_without_token_type_ids_and_with_response_cache(project):
    model = project.model("bert-large-classifier")
    spec = RepositorySpec.of(model).model_copy(
        update={
            "export": model.export.model_copy(update={"token_type_ids": False}),
            "serving": model.serving.model_copy(update={"response_cache": True}),
        }
    )
    cfg = parsed(triton_config.render_config(spec, folder=triton_config.ids_model_name(spec)))
    assert [i.name for i in cfg.input] == ["input_ids", "attention_mask"]
    assert cfg.response_cache.enable
    assert "--cache-config=local" in triton_config.server_environment(spec)["SAGEMAKER_TRITON_ADDITIONAL_ARGS"]


def test_generation_interface(project):
    model = project.model("t5-spelling")
    rendered = {name: parsed(text) for name, text in triton_config.render_repository(model).items()}
    assert list(rendered) == [
        "t5-spelling-text",
        "t5-spelling-tokenize",
        "t5-spelling",
        "t5-spelling-encoder",
        "t5-spelling-decoder",
        "t5-spelling-postprocess",
    ]
    generate, encoder, decoder = (rendered[n] for n in ("t5-spelling", "t5-spelling-encoder", "t5-spelling-decoder"))
    assert generate.backend == "python" and not generate.model_warmup
    assert [(i.name, list(i.dims)) for i in generate.input] == [("input_ids", [32]), ("attention_mask", [32])]
    assert [(o.name, list(o.dims)) for o in generate.output] == [("output_ids", [16])]
    assert generate.parameters["encoder_model"].string_value == "t5-spelling-encoder"
    assert generate.parameters["decoder_model"].string_value == "t5-spelling-decoder"
    assert [(o.name, list(o.dims)) for o in encoder.output] == [("last_hidden_state", [32, 512])]
    assert [(i.name, list(i.dims)) for i in decoder.input] == [
        ("decoder_input_ids", [16]),
        ("encoder_hidden_states", [32, 512]),
        ("encoder_attention_mask", [32]),
    ]
    env = triton_config.server_environment(model)
    assert env["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"] == "t5-spelling-text"
    # explicit model control: the ensemble's steps and the BLS targets are loaded alongside the default model
    assert env["SAGEMAKER_TRITON_ADDITIONAL_ARGS"].split() == [
        "--load-model=t5-spelling-tokenize",
        "--load-model=t5-spelling",
        "--load-model=t5-spelling-encoder",
        "--load-model=t5-spelling-decoder",
        "--load-model=t5-spelling-postprocess",
    ]


def test_tensorrt_plan_backend(project):
    model = project.model("bert-large-classifier")
    spec = RepositorySpec.of(model).model_copy(
        update={"serving": model.serving.model_copy(update={"backend": "tensorrt", "tensorrt_acceleration": None})}
    )
    cfg = parsed(triton_config.render_config(spec, folder=triton_config.ids_model_name(spec)))
    assert cfg.platform == "tensorrt_plan" and cfg.default_model_filename == "model.plan"
    assert not cfg.optimization.execution_accelerators.gpu_execution_accelerator


def test_no_dynamic_batching_and_no_warmup(project):
    model = project.model("bert-large-classifier")
    spec = RepositorySpec.of(model).model_copy(
        update={"serving": model.serving.model_copy(update={"dynamic_batching": None, "warmup": False})}
    )
    cfg = parsed(triton_config.render_config(spec, folder=triton_config.ids_model_name(spec)))
    assert cfg.WhichOneof("scheduling_choice") is None and not cfg.model_warmup


def test_two_scheduling_choices_are_rejected(project):
    text = (
        triton_config.render_config(
            project.model("bert-large-classifier"),
            folder=triton_config.ids_model_name(project.model("bert-large-classifier")),
        )
        + "sequence_batching {}\n"
    )
    with pytest.raises(RepositoryError, match="another member of oneof"):
        triton_config.parse_config(text)


def test_repository_spec_round_trips_as_json(project):
    spec = RepositorySpec.of(project.model("t5-spelling"))
    assert RepositorySpec.model_validate_json(spec.model_dump_json()) == spec


# ---------------------------------------------------------------- repository layout


def test_written_repository_passes_the_serve_script_rules(project, tmp_path):
    model = project.model("t5-spelling")
    out = triton_config.write_repository(model, tmp_path / "repo")
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == sorted(
        f"{name}{suffix}"
        for name in (
            "t5-spelling-text",
            "t5-spelling-tokenize",
            "t5-spelling",
            "t5-spelling-encoder",
            "t5-spelling-decoder",
            "t5-spelling-postprocess",
        )
        for suffix in ("", "/1", "/config.pbtxt")
    )
    triton_config.check_repository(out, default_model="t5-spelling-text")
    assert [p.name for p in tmp_path.iterdir()] == ["repo"]  # no staging directory left


def test_model_files_are_copied_into_the_version_dir(project, tmp_path):
    onnx = tmp_path / "exported.onnx"
    onnx.write_bytes(b"onnx")
    out = triton_config.write_repository(
        project.model("bert-large-classifier"), tmp_path / "repo", model_files={"bert-large-classifier": onnx}
    )
    assert (out / "bert-large-classifier" / "1" / "model.onnx").read_bytes() == b"onnx"


@pytest.fixture
def two_model_repo(project, tmp_path) -> Path:
    return triton_config.write_repository(project.model("t5-spelling"), tmp_path / "repo")


def rejection(root: Path, default_model: str | None) -> str:
    with pytest.raises(RepositoryError) as caught:
        triton_config.check_repository(root, default_model=default_model)
    return str(caught.value)


def test_config_at_the_root_is_rejected(two_model_repo):
    (two_model_repo / "config.pbtxt").write_text('name: "x"\n')
    assert "config.pbtxt at the repository root" in rejection(two_model_repo, "t5-spelling")


def test_two_models_without_a_default_are_rejected(two_model_repo):
    assert "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME is not set" in rejection(two_model_repo, None)


def test_default_naming_a_missing_folder_is_rejected(two_model_repo):
    assert "'t5-grammar' names no folder" in rejection(two_model_repo, "t5-grammar")


def test_missing_version_dir_is_rejected(two_model_repo):
    (two_model_repo / "t5-spelling-decoder" / "1").rmdir()
    assert "t5-spelling-decoder/ has no version directory" in rejection(two_model_repo, "t5-spelling")


def test_config_naming_another_model_is_rejected(two_model_repo):
    path = two_model_repo / "t5-spelling-encoder" / "config.pbtxt"
    path.write_text(path.read_text().replace('name: "t5-spelling-encoder"', 'name: "other"'))
    assert "names model 'other'" in rejection(two_model_repo, "t5-spelling")


def test_single_model_needs_no_default(project, tmp_path):
    out = triton_config.write_repository(project.model("bert-large-classifier"), tmp_path / "repo")
    for folder in ("bert-large-classifier-text", "bert-large-classifier-tokenize", "bert-large-classifier-postprocess"):
        shutil.rmtree(out / folder)
    triton_config.check_repository(out, default_model=None)


def test_write_refuses_a_non_empty_directory(project, tmp_path):
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "keep.txt").write_text("x")
    with pytest.raises(RepositoryError, match="exists and is not an empty directory"):
        triton_config.write_repository(project.model("t5-spelling"), tmp_path / "repo")
    assert [p.name for p in (tmp_path / "repo").iterdir()] == ["keep.txt"]


# ---------------------------------------------------------------- render-triton CLI


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "inferstack", "render-triton", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def test_cli_writes_a_valid_repository(tmp_path):
    result = run_cli("bert-large-classifier", "--out", str(tmp_path / "repo"))
    assert result.returncode == 0, result.stderr
    repo = tmp_path / "repo"
    triton_config.check_repository(repo, default_model="bert-large-classifier")
    cfg = parsed((repo / "bert-large-classifier" / "config.pbtxt").read_text())
    assert cfg.instance_group[0].count == 2


def test_cli_accepts_an_empty_out_dir(tmp_path):
    (tmp_path / "repo").mkdir()
    assert run_cli("t5-spelling", "--out", str(tmp_path / "repo")).returncode == 0
    assert (tmp_path / "repo" / "t5-spelling-decoder" / "config.pbtxt").is_file()


@pytest.mark.parametrize(
    "model, prepare, message",
    [
        (
            "no-such-model",
            None,
            "no model named 'no-such-model'; known: bert-large-classifier, duplicate-bert, "
            "intent-bert-inf2, intent-bert, t5-spelling",
        ),  # the files' order
        ("intent-bert", None, "intent-bert is a neuron-ecs model; render-triton renders triton-sagemaker models"),
        ("t5-spelling", "non-empty", "exists and is not an empty directory"),
        ("t5-spelling", "file", "exists and is not an empty directory"),
    ],
)
def test_cli_rejects_bad_input_with_one_line_and_writes_nothing(tmp_path, model, prepare, message):
    out = tmp_path / "repo"
    if prepare == "non-empty":
        out.mkdir()
        (out / "other.txt").write_text("keep")
    elif prepare == "file":
        out.write_text("keep")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = run_cli(model, "--out", str(out))
    assert result.returncode == 2
    assert result.stderr.startswith("render-triton: error: ") and message in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stdout == ""
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_cli_requires_out(tmp_path):
    result = run_cli("t5-spelling")
    assert result.returncode == 2 and "--out" in result.stderr and "Traceback" not in result.stderr


def test_tensorrt_profile_shapes_cover_batch_one_to_max(project):
    """ONNX Runtime's TensorRT options trt_profile_{min,opt,max}_shapes, as Triton's onnxruntime backend
    passes them (https://github.com/triton-inference-server/onnxruntime_backend, "input1:dim1xdimd2...")."""
    cfg = parsed(
        triton_config.render_config(
            project.model("bert-large-classifier"),
            folder=triton_config.ids_model_name(project.model("bert-large-classifier")),
        )
    )
    (trt,) = cfg.optimization.execution_accelerators.gpu_execution_accelerator
    assert trt.parameters["trt_profile_min_shapes"] == "input_ids:1x512,attention_mask:1x512,token_type_ids:1x512"
    assert trt.parameters["trt_profile_max_shapes"] == ("input_ids:16x512,attention_mask:16x512,token_type_ids:16x512")
    decoder = parsed(triton_config.render_config(project.model("t5-spelling"), folder="t5-spelling-decoder"))
    (trt,) = decoder.optimization.execution_accelerators.gpu_execution_accelerator
    assert trt.parameters["trt_profile_min_shapes"] == (
        "decoder_input_ids:1x16,encoder_hidden_states:1x32x512,encoder_attention_mask:1x32"
    )


# ------------------------------------------------------- overload shedding (dynamic_batching.default_queue_policy)


@pytest.mark.parametrize(
    "name, timeout_us, max_queue",
    [
        # T = SLO p99 - profiled p99; Q = max(ceil(4 x profiled rate x T), max_batch_size), a backstop
        ("bert-large-classifier", 150_000, 32),  # 300 - 150 ms; max(ceil(4 x 53.2/s x 0.15 s) = 32, 16)
        ("t5-spelling", 10_000, 32),  # 50 - 40 ms; max(ceil(4 x 120/s x 0.01 s) = 5, 32)
    ],
)
def test_queue_policy_is_derived_from_the_slo_and_the_profile(project, name, timeout_us, max_queue):
    model = project.model(name)
    assert RepositorySpec.of(model).queue_policy == triton_config.QueuePolicy(
        timeout_microseconds=timeout_us, max_queue_size=max_queue
    )
    rendered = triton_config.render_repository(model)
    policy = parsed(rendered[model.name]).dynamic_batching.default_queue_policy
    assert policy.timeout_action == pb.ModelQueuePolicy.REJECT
    assert (policy.default_timeout_microseconds, policy.max_queue_size) == (timeout_us, max_queue)
    assert not policy.allow_timeout_override  # a caller cannot wait longer than the SLO allows
    # Only the entry point sheds: the models a BLS default model calls serve requests already admitted.
    for folder, text in rendered.items():
        if folder != model.name:
            assert not parsed(text).dynamic_batching.HasField("default_queue_policy"), folder


def test_queue_policy_text_of_the_shipped_classifier(project):
    text = triton_config.render_config(
        project.model("bert-large-classifier"),
        folder=triton_config.ids_model_name(project.model("bert-large-classifier")),
    )
    assert (
        "dynamic_batching {\n"
        "  max_queue_delay_microseconds: 2000\n"
        "  default_queue_policy {\n"
        "    timeout_action: REJECT\n"
        "    default_timeout_microseconds: 150000\n"
        "    max_queue_size: 32\n"
        "  }\n"
        "}\n"
    ) in text


def _with(model, *, slo_ms=None, profile_ms=None, rate=None, delay_us=None, max_batch=None):
    itype = model.capacity.instance_type
    point = model.throughput_profile[itype]
    point = point.model_copy(
        update={k: v for k, v in (("p99_latency_ms", profile_ms), ("throughput_per_second", rate)) if v is not None}
    )
    serving = model.serving
    if delay_us is not None:
        serving = serving.model_copy(
            update={
                "dynamic_batching": serving.dynamic_batching.model_copy(
                    update={"max_queue_delay_microseconds": delay_us}
                )
            }
        )
    if max_batch is not None:
        serving = serving.model_copy(update={"max_batch_size": max_batch})
    return model.model_copy(
        update={
            "slo": model.slo.model_copy(update={"p99_latency_ms": slo_ms or model.slo.p99_latency_ms}),
            "throughput_profile": {**model.throughput_profile, itype: point},
            "serving": serving,
        }
    )


def test_queue_policy_follows_its_inputs(project):
    model = project.model("bert-large-classifier")
    # A looser SLO: a longer timeout, and a bound that 4x the profiled rate does not reach within it.
    assert triton_config.queue_policy(_with(model, slo_ms=1150)) == triton_config.QueuePolicy(
        timeout_microseconds=1_000_000, max_queue_size=213
    )  # ceil(4 x 53.2)
    # A faster instance: more arrive within the same timeout before the bound is reached.
    assert triton_config.queue_policy(_with(model, rate=400)).max_queue_size == 240  # 4 x 400/s x 0.15 s
    # Never below one full batch.
    assert triton_config.queue_policy(_with(model, max_batch=64)).max_queue_size == 64
    # No slack left (the profiled p99 is the SLO): the timeout still outlasts the batcher's own wait.
    tight = triton_config.queue_policy(_with(model, slo_ms=150, delay_us=5000))
    assert tight.timeout_microseconds == 6000 and tight.max_queue_size == 16


def test_no_queue_policy_without_a_dynamic_batcher(project):
    model = project.model("bert-large-classifier")
    model = model.model_copy(update={"serving": model.serving.model_copy(update={"dynamic_batching": None})})
    assert RepositorySpec.of(model).queue_policy is None
    assert "queue_policy" not in triton_config.render_config(model, folder=triton_config.ids_model_name(model))


def test_the_queue_policy_reaches_the_image_build(project):
    """The image's export renders from the JSON build arg: the derived policy travels in it (and a spec from
    before the policy existed still loads, without one)."""
    spec = RepositorySpec.of(project.model("bert-large-classifier"))
    carried = RepositorySpec.model_validate_json(spec.model_dump_json())
    assert carried.queue_policy == spec.queue_policy is not None
    assert triton_config.render_config(
        carried, folder=triton_config.ids_model_name(carried)
    ) == triton_config.render_config(
        project.model("bert-large-classifier"),
        folder=triton_config.ids_model_name(project.model("bert-large-classifier")),
    )
    legacy = spec.model_dump(mode="json")
    del legacy["queue_policy"]
    assert RepositorySpec.model_validate(legacy).queue_policy is None


@pytest.mark.parametrize("name", TRITON_MODELS)
def test_text_folders(project, name):
    """The text ensemble and its Python steps: max_batch_size 0 (TEXT [n]), KIND_CPU, no queue policy."""
    model = project.model(name)
    rendered = {f: parsed(t) for f, t in triton_config.render_repository(model).items()}
    ensemble = rendered[f"{name}-text"]
    assert ensemble.platform == "ensemble" and ensemble.max_batch_size == 0
    assert [(i.name, list(i.dims)) for i in ensemble.input] == [("TEXT", [-1])]
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == [
        f"{name}-tokenize",
        name,
        f"{name}-postprocess",
    ]
    outputs = {o.name for o in ensemble.output}
    assert outputs == ({"logits", "label"} if model.source.task == "text-classification" else {"text"})
    for step in (f"{name}-tokenize", f"{name}-postprocess"):
        cfg = rendered[step]
        assert cfg.backend == "python" and cfg.max_batch_size == 0
        assert cfg.WhichOneof("scheduling_choice") is None
        (group,) = cfg.instance_group
        assert (group.count, group.kind) == (model.serving.tokenizer_instances, pb.ModelInstanceGroup.KIND_CPU)
    assert rendered[f"{name}-tokenize"].parameters["max_batch_size"].string_value == str(model.serving.max_batch_size)
    env = triton_config.server_environment(model)
    assert env["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"] == f"{name}-text"
