"""The tiny models' tokenizers as the server configures them, and texts for them: shared by the tests of the
Python fast path (ascii_wordpiece.py) and of the C one built on its cache (text_scan.c)."""

from __future__ import annotations

import importlib.util
import json
import string

from hypothesis import strategies as st
from tokenizers import Tokenizer

from tests.support.neuron_server import MAKE_TINY

MAX_LENGTH = 32

_spec = importlib.util.spec_from_file_location("make_tiny_model", MAKE_TINY)
make_tiny_model = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_tiny_model)


def library(kind: str = "bert", edit=None, truncate: bool = True) -> Tokenizer:
    """The tiny models' tokenizer as the runner configures it (truncated, unpadded); ``edit`` changes its JSON."""
    backend = make_tiny_model.build_tokenizer(kind, 1000).backend_tokenizer
    if edit is not None:
        config = json.loads(backend.to_str())
        edit(config)
        backend = Tokenizer.from_str(json.dumps(config))
    if truncate:
        backend.enable_truncation(max_length=MAX_LENGTH)
    backend.no_padding()
    return backend


def cased(config: dict) -> None:
    config["normalizer"]["lowercase"] = False


def bert_processing(config: dict) -> None:
    config["post_processor"] = {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]}


TOKENIZERS = {
    "bert": library("bert"),
    "distilbert": library("distilbert"),
    "cased": library("bert", cased),
    "bert-processing": library("bert", bert_processing),
}

printable = st.text(st.sampled_from(string.printable[:95]), max_size=120)  # printable ASCII: no tabs or newlines
wordy = st.lists(
    st.sampled_from(
        ["the", "Film", "e-mail", "don't", "x" * 101, "café", "[MASK]", "ok!!", "42", "A.B.C", "__init__", "", "   "]
    ),
    max_size=40,
).map(" ".join)
