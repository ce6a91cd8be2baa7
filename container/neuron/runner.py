"""The model as the server sees it: tokenize, pad to the compiled shape, execute, split results.

Loaded inside a worker process only (after NEURON_RT_VISIBLE_CORES is set), through the same
Backend interface compile.py used, so cpu, inf1 and inf2 artifacts serve identically.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from artifact import MODEL_FILE, TOKENIZER_FILE
from backends import get_backend

log = logging.getLogger("runner")


@dataclass(frozen=True)
class TextRows:
    texts: list[str]

    @property
    def rows(self) -> int:
        return len(self.texts)


@dataclass(frozen=True)
class TokenRows:
    input_ids: np.ndarray  # int64 [n, <= sequence_length]
    attention_mask: np.ndarray

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[0])


class ModelRunner:
    def __init__(self, model_dir: Path, metadata: dict, torch_threads: int) -> None:
        import torch
        from tokenizers import Tokenizer

        torch.set_num_threads(torch_threads)
        self._torch = torch
        self.sequence_length = int(metadata["sequence_length"])
        self.compiled_batch = int(metadata["batch_size"])
        self.pad_id = int(metadata["pad_token_id"])
        self.tokenizer = Tokenizer.from_file(str(model_dir / TOKENIZER_FILE))
        self.tokenizer.enable_truncation(max_length=self.sequence_length)
        # Padding happens in numpy below: cheaper than padded Encoding objects.
        self.tokenizer.no_padding()
        # encode_batch_fast (tokenizers >= 0.20) skips character offsets, which serving never uses.
        self._encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        backend = get_backend(metadata["backend"])
        module = backend.load(str(model_dir / MODEL_FILE))
        self.model = backend.data_parallel(module, pipeline=metadata["parallelism"] == "pipeline")

    def padded_rows(self, rows: int) -> int:
        """Rows the model executes for ``rows`` real ones: Neuron graphs have a fixed batch, so
        a batch is padded up to a multiple of it."""
        return -(-rows // self.compiled_batch) * self.compiled_batch

    def _stack(self, requests: Sequence[TextRows | TokenRows]) -> tuple[np.ndarray, np.ndarray]:
        total = sum(r.rows for r in requests)
        padded = self.padded_rows(total)
        ids = np.full((padded, self.sequence_length), self.pad_id, dtype=np.int64)
        mask = np.zeros((padded, self.sequence_length), dtype=np.int64)
        mask[total:, 0] = 1  # filler rows attend to one token so softmax stays finite
        texts = [t for r in requests if isinstance(r, TextRows) for t in r.texts]
        encodings = iter(self._encode(texts)) if texts else iter(())
        row = 0
        for request in requests:
            if isinstance(request, TextRows):
                for _ in request.texts:
                    tokens = next(encodings).ids
                    ids[row, : len(tokens)] = tokens
                    mask[row, : len(tokens)] = 1
                    row += 1
            else:
                n, width = request.input_ids.shape
                ids[row : row + n, :width] = request.input_ids
                mask[row : row + n, :width] = request.attention_mask
                row += n
        return ids, mask

    def run(self, requests: Sequence[TextRows | TokenRows]) -> list[np.ndarray]:
        """Logits (float32 [rows, labels]) for each request, in order."""
        ids, mask = self._stack(requests)
        with self._torch.inference_mode():
            logits = self.model(self._torch.from_numpy(ids), self._torch.from_numpy(mask))
        logits = logits.float().numpy()
        out, row = [], 0
        for request in requests:
            out.append(logits[row : row + request.rows])
            row += request.rows
        return out

    def warm_up(self, iterations: int, max_batch_size: int) -> None:
        """Run every batch shape the batcher can form before we report ready.

        Neuron loads its NEFFs on the first call; TorchScript profiles and optimises the graph on
        its first calls, and the first call at each new batch size is slower still (fresh
        buffers). Either would otherwise land on the live requests that happen to form a batch
        of a size not seen before.
        """
        shapes = sorted({self.padded_rows(rows) for rows in range(1, max_batch_size + 1)})
        for _ in range(2):  # TorchScript's profiling executor optimises on the second call
            for rows in shapes:
                self.run([TextRows(["warm up"] * rows)])
        full = [TextRows(["warm up"] * max_batch_size)]
        single = [TextRows(["warm up"])]
        for _ in range(max(1, iterations)):
            self.run(full)
            self.run(single)
