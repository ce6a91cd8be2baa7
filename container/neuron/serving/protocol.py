"""The KServe v2 / Triton inference protocol for this model: tensor interface, parsing, replies.

Inputs:  TEXT (BYTES, shape [n] or [n, 1]) -- raw strings, tokenized by the server; or
         input_ids (INT64, [n, w]) with optional attention_mask (INT64, [n, w]), w <= sequence length.
Outputs: logits (FP32, [n, num_labels]) and label (BYTES, [n]), the arg-max label name.
JSON tensors and Triton's binary tensor extension (Inference-Header-Content-Length) are both
accepted, so tritonclient.http works with its defaults. Every rejection is a ProtocolError whose
message starts with the offending field (e.g. "inputs[0].shape: ...").
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

# The modules beside this one, flat on the path (ruff would sort them in with the third-party ones).
# isort: split
from runner import TextRows, TokenRows

TEXT, INPUT_IDS, ATTENTION_MASK = "TEXT", "input_ids", "attention_mask"
LOGITS, LABEL = "logits", "label"
INPUT_TYPES = {TEXT: "BYTES", INPUT_IDS: "INT64", ATTENTION_MASK: "INT64"}
OUTPUT_TYPES = {LOGITS: "FP32", LABEL: "BYTES"}
HEADER_LENGTH = "inference-header-content-length"
MODEL_VERSION = "1"


class ProtocolError(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class InferRequest:
    id: str | None
    payload: TextRows | TokenRows
    outputs: tuple[str, ...]
    binary_outputs: frozenset[str]


# The reply's side of a request of one TEXT tensor and nothing else (no id, parameters or outputs): all
# that a request text_scan.c read asks of its reply (its payload is built apart, from the scanner's ids).
PLAIN_TEXT_REPLY = InferRequest(None, TextRows([]), (LOGITS, LABEL), frozenset())


def _flatten(data: Any, field: str) -> list:
    """Row-major values of a nested JSON list, one nesting level at a time: a loop, not recursion, so
    data nested as deep as the JSON parser allows cannot exhaust the stack."""
    if not isinstance(data, list):
        raise ProtocolError(f"{field}: expected a list of values")
    while data and isinstance(data[0], list):
        flat: list = []
        for item in data:
            if not isinstance(item, list):
                raise ProtocolError(f"{field}: ragged nesting")
            flat.extend(item)
        data = flat
    if any(isinstance(item, list) for item in data):
        raise ProtocolError(f"{field}: ragged nesting")
    return data


def parse_json(raw: bytes, field: str) -> Any:
    """JSON from a request, or a 400 naming ``field``: malformed, not UTF-8, a number of more than
    4,300 digits (int() refuses it) or nesting deeper than the parser's recursion allows."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        message = "nested too deeply" if isinstance(exc, RecursionError) else " ".join(str(exc).split())[:200]
        raise ProtocolError(f"{field}: malformed JSON: {message}") from None


def _decode_binary_strings(chunk: bytes, count: int, field: str) -> list[str]:
    """Triton's BYTES wire format: each element is a 4-byte little-endian length + bytes."""
    out, offset = [], 0
    for _ in range(count):
        if offset + 4 > len(chunk):
            raise ProtocolError(f"{field}: binary BYTES data ends early")
        (length,) = struct.unpack_from("<I", chunk, offset)
        offset += 4
        if offset + length > len(chunk):
            raise ProtocolError(f"{field}: binary BYTES element overruns the data")
        try:
            out.append(chunk[offset : offset + length].decode("utf-8", errors="strict"))
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"{field}[{len(out)}]: not UTF-8 ({exc.reason} at byte {exc.start})") from None
        offset += length
    if offset != len(chunk):
        raise ProtocolError(f"{field}: binary BYTES data has {len(chunk) - offset} extra bytes")
    return out


def _encode_binary_strings(values: list[str]) -> bytes:
    parts = []
    for value in values:
        raw = value.encode("utf-8")
        parts.append(struct.pack("<I", len(raw)) + raw)
    return b"".join(parts)


class ModelInterface:
    """The tensor interface of one compiled artifact plus the server's input limits."""

    def __init__(
        self, *, name: str, metadata: dict, max_rows: int, max_text_chars: int, native_replies: bool = False
    ) -> None:
        """``native_replies``: write the plain TEXT request's JSON reply in C (text_scan.c's Replier) when the
        extension is built; the worker turns it on with SERVER_TEXT_SCAN."""
        self.name = name
        self.backend = metadata["backend"]
        self.sequence_length = int(metadata["sequence_length"])
        self.labels = list(metadata["labels"])
        self.vocab_size = int(metadata["vocab_size"])
        self.max_rows = max_rows
        self.max_text_chars = max_text_chars
        self._name_json = json.dumps(name)
        self._label_json = [json.dumps(label) for label in self.labels]
        self.native_reply = self._native_reply() if native_replies else None

    def _native_reply(self) -> Any:
        try:
            import _text_scan
        except ImportError:
            return None
        # json.dumps escapes every non-ASCII character: the name and labels are ASCII bytes here.
        labels = tuple(label.encode() for label in self._label_json)
        return _text_scan.Replier(name=self._name_json.encode(), labels=labels).json

    def metadata(self) -> dict:
        seq, n_labels = self.sequence_length, len(self.labels)
        return {
            "name": self.name,
            "versions": [MODEL_VERSION],
            "platform": f"pytorch_{self.backend}",
            "inputs": [
                {"name": TEXT, "datatype": "BYTES", "shape": [-1]},
                {"name": INPUT_IDS, "datatype": "INT64", "shape": [-1, seq]},
                {"name": ATTENTION_MASK, "datatype": "INT64", "shape": [-1, seq]},
            ],
            "outputs": [
                {"name": LOGITS, "datatype": "FP32", "shape": [-1, n_labels]},
                {"name": LABEL, "datatype": "BYTES", "shape": [-1]},
            ],
        }

    # -- requests ---------------------------------------------------------------------------

    def parse(self, body: bytes, header_length: str | None) -> InferRequest:
        json_part, binary = self._split(body, header_length)
        request = parse_json(json_part, "body")
        if not isinstance(request, dict):
            raise ProtocolError("body: expected a JSON object with an 'inputs' list")
        request_id = request.get("id")
        if request_id is not None and not isinstance(request_id, str):
            raise ProtocolError("id: must be a string")
        parameters = request.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise ProtocolError("parameters: must be an object")
        inputs = request.get("inputs")
        if not isinstance(inputs, list) or not inputs:
            raise ProtocolError("inputs: expected a non-empty list of tensors")
        tensors, offset = {}, 0
        for i, tensor in enumerate(inputs):
            name, value, offset = self._parse_input(i, tensor, binary, offset)
            if name in tensors:
                raise ProtocolError(f"inputs[{i}].name: duplicate input '{name}'")
            tensors[name] = value
        if offset != len(binary):
            raise ProtocolError(f"body: {len(binary)} bytes of binary data but the inputs declare {offset}")
        payload = self._payload(tensors)
        outputs, binary_outputs = self._parse_outputs(
            request.get("outputs"), bool(parameters.get("binary_data_output"))
        )
        return InferRequest(request_id, payload, outputs, binary_outputs)

    @staticmethod
    def _split(body: bytes, header_length: str | None) -> tuple[bytes, bytes]:
        if header_length is None:
            return body, b""
        try:
            length = int(header_length)
        except ValueError:
            raise ProtocolError("Inference-Header-Content-Length: expected an integer") from None
        if not 0 < length <= len(body):
            raise ProtocolError(f"Inference-Header-Content-Length: {length} is outside the {len(body)}-byte body")
        return body[:length], body[length:]

    def _parse_input(self, i: int, tensor: Any, binary: bytes, offset: int) -> tuple[str, Any, int]:
        where = f"inputs[{i}]"
        if not isinstance(tensor, dict):
            raise ProtocolError(f"{where}: expected an object with name, datatype, shape and data")
        name = tensor.get("name")
        if name not in INPUT_TYPES:
            raise ProtocolError(
                f"{where}.name: unknown input {name!r}; expected TEXT, or input_ids with attention_mask"
            )
        datatype = tensor.get("datatype")
        if datatype != INPUT_TYPES[name]:
            raise ProtocolError(f"{where}.datatype: {name} must be {INPUT_TYPES[name]}, got {datatype!r}")
        shape = tensor.get("shape")
        if (
            not isinstance(shape, list)
            or not shape
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        ):
            raise ProtocolError(f"{where}.shape: expected a list of non-negative integers, got {shape!r}")
        count = prod(shape)
        rows = shape[0]
        if rows == 0:
            raise ProtocolError(f"{where}.shape: batch dimension must be at least 1")
        if rows > self.max_rows:
            raise ProtocolError(f"{where}.shape: {rows} items exceed the maximum of {self.max_rows} per request", 413)
        if name == TEXT and not (len(shape) == 1 or (len(shape) == 2 and shape[1] == 1)):
            raise ProtocolError(f"{where}.shape: TEXT must be [n] or [n, 1], got {shape}")
        if name != TEXT:
            if len(shape) != 2:
                raise ProtocolError(f"{where}.shape: {name} must be [n, tokens], got {shape}")
            if not 1 <= shape[1] <= self.sequence_length:
                raise ProtocolError(
                    f"{where}.shape: {shape[1]} tokens; the model takes 1 to {self.sequence_length}",
                    413 if shape[1] > self.sequence_length else 400,
                )
        size = (
            (tensor.get("parameters") or {}).get("binary_data_size")
            if isinstance(tensor.get("parameters"), dict)
            else None
        )
        if size is not None:
            if not isinstance(size, int) or size < 0 or offset + size > len(binary):
                raise ProtocolError(f"{where}.parameters.binary_data_size: {size!r} does not fit the binary data")
            chunk = binary[offset : offset + size]
            offset += size
            if name == TEXT:
                values: Any = _decode_binary_strings(chunk, count, f"{where}.data")
            else:
                if size != count * 8:
                    raise ProtocolError(
                        f"{where}.parameters.binary_data_size: shape {shape} needs {count * 8} bytes, got {size}"
                    )
                values = np.frombuffer(chunk, dtype="<i8").astype(np.int64)
        else:
            if "data" not in tensor:
                raise ProtocolError(f"{where}.data: missing (send JSON data or binary_data_size)")
            values = _flatten(tensor["data"], f"{where}.data")
            if len(values) != count:
                raise ProtocolError(f"{where}.data: shape {shape} needs {count} elements, got {len(values)}")
        if name == TEXT:
            return name, self._texts(values, where), offset
        return name, self._integers(name, values, shape, where), offset

    def _texts(self, values: list, where: str) -> list[str]:
        for k, value in enumerate(values):
            if not isinstance(value, str):
                raise ProtocolError(f"{where}.data[{k}]: expected a string, got {type(value).__name__}")
            # 400, not 413, as the Triton ensemble's tokenizer step answers these (its Python backend cannot send
            # a 413): one status per mistake, whichever backend a model is on.
            if len(value) > self.max_text_chars:
                raise ProtocolError(
                    f"{where}.data[{k}]: text of {len(value)} characters exceeds the limit of {self.max_text_chars}"
                )
            if not value or value.isspace():  # nothing for the model to read: an answer would be noise
                raise ProtocolError(f"{where}.data[{k}]: empty text")
            if not value.isascii():
                try:  # JSON's "\ud800" escapes decode to lone surrogates, which the tokenizer cannot take
                    value.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise ProtocolError(
                        f"{where}.data[{k}]: not valid Unicode ({exc.reason} at character {exc.start})"
                    ) from None
        return list(values)

    def _integers(self, name: str, values: Any, shape: list[int], where: str) -> np.ndarray:
        if isinstance(values, np.ndarray):
            array = values
        else:
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                raise ProtocolError(f"{where}.data: {name} must hold integers")
            try:
                array = np.array(values, dtype=np.int64)
            except OverflowError:
                raise ProtocolError(f"{where}.data: {name} value out of INT64 range") from None
        array = array.reshape(shape)
        low, high = (0, self.vocab_size - 1) if name == INPUT_IDS else (0, 1)
        if array.size and (array.min() < low or array.max() > high):
            bad = int(array[(array < low) | (array > high)][0])
            raise ProtocolError(f"{where}.data: {name} value {bad} outside {low}..{high}")
        return array

    @staticmethod
    def _payload(tensors: dict) -> TextRows | TokenRows:
        if TEXT in tensors:
            if len(tensors) > 1:
                raise ProtocolError("inputs: send either TEXT or input_ids/attention_mask, not both")
            return TextRows(tensors[TEXT])
        if INPUT_IDS not in tensors:
            raise ProtocolError("inputs: attention_mask needs input_ids")
        ids = tensors[INPUT_IDS]
        mask = tensors.get(ATTENTION_MASK)
        if mask is None:
            mask = np.ones_like(ids)
        elif mask.shape != ids.shape:
            raise ProtocolError(
                f"inputs: attention_mask shape {list(mask.shape)} differs from input_ids {list(ids.shape)}"
            )
        return TokenRows(ids, mask)

    @staticmethod
    def _parse_outputs(requested: Any, binary_default: bool) -> tuple[tuple[str, ...], frozenset[str]]:
        if requested is None:
            names = (LOGITS, LABEL)
            return names, frozenset(names if binary_default else ())
        if not isinstance(requested, list) or not requested:
            raise ProtocolError('outputs: expected a non-empty list of {"name": ...}')
        names, binary = [], set()
        for i, output in enumerate(requested):
            name = output.get("name") if isinstance(output, dict) else None
            if name not in OUTPUT_TYPES:
                raise ProtocolError(f"outputs[{i}].name: unknown output {name!r}; expected logits or label")
            parameters = output.get("parameters") or {}
            if not isinstance(parameters, dict):
                raise ProtocolError(f"outputs[{i}].parameters: must be an object")
            if parameters.get("binary_data", binary_default):
                binary.add(name)
            names.append(name)
        return tuple(names), frozenset(binary)

    # -- responses --------------------------------------------------------------------------

    def _json_response(self, request: InferRequest, logits: np.ndarray) -> bytes:
        """The all-JSON reply, written out directly: the same bytes json.dumps gives the reply dict
        (compact separators, keys in the same order), in a third of its time; in C for what the plain TEXT
        request asks (its id none, its outputs the defaults) where the Replier takes the logits."""
        if self.native_reply is not None and request.id is None and request.outputs == PLAIN_TEXT_REPLY.outputs:
            content = self.native_reply(logits)
            if content is not None:
                return content
        rows, width = logits.shape
        parts = []
        for name in request.outputs:
            if name == LOGITS:
                values = logits.ravel().tolist()
                # float repr is JSON's for finite values; NaN and infinities take json's spelling.
                data = (
                    ",".join(map(float.__repr__, values))
                    if all(map(math.isfinite, values))
                    else json.dumps(values, separators=(",", ":"))[1:-1]
                )
                parts.append(f'{{"name":"logits","datatype":"FP32","shape":[{rows},{width}],"data":[{data}]}}')
            else:
                labels = ",".join([self._label_json[i] for i in logits.argmax(axis=1).tolist()])
                parts.append(f'{{"name":"label","datatype":"BYTES","shape":[{rows}],"data":[{labels}]}}')
        request_id = "" if request.id is None else ',"id":' + json.dumps(request.id)
        return (
            f'{{"model_name":{self._name_json},"model_version":"{MODEL_VERSION}",'
            f'"outputs":[{",".join(parts)}]{request_id}}}'
        ).encode()

    def response(self, request: InferRequest, logits: np.ndarray) -> tuple[bytes, dict[str, str] | None]:
        """The reply's body and, for a binary reply, its headers (None: a JSON reply)."""
        if not request.binary_outputs:
            return self._json_response(request, logits), None
        rows = logits.shape[0]
        outputs, chunks = [], []
        for name in request.outputs:
            binary = name in request.binary_outputs
            if name == LOGITS:
                tensor: dict = {"name": name, "datatype": "FP32", "shape": [rows, logits.shape[1]]}
                value: Any = np.ascontiguousarray(logits, dtype="<f4").tobytes() if binary else logits.ravel().tolist()
            else:
                labels = [self.labels[i] for i in logits.argmax(axis=1).tolist()]
                tensor = {"name": name, "datatype": "BYTES", "shape": [rows]}
                value = _encode_binary_strings(labels) if binary else labels
            if binary:
                tensor["parameters"] = {"binary_data_size": len(value)}
                chunks.append(value)
            else:
                tensor["data"] = value
            outputs.append(tensor)
        reply: dict = {"model_name": self.name, "model_version": MODEL_VERSION, "outputs": outputs}
        if request.id is not None:
            reply["id"] = request.id
        header = json.dumps(reply, separators=(",", ":")).encode()
        if not chunks:
            return header, None
        return header + b"".join(chunks), {
            "content-type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(header)),
        }
