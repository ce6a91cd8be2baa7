"""container/triton/export.py on CPU with tiny random models: ONNX parity with PyTorch, a repository
that passes check_repository and whose config.pbtxt files (parsed with Triton's proto) match the ONNX
graphs, T5 greedy decoding over the exported graphs equal to transformers' generate(), the client
helper, the TensorRT-plan decision, and every rejection path (one line, nothing written)."""

from __future__ import annotations

import json
import os
import stat
import sys
import types
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from google.protobuf import json_format, text_format
from transformers import AutoModelForSeq2SeqLM, AutoModelForSequenceClassification, AutoTokenizer
from tritonclient.grpc import model_config_pb2 as pb

from inferstack.triton import client as triton_client
from inferstack.triton import config as triton_config
from inferstack.triton.config import RepositorySpec
from tests.support.build_once import build_once
from tests.support.neuron_server import LABELS, SEQUENCE_LENGTH, run_script
from tests.support.paths import ROOT
from tests.support.tiny_models import greedy_reference, varied_t5

TRITON_DIR = ROOT / "container" / "triton"
EXPORT = TRITON_DIR / "export.py"
sys.path.insert(0, str(TRITON_DIR))

import export as triton_export  # noqa: E402 - after container/triton/ is on the path
import t5_greedy_model  # noqa: E402 - after container/triton/ is on the path

MAX_OUTPUT_LENGTH = 12
T5_HIDDEN = 32  # make_tiny_model's default --hidden-size
TEXTS = [
    "hello world",
    "speling mistaks here",
    "x",
    "the quick brown fox jumps",
    "abc def ghi jkl mno",
    "zz",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z " * 4,
]
ONNX_TYPES = {pb.TYPE_INT64: onnx.TensorProto.INT64, pb.TYPE_FP32: onnx.TensorProto.FLOAT}
SERVING = {
    "backend": "onnx",
    "tensorrt_acceleration": {"precision": "FP16"},
    "max_batch_size": 8,
    "dynamic_batching": {"max_queue_delay_microseconds": 100},
    "instance_group": {"kind": "KIND_GPU"},
}


def bert_spec(model_dir: Path, **serving) -> RepositorySpec:
    return RepositorySpec.model_validate(
        {
            "name": "tiny-bert",
            "source": {"local_path": str(model_dir), "task": "text-classification", "labels": list(LABELS)},
            "export": {"sequence_length": SEQUENCE_LENGTH, "token_type_ids": True},
            "serving": {**SERVING, **serving},
        }
    )


def t5_spec(model_dir: Path) -> RepositorySpec:
    return RepositorySpec.model_validate(
        {
            "name": "tiny-t5",
            "source": {"local_path": str(model_dir), "task": "text2text-generation"},
            "export": {
                "sequence_length": SEQUENCE_LENGTH,
                "max_output_length": MAX_OUTPUT_LENGTH,
                "hidden_size": T5_HIDDEN,
            },
            "serving": SERVING,
        }
    )


def run_export(spec: RepositorySpec | str | None, out: Path, *args: str, env: dict | None = None):
    environ = {key: value for key, value in os.environ.items() if key != triton_export.SPEC_ENV}
    if spec is not None:
        environ[triton_export.SPEC_ENV] = spec if isinstance(spec, str) else spec.model_dump_json()
    return run_script(EXPORT, "--out", str(out), *args, env={**environ, **(env or {})}, timeout=400)


# ---------------------------------------------------------------- fixtures (built once per session)


@pytest.fixture(scope="session")
def tiny_t5(tmp_path_factory) -> Path:
    """make_tiny_model's T5 with its weights scaled up: the random init alone repeats one token forever;
    scaled, rows differ and some end with end-of-sequence at different steps, so the greedy test sees
    early stops, padding and full-length rows."""

    def build(target: Path) -> None:
        varied_t5(target, eos_scale=3)

    return build_once(tmp_path_factory, "tiny-t5-varied", build) / "model"


def _exported(tmp_path_factory, name: str, spec: RepositorySpec) -> Path:
    def build(target: Path) -> None:
        result = run_export(spec, target / "repository")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr
        (target / "export.log").write_text(result.stdout)

    return build_once(tmp_path_factory, name, build) / "repository"


@pytest.fixture(scope="session")
def bert_repo(tmp_path_factory, tiny_bert) -> Path:
    return _exported(tmp_path_factory, "triton-bert-repository", bert_spec(tiny_bert))


@pytest.fixture(scope="session")
def t5_repo(tmp_path_factory, tiny_t5) -> Path:
    return _exported(tmp_path_factory, "triton-t5-repository", t5_spec(tiny_t5))


def sessions(repo: Path) -> dict[str, ort.InferenceSession]:
    return {
        p.parent.parent.name: ort.InferenceSession(str(p), providers=["CPUExecutionProvider"])
        for p in repo.glob(f"*/{triton_config.VERSION}/model.onnx")
    }


# ---------------------------------------------------------------- the written repositories


@pytest.mark.parametrize("which", ["bert", "t5"])
def test_repository_passes_check_and_holds_every_model_file(request, which):
    repo = request.getfixturevalue(f"{which}_repo")
    spec = (
        bert_spec(request.getfixturevalue("tiny_bert"))
        if which == "bert"
        else t5_spec(request.getfixturevalue("tiny_t5"))
    )
    triton_config.check_repository(repo, default_model=spec.name)
    assert sorted(p.name for p in repo.iterdir()) == sorted(f.name for f in triton_config.folders(spec))
    for folder in triton_config.folders(spec):
        # The ensemble has nothing in 1/; the text steps' model.py and tokenizer (with its package) are there.
        assert folder.kind == "ensemble" or (repo / folder.name / "1" / folder.model_file).is_file()
        if folder.name.endswith("-tokenize"):
            assert (repo / folder.name / "1" / "tokenizer" / "tokenizer.json").is_file()
            assert (repo / folder.name / "1" / "site-packages" / "tokenizers" / "__init__.py").is_file()
        assert (repo / folder.name / "config.pbtxt").read_text() == triton_config.render_config(
            spec, folder=folder.name
        )
    # The tokenizer rides inside the default model's version dir, where Triton looks for nothing else.
    assert (repo / spec.name / "1" / "tokenizer" / "tokenizer.json").is_file()
    assert not list(repo.parent.glob(".repository.*"))  # no staging left beside it


@pytest.mark.parametrize("which", ["bert", "t5"])
def test_every_config_parses_with_tritons_proto_and_matches_its_onnx_graph(request, which):
    repo = request.getfixturevalue(f"{which}_repo")
    onnx_folders = 0
    for folder in sorted(p for p in repo.iterdir() if p.is_dir()):
        config = text_format.Parse((folder / "config.pbtxt").read_text(), pb.ModelConfig())
        text_folder = folder.name.endswith(("-text", "-tokenize", "-postprocess"))
        # The text ensemble and its steps take TEXT [n] without a batch dimension (inferstack/triton/config.py).
        assert config.name == folder.name and config.max_batch_size == (0 if text_folder else SERVING["max_batch_size"])
        if text_folder:
            source = {"-tokenize": "tokenize_model.py", "-postprocess": "postprocess_model.py"}
            for suffix, file in source.items():
                if folder.name.endswith(suffix):
                    assert (folder / "1" / "model.py").read_bytes() == (TRITON_DIR / file).read_bytes()
            continue
        if config.backend == "python":
            assert (folder / "1" / "model.py").read_bytes() == (TRITON_DIR / "t5_greedy_model.py").read_bytes()
            continue
        assert config.backend == "onnxruntime" and config.default_model_filename == "model.onnx"
        graph = onnx.load(str(folder / "1" / "model.onnx"))
        assert triton_export.onnx_opset(graph) == 17  # the schema's default export.onnx_opset
        for declared, actual in ((config.input, graph.graph.input), (config.output, graph.graph.output)):
            assert [t.name for t in declared] == [v.name for v in actual]
            for tensor, value in zip(declared, actual, strict=True):
                shape = value.type.tensor_type.shape.dim
                assert value.type.tensor_type.elem_type == ONNX_TYPES[tensor.data_type], tensor.name
                assert shape[0].dim_param and not shape[0].dim_value, f"{tensor.name}: batch axis not dynamic"
                assert [d.dim_value for d in shape[1:]] == list(tensor.dims), tensor.name
        onnx_folders += 1
    assert onnx_folders == (1 if which == "bert" else 2)


# ---------------------------------------------------------------- numbers


def test_bert_onnx_matches_pytorch_at_batch_1_and_more(bert_repo, tiny_bert):
    assert "parity tiny-bert: logits within" in (bert_repo.parent / "export.log").read_text()
    codec = triton_client.TextCodec.from_repository(bert_repo / "tiny-bert")
    session = sessions(bert_repo)["tiny-bert"]
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert).eval()
    for texts in (TEXTS[:1], TEXTS):
        tensors = codec.encode(texts)
        (got,) = session.run(["logits"], tensors)
        with torch.no_grad():
            want = model(**{k: torch.from_numpy(v) for k, v in tensors.items()}).logits.numpy()
        assert got.shape == (len(texts), len(LABELS))
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)
    assert not np.allclose(got[0], got[1])  # distinct inputs, distinct outputs


def expected_greedy(model, tensors: dict[str, np.ndarray]) -> np.ndarray:
    return greedy_reference(model, tensors, MAX_OUTPUT_LENGTH)


def test_t5_greedy_decoding_over_the_onnx_graphs_equals_generate(t5_repo, tiny_t5):
    codec = triton_client.TextCodec.from_repository(t5_repo / "tiny-t5")
    found = sessions(t5_repo)
    encoder, decoder = found["tiny-t5-encoder"], found["tiny-t5-decoder"]
    settings = t5_greedy_model.read_generation_settings(str(t5_repo / "tiny-t5" / "1"))
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_t5).eval()
    assert settings == {
        "decoder_start_token_id": model.config.decoder_start_token_id,
        "eos_token_id": model.generation_config.eos_token_id,
        "pad_token_id": model.generation_config.pad_token_id,
    }

    def encode(ids, mask):
        return encoder.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask})[0]

    def decode(hidden, mask, decoder_ids):
        return decoder.run(
            ["next_token_ids"],
            {"decoder_input_ids": decoder_ids, "encoder_hidden_states": hidden, "encoder_attention_mask": mask},
        )[0]

    for texts in (TEXTS[:1], TEXTS):
        tensors = codec.encode(texts)
        got = t5_greedy_model.greedy_decode(
            encode,
            decode,
            tensors["input_ids"],
            tensors["attention_mask"],
            max_output_length=MAX_OUTPUT_LENGTH,
            **settings,
        )
        want = expected_greedy(model, tensors)
        assert got.dtype == np.int64 and got.shape == (len(texts), MAX_OUTPUT_LENGTH)
        np.testing.assert_array_equal(got, want)
    # The comparison covered rows that stop early (then pad) and rows that run to the full length.
    eos = settings["eos_token_id"]
    assert (got == eos).any(axis=1).any() and not (got == eos).any(axis=1).all()
    assert len(codec.decode(got)) == len(TEXTS)


class FakeTriton:
    """The slice of triton_python_backend_utils the greedy model uses, with BLS calls answered by
    onnxruntime sessions over the exported graphs."""

    TRITONSERVER_MEMORY_CPU = 0

    def __init__(self, models: dict[str, ort.InferenceSession]) -> None:
        self.models, self.calls = models, []
        outer = self

        class Tensor:
            def __init__(self, name, array):
                self._name, self._array = name, np.asarray(array)

            def name(self):
                return self._name

            def as_numpy(self):
                return self._array

        class Response:
            def __init__(self, output_tensors, error=None):
                self.output_tensors, self.error_value = output_tensors, error

            def has_error(self):
                return self.error_value is not None

            def error(self):
                return self.error_value

        class InferenceRequest:
            def __init__(self, model_name, requested_output_names, inputs, preferred_memory=None):
                self.model_name, self.outputs, self.inputs = model_name, requested_output_names, inputs
                self.preferred_memory = preferred_memory

            def exec(self):
                outer.calls.append((self.model_name, self.inputs[0].as_numpy().shape[0], self.preferred_memory))
                feeds = {t.name(): t.as_numpy() for t in self.inputs}
                arrays = outer.models[self.model_name].run(self.outputs, feeds)
                return Response([Tensor(n, a) for n, a in zip(self.outputs, arrays, strict=True)])

        self.Tensor, self.InferenceRequest, self.InferenceResponse = Tensor, InferenceRequest, Response
        self.TritonError = lambda message: types.SimpleNamespace(message=lambda: message)
        self.PreferredMemory = lambda kind, device: (kind, device)

    @staticmethod
    def get_input_tensor_by_name(request, name):
        return next(t for t in request if t.name() == name)

    @staticmethod
    def get_output_tensor_by_name(response, name):
        return next(t for t in response.output_tensors if t.name() == name)


def test_python_model_glue_splits_batched_requests_back(t5_repo, tiny_t5, monkeypatch):
    """A fast unit check of the pb_utils glue with a fake module: which rows go back to which request.
    The proof that the decoder works in Triton is the real-Triton tier, test_sagemaker_contract.py here (the real
    Python backend and BLS)."""
    fake = FakeTriton(sessions(t5_repo))
    monkeypatch.setattr(t5_greedy_model, "pb_utils", fake)
    folder = t5_repo / "tiny-t5"
    config = triton_config.parse_config((folder / "config.pbtxt").read_text())
    model = t5_greedy_model.TritonPythonModel()
    # Triton hands the config over as JSON with the proto's own field names (string_value, not stringValue).
    model_config = json_format.MessageToJson(config, preserving_proto_field_name=True)
    model.initialize({"model_config": model_config, "model_repository": str(folder), "model_version": "1"})
    codec = triton_client.TextCodec.from_repository(folder)
    parts = [TEXTS[:2], TEXTS[2:3], TEXTS[3:]]
    requests = []
    for texts in parts:
        tensors = codec.encode(texts)
        requests.append([fake.Tensor(name, array) for name, array in tensors.items()])
    responses = model.execute(requests)
    want = expected_greedy(AutoModelForSeq2SeqLM.from_pretrained(tiny_t5).eval(), codec.encode(TEXTS))
    got = np.concatenate([fake.get_output_tensor_by_name(r, "output_ids").as_numpy() for r in responses])
    np.testing.assert_array_equal(got, want)
    assert [len(fake.get_output_tensor_by_name(r, "output_ids").as_numpy()) for r in responses] == [2, 1, 4]
    # One encoder call and one decoder call per step, each over all requests together, output on host.
    assert fake.calls[0] == ("tiny-t5-encoder", len(TEXTS), (0, 0))
    assert {name for name, _, _ in fake.calls[1:]} == {"tiny-t5-decoder"}
    assert all(batch == len(TEXTS) for _, batch, _ in fake.calls)


# ---------------------------------------------------------------- client helper


def test_client_encodes_to_the_configured_shapes_like_transformers(bert_repo, t5_repo):
    for folder, names in (
        (bert_repo / "tiny-bert", ["input_ids", "attention_mask", "token_type_ids"]),
        (t5_repo / "tiny-t5", ["input_ids", "attention_mask"]),
    ):
        codec = triton_client.TextCodec.from_repository(folder)
        tensors = codec.encode(TEXTS)
        assert list(tensors) == names
        assert all(a.shape == (len(TEXTS), SEQUENCE_LENGTH) and a.dtype == np.int64 for a in tensors.values())
        reference = AutoTokenizer.from_pretrained(folder / "1" / "tokenizer")(
            TEXTS, padding="max_length", truncation=True, max_length=SEQUENCE_LENGTH, return_tensors="np"
        )
        for name in names:
            np.testing.assert_array_equal(tensors[name], reference[name])


def test_request_body_and_response_round_trip(bert_repo):
    codec = triton_client.TextCodec.from_repository(bert_repo / "tiny-bert")
    body = triton_client.request_body(codec.encode(TEXTS[:2]), outputs=["logits"])
    json.dumps(body)  # plain JSON
    assert [(t["name"], t["shape"], t["datatype"]) for t in body["inputs"]] == [
        (n, [2, SEQUENCE_LENGTH], "INT64") for n in ("input_ids", "attention_mask", "token_type_ids")
    ]
    assert len(body["inputs"][0]["data"]) == 2 * SEQUENCE_LENGTH and body["outputs"] == [{"name": "logits"}]
    reply = json.dumps(
        {
            "model_name": "tiny-bert",
            "model_version": "1",
            "outputs": [{"name": "logits", "datatype": "FP32", "shape": [2, 3], "data": [0.5, 1, 2, 3, 4, 5]}],
        }
    )
    logits = triton_client.parse_response(reply.encode())["logits"]
    assert logits.dtype == np.float32 and logits.shape == (2, 3) and logits[1, 2] == 5
    with pytest.raises(triton_client.TritonResponseError, match="server error: unexpected shape"):
        triton_client.parse_response({"error": "unexpected shape for input 'input_ids'"})
    with pytest.raises(triton_client.TritonResponseError, match="not JSON"):
        triton_client.parse_response(b"<html>")


# ---------------------------------------------------------------- rejections: one line, nothing written


def assert_rejected(result, out: Path, code: int, *needles: str) -> str:
    assert result.returncode == code, result.stdout[-2000:] + result.stderr
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in result.stderr, err
    for needle in needles:
        assert needle in err, err
    assert not out.exists()
    assert list(out.parent.iterdir()) == []  # no staging directory left beside --out
    return err


@pytest.mark.parametrize(
    "raw, needle",
    [
        (None, "TRITON_REPOSITORY_SPEC is not set"),
        ("{not json", "TRITON_REPOSITORY_SPEC: Invalid JSON"),
        ('{"name": "x"}', "TRITON_REPOSITORY_SPEC: source: Field required"),
        (
            json.dumps(
                {
                    "name": "t5",
                    "source": {"huggingface_id": "t5-small", "task": "text2text-generation"},
                    "export": {},
                    "serving": {"backend": "onnx"},
                }
            ),
            "text2text-generation needs export.max_output_length",
        ),
    ],
)
def test_bad_spec_exits_2_with_one_line(tmp_path, raw, needle):
    out = tmp_path / "out" / "repository"
    out.parent.mkdir()
    assert_rejected(run_export(raw, out), out, 2, "export.py: error:", needle)


def test_missing_local_model_and_non_empty_out_exit_2(tmp_path, tiny_bert):
    out = tmp_path / "out" / "repository"
    out.parent.mkdir()
    spec = bert_spec(tiny_bert).model_copy(
        update={"source": bert_spec(tiny_bert).source.model_copy(update={"local_path": str(tmp_path / "nowhere")})}
    )
    assert_rejected(run_export(spec, out), out, 2, "source.local_path:", "nowhere")
    out.mkdir()
    (out / "keep").write_text("x")
    result = run_export(bert_spec(tiny_bert), out)
    assert result.returncode == 2 and "--out:" in result.stderr and (out / "keep").exists()


def test_parity_failure_fails_the_build_and_writes_nothing(tmp_path, tiny_bert):
    out = tmp_path / "out" / "repository"
    out.parent.mkdir()
    err = assert_rejected(
        run_export(bert_spec(tiny_bert), out, "--tolerance", "1e-30"),
        out,
        1,
        "export.py: export failed: ONNX parity: tiny-bert logits differ from PyTorch by",
        "tolerance 1e-30",
    )
    assert "batch 1" in err


# ---------------------------------------------------------------- TensorRT plans


def test_plan_needs_a_gpu_build_host_matching_the_target():
    check = triton_export.check_plan_build_host
    common = {"target": "7.5", "instance_type": "ml.g4dn.xlarge"}
    with pytest.raises(triton_export.ExportFailure, match="GPU build host matching the target .*no nvidia-smi"):
        check(**common, nvidia_smi=None, trtexec="/usr/bin/trtexec")
    with pytest.raises(triton_export.ExportFailure, match="nvidia-smi lists no GPU"):
        check(**common, nvidia_smi="nvidia-smi", trtexec="trtexec", gpus=lambda _: [])
    with pytest.raises(triton_export.ExportFailure, match="compute capability 8.6"):
        check(**common, nvidia_smi="nvidia-smi", trtexec="trtexec", gpus=lambda _: ["8.6"])
    with pytest.raises(triton_export.ExportFailure, match="compute capability 8.6"):
        check(**common, nvidia_smi="nvidia-smi", trtexec="trtexec", gpus=lambda _: ["7.5", "8.6"])
    with pytest.raises(triton_export.ExportFailure, match="trtexec is not on PATH"):
        check(**common, nvidia_smi="nvidia-smi", trtexec=None, gpus=lambda _: ["7.5"])
    assert check(**common, nvidia_smi="nvidia-smi", trtexec="/opt/trtexec", gpus=lambda _: ["7.5"]) == "/opt/trtexec"


def test_plan_target_comes_from_the_instance_catalog():
    assert triton_export.target_compute_capability("ml.g4dn.xlarge") == "7.5"
    assert triton_export.target_compute_capability("ml.g5.xlarge") == "8.6"
    with pytest.raises(triton_export.UsageError, match="TRITON_TARGET_INSTANCE_TYPE is not set"):
        triton_export.target_compute_capability(None)
    with pytest.raises(triton_export.UsageError, match="inf2.xlarge has no NVIDIA GPU"):
        triton_export.target_compute_capability("inf2.xlarge")
    with pytest.raises(triton_export.UsageError, match="unknown instance type"):
        triton_export.target_compute_capability("ml.p9.huge")


def test_build_plan_passes_the_configured_shapes_to_trtexec(tmp_path, tiny_bert):
    log = tmp_path / "argv.json"
    fake = tmp_path / "trtexec"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(log)!r}, 'w'))\n"
        "open(next(a for a in sys.argv if a.startswith('--saveEngine=')).split('=', 1)[1], 'w').write('x')\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    spec = bert_spec(tiny_bert, backend="tensorrt", tensorrt_acceleration=None)
    (folder,) = triton_config.ids_folders(spec)
    assert folder.kind == "tensorrt" and folder.model_file == "model.plan"
    triton_export.build_plan(str(fake), tmp_path / "m.onnx", tmp_path / "m.plan", folder, 8)
    argv = json.loads(log.read_text())
    assert "--fp16" in argv and (tmp_path / "m.plan").is_file()
    seq = SEQUENCE_LENGTH
    assert f"--minShapes=input_ids:1x{seq},attention_mask:1x{seq},token_type_ids:1x{seq}" in argv
    assert f"--maxShapes=input_ids:8x{seq},attention_mask:8x{seq},token_type_ids:8x{seq}" in argv


def test_tensorrt_backend_on_a_cpu_build_host_fails_before_exporting(tmp_path, tiny_bert):
    out = tmp_path / "out" / "repository"
    out.parent.mkdir()
    spec = bert_spec(tiny_bert, backend="tensorrt", tensorrt_acceleration=None)
    env = {"TRITON_TARGET_INSTANCE_TYPE": "ml.g4dn.xlarge", "PATH": "/usr/bin:/bin"}  # no nvidia-smi here
    assert_rejected(
        run_export(spec, out, env=env), out, 1, "GPU build host matching the target", "compute capability 7.5"
    )
    assert_rejected(
        run_export(spec, out, env={"TRITON_TARGET_INSTANCE_TYPE": ""}), out, 2, "TRITON_TARGET_INSTANCE_TYPE is not set"
    )


# ---------------------------------------------------------------- the image's export stage


def test_export_requirements_pin_what_these_tests_ran_with():
    from importlib import metadata

    lines = [line.strip() for line in (TRITON_DIR / "requirements-export.txt").read_text().splitlines()]
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    pins = dict(line.split("==") for line in lines if line and not line.startswith(("#", "-")))
    assert pins["torch"] == "2.13.0+cpu"  # the CPU build: no CUDA wheels in the export stage
    for package in ("torch", "transformers", "tokenizers", "onnx", "onnxscript", "onnxruntime", "numpy"):
        assert metadata.version(package).split("+")[0] == pins[package].split("+")[0], package
