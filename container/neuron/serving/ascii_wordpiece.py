"""BERT WordPiece tokenization of printable-ASCII text without the tokenizers library's per-text cost.

The library spends most of a short query's tokenization on normalizing and splitting it character by
character (about 70 microseconds per text on the benchmark machine, two thirds of a request's CPU).
For a BertNormalizer + BertPreTokenizer + WordPiece tokenizer and printable ASCII text, those steps
reduce to lower-casing (when the normalizer lower-cases) and a split at spaces and ASCII punctuation,
and a word's pieces depend on the word alone, so they are cached per word; a word not seen before
goes through the library's own WordPiece model. Anything else (another tokenizer, non-ASCII or
control characters, a special token's text) is left to the library. ``from_tokenizer`` checks the
equivalence on probe texts and declines when it does not hold.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

log = logging.getLogger("runner")

# BertPreTokenizer: split at whitespace (dropped) and isolate each punctuation character. In printable
# ASCII the only whitespace is the space, and Rust's is_ascii_punctuation is exactly these ranges.
_WORDS = re.compile(r"[^ !-/:-@\[-`{-~]+|[!-/:-@\[-`{-~]")
CACHE_WORDS = 1 << 16  # a query vocabulary's head; beyond it words go to the library every time

PROBES = (
    "",
    " ",
    "a",
    "Hello, World!",
    "the QUICK brown fox's e-mail: fox@example.com (2024)",
    "don't stop--believing... #1 [ok] {x} `y` ~z^ _under_score_ \\back/slash|pipe",
    "x" * 150,
    "aaaa" * 10 + " " + "zz" * 30,
    "MiXeD CaSe 123abc ABC123 9.99 $5 100%",
    " ".join(["word"] * 200),
    "[CLS] inside text",
    "unaffable embeddings tokenizer",
)


class AsciiWordPiece:
    def __init__(
        self,
        tokenizer: Any,
        *,
        lowercase: bool,
        prefix: list[int],
        suffix: list[int],
        budget: int,
        added: tuple[str, ...],
    ) -> None:
        self._model = tokenizer.model
        self._lowercase = lowercase
        self._prefix = prefix
        self._suffix = suffix
        self._budget = budget  # content tokens that fit between prefix and suffix
        self._added = added  # lower-cased texts of the added tokens, which the library matches first
        self._cache: dict[str, list[int]] = {}

    def encode(self, text: str) -> list[int] | None:
        """The token ids the library would give ``text`` (truncated, no padding), or None when this
        text is not one the fast path can answer exactly."""
        if not (text.isascii() and text.isprintable()):
            return None
        low = text.lower()
        for added in self._added:
            if added in low:
                return None
        if self._lowercase:
            text = low
        ids = list(self._prefix)
        limit = self._budget + len(ids)
        cache = self._cache
        for word in _WORDS.findall(text):
            pieces = cache.get(word)
            if pieces is None:
                pieces = [token.id for token in self._model.tokenize(word)]
                if len(cache) < CACHE_WORDS:
                    cache[word] = pieces
            ids += pieces
            if len(ids) >= limit:
                del ids[limit:]
                break
        ids += self._suffix
        return ids

    def scanner(self, *, max_rows: int, max_text_chars: int) -> Any:
        """The common request's body straight to its texts' ids (text_scan.c's Scanner), reading this object's
        word cache: ``.scan(body)`` gives what parsing the body and ``encode`` would give each text, or None for
        any body or text it leaves to them; ``.request(data, paths, max_body)`` does the same for one whole HTTP
        request as it was read (its head checked in C too). None when the extension is not built
        (build_text_scan.py)."""
        try:
            import _text_scan
        except ImportError:
            return None
        return _text_scan.Scanner(
            cache=self._cache,
            lowercase=self._lowercase,
            prefix=tuple(self._prefix),
            suffix=tuple(self._suffix),
            budget=self._budget,
            # A text the scanner reads is printable ASCII, which no other added token can be found in.
            added=tuple(added.encode() for added in self._added if added.isascii()),
            max_rows=max_rows,
            max_chars=max_text_chars,
        )


def from_tokenizer(tokenizer: Any, max_length: int) -> AsciiWordPiece | None:
    """The fast path for this tokenizer (truncating to ``max_length`` tokens, as the server runs it), or
    None when the tokenizer is not a BERT WordPiece one or the probes disagree with the library."""
    try:
        config = json.loads(tokenizer.to_str())
        fast = _build(tokenizer, config, max_length)
    except (KeyError, TypeError, ValueError) as exc:
        log.info("tokenizer fast path off: %s", exc)
        return None
    if fast is None:
        return None
    expected = [encoding.ids for encoding in tokenizer.encode_batch(list(PROBES))]
    got = [fast.encode(text) for text in PROBES]
    for text, want, have in zip(PROBES, expected, got, strict=True):
        if have is not None and have != want:
            log.warning("tokenizer fast path off: it disagrees with the tokenizer on %r", text[:40])
            return None
    return fast


def _build(tokenizer: Any, config: dict, max_length: int) -> AsciiWordPiece | None:
    normalizer, pre_tokenizer = config.get("normalizer") or {}, config.get("pre_tokenizer") or {}
    if normalizer.get("type") != "BertNormalizer" or pre_tokenizer.get("type") != "BertPreTokenizer":
        return None
    if (config.get("model") or {}).get("type") != "WordPiece":
        return None
    processor = config.get("post_processor") or {}
    if processor.get("type") == "BertProcessing":
        prefix, suffix = [processor["cls"][1]], [processor["sep"][1]]
    elif processor.get("type") == "TemplateProcessing":
        prefix, suffix, seen = [], [], False
        for piece in processor["single"]:
            if "Sequence" in piece:
                if seen or piece["Sequence"]["id"] != "A":
                    return None
                seen = True
            else:
                ids = processor["special_tokens"][piece["SpecialToken"]["id"]]["ids"]
                (suffix if seen else prefix).extend(int(i) for i in ids)
        if not seen:
            return None
    else:
        return None
    budget = max_length - len(prefix) - len(suffix)
    if budget < 1:
        return None
    added = tuple(token["content"].lower() for token in config.get("added_tokens", []) if token["content"])
    return AsciiWordPiece(
        tokenizer, lowercase=bool(normalizer.get("lowercase")), prefix=prefix, suffix=suffix, budget=budget, added=added
    )
