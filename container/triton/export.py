"""Export step of the Triton image: Hugging Face checkpoint -> ONNX (dynamic batch axis) -> parity
check against PyTorch with onnxruntime -> the Triton model repository, written by
inferstack.triton.config.write_repository (the same renderer the stacks use).

    TRITON_REPOSITORY_SPEC='<RepositorySpec JSON>' python container/triton/export.py --out /build/repository

Exit 2: bad input (TRITON_REPOSITORY_SPEC, flags, a config that does not fit the checkpoint);
exit 1: the export or its checks failed. Either way one line on stderr and no --out written;
library output goes to stdout (the build log).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The image and this checkout both keep inferstack/ two levels above this file.
sys.path.insert(0, str(HERE.parents[1]))

from inferstack.schema import instances  # noqa: E402 - after inferstack/ is on the path
from inferstack.triton.config import (  # noqa: E402 - after inferstack/ is on the path
    VERSION,
    FolderSpec,
    RepositoryError,
    RepositorySpec,
    check_repository,
    default_model_name,
    folders,
    ids_folders,
    ids_model_name,
    postprocess_model_name,
    step_folders,
    tokenize_model_name,
    write_repository,
)

SPEC_ENV = "TRITON_REPOSITORY_SPEC"
# Only read for backend tensorrt: the instance type the plan will run on (its GPU's compute capability).
TARGET_ENV = "TRITON_TARGET_INSTANCE_TYPE"
DEFAULT_TOLERANCE = 1e-3
TOKENIZER_DIR = "tokenizer"  # <repo>/<folder>/1/tokenizer: inside a version dir, so Triton ignores it
GREEDY_MODEL = HERE / "t5_greedy_model.py"
TOKENIZE_MODEL = HERE / "tokenize_model.py"
# <folder>/1/site-packages/tokenizers: the text steps' tokenizers package, which SageMaker's Triton image
# lacks (tokenize_model.py puts the directory first on sys.path).
SITE_PACKAGES_DIR = "site-packages"
POSTPROCESS_MODEL = HERE / "postprocess_model.py"
GENERATION_FILE = "generation.json"
# torch's ONNX exporter writes opset 18 natively; lower opsets are converted after its graph
# optimisation (converting during export fails on T5's reductions).
NATIVE_OPSET = 18
# Parity inputs: short, padded and over-long (truncated) texts; run at batch 1 and at batch 4.
CHECK_TEXTS = (
    "the quick brown fox jumps over the lazy dog",
    "hello",
    "thsi sentnce has speling mistaks",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z " * 40,
    "translate english to german: the house is wonderful.",
)
CHECK_BATCHES = ((0,), (1, 2, 3, 4))
ONNX_TYPES = {"TYPE_INT64": 7, "TYPE_FP32": 1}  # onnx.TensorProto.INT64 / FLOAT


class UsageError(Exception):
    """Bad input: the spec, the flags, or a spec that does not fit the checkpoint (exit 2)."""


class ExportFailure(Exception):
    """The export or one of its checks failed (exit 1)."""


# ---------------------------------------------------------------- input


def load_spec(raw: str | None) -> RepositorySpec:
    from pydantic import ValidationError

    if raw is None or not raw.strip():
        raise UsageError(
            f"{SPEC_ENV} is not set: it carries the model's RepositorySpec JSON "
            "(the build arg stacks/serving_stack.py passes)"
        )
    try:
        return RepositorySpec.model_validate_json(raw)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"])
            problems.append(f"{where}: {error['msg']}" if where else error["msg"])
        raise UsageError(f"{SPEC_ENV}: " + "; ".join(problems)) from None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="repository to create (absent or empty)")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help="largest max-abs difference between ONNX and PyTorch outputs (default %(default)g)",
    )
    args = parser.parse_args(argv)
    if not args.tolerance > 0:
        raise UsageError(f"--tolerance: must be > 0, got {args.tolerance:g}")
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        raise UsageError(f"--out: {args.out} exists and is not an empty directory")
    return args


# ---------------------------------------------------------------- TensorRT plan decision


def target_compute_capability(instance_type: str | None) -> str:
    if not instance_type:
        raise UsageError(
            f"{TARGET_ENV} is not set: backend tensorrt builds a plan for one GPU, name the "
            "instance type it will run on (e.g. ml.g4dn.xlarge)"
        )
    try:
        spec = instances.get(instance_type)
    except instances.UnknownInstanceType as exc:
        raise UsageError(f"{TARGET_ENV}: {exc}") from None
    if spec.compute_capability is None:
        raise UsageError(f"{TARGET_ENV}: {instance_type} has no NVIDIA GPU")
    return spec.compute_capability


def gpu_compute_capabilities(nvidia_smi: str) -> list[str]:
    result = subprocess.run(
        [nvidia_smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True, text=True, timeout=60
    )
    if result.returncode != 0:
        return []
    return [line.strip() for line in result.stdout.splitlines() if line.strip()]


def check_plan_build_host(
    *,
    target: str,
    instance_type: str,
    nvidia_smi: str | None,
    trtexec: str | None,
    gpus: Callable[[str], list[str]] = gpu_compute_capabilities,
) -> str:
    """Return trtexec's path when this host can build a plan for `target` (a compute capability such as
    "7.5"); otherwise ExportFailure. A plan only loads on the GPU architecture (and TensorRT version)
    that built it, so it cannot come from a CPU build host or another GPU."""
    needs = (
        f"backend tensorrt builds model.plan with trtexec on a GPU build host matching the target "
        f"({instance_type}, compute capability {target}); the shipped configs use backend onnx with "
        "the TensorRT execution accelerator instead"
    )
    if nvidia_smi is None:
        raise ExportFailure(f"{needs}: this host has no nvidia-smi")
    found = gpus(nvidia_smi)
    if not found:
        raise ExportFailure(f"{needs}: nvidia-smi lists no GPU")
    wrong = sorted({cc for cc in found if cc != target})
    if wrong:
        raise ExportFailure(f"{needs}: this host's GPU has compute capability {', '.join(wrong)}")
    if trtexec is None:
        raise ExportFailure(f"{needs}: trtexec is not on PATH")
    return trtexec


def build_plan(trtexec: str, onnx_path: Path, plan_path: Path, folder: FolderSpec, max_batch_size: int) -> None:
    def shapes(batch: int) -> str:
        return ",".join(f"{t.name}:{'x'.join(str(d) for d in (batch, *t.dims))}" for t in folder.inputs)

    # The schema has no precision knob for plans (tensorrt_acceleration is the onnx backend's): FP16,
    # what the T4's tensor cores run fastest.
    command = [
        trtexec,
        f"--onnx={onnx_path}",
        f"--saveEngine={plan_path}",
        "--fp16",
        f"--minShapes={shapes(1)}",
        f"--optShapes={shapes(max_batch_size)}",
        f"--maxShapes={shapes(max_batch_size)}",
    ]
    print("running", " ".join(command), flush=True)
    result = subprocess.run(command, stdout=sys.stdout, stderr=subprocess.STDOUT)
    if result.returncode != 0 or not plan_path.is_file():
        raise ExportFailure(f"trtexec failed for {folder.name} (exit {result.returncode}); its log is above")


# ---------------------------------------------------------------- checkpoint


def load_checkpoint(spec: RepositorySpec):
    source = spec.source
    if source.local_path is not None:
        where = str(Path(source.local_path))
        if not Path(where).is_dir():
            raise UsageError(f"source.local_path: {where} is not a directory (relative paths start at {Path.cwd()})")
        kwargs: dict = {}
    else:
        where = source.huggingface_id
        kwargs = {"revision": source.revision} if source.revision else {}

    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    generation = source.task == "text2text-generation"
    auto = AutoModelForSeq2SeqLM if generation else AutoModelForSequenceClassification
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
        # Eager attention: torch's exporter fails on T5's SDPA path, and the plain matmul/softmax graph
        # is what ONNX Runtime's TensorRT provider takes whole.
        model = auto.from_pretrained(where, attn_implementation="eager", dtype=torch.float32, **kwargs).eval()
    except Exception as exc:  # hub, file and config errors all mean "cannot load"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ExportFailure(f"cannot load a {source.task} model from {where}: {type(exc).__name__}: {first}") from None
    if not getattr(tokenizer, "is_fast", False):
        raise UsageError(f"source: {where} has no fast tokenizer (tokenizer.json), which clients need")
    if tokenizer.pad_token_id is None:
        raise UsageError(f"source: the tokenizer of {where} defines no pad token")

    config = model.config
    if generation:
        if not config.is_encoder_decoder:
            raise UsageError(f"source.task: {where} is not an encoder-decoder model")
        if config.d_model != spec.export.hidden_size:
            raise UsageError(f"export.hidden_size: {spec.export.hidden_size}, but {where} has d_model {config.d_model}")
    else:
        if config.num_labels != len(source.labels):
            raise UsageError(f"source.labels: {len(source.labels)} labels, but {where} has {config.num_labels} outputs")
        max_positions = getattr(config, "max_position_embeddings", None)
        if max_positions and spec.export.sequence_length > max_positions:
            raise UsageError(
                f"export.sequence_length: {spec.export.sequence_length} exceeds the "
                f"{max_positions} positions of {where}"
            )
        if spec.export.token_type_ids and "token_type_ids" not in tokenizer.model_input_names:
            raise UsageError(f"export.token_type_ids: the tokenizer of {where} does not emit token_type_ids")
    return tokenizer, model


def tokenize(tokenizer, spec: RepositorySpec, texts: Sequence[str], names: Sequence[str]):
    encoded = tokenizer(
        list(texts), padding="max_length", truncation=True, max_length=spec.export.sequence_length, return_tensors="pt"
    )
    return tuple(encoded[name] for name in names)


# ---------------------------------------------------------------- ONNX


def export_onnx(module, args: tuple, folder: FolderSpec, path: Path, opset: int) -> None:
    import onnx
    import torch
    from onnx import version_converter

    batch = torch.export.Dim("batch")
    try:
        torch.onnx.export(
            module,
            args,
            str(path),
            dynamo=True,
            external_data=False,
            optimize=True,
            opset_version=max(opset, NATIVE_OPSET),
            input_names=[t.name for t in folder.inputs],
            output_names=[t.name for t in folder.outputs],
            dynamic_shapes=tuple({0: batch} for _ in args),
        )
    except Exception as exc:  # the exporter raises many types; the traceback is in the log
        traceback.print_exc(file=sys.stdout)
        raise ExportFailure(
            f"torch.onnx.export failed for {folder.name}: {type(exc).__name__} (traceback above)"
        ) from None
    model = onnx.load(str(path))
    if opset < NATIVE_OPSET:
        try:
            model = version_converter.convert_version(model, opset)
            _drop_default_noop_with_empty_axes(model)
        except Exception as exc:
            raise ExportFailure(
                f"{folder.name}: cannot convert the ONNX graph to opset {opset} "
                f"(export.onnx_opset; {NATIVE_OPSET} or higher needs no conversion): "
                f"{str(exc).splitlines()[0]}"
            ) from None
        onnx.save(model, str(path))
    onnx.checker.check_model(str(path))
    actual = onnx_opset(model)
    if actual != opset:
        raise ExportFailure(f"{folder.name}: the ONNX graph has opset {actual}, not export.onnx_opset {opset}")
    problems = interface_mismatches(model, folder)
    if problems:
        raise ExportFailure(f"{folder.name}: the ONNX graph does not match config.pbtxt: {'; '.join(problems)}")


def _drop_default_noop_with_empty_axes(model) -> None:
    """onnx's version converter moves a Reduce* node's axes input back into an attribute below opset 18
    but keeps the opset-18-only attribute noop_with_empty_axes, which the checker and ONNX Runtime
    reject. At its default 0 (reduce over the given axes) dropping it changes nothing."""
    for node in model.graph.node:
        if not node.op_type.startswith("Reduce"):
            continue
        for attribute in list(node.attribute):
            if attribute.name == "noop_with_empty_axes":
                if attribute.i != 0:
                    raise ValueError(f"{node.name}: noop_with_empty_axes=1 has no equivalent below opset 18")
                node.attribute.remove(attribute)


def onnx_opset(model) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def onnx_interface(model) -> dict[str, tuple[int, tuple[int | str, ...]]]:
    """Tensor name -> (ONNX elem type, dims with a symbolic dim as its name) of the graph's inputs/outputs."""
    found = {}
    for value in (*model.graph.input, *model.graph.output):
        tensor = value.type.tensor_type
        found[value.name] = (tensor.elem_type, tuple(d.dim_param or d.dim_value for d in tensor.shape.dim))
    return found


def interface_mismatches(model, folder: FolderSpec) -> list[str]:
    """What differs between the graph and the folder's config: names, types, a symbolic batch axis,
    then exactly the configured dims."""
    graph = onnx_interface(model)
    wanted = (*folder.inputs, *folder.outputs)
    problems = []
    extra = sorted(set(graph) - {t.name for t in wanted})
    if extra:
        problems.append(f"unexpected tensors {', '.join(extra)}")
    for tensor in wanted:
        if tensor.name not in graph:
            problems.append(f"{tensor.name} missing")
            continue
        elem, dims = graph[tensor.name]
        if elem != ONNX_TYPES[tensor.type_name]:
            problems.append(f"{tensor.name} has ONNX type {elem}, config {tensor.type_name}")
        if not dims or not isinstance(dims[0], str) or tuple(dims[1:]) != tensor.dims:
            problems.append(f"{tensor.name} has dims {list(dims)}, config [batch, {', '.join(map(str, tensor.dims))}]")
    return problems


def session(path: Path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def max_abs_diff(got, want) -> float:
    import numpy as np

    return float(np.max(np.abs(np.asarray(got, dtype=np.float64) - np.asarray(want, dtype=np.float64))))


# ---------------------------------------------------------------- per task


def export_classifier(spec: RepositorySpec, tokenizer, model, work: Path, tolerance: float) -> dict[str, Path]:
    import torch

    (folder,) = ids_folders(spec)
    names = [t.name for t in folder.inputs]

    class Classifier(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        # Named parameters, not *tensors: torch.export matches dynamic_shapes to them one by one.
        def forward(self, input_ids, attention_mask, token_type_ids=None):
            extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            return self.model(input_ids=input_ids, attention_mask=attention_mask, **extra).logits

    module = Classifier().eval()
    path = work / f"{folder.name}.onnx"
    with torch.no_grad():
        export_onnx(module, tokenize(tokenizer, spec, CHECK_TEXTS[:2], names), folder, path, spec.export.onnx_opset)
    ort_session = session(path)
    worst = 0.0
    for rows in CHECK_BATCHES:
        tensors = tokenize(tokenizer, spec, [CHECK_TEXTS[i] for i in rows], names)
        with torch.inference_mode():
            want = module(*tensors).numpy()
        (got,) = ort_session.run(["logits"], {n: t.numpy() for n, t in zip(names, tensors, strict=True)})
        diff = max_abs_diff(got, want)
        if not diff <= tolerance:  # NaN fails too
            raise ExportFailure(
                f"ONNX parity: {folder.name} logits differ from PyTorch by {diff:.3g} at batch "
                f"{len(rows)} (tolerance {tolerance:g})"
            )
        worst = max(worst, diff)
    print(
        f"parity {folder.name}: logits within {worst:.3g} of PyTorch at batch sizes "
        f"{', '.join(str(len(r)) for r in CHECK_BATCHES)}",
        flush=True,
    )
    return {folder.name: path}


def generation_settings(model) -> dict[str, int]:
    generation = getattr(model, "generation_config", None)

    def pick(key: str) -> int:
        value = getattr(generation, key, None)
        if value is None:
            value = getattr(model.config, key, None)
        if isinstance(value, (list, tuple)):
            if len(value) != 1:
                raise UsageError(f"source: the checkpoint has {len(value)} {key}s; greedy decoding here stops at one")
            value = value[0]
        if value is None:
            raise UsageError(f"source: the checkpoint defines no {key}")
        return int(value)

    return {key: pick(key) for key in ("decoder_start_token_id", "eos_token_id", "pad_token_id")}


def seq2seq_modules(model):
    """The two graphs the Python model calls: encoder -> hidden states; decoder -> argmax id per position
    (logits() for the parity check)."""
    import torch

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = model.get_encoder()

        def forward(self, input_ids, attention_mask):
            return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def logits(self, decoder_input_ids, encoder_hidden_states, encoder_attention_mask):
            return self.model(
                encoder_outputs=(encoder_hidden_states,),
                attention_mask=encoder_attention_mask,
                decoder_input_ids=decoder_input_ids,
                use_cache=False,
            ).logits

        def forward(self, decoder_input_ids, encoder_hidden_states, encoder_attention_mask):
            return self.logits(decoder_input_ids, encoder_hidden_states, encoder_attention_mask).argmax(-1)

    return Encoder().eval(), Decoder().eval()


def export_seq2seq(spec: RepositorySpec, tokenizer, model, work: Path, tolerance: float) -> dict[str, Path]:
    import numpy as np
    import torch

    generate_folder, encoder_folder, decoder_folder = ids_folders(spec)
    settings = generation_settings(model)
    out_len = spec.export.max_output_length
    encoder, decoder = seq2seq_modules(model)
    names = ("input_ids", "attention_mask")

    def decoder_ids_for(ids, mask):
        # Teacher-forced decoder input: the start token and PyTorch's own greedy ids, padded.
        generated = model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=out_len, num_beams=1, do_sample=False
        )[:, :out_len]
        padded = torch.full((ids.shape[0], out_len), settings["pad_token_id"], dtype=torch.long)
        padded[:, : generated.shape[1]] = generated
        return padded

    encoder_path = work / f"{encoder_folder.name}.onnx"
    decoder_path = work / f"{decoder_folder.name}.onnx"
    with torch.no_grad():
        ids, mask = tokenize(tokenizer, spec, CHECK_TEXTS[:2], names)
        export_onnx(encoder, (ids, mask), encoder_folder, encoder_path, spec.export.onnx_opset)
        hidden = encoder(ids, mask)
        export_onnx(
            decoder, (decoder_ids_for(ids, mask), hidden, mask), decoder_folder, decoder_path, spec.export.onnx_opset
        )

    encoder_session, decoder_session = session(encoder_path), session(decoder_path)
    worst_hidden, worst_gap, flips = 0.0, 0.0, 0
    for rows in CHECK_BATCHES:
        ids, mask = tokenize(tokenizer, spec, [CHECK_TEXTS[i] for i in rows], names)
        with torch.inference_mode():
            hidden = encoder(ids, mask)
            decoder_ids = decoder_ids_for(ids, mask)
            logits = decoder.logits(decoder_ids, hidden, mask).numpy()
        (got_hidden,) = encoder_session.run(
            ["last_hidden_state"], {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
        )
        diff = max_abs_diff(got_hidden, hidden.numpy())
        if not diff <= tolerance:
            raise ExportFailure(
                f"ONNX parity: {encoder_folder.name} last_hidden_state differs from PyTorch by "
                f"{diff:.3g} at batch {len(rows)} (tolerance {tolerance:g})"
            )
        worst_hidden = max(worst_hidden, diff)
        (got_ids,) = decoder_session.run(
            ["next_token_ids"],
            {
                "decoder_input_ids": decoder_ids.numpy(),
                "encoder_hidden_states": hidden.numpy(),
                "encoder_attention_mask": mask.numpy(),
            },
        )
        want_ids = logits.argmax(-1)
        # An id may differ only where PyTorch's logits nearly tie: the gap between PyTorch's best logit
        # and the logit of the id ONNX picked must stay within the tolerance.
        chosen = np.take_along_axis(logits, got_ids[..., None], axis=-1)[..., 0]
        gaps = np.where(got_ids != want_ids, logits.max(-1) - chosen, 0.0)
        gap = float(gaps.max())
        if not gap <= tolerance:
            raise ExportFailure(
                f"ONNX parity: {decoder_folder.name} next_token_ids differ from PyTorch's argmax "
                f"at {int((got_ids != want_ids).sum())} position(s), logit gap {gap:.3g} at batch "
                f"{len(rows)} (tolerance {tolerance:g})"
            )
        worst_gap, flips = max(worst_gap, gap), flips + int((got_ids != want_ids).sum())
    print(
        f"parity {encoder_folder.name}: last_hidden_state within {worst_hidden:.3g} of PyTorch; "
        f"{decoder_folder.name}: next_token_ids equal PyTorch's argmax ({flips} near-tie flips, "
        f"logit gap {worst_gap:.3g})",
        flush=True,
    )

    (work / GENERATION_FILE).write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return {generate_folder.name: GREEDY_MODEL, encoder_folder.name: encoder_path, decoder_folder.name: decoder_path}


# ---------------------------------------------------------------- repository


def export_repository(
    spec: RepositorySpec, out: Path, *, tolerance: float, target_instance_type: str | None = None
) -> Path:
    """Export, check and write the repository at `out` all at once: everything happens in a staging
    directory beside `out`, renamed into place only when every check passed."""
    missing_steps = [s.python for s in spec.pipeline or () if s.python is not None and s.python not in spec.step_code]
    if missing_steps:
        raise UsageError(
            f"{SPEC_ENV}: step_code has no text for the pipeline's {', '.join(missing_steps)} "
            "(validate reads each step file from the model's folder into the spec)"
        )
    trtexec = None
    if spec.serving.backend == "tensorrt":
        # Decided before the (slow) export: a CPU build host cannot build a plan at all.
        target = target_compute_capability(target_instance_type)
        trtexec = check_plan_build_host(
            target=target,
            instance_type=str(target_instance_type),
            nvidia_smi=shutil.which("nvidia-smi"),
            trtexec=shutil.which("trtexec"),
        )

    out = out.absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        work = staging / "work"
        work.mkdir()
        tokenizer, model = load_checkpoint(spec)
        if spec.source.task == "text2text-generation":
            model_files = export_seq2seq(spec, tokenizer, model, work, tolerance)
        else:
            model_files = export_classifier(spec, tokenizer, model, work, tolerance)
        if trtexec is not None:
            for folder in folders(spec):
                if folder.kind == "tensorrt":
                    plan = work / f"{folder.name}.plan"
                    build_plan(trtexec, model_files[folder.name], plan, folder, spec.serving.max_batch_size)
                    model_files[folder.name] = plan

        model_files[tokenize_model_name(spec)] = TOKENIZE_MODEL
        model_files[postprocess_model_name(spec)] = POSTPROCESS_MODEL
        model_files.update(write_step_files(spec, work))
        repository = write_repository(spec, staging / "repository", model_files=model_files)
        default = default_model_name(spec)
        version_dir = repository / ids_model_name(spec) / VERSION
        # The token-id model's copy is for clients that tokenize themselves (TextCodec.from_repository);
        # the text steps load their own, so each folder stands alone.
        tokenizer_users = [ids_model_name(spec), tokenize_model_name(spec)]
        if spec.source.task == "text2text-generation":
            tokenizer_users.append(postprocess_model_name(spec))
        for name in tokenizer_users:
            tokenizer.save_pretrained(str(repository / name / VERSION / TOKENIZER_DIR))
        for name in tokenizer_users[1:]:
            vendor_tokenizers(repository / name / VERSION / SITE_PACKAGES_DIR)
        if (work / GENERATION_FILE).exists():
            shutil.copy2(work / GENERATION_FILE, version_dir / GENERATION_FILE)
        check_repository(repository, default_model=default)
        missing = [
            f"{f.name}/{VERSION}/{f.model_file}"
            for f in folders(spec)
            if f.model_file and not (repository / f.name / VERSION / f.model_file).is_file()
        ]
        if missing:
            raise ExportFailure(f"the repository lacks {', '.join(missing)}")
        if out.exists():
            out.rmdir()  # empty, checked by parse_args
        repository.rename(out)
    except RepositoryError as exc:
        raise ExportFailure(f"repository check: {exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def write_step_files(spec: RepositorySpec, work: Path) -> dict[str, Path]:
    """The pipeline's Python steps (the user's files, carried in the spec as step_code) as files to copy to
    <folder>/1/model.py."""
    found = {}
    for folder in step_folders(spec):
        code = spec.step_code[dict(folder.parameters)["step_file"]]
        path = work / f"{folder.name}.py"
        path.write_text(code, encoding="utf-8")
        found[folder.name] = path
    return found


def vendor_tokenizers(target: Path) -> None:
    """Copy this environment's tokenizers package (the version requirements-export.txt pins, the one the
    parity checks used) to `target`. Its wheel is abi3 (CPython >= 3.9) manylinux x86_64, so the copy
    loads in the Triton image's Python as long as the export stage builds for the same architecture."""
    import tokenizers

    shutil.copytree(
        Path(tokenizers.__file__).parent,
        target / "tokenizers",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyi", "py.typed"),
    )


def _stderr_for_errors():
    """Send everything libraries write to fd 2 into stdout (the build log) and keep a private stderr,
    so a failure's stderr is export.py's one line."""
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.flush()
    private = os.fdopen(os.dup(2), "w", buffering=1)
    os.dup2(1, 2)
    return private


def main(argv: Sequence[str] | None = None) -> int:
    errors = _stderr_for_errors()
    try:
        args = parse_args(argv)
        spec = load_spec(os.environ.get(SPEC_ENV))
        out = export_repository(
            spec, args.out, tolerance=args.tolerance, target_instance_type=os.environ.get(TARGET_ENV) or None
        )
    except UsageError as exc:
        print(f"export.py: error: {exc}", file=errors)
        return 2
    except ExportFailure as exc:
        print(f"export.py: export failed: {exc}", file=errors)
        return 1
    except SystemExit as exc:  # argparse: its usage message went to stdout with the rest
        if exc.code not in (0, None):
            print("export.py: error: bad arguments (usage above); --out is required", file=errors)
        return int(exc.code or 0)
    except Exception as exc:  # unexpected: the traceback to the log, one line to stderr
        traceback.print_exc(file=sys.stdout)
        print(f"export.py: export failed: {type(exc).__name__}: {exc}".splitlines()[0], file=errors)
        return 1
    print(f"wrote the Triton repository of {spec.name} to {out}: {', '.join(f.name for f in folders(spec))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
