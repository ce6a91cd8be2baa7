"""Build a tiny, randomly initialised Hugging Face model and fast tokenizer, fully offline.

Tests and benchmarks need a real model directory (config, weights, tokenizer) without hub
downloads; this writes one with ``save_pretrained``, deterministically (fixed seed, generated vocab).

    python benchmarks/make_tiny_model.py --kind bert --out /tmp/tiny-bert

Kinds are Hugging Face model types (inferstack/schema/families.py): bert, distilbert and roberta sequence
classifiers, each with its architecture's tokenizer (BERT's WordPiece emitting token_type_ids; DistilBERT's
without them; RoBERTa's byte-level BPE, pad id 1, positions offset past it), and a t5 encoder-decoder.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import string
import sys
import tempfile
from pathlib import Path

SPECIAL_BERT = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SPECIAL_T5 = ["<pad>", "</s>", "<unk>"]
SPECIAL_ROBERTA = ["<s>", "<pad>", "</s>", "<unk>"]  # RoBERTa's ids 0-3; <mask> comes last
KINDS = ("bert", "distilbert", "roberta", "t5")
DEFAULT_LABELS = ("negative", "positive")


def generated_words(limit: int) -> list[str]:
    """A deterministic vocabulary: letters, digits, then two- and three-letter strings.

    Every lowercase word can be tokenized (single letters and their ``##`` continuations are
    present), so tokenization never collapses to [UNK]; more vocab just shortens sequences.
    """
    letters = string.ascii_lowercase
    words = list(letters) + list(string.digits) + list(string.punctuation)
    words += ["##" + c for c in letters + string.digits]
    for n in (2, 3):
        for combo in itertools.product(letters, repeat=n):
            if len(words) >= limit:
                return words
            words.append("".join(combo))
    return words[:limit]


def build_bert_tokenizer(vocab_size: int, kind: str = "bert"):
    """BERT's WordPiece tokenizer; for DistilBERT the same vocabulary under DistilBERT's tokenizer class,
    which emits no token_type_ids (its model_input_names)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import BertTokenizerFast, DistilBertTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_BERT + generated_words(vocab_size - len(SPECIAL_BERT)))}
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tok.decoder = decoders.WordPiece(prefix="##")
    tokenizer_class = DistilBertTokenizerFast if kind == "distilbert" else BertTokenizerFast
    return tokenizer_class(
        tokenizer_object=tok,
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
    )


def build_roberta_tokenizer(vocab_size: int):
    """RoBERTa's byte-level BPE: every byte a token (so nothing is ever unknown), <s> text </s>, pad id 1.
    `vocab_size` is not used: the 256 bytes, the specials and <mask> make its vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import RobertaTokenizerFast

    words = SPECIAL_ROBERTA + sorted(pre_tokenizers.ByteLevel.alphabet()) + ["<mask>"]
    vocab = {tok: i for i, tok in enumerate(words)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.RobertaProcessing(("</s>", vocab["</s>"]), ("<s>", vocab["<s>"]))
    return RobertaTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
    )


def build_t5_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    # Bare characters let any word be spelled out after a "\u2581"-prefixed start piece, so
    # nothing lowercase ever becomes <unk>; the generated words are word-initial pieces.
    bare = list(string.ascii_lowercase + string.digits + string.punctuation)
    words = SPECIAL_T5 + ["\u2581"] + bare
    words += ["\u2581" + w for w in generated_words(vocab_size - len(words))]
    words = words[:vocab_size]
    # Unigram needs a log-probability per piece; longer pieces score lower per piece but cover
    # more text, so the segmentation prefers whole generated words over single letters.
    pieces = [(w, 0.0 if w in SPECIAL_T5 else -float(len(w))) for w in words]
    tok = Tokenizer(models.Unigram(pieces, unk_id=SPECIAL_T5.index("<unk>")))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B:1 </s>:1", special_tokens=[("</s>", SPECIAL_T5.index("</s>"))]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def build_tokenizer(kind: str, vocab_size: int):
    if kind in ("bert", "distilbert"):
        return build_bert_tokenizer(vocab_size, kind)
    if kind == "roberta":
        return build_roberta_tokenizer(vocab_size)
    return build_t5_tokenizer(vocab_size)


def build_model(
    kind: str,
    vocab_size: int,
    labels: tuple[str, ...],
    layers: int,
    hidden: int,
    max_len: int,
    heads: int | None = None,
):
    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        DistilBertConfig,
        DistilBertForSequenceClassification,
        RobertaConfig,
        RobertaForSequenceClassification,
        T5Config,
        T5ForConditionalGeneration,
    )

    torch.manual_seed(0)
    classifier = dict(
        num_labels=len(labels), id2label=dict(enumerate(labels)), label2id={label: i for i, label in enumerate(labels)}
    )
    if kind == "bert":
        config = BertConfig(
            vocab_size=vocab_size,
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads or max(1, hidden // 16),
            intermediate_size=hidden * 4,
            max_position_embeddings=max_len,
            **classifier,
        )
        return BertForSequenceClassification(config).eval()
    if kind == "distilbert":
        config = DistilBertConfig(
            vocab_size=vocab_size,
            dim=hidden,
            n_layers=layers,
            n_heads=heads or max(1, hidden // 16),
            hidden_dim=hidden * 4,
            max_position_embeddings=max_len,
            pad_token_id=0,
            **classifier,
        )
        return DistilBertForSequenceClassification(config).eval()
    if kind == "roberta":
        # As real RoBERTa checkpoints: positions start after the pad id (1), so max_len tokens need max_len + 2
        # position embeddings (roberta-base: 514 for 512), and one token type.
        config = RobertaConfig(
            vocab_size=vocab_size,
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads or max(1, hidden // 16),
            intermediate_size=hidden * 4,
            max_position_embeddings=max_len + 2,
            type_vocab_size=1,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            **classifier,
        )
        return RobertaForSequenceClassification(config).eval()
    config = T5Config(
        vocab_size=vocab_size,
        d_model=hidden,
        d_kv=16,
        d_ff=hidden * 2,
        num_layers=layers,
        num_decoder_layers=layers,
        num_heads=max(1, hidden // 16),
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    return T5ForConditionalGeneration(config).eval()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--out", required=True, type=Path, help="directory to create (must not exist or be empty)")
    parser.add_argument("--labels", default=",".join(DEFAULT_LABELS), help="comma-separated class labels (classifiers)")
    parser.add_argument("--vocab-size", type=int, default=1000)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden-size", type=int, default=32)
    parser.add_argument(
        "--attention-heads",
        type=int,
        default=None,
        help="classifiers: attention heads (default hidden size / 16; BERT-Tiny has 2)",
    )
    parser.add_argument("--max-position", type=int, default=512)
    args = parser.parse_args(argv)
    labels = tuple(label.strip() for label in args.labels.split(",") if label.strip())
    if len(labels) < 2:
        parser.error("--labels: need at least two comma-separated labels")
    if len(set(labels)) != len(labels):
        parser.error("--labels: labels must be unique")
    if args.vocab_size < 200:
        parser.error("--vocab-size: must be at least 200")
    if args.layers < 1 or args.hidden_size < 16 or args.hidden_size % 16:
        parser.error("--layers must be >= 1 and --hidden-size a positive multiple of 16")
    if args.attention_heads is not None and (args.attention_heads < 1 or args.hidden_size % args.attention_heads):
        parser.error("--attention-heads: must be >= 1 and divide --hidden-size")
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        parser.error(f"--out: {args.out} exists and is not an empty directory")
    args.labels = labels
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tokenizer = build_tokenizer(args.kind, args.vocab_size)
    model = build_model(
        args.kind, len(tokenizer), args.labels, args.layers, args.hidden_size, args.max_position, args.attention_heads
    )
    # Write next to the destination and rename, so a failed run leaves nothing behind.
    args.out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{args.out.name}.", dir=args.out.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if args.out.exists():
            args.out.rmdir()
        os.replace(staging, args.out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    print(f"wrote tiny {args.kind} model ({model.num_parameters()} parameters) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
