"""Tiny random checkpoints shared by the export tests and the real-Triton tier (no hub downloads)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.support.paths import ROOT

MAKE_TINY = ROOT / "benchmarks" / "make_tiny_model.py"


def varied_t5(target: Path, *, eos_scale: float, make_tiny_args: tuple[str, ...] = ()) -> Path:
    """make_tiny_model's T5 with its weights scaled up, saved at target/model: the random init alone
    repeats one token forever; scaled, rows differ, and the end-of-sequence row scaled by `eos_scale`
    ends some rows early (at different steps) while others run to the full length."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    result = subprocess.run(
        [sys.executable, str(MAKE_TINY), "--kind", "t5", "--out", str(target / "base"), *make_tiny_args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    model = AutoModelForSeq2SeqLM.from_pretrained(target / "base", attn_implementation="eager").eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "layer_norm" not in name:
                parameter.mul_(10)
        model.lm_head.weight[model.config.eos_token_id] *= eos_scale  # tied with the input embedding
    model.save_pretrained(target / "model")
    AutoTokenizer.from_pretrained(target / "base").save_pretrained(target / "model")
    return target / "model"


def greedy_reference(model, tensors: dict[str, np.ndarray], max_output_length: int) -> np.ndarray:
    """transformers' own greedy generate(), without the start token, padded to max_output_length: what
    the exported T5 greedy decoder must return."""
    import torch

    with torch.no_grad():
        generated = model.generate(
            input_ids=torch.from_numpy(tensors["input_ids"]),
            attention_mask=torch.from_numpy(tensors["attention_mask"]),
            max_new_tokens=max_output_length,
            num_beams=1,
            do_sample=False,
        ).numpy()
    out = np.full((generated.shape[0], max_output_length), model.generation_config.pad_token_id, dtype=np.int64)
    out[:, : generated.shape[1] - 1] = generated[:, 1:]
    return out
