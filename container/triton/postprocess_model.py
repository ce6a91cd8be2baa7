"""Triton Python-backend model: the text ensemble's postprocessing step (`<name>-postprocess`, interfaces
in inferstack/triton/config.py).

- text-classification: `logits` FP32 [n, labels] -> `label` BYTES [n], the argmax's name from the
  `labels` parameter (the model file's source.labels, in the order the checkpoint's outputs have), and
  `logits` unchanged (the ensemble's `logits` output comes from here: see inferstack/triton/config.py).
- text2text-generation: `output_ids` INT64 [n, max_output_length] -> `text` BYTES [n], decoded by the
  checkpoint's tokenizer (`1/tokenizer/`) with special tokens dropped, as TextCodec.decode does.

export.py copies this file to `<repo>/<name>-postprocess/1/model.py`. Only numpy and tokenizers.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # outside Triton: tests import the pure functions
    pb_utils = None

TOKENIZER_DIR = "tokenizer"
SITE_PACKAGES_DIR = "site-packages"  # export.py's copy of the tokenizers package


def use_vendored_packages(version_dir: str) -> None:
    """Put export.py's tokenizers copy first on sys.path: SageMaker's Triton image has no tokenizers."""
    vendored = os.path.join(version_dir, SITE_PACKAGES_DIR)
    if os.path.isdir(vendored) and vendored not in sys.path:
        sys.path.insert(0, vendored)


def labels_of(logits: np.ndarray, labels: Sequence[str]) -> np.ndarray:
    """BYTES [n]: the name of each row's argmax (the first on a tie, as numpy and the Neuron app pick)."""
    return np.array([labels[i].encode("utf-8") for i in np.asarray(logits).argmax(axis=1)], dtype=np.object_)


def texts_of(tokenizer, output_ids: np.ndarray) -> np.ndarray:
    decoded = tokenizer.decode_batch([list(map(int, row)) for row in output_ids], skip_special_tokens=True)
    return np.array([text.encode("utf-8") for text in decoded], dtype=np.object_)


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        parameters = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        self.input = config["input"][0]["name"]
        self.output = config["output"][0]["name"]
        self.passed_on = [output["name"] for output in config["output"][1:]]  # the classifier's logits
        if "labels" in parameters:
            self.labels = json.loads(parameters["labels"])
            self.tokenizer = None
        else:
            version_dir = os.path.join(args["model_repository"], args["model_version"])
            use_vendored_packages(version_dir)
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(os.path.join(version_dir, TOKENIZER_DIR, "tokenizer.json"))

    def execute(self, requests):
        # Row-wise work: requests (one at a time with max_batch_size 0) are processed together, split back.
        parts = [pb_utils.get_input_tensor_by_name(r, self.input).as_numpy() for r in requests]
        joined = np.concatenate(parts)
        result = labels_of(joined, self.labels) if self.tokenizer is None else texts_of(self.tokenizer, joined)
        responses, start = [], 0
        for part in parts:
            tensors = [pb_utils.Tensor(self.output, result[start : start + len(part)])]
            tensors += [pb_utils.Tensor(name, part) for name in self.passed_on]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start += len(part)
        return responses
