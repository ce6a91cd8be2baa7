"""Triton Python-backend model for text2text-generation: greedy decoding over BLS calls to the
`<name>-encoder` and `<name>-decoder` ONNX models (interfaces in inferstack/triton/config.py).

export.py copies this file to `<repo>/<name>/1/model.py` and writes `generation.json` beside it.
The decoding loop, `greedy_decode`, is a pure function of two callables, so tests drive it with
onnxruntime sessions over the exported files; the pb_utils glue below it only moves tensors.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # outside Triton: tests import greedy_decode only
    pb_utils = None

GENERATION_FILE = "generation.json"

Encode = Callable[[np.ndarray, np.ndarray], np.ndarray]
Decode = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def greedy_decode(
    encode: Encode,
    decode: Decode,
    input_ids: np.ndarray,
    attention_mask: np.ndarray,
    *,
    max_output_length: int,
    decoder_start_token_id: int,
    eos_token_id: int,
    pad_token_id: int,
) -> np.ndarray:
    """Greedy decoding as transformers' generate(num_beams=1, do_sample=False,
    max_new_tokens=max_output_length) does it, without the start token: [batch, max_output_length]
    INT64, a row's ids up to and including end-of-sequence, then the pad token.

    `encode(ids, mask) -> hidden`; `decode(hidden, mask, decoder_ids) -> ids`, the argmax id at every
    position of the fixed-length decoder_ids. The decoder is causal, so the pad ids after step t do not
    change the id at t; each step re-runs it over the whole fixed shape (one TensorRT profile, no cache).
    """
    batch = input_ids.shape[0]
    hidden = encode(input_ids, attention_mask)
    decoder_ids = np.full((batch, max_output_length), pad_token_id, dtype=np.int64)
    decoder_ids[:, 0] = decoder_start_token_id
    output = np.full((batch, max_output_length), pad_token_id, dtype=np.int64)
    finished = np.zeros(batch, dtype=bool)
    for step in range(max_output_length):
        ids = np.asarray(decode(hidden, attention_mask, decoder_ids))[:, step].astype(np.int64)
        ids = np.where(finished, pad_token_id, ids)  # generate() pads rows that already ended
        output[:, step] = ids
        finished |= ids == eos_token_id
        if finished.all():
            break
        if step + 1 < max_output_length:
            decoder_ids[:, step + 1] = ids
    return output


def read_generation_settings(version_dir: str) -> dict[str, int]:
    with open(os.path.join(version_dir, GENERATION_FILE), encoding="utf-8") as handle:
        settings = json.load(handle)
    return {key: int(settings[key]) for key in ("decoder_start_token_id", "eos_token_id", "pad_token_id")}


class BlsError(RuntimeError):
    pass


class TritonPythonModel:
    """Concatenates the batched requests, decodes once, splits the ids back per request."""

    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        parameters = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        self.encoder = parameters["encoder_model"]
        self.decoder = parameters["decoder_model"]
        self.max_output_length = int(parameters["max_output_length"])
        self.settings = read_generation_settings(os.path.join(args["model_repository"], args["model_version"]))

    def execute(self, requests):
        ids = [pb_utils.get_input_tensor_by_name(r, "input_ids").as_numpy() for r in requests]
        masks = [pb_utils.get_input_tensor_by_name(r, "attention_mask").as_numpy() for r in requests]
        try:
            output = greedy_decode(
                self._encode,
                self._decode,
                np.concatenate(ids),
                np.concatenate(masks),
                max_output_length=self.max_output_length,
                **self.settings,
            )
        except BlsError as exc:
            error = pb_utils.TritonError(str(exc))
            return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in requests]
        responses, start = [], 0
        for rows in ids:
            part = output[start : start + len(rows)]
            start += len(rows)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("output_ids", part)]))
        return responses

    def _encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        return self._call(self.encoder, {"input_ids": input_ids, "attention_mask": attention_mask}, "last_hidden_state")

    def _decode(self, hidden: np.ndarray, attention_mask: np.ndarray, decoder_ids: np.ndarray) -> np.ndarray:
        return self._call(
            self.decoder,
            {
                "decoder_input_ids": decoder_ids,
                "encoder_hidden_states": hidden,
                "encoder_attention_mask": attention_mask,
            },
            "next_token_ids",
        )

    def _call(self, model: str, inputs: dict[str, np.ndarray], output: str) -> np.ndarray:
        kwargs = {}
        if hasattr(pb_utils, "PreferredMemory"):
            # The ids and hidden states come back to this CPU model: ask for host memory, or a GPU
            # model's output tensor could not be read with as_numpy().
            kwargs["preferred_memory"] = pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0)
        request = pb_utils.InferenceRequest(
            model_name=model,
            requested_output_names=[output],
            inputs=[pb_utils.Tensor(name, np.ascontiguousarray(value)) for name, value in inputs.items()],
            **kwargs,
        )
        response = request.exec()
        if response.has_error():
            raise BlsError(f"{model}: {response.error().message()}")
        return pb_utils.get_output_tensor_by_name(response, output).as_numpy()
