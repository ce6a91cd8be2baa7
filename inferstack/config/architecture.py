"""Does a model file fit its checkpoint's architecture? The family (inferstack.schema.families) comes from the
checkpoint's config.json where `source.local_path` lies in the image's build context, else from
`source.family`, else from the hub id's name; the model's task and the tensors its export declares
(export.token_type_ids) are checked against what that family takes, so a copied BERT file pointed at
DistilBERT fails here, in one line, instead of inside `docker build`.

An unknown family is a warning: the checks need it, the deployment does not."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from inferstack.config.yaml_source import KeyPath
from inferstack.neuron import image as neuron_image
from inferstack.schema import families, kinds
from inferstack.schema.kinds import Model
from inferstack.schema.triton_sagemaker import TritonSageMakerModel
from inferstack.triton import image as triton_image

Finding = tuple[KeyPath, str]

# The repository the images are built from (the stacks build from the same root).
REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
MAX_CONFIG_BYTES = 1 << 20  # a checkpoint's config.json is a few KB


@dataclass(frozen=True)
class Resolution:
    name: str | None  # the family as found (None: nothing names it)
    origin: str  # where it was found, for messages
    key: KeyPath  # the model file's key it came from
    checkpoint_config: dict | None = None  # the checkpoint's config.json, where it is in the image context

    @property
    def family(self) -> families.Family | None:
        return families.get(self.name)


def checkpoint_config_path(model: Model, root: Path) -> Path | None:
    """config.json of a local checkpoint that is in the image's build context, or None."""
    local = model.source.local_path
    if not local:
        return None
    image = IMAGES[kinds.model_kind(model)]
    context = (root / image.context).resolve()
    directory = (root / image.local_path_base / local).resolve()
    if not directory.is_relative_to(context):
        return None
    path = directory / "config.json"
    return path if path.is_file() else None


def resolve(model: Model, root: Path) -> tuple[Resolution, list[Finding]]:
    """The model's family, and the problems found on the way (an unreadable config.json, a source.family that
    contradicts it)."""
    source = model.source
    problems: list[Finding] = []
    path = checkpoint_config_path(model, root)
    if path is not None:
        shown = path.relative_to(root.resolve()) if path.is_relative_to(root.resolve()) else path
        try:
            if path.stat().st_size > MAX_CONFIG_BYTES:
                raise ValueError(f"over {MAX_CONFIG_BYTES} bytes")
            data = json.loads(path.read_text(encoding="utf-8"))
            model_type = data.get("model_type") if isinstance(data, dict) else None
        except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            problems.append((("source", "local_path"), f"{shown}: not a readable checkpoint config ({exc})"))
            data, model_type = None, None
        if isinstance(model_type, str) and model_type:
            if source.family is not None and source.family != model_type:
                problems.append(
                    (
                        ("source", "family"),
                        (
                            f"{source.family}, but the checkpoint's {shown} says model_type {model_type}: the export "
                            f"loads the checkpoint; set source.family: {model_type} or remove it"
                        ),
                    )
                )
            return Resolution(model_type, f"the checkpoint's {shown}", ("source", "local_path"), data), problems
    if source.family is not None:
        return Resolution(source.family, "source.family", ("source", "family")), problems
    if source.huggingface_id:
        return (
            Resolution(
                families.from_name(source.huggingface_id),
                f"source.huggingface_id {source.huggingface_id}",
                ("source", "huggingface_id"),
            ),
            problems,
        )
    return Resolution(None, f"source.local_path {source.local_path}", ("source", "local_path")), problems


def check(model: Model, root: Path = REPOSITORY_ROOT) -> tuple[list[Finding], list[Finding]]:
    """(problems, warnings) of the model against its family."""
    resolution, problems = resolve(model, root)
    warnings: list[Finding] = []
    known = ", ".join(families.FAMILIES)
    family = resolution.family
    if resolution.name is None:
        warnings.append(
            (
                resolution.key,
                (
                    f"cannot tell the model family from {resolution.origin}: set source.family ({known}) so validate "
                    f"can check the task and export against it and the image rehearsal stands in the same architecture"
                ),
            )
        )
        return problems, warnings
    if family is None:
        guess = families.close_to(resolution.name) if resolution.key == ("source", "family") else None
        hint = f"; did you mean {guess}?" if guess else ""
        warnings.append(
            (
                resolution.key,
                (
                    f"model family {resolution.name} (from {resolution.origin}) is not one validate knows "
                    f"({known}){hint}: the task and export.token_type_ids are not checked, and the image "
                    f"rehearsal stands in a {families.default_for_task(model.source.task)}"
                ),
            )
        )
        return problems, warnings
    where = f"{family.name} (from {resolution.origin})"
    task = model.source.task
    if task not in family.tasks:
        kind = "an encoder-decoder" if family.encoder_decoder else "an encoder-only"
        problems.append((("source", "task"), (f"{where} is {kind} model for {', '.join(family.tasks)}, not {task}")))
        return problems, warnings
    problems.extend(IMAGES[kinds.model_kind(model)].check_export(model, family, resolution, where))
    return problems, warnings


def _check_triton_export(
    model: TritonSageMakerModel, family: families.Family, resolution: Resolution, where: str
) -> Iterable[Finding]:
    """The tensors the export declares against what the family takes."""
    task = model.source.task
    if task == families.TEXT_CLASSIFICATION and model.export.token_type_ids and "token_type_ids" not in family.inputs:
        yield (
            ("export", "token_type_ids"),
            (
                f"{where} takes {', '.join(family.inputs)}, not token_type_ids ({family.why}): set "
                f"export.token_type_ids: false"
            ),
        )
    config = resolution.checkpoint_config or {}
    d_model = config.get("d_model")
    if (
        task == families.TEXT2TEXT_GENERATION
        and isinstance(d_model, int)
        and model.export.hidden_size is not None
        and model.export.hidden_size != d_model
    ):
        yield ("export", "hidden_size"), f"{model.export.hidden_size}, but {where} has d_model {d_model}"


@dataclass(frozen=True)
class Image:
    """What one model kind's image build takes of a model file."""

    context: str  # the part of the repository that reaches the build
    local_path_base: str  # what `source.local_path` is relative to
    # (model, family, resolution, where): the model's own settings of the build against its family
    check_export: Callable[..., Iterable[Finding]] = lambda *_args: ()


IMAGES: dict[kinds.ModelKind, Image] = {
    kinds.NEURON_ECS: Image(neuron_image.CONTEXT, neuron_image.LOCAL_PATH_BASE),
    kinds.TRITON_SAGEMAKER: Image(triton_image.CONTEXT, triton_image.LOCAL_PATH_BASE, _check_triton_export),
}
