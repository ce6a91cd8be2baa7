"""Whether a reply answers a KServe v2 request: the outputs a model's interface promises (name, datatype,
shape, value count). One check for `smoke` and for every load test request; no dependencies, so Locust's
processes load it as cheaply as the CLI does."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass


class WrongAnswer(ValueError):
    """The reason a reply is not a valid answer, in one line."""


@dataclass(frozen=True)
class Output:
    name: str
    datatype: str
    shape: tuple[int, ...]


def check(reply: bytes, expected: tuple[Output, ...]) -> None:
    """Raises WrongAnswer unless `reply` holds every expected output with its datatype, shape and values."""
    try:
        document = json.loads(reply)
    except (ValueError, UnicodeDecodeError):
        raise WrongAnswer(f"reply is not JSON: {reply[:80]!r}") from None
    if not isinstance(document, dict) or not isinstance(document.get("outputs"), list):
        raise WrongAnswer(f"reply has no 'outputs' list: {json.dumps(document)[:120]}")
    by_name = {o.get("name"): o for o in document["outputs"] if isinstance(o, dict)}
    for want in expected:
        got = by_name.get(want.name)
        if got is None:
            raise WrongAnswer(f"output {want.name} missing (got {', '.join(map(str, by_name)) or 'none'})")
        if got.get("datatype") != want.datatype:
            raise WrongAnswer(f"output {want.name}: datatype {got.get('datatype')}, expected {want.datatype}")
        shape = got.get("shape")
        if not isinstance(shape, list) or tuple(shape) != tuple(want.shape):
            raise WrongAnswer(f"output {want.name}: shape {got.get('shape')}, expected {list(want.shape)}")
        if _count(got.get("data")) != math.prod(want.shape):
            raise WrongAnswer(f"output {want.name}: {_count(got.get('data'))} values for shape {list(want.shape)}")


def _count(data) -> int:
    if isinstance(data, list):
        return sum(_count(item) for item in data)
    return 0 if data is None else 1
