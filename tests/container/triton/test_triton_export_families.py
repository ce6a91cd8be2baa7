"""container/triton/export.py on the other encoder families validate knows (inferstack/schema/families.py):
a tiny random DistilBERT and a tiny random RoBERTa (benchmarks/make_tiny_model.py) export with the inputs
their family takes, their ONNX logits equal PyTorch's through the client's own codec, and the BERT setting a
newcomer copies (export.token_type_ids: true) fails the export in one line, as validate says it would."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from inferstack.schema import families
from inferstack.triton import client as triton_client
from inferstack.triton import config as triton_config
from inferstack.triton.config import RepositorySpec
from tests.support.build_once import build_once
from tests.support.neuron_server import LABELS, MAKE_TINY, run_script
from tests.support.paths import ROOT

EXPORT = ROOT / "container" / "triton" / "export.py"
SEQUENCE_LENGTH = 24
TEXTS = ["hello world", "speling mistaks here", "x", "a b c d e f g h i j k l m n o p q r s t u v w x y z " * 3]
KINDS = ("distilbert", "roberta")


def spec(kind: str, model_dir: Path, *, token_type_ids: bool = False) -> RepositorySpec:
    return RepositorySpec.model_validate(
        {
            "name": f"tiny-{kind}",
            "source": {
                "local_path": str(model_dir),
                "task": "text-classification",
                "labels": list(LABELS),
                "family": kind,
            },
            "export": {"sequence_length": SEQUENCE_LENGTH, "token_type_ids": token_type_ids},
            "serving": {"backend": "onnx", "max_batch_size": 8, "instance_group": {"kind": "KIND_GPU"}},
        }
    )


def export(model_spec: RepositorySpec, out: Path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_REPOSITORY_SPEC"}
    env["TRITON_REPOSITORY_SPEC"] = model_spec.model_dump_json()
    return run_script(EXPORT, "--out", str(out), env=env, timeout=400)


@pytest.fixture(scope="module", params=KINDS)
def kind(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, kind) -> Path:
    def build(target: Path) -> None:
        result = run_script(MAKE_TINY, "--kind", kind, "--out", str(target / "model"), "--labels", ",".join(LABELS))
        assert result.returncode == 0, result.stderr

    return build_once(tmp_path_factory, f"tiny-{kind}", build) / "model"


@pytest.fixture(scope="module")
def repo(tmp_path_factory, kind, tiny) -> Path:
    def build(target: Path) -> None:
        result = export(spec(kind, tiny), target / "repository")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr
        (target / "export.log").write_text(result.stdout)

    return build_once(tmp_path_factory, f"triton-{kind}-repository", build) / "repository"


def test_the_tiny_checkpoint_is_its_family_and_its_tokenizer_emits_what_the_family_takes(kind, tiny):
    model = AutoModelForSequenceClassification.from_pretrained(tiny)
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    assert model.config.model_type == kind and tokenizer.is_fast
    assert list(tokenizer.model_input_names) == ["input_ids", "attention_mask"]
    assert set(tokenizer.model_input_names) == set(families.FAMILIES[kind].inputs)
    assert tokenizer.pad_token_id == model.config.pad_token_id
    if kind == "roberta":  # positions start after the pad id, as in roberta-base (514 for 512 tokens)
        assert model.config.max_position_embeddings == 512 + 2 and model.config.type_vocab_size == 1


def test_bert_s_tiny_tokenizer_emits_token_type_ids_as_the_family_table_says(tiny_bert):
    assert "token_type_ids" in AutoTokenizer.from_pretrained(tiny_bert).model_input_names
    assert "token_type_ids" in families.FAMILIES["bert"].inputs


def test_the_repository_declares_and_the_graph_takes_only_the_familys_inputs(kind, repo):
    model_spec = spec(kind, Path("unused"))
    triton_config.check_repository(repo, default_model=model_spec.name)
    (folder,) = triton_config.ids_folders(model_spec)
    assert [t.name for t in folder.inputs] == ["input_ids", "attention_mask"]
    graph = onnx.load(str(repo / model_spec.name / triton_config.VERSION / "model.onnx"))
    assert [i.name for i in graph.graph.input] == ["input_ids", "attention_mask"]
    assert f"parity tiny-{kind}: logits within" in (repo.parent / "export.log").read_text()


def test_onnx_logits_equal_pytorch_through_the_clients_codec(kind, repo, tiny):
    codec = triton_client.TextCodec.from_repository(repo / f"tiny-{kind}")
    session = ort.InferenceSession(
        str(repo / f"tiny-{kind}" / triton_config.VERSION / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    model = AutoModelForSequenceClassification.from_pretrained(tiny).eval()
    for texts in (TEXTS[:1], TEXTS):
        tensors = codec.encode(texts)
        assert sorted(tensors) == ["attention_mask", "input_ids"]
        (got,) = session.run(["logits"], tensors)
        with torch.no_grad():
            want = model(**{k: torch.from_numpy(v) for k, v in tensors.items()}).logits.numpy()
        assert got.shape == (len(texts), len(LABELS))
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)
    assert not np.allclose(got[0], got[1])


def test_token_type_ids_copied_from_a_bert_file_fail_the_export_in_one_line(kind, tiny, tmp_path):
    result = export(spec(kind, tiny, token_type_ids=True), tmp_path / "repository")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"export.py: error: export.token_type_ids: the tokenizer of {tiny} does not emit token_type_ids"
    )
    assert not (tmp_path / "repository").exists()
