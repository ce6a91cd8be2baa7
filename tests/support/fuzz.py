"""Hypothesis pieces the fuzz tests share: their example count (`fuzz_examples`), hostile values, the key paths
of a parsed document, and one mutation of a document at a path (replace, delete, add a key, nest deeply). The
Hypothesis profiles (derandomized in CI) are tests/conftest.py's."""

from __future__ import annotations

import os

from hypothesis import strategies as st


def mutate(document: bytes, data, alphabet: bytes, max_edits: int) -> bytes:
    """``document`` with 1 to ``max_edits`` bytes flipped, inserted or deleted where Hypothesis draws them (``data``:
    a test's ``st.data()``), each new byte one of ``alphabet``."""
    mutated = bytearray(document)
    for _ in range(data.draw(st.integers(1, max_edits))):
        at = data.draw(st.integers(0, len(mutated)))
        edit = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        byte = data.draw(st.sampled_from(alphabet))
        if edit == "insert" or not mutated:
            mutated[at:at] = bytes([byte])
        elif edit == "flip":
            mutated[min(at, len(mutated) - 1)] = byte
        else:
            del mutated[min(at, len(mutated) - 1)]
    return bytes(mutated)


def fuzz_examples(count: int) -> int:
    """A fuzz test's example count: modest by default (the suite stays fast), scaled by FUZZ_SCALE."""
    return count * int(os.environ.get("FUZZ_SCALE", "1"))


NUMBER_SPELLINGS = [
    "nan",
    "NaN",
    "-nan",
    "inf",
    "-inf",
    "Infinity",
    "1e400",
    "-1e400",
    "1e-400",
    "1e308",
    "0x7fffffffffffffff",
    "9" * 30,
    "1_000",
    "0b101",
    "0o17",
    "1:30",
    "-0",
    "+1",
    ".5",
]
ODD_STRINGS = [
    "",
    " ",
    "~",
    "null",
    "yes",
    "off",
    "2024-13-45",
    "2024-02-30",
    "inf1.xlarge",
    "ml.g4dn.xlarge",
    "a\x00b",
    "\u202e",
    "x" * 300,
    "dev",
    "prod",
    "cron(0 20 ? * MON-FRI *)",
    "Mars/Olympus",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2**31, 2**63 - 1, 2**63, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -1e308, 5e-324, 1e-300, 0.0, -0.0]),
    st.text(max_size=12),
    st.sampled_from(NUMBER_SPELLINGS + ODD_STRINGS),
)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def paths_of(data, prefix=()) -> list[tuple]:
    """Every key path in `data`, containers included."""
    out = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, value in data.items():
            out += paths_of(value, prefix + (key,))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            out += paths_of(value, prefix + (index,))
    return out


def nested(value, depth: int):
    for _ in range(depth):
        value = [value]
    return value


def mutate_once(draw, data, actions: list[str]) -> None:
    """Apply one of `actions` ("replace", "delete", "add", "nest"; repeat one to weight it) at a drawn path."""
    path = draw(st.sampled_from(paths_of(data)))
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    action = draw(st.sampled_from(actions))
    if action == "replace":
        parent[path[-1]] = draw(values)
    elif action == "delete":
        del parent[path[-1]]
    elif action == "add" and isinstance(parent, dict):
        parent[draw(st.text(min_size=1, max_size=8))] = draw(values)
    elif action == "nest":
        parent[path[-1]] = nested(parent[path[-1]], draw(st.integers(1, 60)))
