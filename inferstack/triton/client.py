"""Client side of the Triton text models: turn text into the tensors a model folder's config.pbtxt
declares (the tokenizer export.py saves into the repository, padded to the configured length), build
the KServe v2 JSON request body, and read the response back into arrays.

Clients tokenize because the repository serves token ids (no tokenizer model in Triton). Needs numpy
and tokenizers (not the CDK app's runtime dependencies, so they are imported on use).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferstack.triton.config import CONFIG_FILE, VERSION, parse_config

if TYPE_CHECKING:
    import numpy as np
    from tokenizers import Tokenizer

TOKENIZER_DIR = "tokenizer"  # export.py: <repo>/<default model>/1/tokenizer/
_V2_TYPES = {"int64": "INT64", "int32": "INT32", "float32": "FP32", "float16": "FP16", "bool": "BOOL"}
_NUMPY_TYPES = {v: k for k, v in _V2_TYPES.items()}


class TritonResponseError(ValueError):
    """The server answered with an error, or with a body that is not a v2 inference response."""


@dataclass(frozen=True)
class TextCodec:
    """Text -> padded token tensors (and generated ids -> text) for one model folder."""

    tokenizer: Tokenizer
    sequence_length: int
    input_names: tuple[str, ...]

    @classmethod
    def from_repository(cls, model_dir: Path | str) -> TextCodec:
        """The default model folder of a repository export.py wrote (`<repo>/<name>`): its inputs and
        sequence length from config.pbtxt, its tokenizer from `1/tokenizer/`."""
        model_dir = Path(model_dir)
        config = parse_config((model_dir / CONFIG_FILE).read_text(encoding="utf-8"))
        lengths = {tuple(tensor.dims) for tensor in config.input}
        if len(lengths) != 1 or len(next(iter(lengths))) != 1:
            raise ValueError(f"{model_dir / CONFIG_FILE}: inputs are not token tensors of one length ({lengths})")
        length = next(iter(lengths))[0]
        return cls.load(
            model_dir / VERSION / TOKENIZER_DIR,
            sequence_length=length,
            input_names=tuple(tensor.name for tensor in config.input),
        )

    @classmethod
    def load(
        cls,
        tokenizer_dir: Path | str,
        *,
        sequence_length: int,
        input_names: Sequence[str] = ("input_ids", "attention_mask"),
    ) -> TextCodec:
        """A tokenizer saved with save_pretrained (tokenizer.json + tokenizer_config.json), padded and
        truncated the way transformers does with padding="max_length", truncation=True."""
        from tokenizers import Tokenizer

        tokenizer_dir = Path(tokenizer_dir)
        tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
        settings_file = tokenizer_dir / "tokenizer_config.json"
        settings = json.loads(settings_file.read_text(encoding="utf-8")) if settings_file.exists() else {}
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
        return cls(tokenizer, sequence_length, tuple(input_names))

    def encode(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """{input_ids, attention_mask[, token_type_ids]}: INT64 [len(texts), sequence_length]."""
        import numpy as np

        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of texts, not one string")
        encodings = self.tokenizer.encode_batch(list(texts))
        fields = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}
        unknown = [name for name in self.input_names if name not in fields]
        if unknown:
            raise ValueError(f"no tokenizer output for input(s) {', '.join(unknown)}")
        return {
            name: np.array([getattr(e, fields[name]) for e in encodings], dtype=np.int64).reshape(
                len(encodings), self.sequence_length
            )
            for name in self.input_names
        }

    def decode(self, output_ids: np.ndarray) -> list[str]:
        """Generated ids (output_ids of a text2text-generation model) -> text, special tokens dropped."""
        return self.tokenizer.decode_batch([list(map(int, row)) for row in output_ids], skip_special_tokens=True)


def request_body(inputs: Mapping[str, np.ndarray], *, outputs: Sequence[str] = ()) -> dict[str, Any]:
    """A KServe v2 inference request with JSON tensors (POST /v2/models/<name>/infer, or SageMaker's
    /invocations with ContentType application/json)."""
    import numpy as np

    tensors = []
    for name, value in inputs.items():
        array = np.asarray(value)
        datatype = _V2_TYPES.get(array.dtype.name)
        if datatype is None:
            raise TypeError(f"{name}: no v2 datatype for numpy {array.dtype}")
        tensors.append(
            {"name": name, "shape": list(array.shape), "datatype": datatype, "data": array.reshape(-1).tolist()}
        )
    body: dict[str, Any] = {"inputs": tensors}
    if outputs:
        body["outputs"] = [{"name": name} for name in outputs]
    return body


def parse_response(body: bytes | str | Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Output name -> array of a KServe v2 JSON response; TritonResponseError for an error body."""
    import numpy as np

    if isinstance(body, (bytes, str)):
        try:
            body = json.loads(body)
        except ValueError as exc:
            raise TritonResponseError(f"response is not JSON: {exc}") from None
    if not isinstance(body, Mapping):
        raise TritonResponseError("response is not a JSON object")
    if "error" in body:
        raise TritonResponseError(f"server error: {body['error']}")
    if not isinstance(body.get("outputs"), list):
        raise TritonResponseError("response has no 'outputs' list")
    arrays = {}
    for index, tensor in enumerate(body["outputs"]):
        try:
            dtype = _NUMPY_TYPES[tensor["datatype"]]
            arrays[tensor["name"]] = np.array(tensor["data"], dtype=dtype).reshape(tensor["shape"])
        except (KeyError, TypeError, ValueError) as exc:
            raise TritonResponseError(f"outputs[{index}]: not a JSON tensor ({type(exc).__name__}: {exc})") from None
    return arrays
