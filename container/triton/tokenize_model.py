"""Triton Python-backend model: the text ensemble's tokenizer step (`<name>-tokenize`, interfaces in
inferstack/triton/config.py). TEXT BYTES [n] -> the token-id model's inputs, INT64 [n, sequence_length]; an empty
text, one over max_text_chars characters or a batch outside 1..max_batch_size is refused with INVALID_ARG
(HTTP 400).

export.py copies this file to `<repo>/<name>-tokenize/1/model.py` and the checkpoint's tokenizer to
`1/tokenizer/` beside it. Tokenization is inferstack.triton.client.TextCodec's (padding="max_length",
truncation=True, as transformers does), so text sent here and text tokenized by a client give the
token-id model the same ids (tests/container/triton/test_text_ensemble.py checks it on the real server).
Only numpy and tokenizers: the serving image has no transformers.
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


# The token-id model's inputs and the tokenizer's Encoding attribute each comes from.
FIELDS = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}


class TextError(ValueError):
    """A text the model refuses; the message names the field as the Neuron app does."""


def load_tokenizer(tokenizer_dir: str, sequence_length: int):
    """tokenizer.json padded and truncated to sequence_length with tokenizer_config.json's pad token and
    sides, as TextCodec.load configures it."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))
    settings_file = os.path.join(tokenizer_dir, "tokenizer_config.json")
    settings = {}
    if os.path.exists(settings_file):
        with open(settings_file, encoding="utf-8") as handle:
            settings = json.load(handle)
    pad_token = settings.get("pad_token")
    if isinstance(pad_token, dict):  # an AddedToken written out in full
        pad_token = pad_token.get("content")
    pad_id = tokenizer.token_to_id(pad_token) if pad_token else None
    if pad_id is None:
        raise ValueError(f"{tokenizer_dir}: the tokenizer defines no pad token")
    tokenizer.enable_truncation(max_length=sequence_length, direction=settings.get("truncation_side", "right"))
    tokenizer.enable_padding(
        length=sequence_length, pad_id=pad_id, pad_token=pad_token, direction=settings.get("padding_side", "right")
    )
    return tokenizer


def texts_of(values: np.ndarray, max_chars: int, max_rows: int) -> list[str]:
    """The request's TEXT elements as str, or TextError for what the contract refuses (the first bad text).
    The ensemble has one input, so it is always `inputs[0]`; K counts the request's own texts. Messages as
    container/neuron/serving/protocol.py words them."""
    if values.shape[0] < 1:
        raise TextError("inputs[0].shape: batch dimension must be at least 1")
    if values.shape[0] > max_rows:
        raise TextError(f"inputs[0].shape: {values.shape[0]} items exceed the maximum of {max_rows} per request")
    texts = []
    for k, value in enumerate(values.reshape(-1)):
        if isinstance(value, bytes):
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError as exc:  # only binary tensor data can carry such bytes, not JSON
                raise TextError(f"inputs[0].data[{k}]: not UTF-8 ({exc.reason} at byte {exc.start})") from None
        if not value or value.isspace():  # as the Neuron app: nothing for the model to read
            raise TextError(f"inputs[0].data[{k}]: empty text")
        if len(value) > max_chars:
            raise TextError(f"inputs[0].data[{k}]: text of {len(value)} characters exceeds the limit of {max_chars}")
        texts.append(value)
    return texts


def encode(tokenizer, texts: Sequence[str], names: Sequence[str], sequence_length: int) -> dict[str, np.ndarray]:
    encodings = tokenizer.encode_batch(list(texts))
    return {
        name: np.array([getattr(e, FIELDS[name]) for e in encodings], dtype=np.int64).reshape(
            len(encodings), sequence_length
        )
        for name in names
    }


class TritonPythonModel:
    """Validates each request and tokenizes its texts. max_batch_size 0 (see inferstack/triton/config.py), so
    Triton hands it one request at a time; the loop serves any number all the same."""

    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        parameters = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        self.sequence_length = int(parameters["sequence_length"])
        self.max_chars = int(parameters["max_text_chars"])
        self.max_rows = int(parameters["max_batch_size"])
        self.names = [output["name"] for output in config["output"]]
        unknown = [name for name in self.names if name not in FIELDS]
        if unknown:
            raise ValueError(f"no tokenizer output for {', '.join(unknown)}")
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        use_vendored_packages(version_dir)
        self.tokenizer = load_tokenizer(os.path.join(version_dir, TOKENIZER_DIR), self.sequence_length)

    def execute(self, requests):
        responses: list = [None] * len(requests)
        valid: list[tuple[int, list[str]]] = []
        for index, request in enumerate(requests):
            try:
                valid.append(
                    (
                        index,
                        texts_of(
                            pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy(), self.max_chars, self.max_rows
                        ),
                    )
                )
            except TextError as exc:
                responses[index] = pb_utils.InferenceResponse(output_tensors=[], error=invalid_argument(str(exc)))
        if valid:
            tensors = encode(self.tokenizer, [t for _, texts in valid for t in texts], self.names, self.sequence_length)
            start = 0
            for index, texts in valid:
                rows = slice(start, start + len(texts))
                start += len(texts)
                responses[index] = pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor(name, tensors[name][rows]) for name in self.names]
                )
        return responses


def invalid_argument(message: str):
    """INVALID_ARG, which Triton's front ends answer with HTTP 400 (a bare TritonError is INTERNAL: 500)."""
    return pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG)
