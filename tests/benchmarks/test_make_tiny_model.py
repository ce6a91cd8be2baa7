"""benchmarks/make_tiny_model.py: offline, deterministic tiny models with fast tokenizers."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from tests.support.neuron_server import LABELS, MAKE_TINY, neuron_dirs_on_path, run_script

neuron_dirs_on_path()
from artifact import source_checksums  # noqa: E402 - after neuron_dirs_on_path() (container/neuron/build/)


def test_bert_is_deterministic(tmp_path: Path, tiny_bert: Path):
    result = run_script(MAKE_TINY, "--kind", "bert", "--out", str(tmp_path / "again"), "--labels", ",".join(LABELS))
    assert result.returncode == 0, result.stderr
    assert source_checksums(tmp_path / "again") == source_checksums(tiny_bert)
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    assert tokenizer.is_fast
    encoded = tokenizer("Hello, world")
    assert encoded["input_ids"][0] == tokenizer.cls_token_id and encoded["input_ids"][-1] == tokenizer.sep_token_id
    assert tokenizer.unk_token_id not in encoded["input_ids"]


def test_t5_builds_and_generates(tmp_path: Path):
    out = tmp_path / "t5"
    result = run_script(MAKE_TINY, "--kind", "t5", "--out", str(out))
    assert result.returncode == 0, result.stderr
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    encoded = tokenizer(["fix this sentense"], return_tensors="pt")
    assert tokenizer.unk_token_id not in encoded["input_ids"][0].tolist()
    assert encoded["input_ids"][0, -1].item() == tokenizer.eos_token_id
    with torch.inference_mode():
        generated = model.generate(**encoded, max_new_tokens=3, do_sample=False)
    assert generated.shape[0] == 1 and 1 < generated.shape[1] <= 4


def test_bad_arguments_write_nothing(tmp_path: Path):
    for args in (
        ["--kind", "gpt"],
        ["--kind", "bert", "--labels", "only-one"],
        ["--kind", "bert", "--hidden-size", "20"],
        ["--kind", "bert", "--attention-heads", "3"],
    ):
        result = run_script(MAKE_TINY, *args, "--out", str(tmp_path / "m"))
        assert result.returncode == 2, result.stderr
        assert not (tmp_path / "m").exists()
