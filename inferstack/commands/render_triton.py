"""`python -m inferstack render-triton MODEL --out DIR`: a Triton model repository skeleton for one model."""

from __future__ import annotations

import argparse
from pathlib import Path

from inferstack import config
from inferstack.command_line import DEFAULT_CONFIG_DIR, UsageError
from inferstack.schema import kinds
from inferstack.schema.triton_sagemaker import TritonSageMakerModel


def add_parser(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser(
        "render-triton",
        help="write a Triton model repository skeleton (config.pbtxt per model folder, empty version dirs)",
    )
    cmd.add_argument("model", help="a triton-sagemaker model name from model_configs/")
    cmd.add_argument("--out", type=Path, required=True, help="a directory that does not exist or is empty")
    cmd.add_argument("--config-dir", type=Path, default=DEFAULT_CONFIG_DIR)
    cmd.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: the Triton proto is only needed by this command.
    from inferstack.triton import config as triton_config

    project = config.load(args.config_dir)
    try:
        model = project.model(args.model)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    if not isinstance(model, TritonSageMakerModel):  # the triton-sagemaker kind's schema
        raise UsageError(
            f"{model.name} is a {model.kind} model; render-triton renders {kinds.TRITON_SAGEMAKER.name} models"
        )
    try:
        out = triton_config.write_repository(model, args.out)
    except triton_config.RepositoryError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {args.out}: {exc.strerror or exc}") from None
    names = ", ".join(spec.name for spec in triton_config.folders(model))
    print(f"wrote {out}: {names} (default model {triton_config.default_model_name(model)})")
    return 0
