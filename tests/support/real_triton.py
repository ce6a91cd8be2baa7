"""What the real-Triton tier's fixtures (tests/container/triton/conftest.py) build: every shipped Triton
model's repository, written by container/triton/export.py from tiny random checkpoints, served by the real
tritonserver 2.51 (nvidia-pytriton, side environment .venv-triton) started as SageMaker's r24.09 serve script
starts it (rehearsal/triton_server.py), with the Model Environment of the synthesized dev template.

What comes from where:
- the Model `Environment`: the AWS::SageMaker::Model of each Triton model's dev stack template,
  synthesized here (tests/support/synth.py), not a copy;
- the repository spec: the `TRITON_REPOSITORY_SPEC` build arg of the model's image asset in the same
  cloud assembly, i.e. what the image build would get, with two replacements only: `source` points at
  a tiny random checkpoint of the same task and labels (no hub download), and T5's
  `export.hidden_size` is the tiny model's d_model. Serving settings, sequence lengths, opset, labels
  are the shipped ones, so config.pbtxt is the shipped one (KIND_GPU, TensorRT accelerator, warm-up,
  dynamic batching, 2 instances);
- stand-ins (documented in rehearsal/): a CPU copy of the repository (KIND_GPU -> KIND_CPU)
  and the `onnxruntime` backend as a Python-based backend over the same model.onnx.

The synthesized contract, the checkpoints and the exports are built once per session and shared
across xdist workers (file locks). Servers are per worker (a server cannot outlive the worker that
started it): under `-n 2` a model's server may start on both workers, about 2-4 s each. (pytest-xdist
3.8's `--dist loadgroup` did not keep an xdist_group on one worker in a trial here, so it is not used.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from inferstack import config
from inferstack.config import TritonSageMakerModel
from inferstack.triton.config import RepositorySpec
from rehearsal import triton_server
from tests.support.build_once import build_once
from tests.support.paths import CONFIG_DIR, ROOT
from tests.support.tiny_models import varied_t5

EXPORT = ROOT / "container" / "triton" / "export.py"
MAKE_TINY = ROOT / "benchmarks" / "make_tiny_model.py"
ENV = "dev"
# Token ids up to 7592 (BERT's "hello") appear in the tests' requests to the token-id models: the tiny vocabularies
# must hold them.
TINY_VOCAB = 8192
TINY_HIDDEN = 32  # make_tiny_model's default --hidden-size (T5's d_model)
EOS_SCALE = 30

PROJECT = config.load(CONFIG_DIR)
TRITON_MODELS = sorted(m.name for m in PROJECT.models if isinstance(m, TritonSageMakerModel))


def model_params(task: str | None = None) -> list:
    """One param per shipped Triton model (of `task`)."""
    return [
        pytest.param(m.name, id=m.name)
        for m in sorted(PROJECT.models, key=lambda m: m.name)
        if isinstance(m, TritonSageMakerModel) and (task is None or m.source.task == task)
    ]


def shipped(name: str) -> TritonSageMakerModel:
    return next(m for m in PROJECT.models if m.name == name)


def _run(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


# ---------------------------------------------------------------- the contract from the synthesized app


def _contract_from_assembly(outdir: Path, templates: dict[str, dict]) -> dict[str, dict]:
    """Model -> {"environment": the Model's Environment, "spec": its image's TRITON_REPOSITORY_SPEC}."""
    build_args = {}
    for manifest in (outdir / f"assembly-{ENV}").glob("*.assets.json"):
        for asset_hash, asset in json.loads(manifest.read_text()).get("dockerImages", {}).items():
            build_args[asset_hash] = asset["source"].get("dockerBuildArgs", {})
    found = {}
    for name in TRITON_MODELS:
        models = [r for r in templates[name]["Resources"].values() if r["Type"] == "AWS::SageMaker::Model"]
        assert len(models) == 1, f"{ENV}/{name}: {len(models)} AWS::SageMaker::Model resources"
        props = models[0]["Properties"]
        container = props.get("PrimaryContainer") or props["Containers"][0]
        environment = container.get("Environment", {})
        tokens = {k: v for k, v in environment.items() if not isinstance(v, str)}
        assert not tokens, f"{ENV}/{name}: Environment values resolved only at deploy time: {tokens}"
        image = json.dumps(container["Image"])
        args = [a for h, a in build_args.items() if h in image]
        assert len(args) == 1, f"{ENV}/{name}: no single image asset for {image}"
        found[name] = {"environment": environment, "spec": json.loads(args[0]["TRITON_REPOSITORY_SPEC"])}
    return found


def build_contract(tmp_path_factory) -> dict[str, dict]:
    """The contract from dev synthesized once per session (the `contract` fixture)."""

    def build(target: Path) -> None:
        from tests.support.synth import synth

        target.mkdir(parents=True, exist_ok=True)
        synthesized = synth(PROJECT, [ENV], target / "cdk.out", pipeline=False)
        found = _contract_from_assembly(target / "cdk.out", synthesized.templates[ENV])
        (target / "contract.json").write_text(json.dumps(found, indent=2))

    return json.loads((build_once(tmp_path_factory, "real-triton-contract", build) / "contract.json").read_text())


# ---------------------------------------------------------------- tiny checkpoints and exports


def _tiny_bert(target: Path, labels: list[str]) -> Path:
    result = _run(
        str(MAKE_TINY),
        "--kind",
        "bert",
        "--out",
        str(target / "model"),
        "--labels",
        ",".join(labels),
        "--vocab-size",
        str(TINY_VOCAB),
    )
    assert result.returncode == 0, result.stderr
    return target / "model"


def _tiny_t5(target: Path) -> Path:
    """make_tiny_model's T5 with its weights scaled (as tests/container/triton/test_triton_export.py does): the
    random init alone repeats one token; scaled, rows differ. The end-of-sequence row is scaled by
    EOS_SCALE (not 3 as there): with the larger vocabulary a factor 3 ends no row within 16 steps, 30
    ends some rows early (at different steps) and leaves others running to the full length."""
    return varied_t5(
        target, eos_scale=EOS_SCALE, make_tiny_args=("--vocab-size", str(TINY_VOCAB), "--hidden-size", str(TINY_HIDDEN))
    )


def tiny_spec(synthesized_spec: dict, checkpoint: Path) -> RepositorySpec:
    spec = json.loads(json.dumps(synthesized_spec))
    spec["source"] = {
        "local_path": str(checkpoint),
        "task": spec["source"]["task"],
        "labels": spec["source"].get("labels", []),
    }
    if spec["source"]["task"] == "text2text-generation":
        spec["export"]["hidden_size"] = TINY_HIDDEN
    return RepositorySpec.model_validate(spec)


@dataclass(frozen=True)
class Exported:
    name: str
    spec: RepositorySpec
    checkpoint: Path
    repository: Path  # as export.py wrote it (KIND_GPU)


def exported(tmp_path_factory, contract: dict, name: str) -> Exported:
    synthesized_spec = contract[name]["spec"]
    task = synthesized_spec["source"]["task"]
    checkpoint_dir = build_once(
        tmp_path_factory,
        f"real-triton-tiny-{task}-{name}",
        (lambda t: _tiny_t5(t))
        if task == "text2text-generation"
        else (lambda t: _tiny_bert(t, synthesized_spec["source"]["labels"])),
    )
    checkpoint = checkpoint_dir / "model"
    spec = tiny_spec(synthesized_spec, checkpoint)

    def build(target: Path) -> None:
        result = _run(
            str(EXPORT), "--out", str(target / "repository"), env={"TRITON_REPOSITORY_SPEC": spec.model_dump_json()}
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr
        (target / "export.log").write_text(result.stdout)

    repository = build_once(tmp_path_factory, f"real-triton-repository-{name}", build) / "repository"
    return Exported(name, spec, checkpoint, repository)


# ---------------------------------------------------------------- servers (the `serve` fixture)


@dataclass
class Served:
    exported: Exported
    repository: Path  # the CPU copy the server reads
    rewrites: list[str]  # the KIND_GPU groups cpu_copy rewrote
    environment: dict[str, str]  # the synthesized Model Environment
    server: triton_server.TritonServer
    batch_log: Path

    @property
    def name(self) -> str:
        return self.exported.name

    def batches(self) -> list[dict]:
        return triton_server.read_batch_log(self.batch_log)


def without_queue_policy(repository) -> list[str]:
    """Stand-in: drop the queue policy. Still needed: its timeout is sized for the profiled g4dn (T5: 10 ms), the
    CPU stand-in is far slower, and with any policy Triton 24.09's batcher may wait up to 500 ms for a new arrival
    before the next batch, so the bursts the contract tests send would be shed. The shedding itself:
    test_overload_shedding.py."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    removed = []
    for path in sorted(repository.glob("*/config.pbtxt")):
        config = text_format.Parse(path.read_text(encoding="utf-8"), pb.ModelConfig())
        if config.dynamic_batching.HasField("default_queue_policy"):
            config.dynamic_batching.ClearField("default_queue_policy")
            path.write_text(text_format.MessageToString(config), encoding="utf-8")
            removed.append(f"{path.parent.name}: dynamic_batching.default_queue_policy")
    return removed
