"""ascii_wordpiece.py against the tokenizers library: the same ids for every printable-ASCII text it
answers (random texts, punctuation-heavy, long words, truncation), no answer for the rest, and no fast
path at all for a tokenizer it does not match exactly. Derandomized (tests/conftest.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# serving/ and build/'s flat modules, on the path from conftest.py (ruff would count them third-party).
# isort: split
import ascii_wordpiece
from runner import EncodedRows, TextRows

from tests.support.fuzz import fuzz_examples
from tests.support.wordpiece import MAX_LENGTH, TOKENIZERS, library, printable, wordy

pytestmark = pytest.mark.fuzz
FAST = {name: ascii_wordpiece.from_tokenizer(tok, MAX_LENGTH) for name, tok in TOKENIZERS.items()}


@settings(max_examples=fuzz_examples(300), deadline=None)
@given(st.one_of(printable, wordy), st.sampled_from(sorted(TOKENIZERS)))
def test_the_fast_path_gives_the_library_s_ids_or_declines(text, name):
    fast = FAST[name]
    assert fast is not None
    got = fast.encode(text)
    if text.isascii() and text.isprintable() and "[" not in text:
        assert got is not None, text  # the texts it exists for
    if got is not None:
        assert got == TOKENIZERS[name].encode(text).ids, text


@pytest.mark.parametrize("text", ["café", "tab\there", "line\nbreak", "\x7f", "a [MASK] b", "[cls] lower too"])
def test_non_ascii_control_characters_and_special_tokens_go_to_the_library(text):
    assert FAST["bert"].encode(text) is None


@pytest.mark.parametrize(
    "kind, edit, truncate",
    [
        ("roberta", None, True),  # byte-level BPE
        ("t5", None, True),  # Unigram with its own normalizer
        ("bert", lambda c: c.update(pre_tokenizer={"type": "Whitespace"}), True),
        ("bert", lambda c: c["normalizer"].update(type="Lowercase"), True),
        ("bert", None, False),  # configured to truncate elsewhere than the server's length: the probes disagree
    ],
)
def test_no_fast_path_for_a_tokenizer_it_does_not_match(kind, edit, truncate):
    assert ascii_wordpiece.from_tokenizer(library(kind, edit, truncate), MAX_LENGTH) is None


def test_the_runner_tokenizes_on_arrival_only_when_every_text_qualifies(artifact):
    from artifact import read_metadata
    from runner import ModelRunner

    # The emulated accelerator (a stand-in for a NeuronCore): this test is about tokenization only.
    runner = ModelRunner(artifact, read_metadata(artifact), torch_threads=1, standin_batch_ms=0)
    assert runner.fast_tokenizer is not None
    ascii_only = runner.prepare(TextRows(["a plain query", "Another, with punctuation!"]))
    assert isinstance(ascii_only, EncodedRows) and ascii_only.ids == [
        e.ids for e in runner.tokenizer.encode_batch(["a plain query", "Another, with punctuation!"])
    ]
    mixed = TextRows(["a plain query", "une requête"])
    assert runner.prepare(mixed) is mixed  # tokenized with the batch, by the library
    # Both kinds stack to the same rows the library alone would give.
    fast = runner.stack([ascii_only])
    library = runner.stack([TextRows(["a plain query", "Another, with punctuation!"])])
    assert (fast.input_ids == library.input_ids).all() and (fast.attention_mask == library.attention_mask).all()
    assert fast.rows == library.rows == (2,)
