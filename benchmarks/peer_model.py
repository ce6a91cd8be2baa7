"""The model as benchmarks/peers.py's peers (TorchServe, Triton) run it: the serving app's artifact
(TorchScript model, tokenizer, metadata), tokenized by the tokenizers library in one call per batch, run
with one torch thread, or replaced by the emulated accelerator (container/neuron/serving/standin_accelerator.py,
a stand-in for a NeuronCore). Each batch's size is counted in a small file per process (PEER_STATS_DIR),
which peers.py reads for the peers' average batch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np


class PeerModel:
    def __init__(self, artifact: Path, standin_ms: float | None, stats_dir: str | None) -> None:
        from tokenizers import Tokenizer

        metadata = json.loads((artifact / "metadata.json").read_text())
        self.labels = list(metadata["labels"])
        length = int(metadata["sequence_length"])
        self.tokenizer = Tokenizer.from_file(str(artifact / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=length)
        self.tokenizer.enable_padding(length=length, pad_id=int(metadata["pad_token_id"]))
        if standin_ms is not None:
            from standin_accelerator import StandinAccelerator

            self.forward = StandinAccelerator(standin_ms, len(self.labels))
        else:
            import torch

            torch.set_num_threads(1)
            model = torch.jit.load(str(artifact / "model.pt")).eval()

            def forward(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
                with torch.inference_mode():
                    return model(torch.from_numpy(ids), torch.from_numpy(mask)).float().numpy()

            self.forward = forward
        self.batches = self.rows = 0
        self._stats = None
        if stats_dir:
            self._stats = os.open(os.path.join(stats_dir, f"{os.getpid()}-{id(self)}"), os.O_CREAT | os.O_WRONLY, 0o644)

    def infer(self, texts: list[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        logits = self.forward(ids, mask)
        self.batches += 1
        self.rows += len(texts)
        if self._stats is not None:
            os.pwrite(self._stats, f"{self.batches:>20} {self.rows:>20}\n".encode(), 0)
        return logits

    def reply(self, logits_row: np.ndarray) -> dict:
        values = [float(v) for v in logits_row]
        return {
            "model_name": "model",
            "model_version": "1",
            "outputs": [
                {"name": "logits", "datatype": "FP32", "shape": [1, len(values)], "data": values},
                {"name": "label", "datatype": "BYTES", "shape": [1], "data": [self.labels[int(np.argmax(logits_row))]]},
            ],
        }


def read_stats(stats_dir: str) -> tuple[int, int]:
    """(batches, rows) summed over every process that counted into ``stats_dir``."""
    batches = rows = 0
    for name in os.listdir(stats_dir):
        fields = Path(stats_dir, name).read_text().split()
        if len(fields) == 2:
            batches += int(fields[0])
            rows += int(fields[1])
    return batches, rows
