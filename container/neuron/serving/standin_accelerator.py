"""A stand-in for a NeuronCore, for benchmarks and tests only: not a way to deploy anything.

Each call takes a fixed time per batch whatever its size (up to ``rows_per_call`` rows; a larger
batch takes one such time per started group of rows), sleeps through it without the GIL, as the
Neuron runtime waits for the device, and answers logits shaped like the model's. It measures what
the serving app itself costs when the model runs off the host CPU. serve.py reaches it only through
the hidden --standin-accelerator-ms flag (no environment variable), and the images leave this file
out of their build context (.dockerignore), so no task definition can turn it on.
"""

from __future__ import annotations

import time

import numpy as np


class StandinAccelerator:
    """forward(input_ids, attention_mask) -> float32 logits [rows, labels], taking ``batch_ms`` per call."""

    def __init__(self, batch_ms: float, labels: int, rows_per_call: int = 16) -> None:
        if batch_ms < 0 or labels < 1 or rows_per_call < 1:
            raise ValueError("batch_ms must be >= 0, labels and rows_per_call >= 1")
        self.batch_s = batch_ms / 1000.0
        self.labels = labels
        self.rows_per_call = rows_per_call
        self.calls = 0

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        started = time.perf_counter()
        rows = input_ids.shape[0]
        # A cheap function of the input, so each row gets its own answer and the server's row
        # bookkeeping shows in the replies: label k scores (sum of the row's ids * (k + 1)) mod 97.
        sums = (input_ids * attention_mask).sum(axis=1, dtype=np.int64)
        logits = ((sums[:, None] * np.arange(1, self.labels + 1)) % 97).astype(np.float32)
        self.calls += 1
        deadline = started + self.batch_s * -(-rows // self.rows_per_call)
        # time.sleep releases the GIL; sleeping to a deadline keeps the batch time fixed whatever
        # the computation above took.
        remaining = deadline - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
        return logits
