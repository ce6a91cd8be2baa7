"""Property-based fuzzing of the pin history parser (inferstack/config/pin_history.py): whatever a history
file holds, `read` either returns one entry per line or raises HistoryError whose message is one printable
line naming the file and line, in bounded time; and what `append` writes reads back equal.

Files are valid entries with values swapped for random types, deleted or added keys, deep nesting; raw text
lines; raw bytes. Derandomized (tests/conftest.py): CI runs the same examples every time."""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferstack.config import pin_history
from inferstack.config.pin_history import HISTORY_FORMAT, HistoryEntry, HistoryError
from inferstack.config.release_pin import PIN_FORMAT, PinnedImage, ReleaseIdentity, ReleasePin
from tests.support.fuzz import fuzz_examples, mutate_once
from tests.support.hang_guard import hang_guard

pytestmark = pytest.mark.fuzz

ENV = "staging"
REGISTRY = "222222222222.dkr.ecr.us-east-1.amazonaws.com"

# Image unit names as a repository path segment takes them (no "--": the registry pattern separates parts by one).
units = st.from_regex(r"^[a-z][a-z0-9]{1,4}(-[a-z0-9]{1,4}){0,2}$", fullmatch=True)
digests = st.from_regex(r"^sha256:[0-9a-f]{64}$", fullmatch=True)
commits = st.none() | st.from_regex(r"^[0-9a-f]{40}$", fullmatch=True)


@st.composite
def entries(draw, number: int) -> HistoryEntry:
    """A valid entry that can stand at line `number`."""
    images = draw(st.dictionaries(units, digests, min_size=1, max_size=4))
    pin = ReleasePin(
        format=PIN_FORMAT,
        environment=ENV,
        promoted_from="dev",
        release=ReleaseIdentity(commit=draw(commits), config_sha256=draw(st.none() | digests.map(lambda d: d[7:]))),
        images={u: PinnedImage(repository_uri=f"{REGISTRY}/inferstack/{u}", digest=d) for u, d in images.items()},
    )
    rollback = number > 1 and draw(st.booleans())
    return HistoryEntry(
        format=HISTORY_FORMAT,
        environment=ENV,
        action="rollback" if rollback else "promote",
        promoted_from=None if rollback else "dev",
        rolled_back_to=draw(st.integers(1, number - 1)) if rollback else None,
        at=draw(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC))),
        by=draw(
            st.text(st.characters(codec="utf-8", categories=["L", "N", "P", "S"]), min_size=1, max_size=20).filter(
                lambda s: s.strip() == s
            )
        ),
        repository_commit=draw(commits),
        pin=pin,
    )


@st.composite
def histories(draw) -> list[HistoryEntry]:
    return [draw(entries(n)) for n in range(1, draw(st.integers(1, 4)) + 1)]


@st.composite
def mutated_history(draw) -> str:
    """A valid history with a few values of one line replaced, deleted, added or nested."""
    lines = [json.loads(pin_history.dump_entry(e)) for e in draw(histories())]
    data = lines[draw(st.integers(0, len(lines) - 1))]
    for _ in range(draw(st.integers(1, 3))):
        mutate_once(draw, data, ["replace", "replace", "delete", "add", "nest"])
        if not data:
            break
    return "".join(json.dumps(d, sort_keys=draw(st.booleans())) + "\n" for d in lines)


raw_text = st.one_of(
    st.text(alphabet='{}[]":,\n\r\t 0123456789eE.-+truefalsn\\u2028', max_size=80),
    st.lists(
        st.sampled_from(
            [
                "{}\n",
                "[]\n",
                '"x"\n',
                "\n",
                '{"format": "inferstack-pin-history/1"}\n',
                '{"format": "inferstack-pin-history/1", "pin": ' + "[" * 2000 + "\n",
                "1" * 5000 + "\n",
                '{"a": NaN}\n',
                '{"a": 1e400}\n',
                "\ufeff{}\n",
                "\u2028\n",
            ]
        ),
        max_size=5,
    ).map("".join),
)


def assert_reads_or_reports(content: bytes) -> list[HistoryEntry] | None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{ENV}.jsonl"
        path.write_bytes(content)
        try:
            with hang_guard("pin_history.read of a generated file"):
                read = pin_history.read(path, ENV)
        except HistoryError as exc:
            message = str(exc)
            assert len(message.splitlines()) == 1 and message.isprintable(), message
            assert len(message) < 2000, message
            assert message.startswith(f"{path}:"), message
            return None
    body = content.decode("utf-8")
    assert len(read) == body.count("\n") + (0 if body.endswith("\n") or not body else 1)
    return read


@settings(max_examples=fuzz_examples(80), deadline=None)
@given(mutated_history())
def test_mutated_histories_read_or_report(text):
    assert_reads_or_reports(text.encode())


@settings(max_examples=fuzz_examples(60), deadline=None)
@given(raw_text)
def test_raw_text_reads_or_reports(text):
    assert_reads_or_reports(text.encode("utf-8", errors="surrogatepass"))


@settings(max_examples=fuzz_examples(20), deadline=None)
@given(st.binary(max_size=200))
def test_raw_bytes_read_or_report(content):
    assert_reads_or_reports(content)


@settings(max_examples=fuzz_examples(40), deadline=None)
@given(histories())
def test_what_append_writes_reads_back_equal(history):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "history" / f"{ENV}.jsonl"
        for number, entry in enumerate(history, start=1):
            assert pin_history.append(path, entry) == number
        assert pin_history.read(path, ENV) == history
