"""The model as the server sees it: tokenize, pad to the compiled shape, execute, split results.

Loaded inside a worker process only (after NEURON_RT_VISIBLE_CORES is set), through the same
Backend interface compile.py used, so cpu, inf1 and inf2 artifacts serve identically.
Texts are tokenized as each request arrives, on the event loop, when the ASCII WordPiece fast path
(ascii_wordpiece.py) can answer them, so a batch only waits for its stacking once it leaves the
queue; other texts are tokenized together, per batch, by the tokenizers library off the event loop, in the
batcher's prepare stage (stack), which runs while the model executes the batch before (execute).
The common request (one TEXT tensor and nothing else) is read and tokenized before any of that, in one C
call from the same word cache (text_scanner, text_scan.c), whenever every one of its words is cached.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# The modules beside this one, flat on the path (ruff would sort them in with the third-party ones).
# isort: split
import ascii_wordpiece
from artifact import MODEL_FILE, TOKENIZER_FILE
from backends import get_backend

log = logging.getLogger("runner")
INT64 = np.dtype(np.int64)


def native_pack() -> Any:
    """text_scan.c's pack (pre-tokenized rows to the model's padded inputs), None when the extension is not built."""
    try:
        from _text_scan import pack
    except ImportError:
        return None
    return pack


@dataclass(frozen=True)
class TextRows:
    texts: list[str]

    @property
    def rows(self) -> int:
        return len(self.texts)


@dataclass(frozen=True)
class EncodedRows:
    """Texts already tokenized (unpadded token ids, at most the sequence length each)."""

    ids: list[list[int]]

    @property
    def rows(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class TokenRows:
    input_ids: np.ndarray  # int64 [n, <= sequence_length]
    attention_mask: np.ndarray

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[0])


@dataclass(frozen=True)
class Stacked:
    """A batch as the model takes it: padded ids and mask, and each request's row count, in order."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    rows: tuple[int, ...]


class ModelRunner:
    def __init__(
        self,
        model_dir: Path,
        metadata: dict,
        torch_threads: int,
        standin_batch_ms: float | None = None,
        native_stack: bool = False,
    ) -> None:
        """``standin_batch_ms`` replaces the model with the emulated accelerator (standin_accelerator.py),
        for benchmarks and tests: tokenization and everything around the model stay as they are.
        ``native_stack``: stack batches of pre-tokenized rows in C (text_scan.c's pack) when the extension is
        built; the worker asks for it with SERVER_TEXT_SCAN on or body."""
        from tokenizers import Tokenizer

        self._pack = native_pack() if native_stack else None

        self.sequence_length = int(metadata["sequence_length"])
        self.compiled_batch = int(metadata["batch_size"])
        self.pad_id = int(metadata["pad_token_id"])
        self.tokenizer = Tokenizer.from_file(str(model_dir / TOKENIZER_FILE))
        self.tokenizer.enable_truncation(max_length=self.sequence_length)
        # Padding happens in numpy below: cheaper than padded Encoding objects.
        self.tokenizer.no_padding()
        # encode_batch_fast (tokenizers >= 0.20) skips character offsets, which serving never uses.
        self._encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        self.fast_tokenizer = ascii_wordpiece.from_tokenizer(self.tokenizer, self.sequence_length)
        if standin_batch_ms is not None:
            from standin_accelerator import StandinAccelerator  # not in the images (.dockerignore)

            self.forward = StandinAccelerator(standin_batch_ms, len(metadata["labels"]))
            return
        import torch

        torch.set_num_threads(torch_threads)
        backend = get_backend(metadata["backend"])
        module = backend.load(str(model_dir / MODEL_FILE))
        model = backend.data_parallel(module, pipeline=metadata["parallelism"] == "pipeline")

        def forward(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                return model(torch.from_numpy(ids), torch.from_numpy(mask)).float().numpy()

        self.forward = forward

    def padded_rows(self, rows: int) -> int:
        """Rows the model executes for ``rows`` real ones: Neuron graphs have a fixed batch, so
        a batch is padded up to a multiple of it."""
        return -(-rows // self.compiled_batch) * self.compiled_batch

    def prepare(self, payload: TextRows | TokenRows) -> TextRows | EncodedRows | TokenRows:
        """The payload with its texts tokenized now if the fast path answers all of them (called on the
        event loop: the fast path's word cache belongs to that thread), else as it was."""
        fast = self.fast_tokenizer
        if fast is None or not isinstance(payload, TextRows):
            return payload
        ids = []
        for text in payload.texts:
            encoded = fast.encode(text)
            if encoded is None:
                return payload
            ids.append(encoded)
        return EncodedRows(ids)

    def text_scanner(self, max_rows: int, max_text_chars: int) -> Any:
        """The common TEXT request to each text's ids in C (ascii_wordpiece.AsciiWordPiece.scanner): ``.scan(body)``
        and ``.request(data, paths, max_body)``, None for what they leave to parsing and ``prepare``; None without
        the fast path or the extension. On the event loop only, as ``prepare``: they share the word cache."""
        fast = self.fast_tokenizer
        return None if fast is None else fast.scanner(max_rows=max_rows, max_text_chars=max_text_chars)

    def stack(self, requests: Sequence[TextRows | EncodedRows | TokenRows]) -> Stacked:
        """A batch's model inputs (the batcher's prepare stage, off the event loop): texts not tokenized yet
        tokenized together, every row padded into the compiled shape."""
        packed = self.stack_now(requests)
        if packed is not None:
            return packed
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
            elif isinstance(request, EncodedRows):
                for tokens in request.ids:
                    ids[row, : len(tokens)] = tokens
                    mask[row, : len(tokens)] = 1
                    row += 1
            else:
                n, width = request.input_ids.shape
                ids[row : row + n, :width] = request.input_ids
                mask[row : row + n, :width] = request.attention_mask
                row += n
        return Stacked(ids, mask, tuple(r.rows for r in requests))

    def stack_now(self, requests: Sequence[TextRows | EncodedRows | TokenRows]) -> Stacked | None:
        """``stack``'s result when one C call makes it (every request pre-tokenized, text_scan.c's pack: a few
        microseconds, cheap enough for the event loop), else None."""
        pack = self._pack
        if pack is None:
            return None
        ids = [request.ids for request in requests if type(request) is EncodedRows]
        if len(ids) != len(requests):
            return None
        rows = tuple(map(len, ids))
        padded = self.padded_rows(sum(rows))
        ids_bytes, mask_bytes = pack(ids, padded, self.sequence_length, self.pad_id)
        shape = (padded, self.sequence_length)
        return Stacked(np.ndarray(shape, INT64, ids_bytes), np.ndarray(shape, INT64, mask_bytes), rows)

    def execute(self, stacked: Stacked) -> list[np.ndarray]:
        """Logits (float32 [rows, labels]) for each request of a stacked batch, in order (the batcher's
        model stage: the accelerator call, GIL released, and the split)."""
        logits = self.forward(stacked.input_ids, stacked.attention_mask)
        out, row = [], 0
        for rows in stacked.rows:
            out.append(logits[row : row + rows])
            row += rows
        return out

    def run(self, requests: Sequence[TextRows | EncodedRows | TokenRows]) -> list[np.ndarray]:
        """Logits (float32 [rows, labels]) for each request, in order."""
        return self.execute(self.stack(requests))

    def warm_up(self, iterations: int, max_batch_size: int) -> float:
        """Run every batch shape the batcher can form before we report ready; returns the median time of a
        full batch (stacked and executed), where admission's batch-time estimate starts.

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
        times = []
        for _ in range(max(1, iterations)):
            started = time.perf_counter()
            self.run(full)
            times.append(time.perf_counter() - started)
            self.run(single)
        return sorted(times)[len(times) // 2]
