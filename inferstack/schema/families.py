"""Model families (architectures) and the tensors each takes: what `validate` checks a model's export and
task against, and what the image build rehearsal builds its tiny stand-in checkpoint from.

Pure data and string matching: no transformers import (the config loader and the Triton image import this).
A family is named by Hugging Face's `model_type` (a checkpoint's config.json). Where the checkpoint is not
on disk, its hub id usually names it ('distilbert-base-uncased', 'FacebookAI/roberta-base'); a model file
may also say so with `source.family`.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

TEXT_CLASSIFICATION = "text-classification"
TEXT2TEXT_GENERATION = "text2text-generation"


@dataclass(frozen=True)
class Family:
    name: str  # Hugging Face's model_type
    inputs: tuple[str, ...]  # what the (encoder's) forward takes from the tokenizer
    tasks: tuple[str, ...]  # the model file tasks this architecture serves here
    decoder_inputs: tuple[str, ...] = ()  # encoder-decoder families: the decoder's own inputs
    why: str = ""  # why an input is absent, for the message that rejects it

    @property
    def encoder_decoder(self) -> bool:
        return bool(self.decoder_inputs)


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("bert", ("input_ids", "attention_mask", "token_type_ids"), (TEXT_CLASSIFICATION,)),
        Family(
            "distilbert",
            ("input_ids", "attention_mask"),
            (TEXT_CLASSIFICATION,),
            why="DistilBERT has no token type embeddings: its forward() takes no token_type_ids",
        ),
        # RobertaModel.forward accepts token_type_ids, but RoBERTa checkpoints have type_vocab_size 1: the only
        # valid value is 0 everywhere, which is the default. Its tokenizer does not emit them
        # (model_input_names), and export.py refuses token_type_ids a tokenizer does not emit.
        Family(
            "roberta",
            ("input_ids", "attention_mask"),
            (TEXT_CLASSIFICATION,),
            why="RoBERTa checkpoints have type_vocab_size 1 (only zeros, the default, are valid) and its "
            "tokenizer does not emit token_type_ids",
        ),
        Family(
            "t5",
            ("input_ids", "attention_mask"),
            (TEXT2TEXT_GENERATION,),
            decoder_inputs=("decoder_input_ids",),
            why="T5 has no token type embeddings",
        ),
    )
}

# Hub names that spell a family differently: distilroberta-base is a roberta checkpoint (model_type roberta).
_NAME_ALIASES = {"distilroberta": "roberta"}


def get(name: str | None) -> Family | None:
    return FAMILIES.get(name) if name else None


def from_name(huggingface_id: str | None) -> str | None:
    """The family a hub id names, or None: the leftmost word of the repository name (split at '-', '_' and
    '.') that is a family, so 'distilbert-base-uncased' -> distilbert, 'google/flan-t5-base' -> t5,
    'cardiffnlp/twitter-roberta-base-sentiment' -> roberta, 'my-org/ticket-model' -> None."""
    if not huggingface_id:
        return None
    for word in re.split(r"[-_.]+", huggingface_id.rsplit("/", 1)[-1].lower()):
        family = _NAME_ALIASES.get(word, word)
        if family in FAMILIES:
            return family
    return None


def close_to(name: str) -> str | None:
    """The known family a misspelt name most likely means ('distilbrt' -> distilbert), or None."""
    found = difflib.get_close_matches(name.lower(), list(FAMILIES), n=1)
    return found[0] if found else None


def default_for_task(task: str) -> str:
    """The family the shipped configs use for a task: what stands in where a model's family is unknown."""
    return "t5" if task == TEXT2TEXT_GENERATION else "bert"
