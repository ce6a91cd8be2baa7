"""Compile a Hugging Face text classifier into a serving artifact (runs during `docker build`).

    python compile.py --backend {cpu,inf1,inf2} --model ID_OR_DIR --out ARTIFACT_DIR \
        [--revision REV] [--task text-classification] [--labels a,b] [--batch-size 1] \
        [--sequence-length 128] [--neuron-cores 1] [--parallelism data-parallel] \
        [--compiler-args="--fp32-cast=all"]
    python compile.py --backend {cpu,inf1,inf2} --models-json '[{"name": "a", "model": ...}, ...]' --out DIR

Loads the model, pads example inputs to the fixed (batch, sequence) shape, traces it with the
backend (torch.neuron.trace / torch_neuronx.trace / torch.jit.trace), fails unless the whole graph
compiled, and writes model.pt + tokenizer + metadata.json. With --models-json (the MODELS build arg)
it compiles every entry into DIR/<name>/ and publishes DIR only once all of them compiled.
Exit 2: bad flags; exit 1: compile failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
import tempfile
from pathlib import Path

from artifact import (
    FORMAT_VERSION,
    MODEL_FILE,
    TOKENIZER_FILE,
    sha256_file,
    source_checksums,
    staged_directory,
    write_metadata,
)
from backends import get_backend, installed_versions
from compile_models import PackedCompile, parse_models, relabel
from compile_report import IncompleteCompileError
from compile_settings import CompileSettings, SettingsError, build_settings

EXAMPLE_TEXT = "the quick brown fox jumps over the lazy dog"
CPU_TOLERANCE = 1e-4  # traced vs eager on the same host: only float reassociation differs


class UsageError(Exception):
    """Bad input from the command line (exit 2)."""


class CompileFailure(Exception):
    """The model could not be compiled as configured (exit 1)."""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse prints usage over several lines by default
        raise UsageError(message)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = OneLineParser(prog="compile.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backend", "--neuron-target", dest="backend", required=True, help="cpu, inf1 or inf2 (NEURON_TARGET)"
    )
    parser.add_argument(
        "--model", "--model-source", dest="model", default=None, help="HF id or local dir (MODEL_SOURCE)"
    )
    parser.add_argument(
        "--revision", "--model-revision", dest="revision", default=None, help="hub revision (MODEL_REVISION)"
    )
    parser.add_argument("--task", default="text-classification", help="TASK")
    parser.add_argument("--labels", default=None, help="comma-separated labels (LABELS); default: the model config's")
    parser.add_argument("--batch-size", default="1", help="compiled batch size (BATCH_SIZE)")
    parser.add_argument("--sequence-length", default="128", help="compiled sequence length (SEQUENCE_LENGTH)")
    parser.add_argument(
        "--neuron-cores", "--neuron-cores-per-model", dest="neuron_cores", default="1", help="NEURON_CORES_PER_MODEL"
    )
    parser.add_argument("--parallelism", default="data-parallel", help="data-parallel or pipeline (PARALLELISM)")
    parser.add_argument(
        "--compiler-args", default="", help='compiler flags, e.g. --compiler-args="--fp32-cast=all" (COMPILER_ARGS)'
    )
    parser.add_argument(
        "--models-json",
        default=None,
        help="JSON array of models to compile into OUT/<name>/ (MODELS); --model must be empty",
    )
    parser.add_argument("--out", required=True, help="artifact directory to create")
    return parser.parse_args(argv)


def packed_models_json(args: argparse.Namespace) -> str | None:
    """MODELS when set (then MODEL_SOURCE must be empty), None for a single model (then it is required)."""
    packed = args.models_json if args.models_json and args.models_json.strip() else None
    if packed is None and args.model is None:
        raise UsageError("the following arguments are required: --model")
    if packed is not None and args.model:
        raise UsageError("--model (MODEL_SOURCE): must be empty when --models-json (MODELS) is set")
    return packed


def resolve_model_dir(settings: CompileSettings) -> tuple[Path, str | None]:
    """A local directory, or the hub snapshot downloaded for the id (and its commit)."""
    if settings.model_is_local:
        return Path(settings.model_source).expanduser().resolve(), settings.model_revision
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import RepositoryNotFoundError, RevisionNotFoundError  # also in 0.2x hubs

    try:
        path = Path(
            snapshot_download(
                repo_id=settings.model_source,
                revision=settings.model_revision,
                allow_patterns=["*.json", "*.txt", "*.model", "*.safetensors"],
            )
        )
    except RepositoryNotFoundError:
        raise UsageError(f"--model: no such model on the Hugging Face hub: {settings.model_source}") from None
    except RevisionNotFoundError:
        raise UsageError(f"--revision: {settings.model_revision!r} not found for {settings.model_source}") from None
    except Exception as exc:  # network, auth, disk: report in one line
        raise CompileFailure(f"cannot download {settings.model_source}: {type(exc).__name__}: {exc}") from None
    return path, path.name  # snapshots/<commit>: the exact revision that was compiled


def load_model(model_dir: Path, settings: CompileSettings):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    # Keep stderr for our own one-line errors: no progress bars or advisory warnings.
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        # Eager attention: the plain matmul/softmax graph is what the Neuron compilers support.
        model = AutoModelForSequenceClassification.from_pretrained(model_dir, attn_implementation="eager")
    except Exception as exc:
        raise UsageError(
            f"--model: cannot load a text classifier from {settings.model_source}: {type(exc).__name__}: {exc}"
        ) from None
    if not getattr(tokenizer, "is_fast", False):
        raise UsageError(f"--model: {settings.model_source} has no fast tokenizer (tokenizer.json)")
    config = model.config
    max_positions = getattr(config, "max_position_embeddings", None)
    if max_positions and settings.sequence_length > max_positions:
        raise UsageError(f"--sequence-length: {settings.sequence_length} exceeds the model's {max_positions} positions")
    if settings.labels is not None and len(settings.labels) != config.num_labels:
        raise UsageError(f"--labels: {len(settings.labels)} labels given but the model has {config.num_labels} outputs")
    labels = settings.labels or tuple(str(config.id2label[i]) for i in range(config.num_labels))
    if tokenizer.pad_token_id is None:
        raise UsageError(f"--model: the tokenizer of {settings.model_source} defines no pad token")
    model.eval()
    torch.manual_seed(0)
    return tokenizer, model, labels


def logits_module(model):
    """Wrap the HF model so tracing sees (input_ids, attention_mask) -> logits tensor."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)[0]

    return Logits(model).eval()


def example_inputs(tokenizer, batch_size: int, sequence_length: int):
    encoded = tokenizer(
        [EXAMPLE_TEXT] * batch_size,
        padding="max_length",
        truncation=True,
        max_length=sequence_length,
        return_tensors="pt",
    )
    return encoded["input_ids"], encoded["attention_mask"]


def cpu_equivalence(traced, eager, tokenizer, settings: CompileSettings) -> float:
    """Max |traced - eager| over the example and a different, larger batch."""
    import torch

    texts = [EXAMPLE_TEXT, "hello", "a much longer sentence " * 20]
    batch = tokenizer(
        texts, padding="max_length", truncation=True, max_length=settings.sequence_length, return_tensors="pt"
    )
    worst = 0.0
    with torch.inference_mode():
        for ids, mask in (
            example_inputs(tokenizer, settings.batch_size, settings.sequence_length),
            (batch["input_ids"], batch["attention_mask"]),
        ):
            worst = max(worst, (traced(ids, mask) - eager(ids, mask)).abs().max().item())
    if worst > CPU_TOLERANCE:
        raise CompileFailure(f"traced model differs from the eager model by {worst:.3g} (> {CPU_TOLERANCE})")
    return worst


def compile_artifact(settings: CompileSettings) -> dict:
    import torch

    backend = get_backend(settings.backend)
    model_dir, revision = resolve_model_dir(settings)
    tokenizer, model, labels = load_model(model_dir, settings)
    wrapped = logits_module(model)
    inputs = example_inputs(tokenizer, settings.batch_size, settings.sequence_length)
    with tempfile.TemporaryDirectory(prefix="neuron-compile-") as workdir:
        try:
            result = backend.trace(wrapped, inputs, settings.compiler_args, workdir)
        except IncompleteCompileError as exc:
            raise CompileFailure(f"partial compile rejected: {exc}") from None
    max_abs_diff = cpu_equivalence(result.module, wrapped, tokenizer, settings) if settings.backend == "cpu" else None
    source_sha256, source_files = source_checksums(model_dir)
    batch, seq = settings.batch_size, settings.sequence_length
    metadata = {
        "format_version": FORMAT_VERSION,
        "backend": settings.backend,
        "task": settings.task,
        "model_source": settings.model_source,
        "model_revision": revision,
        "source_sha256": source_sha256,
        "source_files": source_files,
        "labels": list(labels),
        "batch_size": batch,
        "sequence_length": seq,
        "neuron_cores_per_model": settings.neuron_cores,
        "parallelism": settings.parallelism,
        "compiler_args": list(settings.compiler_args),
        "inputs": [
            {"name": "input_ids", "datatype": "INT64", "shape": [batch, seq]},
            {"name": "attention_mask", "datatype": "INT64", "shape": [batch, seq]},
        ],
        "outputs": [{"name": "logits", "datatype": "FP32", "shape": [batch, len(labels)]}],
        "vocab_size": int(model.config.vocab_size),
        "pad_token_id": int(tokenizer.pad_token_id),
        "pad_token": str(tokenizer.pad_token),
        "versions": {"python": platform.python_version(), **installed_versions()},
        "compile_report": result.report,
        "cpu_max_abs_diff": max_abs_diff,
    }
    with staged_directory(settings.out) as staging:
        torch.jit.save(result.module, str(staging / MODEL_FILE))
        tokenizer.save_pretrained(staging)
        if not (staging / TOKENIZER_FILE).is_file():
            raise CompileFailure(f"the tokenizer did not save a {TOKENIZER_FILE}")
        metadata["artifact_sha256"] = sha256_file(staging / MODEL_FILE)
        write_metadata(staging, metadata)
    return metadata


def compile_packed(entries: list[PackedCompile], out: Path) -> list[dict]:
    """Every entry into <out>/<name>/; <out> appears only once all of them compiled."""
    compiled = []
    with staged_directory(out) as staging:
        for entry in entries:
            settings = dataclasses.replace(entry.settings, out=staging / entry.name)
            try:
                compiled.append(compile_artifact(settings))
            except (UsageError, SettingsError) as exc:
                raise UsageError(relabel(entry.index, str(exc))) from None
            except CompileFailure as exc:
                raise CompileFailure(f"MODELS[{entry.index}] ({entry.name}): {exc}") from None
    return compiled


def summary(metadata: dict, out: Path) -> str:
    return (
        f"compiled {metadata['model_source']} for {metadata['backend']}: batch {metadata['batch_size']}, "
        f"sequence {metadata['sequence_length']}, labels {','.join(metadata['labels'])} -> {out}"
    )


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        packed = packed_models_json(args)
        if packed is not None:
            entries = parse_models(packed, backend=args.backend, out=args.out)
            for entry, metadata in zip(entries, compile_packed(entries, Path(args.out)), strict=True):
                print(summary(metadata, Path(args.out) / entry.name))
            return 0
        settings = build_settings(
            backend=args.backend,
            model=args.model,
            revision=args.revision,
            task=args.task,
            labels=args.labels,
            batch_size=args.batch_size,
            sequence_length=args.sequence_length,
            neuron_cores=args.neuron_cores,
            parallelism=args.parallelism,
            compiler_args=args.compiler_args,
            out=args.out,
        )
        metadata = compile_artifact(settings)
    except (UsageError, SettingsError) as exc:
        print(f"compile.py: error: {exc}", file=sys.stderr)
        return 2
    except CompileFailure as exc:
        print(f"compile.py: compile failed: {exc}", file=sys.stderr)
        return 1
    print(summary(metadata, settings.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
