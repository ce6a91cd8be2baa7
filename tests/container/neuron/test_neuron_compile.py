"""compile.py on the CPU backend: the artifact round trip and every rejection path."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

# serving/ and build/'s flat modules, on the path from conftest.py (ruff would count them third-party).
# isort: split
from artifact import source_checksums
from backends import load_torchscript

from tests.support.neuron_server import COMPILE, LABELS, SEQUENCE_LENGTH, run_script


def test_metadata_describes_the_compiled_artifact(artifact: Path, tiny_bert: Path):
    metadata = json.loads((artifact / "metadata.json").read_text())
    assert metadata["backend"] == "cpu"
    assert metadata["batch_size"] == 2 and metadata["sequence_length"] == SEQUENCE_LENGTH
    assert metadata["inputs"] == [
        {"name": "input_ids", "datatype": "INT64", "shape": [2, SEQUENCE_LENGTH]},
        {"name": "attention_mask", "datatype": "INT64", "shape": [2, SEQUENCE_LENGTH]},
    ]
    assert metadata["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": [2, len(LABELS)]}]
    assert metadata["labels"] == list(LABELS)
    assert metadata["compiler_args"] == ["--fp32-cast=all"]
    assert metadata["neuron_cores_per_model"] == 1 and metadata["parallelism"] == "data-parallel"
    assert (
        metadata["versions"]["torch"] == torch.__version__.split("+")[0]
        or metadata["versions"]["torch"] == torch.__version__
    )
    expected_sha, files = source_checksums(tiny_bert)
    assert metadata["source_sha256"] == expected_sha
    assert set(metadata["source_files"]) == set(files) and "model.safetensors" in files
    assert {"model.pt", "tokenizer.json", "metadata.json"} <= {p.name for p in artifact.iterdir()}


def test_traced_artifact_matches_the_eager_model(artifact: Path, tiny_bert: Path):
    traced = load_torchscript(str(artifact / "model.pt"))
    eager = AutoModelForSequenceClassification.from_pretrained(tiny_bert, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(artifact)
    texts = ["a fine film", "nothing at all to see here, move along", "x", "zz top " * 30, "dog"]
    batch = tokenizer(texts, padding="max_length", truncation=True, max_length=SEQUENCE_LENGTH, return_tensors="pt")
    with torch.inference_mode():
        got = traced(batch["input_ids"], batch["attention_mask"])
        want = eager(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    assert got.shape == (len(texts), len(LABELS))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(got[0], got[1])  # distinct inputs give distinct outputs


def test_cpu_artifact_is_saved_frozen(artifact: Path):
    module = load_torchscript(str(artifact / "model.pt"))
    # Frozen: the weights are graph constants, not attributes looked up on every call.
    assert list(module.parameters()) == []
    assert "prim::GetAttr" not in {node.kind() for node in module.graph.nodes()}


def _rejects(tmp_path: Path, *args: str, flag: str, code: int = 2) -> str:
    out = tmp_path / "out" / "art"
    result = run_script(COMPILE, *args, "--out", str(out))
    assert result.returncode == code, result.stderr
    err = result.stderr.strip()
    assert "Traceback" not in result.stderr
    assert len(err.splitlines()) == 1, err
    assert flag in err, err
    assert not out.exists()
    leftovers = list((tmp_path / "out").iterdir()) if (tmp_path / "out").exists() else []
    assert leftovers == [], leftovers  # nothing half-written next to --out either
    return err


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--batch-size", "0"], "--batch-size"),
        (["--batch-size", "two"], "--batch-size"),
        (["--sequence-length", "4"], "--sequence-length"),
        (["--parallelism", "tensor"], "--parallelism"),
        (["--neuron-cores", "4"], "--neuron-cores"),
        (["--task", "translation"], "--task"),
        (["--labels", "a,,b"], "--labels"),
        (["--compiler-args=fp32-cast=all"], "--compiler-args"),
        (["--compiler-args=--neuroncore-pipeline-cores 4"], "--compiler-args"),
        (["--unknown-flag", "1"], "--unknown-flag"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(tmp_path, tiny_bert, extra, flag):
    _rejects(tmp_path, "--backend", "cpu", "--model", str(tiny_bert), *extra, flag=flag)


def test_bad_backend_and_inf2_pipeline(tmp_path, tiny_bert):
    _rejects(tmp_path, "--backend", "gpu", "--model", str(tiny_bert), flag="--backend")
    _rejects(
        tmp_path,
        "--backend",
        "inf2",
        "--model",
        str(tiny_bert),
        "--parallelism",
        "pipeline",
        "--neuron-cores",
        "2",
        flag="--parallelism",
    )


def test_missing_model_dir(tmp_path):
    err = _rejects(tmp_path, "--backend", "cpu", "--model", str(tmp_path / "nope"), flag="--model")
    assert "not found" in err


def test_directory_without_model(tmp_path):
    (tmp_path / "empty").mkdir()
    _rejects(tmp_path, "--backend", "cpu", "--model", str(tmp_path / "empty"), flag="--model")


def test_existing_output_is_not_overwritten(tmp_path, tiny_bert):
    out = tmp_path / "art"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    result = run_script(COMPILE, "--backend", "cpu", "--model", str(tiny_bert), "--out", str(out))
    assert result.returncode == 2 and "--out" in result.stderr
    assert (out / "keep.txt").read_text() == "precious"


def test_labels_must_match_the_model_after_loading(tmp_path, tiny_bert):
    # Checked only once the model is loaded: the staging directory must still not appear.
    err = _rejects(tmp_path, "--backend", "cpu", "--model", str(tiny_bert), "--labels", "yes,no", flag="--labels")
    assert "3 outputs" in err


def test_the_cpu_backend_loads_the_artifact_without_a_deprecation_warning(artifact: Path):
    # Neuron artifacts are TorchScript, so the backends load TorchScript; torch's advice to move to
    # torch.export does not apply and must not reach the server's log.
    from backends import CpuBackend

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module = CpuBackend().load(str(artifact / "model.pt"))
    assert isinstance(module, torch.jit.ScriptModule)
