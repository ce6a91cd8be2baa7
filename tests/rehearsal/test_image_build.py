"""The image build rehearsal (rehearsal/image_build.py) on dev's real image assets: the
context Docker would send (the docker SDK's .dockerignore matcher on the staged asset), every
Dockerfile step interpreted in order, each build step run in that context with the image's own pinned
requirements, and the closure of what the Triton export imports pinned against the context.

Stand-ins (each named in the rehearsal's report): tiny random checkpoints instead of hub downloads,
compile.py's CPU backend instead of the Neuron compiler, the local torch CPU wheel instead of
PyTorch's index and of the Neuron DLC's torch. dev's Neuron images are intent-bert-inf2's (one model,
Dockerfile.inf2) and the neuron-cores fleet intent-pack's (intent-bert and duplicate-bert packed with MODELS,
Dockerfile.inf1); the single-model inf1 build is rehearsed with intent-bert-inf2's staged context and build
arguments retargeted to inf1."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from inferstack.triton import config as triton_config
from rehearsal import dockerfile as df
from rehearsal import image_build
from tests.support.build_once import build_once

pytestmark = pytest.mark.image_build

TRITON_MODELS = ("bert-large-classifier", "t5-spelling")
# What the Triton export may import of inferstack, and all the build context may hold of it: the
# schema and the renderer (inferstack/triton/image.py BUILD_CONTEXT, kept identical to the Dockerfile's
# .dockerignore). A change here is a change of the image's contract.
TRITON_CLOSURE = {
    "inferstack",
    "inferstack.schema",
    "inferstack.schema.base",
    "inferstack.schema.deployment",
    "inferstack.schema.families",
    "inferstack.schema.instances",
    "inferstack.schema.model_file",
    "inferstack.schema.off_hours",
    "inferstack.schema.pipeline",
    "inferstack.schema.throughput",
    "inferstack.schema.triton_sagemaker",
    "inferstack.triton",
    "inferstack.triton.config",
    "inferstack.triton.folders",
    "inferstack.triton.queue_policy",
    "inferstack.triton.spec",
}


def inf1_asset(inf2: image_build.ImageAsset) -> image_build.ImageAsset:
    args = dict(inf2.build_args, NEURON_TARGET="inf1", COMPILER_ARGS="--fp32-cast=all")
    return dataclasses.replace(inf2, dockerfile="Dockerfile.inf1", build_args=args)


def patterns_of(asset: image_build.ImageAsset) -> list[str]:
    return image_build.ignore_patterns(image_build.ignore_file(asset.directory, asset.dockerfile))


def test_the_environments_build_five_images_each_with_a_recipe(dev_images):
    assert sorted(dev_images) == ["LoadTest", "bert-large-classifier", "intent-bert-inf2", "intent-pack", "t5-spelling"]
    assert {name: image_build.recipe_for(a).name for name, a in dev_images.items()} == {
        "bert-large-classifier": "triton",
        "t5-spelling": "triton",
        "intent-bert-inf2": "neuron-inf2",
        "intent-pack": "neuron-inf1",
        "LoadTest": "loadtest",
    }
    assert dev_images["LoadTest"].stacks == ("staging/LoadTest",)


def test_the_triton_context_is_the_schema_the_renderer_and_the_export(dev_images, tmp_path):
    asset = dev_images["bert-large-classifier"]
    files = image_build.build_context(asset.directory, asset.dockerfile, tmp_path)
    assert image_build.ignore_file(asset.directory, asset.dockerfile).name == "Dockerfile.dockerignore"
    assert [f for f in files if f.startswith("inferstack/")] == [
        "inferstack/__init__.py",
        "inferstack/schema/__init__.py",
        "inferstack/schema/base.py",
        "inferstack/schema/deployment.py",
        "inferstack/schema/families.py",
        "inferstack/schema/instances.py",
        "inferstack/schema/model_file.py",
        "inferstack/schema/off_hours.py",
        "inferstack/schema/pipeline.py",
        "inferstack/schema/throughput.py",
        "inferstack/schema/triton_sagemaker.py",
        "inferstack/triton/__init__.py",
        "inferstack/triton/config.py",
        "inferstack/triton/folders.py",
        "inferstack/triton/queue_policy.py",
        "inferstack/triton/spec.py",
    ]
    assert "container/triton/export.py" in files and "container/triton/requirements-export.txt" in files


@pytest.mark.parametrize("model", TRITON_MODELS)
def test_triton_image_builds_its_repository_and_imports_only_its_closure(rehearsed, dev_assembly, dev_images, model):
    built = rehearsed(model)
    report = (built / "report.txt").read_text()
    assert "step container/triton/Dockerfile:" in report and "python container/triton/export.py" in report
    imports = set((built / "imports.txt").read_text().split())
    assert {m for m in imports if m.startswith("inferstack")} == TRITON_CLOSURE
    # The serve stage's COPY --from=export put the repository where SageMaker's serve script reads it.
    repository = built / "image-root" / "opt" / "ml" / "model"
    name = json.loads(dev_images[model].build_args["TRITON_REPOSITORY_SPEC"])["name"]
    # What SageMaker's serve script loads and /invocations reaches: the text ensemble, named by the Environment
    # of every SageMaker Model the assembly runs this image in.
    defaults = default_model_names(dev_assembly, dev_images[model])
    assert defaults and set(defaults.values()) == {f"{name}-text"}, defaults
    triton_config.check_repository(repository, default_model=f"{name}-text")
    folders = sorted(p.name for p in repository.iterdir() if p.is_dir())
    ids_folders = [name] if model == "bert-large-classifier" else [name, f"{name}-decoder", f"{name}-encoder"]
    assert folders == sorted([f"{name}-text", f"{name}-tokenize", *ids_folders, f"{name}-postprocess"])
    ensemble = triton_config.parse_config((repository / f"{name}-text" / "config.pbtxt").read_text())
    assert ensemble.platform == "ensemble" and ensemble.max_batch_size == 0
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == [
        f"{name}-tokenize",
        name,
        f"{name}-postprocess",
    ]
    assert [i.name for i in ensemble.input] == ["TEXT"]
    # The text steps: their model.py, the tokenizer, and export.py's copy of the tokenizers package (the
    # Triton image has none). T5's postprocessing step detokenizes, so it carries both too.
    tokenizer_steps = [f"{name}-tokenize"] + ([f"{name}-postprocess"] if model == "t5-spelling" else [])
    for step in (f"{name}-tokenize", f"{name}-postprocess"):
        version = repository / step / "1"
        assert (version / "model.py").is_file(), step
        assert triton_config.parse_config((repository / step / "config.pbtxt").read_text()).backend == "python"
        if step in tokenizer_steps:
            assert {"tokenizer.json", "tokenizer_config.json"} <= {p.name for p in (version / "tokenizer").iterdir()}
            package = version / "site-packages" / "tokenizers"
            assert (package / "__init__.py").is_file(), step
            assert list(package.glob("tokenizers*.so")), f"{step}: no compiled tokenizers extension"
    assert (repository / name / "config.pbtxt").is_file()
    # The token-id model keeps its tokenizer for callers that tokenize themselves.
    assert (repository / name / "1" / "tokenizer" / "tokenizer.json").is_file()


def default_model_names(assembly: Path, asset: image_build.ImageAsset) -> dict[str, str]:
    """'<template>/<resource>' -> SAGEMAKER_TRITON_DEFAULT_MODEL_NAME of every AWS::SageMaker::Model container in
    the assembly (nested ones included) whose image is `asset`."""
    found = {}
    for template in sorted(assembly.rglob("*.template.json")):
        for key, resource in json.loads(template.read_text()).get("Resources", {}).items():
            if resource.get("Type") != "AWS::SageMaker::Model":
                continue
            props = resource["Properties"]
            for container in (
                [props["PrimaryContainer"]] if "PrimaryContainer" in props else props.get("Containers", [])
            ):
                if asset.asset_id in json.dumps(container.get("Image")):
                    found[f"{template.relative_to(assembly)}/{key}"] = container.get("Environment", {}).get(
                        "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"
                    )
    return found


# What the load-test image's entrypoint runs of inferstack (task, and the locustfile Locust loads), and all its
# context may hold of it (stacks/load_test_stack.py LOAD_TEST_BUILD_CONTEXT, kept identical to its ignore file).
LOADTEST_CLOSURE = {
    "inferstack",
    "inferstack.atomic_write",
    "inferstack.loadtest",
    "inferstack.loadtest.answer",
    "inferstack.loadtest.locustfile",
    "inferstack.loadtest.measure",
    "inferstack.loadtest.pacing",
    "inferstack.loadtest.report",
    "inferstack.loadtest.results",
    "inferstack.loadtest.runner",
    "inferstack.loadtest.spec",
    "inferstack.loadtest.task",
    "inferstack.loadtest.wire",
}


def test_the_load_test_image_imports_exactly_its_closure_and_its_pins(rehearsed, dev_images):
    built = rehearsed("LoadTest")
    report = (built / "report.txt").read_text()
    assert "step container/loadtest/Dockerfile:" in report and "python check_image.py" in report
    assert "stand-in: no model in this image" in report
    imports = set((built / "imports.txt").read_text().split())
    assert {m for m in imports if m.startswith("inferstack")} == LOADTEST_CLOSURE
    assert {"locust", "gevent", "zmq", "boto3", "matplotlib", "hdrh"} <= {m.split(".")[0] for m in imports}
    # The entrypoint's modules are in the image where its PYTHONPATH points, and nothing else of the package.
    package = built / "image-root" / "opt" / "inferstack" / "inferstack"
    assert {
        p.relative_to(package.parent).with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__")
        for p in package.rglob("*.py")
    } == LOADTEST_CLOSURE


def test_a_module_the_load_test_entrypoint_imports_left_out_of_the_context_fails(dev_images, tmp_path):
    asset = dev_images["LoadTest"]
    with pytest.raises(image_build.RehearsalError, match=r"Dockerfile:\d+: build step failed .*pacing"):
        image_build.rehearse(asset, tmp_path / "w", patterns=patterns_of(asset) + ["inferstack/loadtest/pacing.py"])


@pytest.mark.parametrize("target", ["inf1", "inf2"])
def test_neuron_image_compiles_an_artifact_where_the_entrypoint_reads_it(tmp_path_factory, dev_images, target):
    asset = dev_images["intent-bert-inf2"] if target == "inf2" else inf1_asset(dev_images["intent-bert-inf2"])

    def build(out: Path) -> None:
        report = image_build.rehearse(asset, out / "work")
        (out / "report.txt").write_text("\n".join(report.lines()))
        (out / "image-root").symlink_to(report.image_root)

    built = build_once(tmp_path_factory, f"neuron-image-{target}", build)
    report = (built / "report.txt").read_text()
    assert f"Dockerfile.{target}" in report and "--backend cpu" in report
    metadata = json.loads((built / "image-root/opt/inferstack/artifact/model/metadata.json").read_text())
    assert metadata["backend"] == "cpu" and metadata["sequence_length"] == 128
    # The supervisor reads neuron-monitor's configuration beside itself (container/neuron/serving/neuron_monitor.py),
    # and serve.py imports build/'s modules from beside its own folder.
    app = built / "image-root/opt/inferstack/app"
    assert (app / "serving/supervisor.py").is_file() and (app / "serving/neuron_monitor.py").is_file()
    assert json.loads((app / "serving/neuron-monitor.json").read_text())["neuron_runtimes"]
    assert (app / "build/artifact.py").is_file() and (app / "build/backends.py").is_file()
    assert not (app / "serving/standin_accelerator.py").exists()
    # The worker's C fast path, compiled by the image's own step (a checkout's build stays out of the context),
    # loads in the image's layout.
    assert "serving/build_text_scan.py" in report
    (module,) = (app / "serving").glob("_text_scan*.so")
    loaded = subprocess.run(
        [sys.executable, "-E", "-s", "-c", "import _text_scan; print(_text_scan.Scanner.__name__)"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=module.parent,
    )
    assert loaded.returncode == 0 and loaded.stdout.strip() == "Scanner", loaded.stderr
    # The entrypoint starts from the image's layout alone (no PYTHONPATH): serve.py finds build/ beside serving/.
    started = subprocess.run(
        [sys.executable, "-E", "-s", str(app / "serving/serve.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=built,
    )
    assert started.returncode == 0 and "--model-dir" in started.stdout, started.stderr


def entrypoint_model_dir(dockerfile: Path) -> str:
    _, stages = df.read(dockerfile)
    (entrypoint,) = [i for i in stages[-1].instructions if i.keyword == "ENTRYPOINT"]
    argv = json.loads(entrypoint.arguments)
    return argv[argv.index("--model-dir") + 1]


def test_the_fleets_packed_image_compiles_every_member_where_the_entrypoint_reads_it(tmp_path_factory, dev_images):
    """The neuron-cores fleet's one image: MODELS as FleetStack passes it (no MODEL_SOURCE), each member
    compiled into the artifact directory under its name."""
    asset = dev_images["intent-pack"]
    assert set(asset.build_args) == {"MODELS", "NEURON_TARGET"}
    members = json.loads(asset.build_args["MODELS"])

    def build(out: Path) -> None:
        report = image_build.rehearse(asset, out / "work")
        (out / "report.txt").write_text("\n".join(report.lines()))
        (out / "image-root").symlink_to(report.image_root)

    built = build_once(tmp_path_factory, "neuron-image-packed", build)
    report = (built / "report.txt").read_text()
    assert "--backend cpu" in report and "MODELS: bert-base-uncased -> ./rehearsal-checkpoint/intent-bert," in report
    model_dir = built / "image-root" / entrypoint_model_dir(asset.directory / asset.dockerfile).lstrip("/")
    assert sorted(p.name for p in model_dir.iterdir()) == ["duplicate-bert", "intent-bert"]
    for entry in members:
        metadata = json.loads((model_dir / entry["name"] / "metadata.json").read_text())
        assert metadata["labels"] == entry["labels"] and metadata["sequence_length"] == entry["sequence_length"]
        assert metadata["batch_size"] == entry["batch_size"] and metadata["backend"] == "cpu"
        assert (model_dir / entry["name"] / "model.pt").is_file()


def as_distilbert(asset: image_build.ImageAsset, *, token_type_ids: bool) -> image_build.ImageAsset:
    """bert-large-classifier's image as a newcomer's copy of its file pointed at DistilBERT builds it."""
    spec = json.loads(asset.build_args["TRITON_REPOSITORY_SPEC"])
    spec["source"]["huggingface_id"] = "distilbert-base-uncased"
    spec["export"]["token_type_ids"] = token_type_ids
    return dataclasses.replace(asset, build_args={**asset.build_args, "TRITON_REPOSITORY_SPEC": json.dumps(spec)})


def test_bert_s_token_type_ids_on_a_distilbert_fail_the_rehearsal_as_they_would_fail_docker_build(dev_images, tmp_path):
    """The stand-in is a tiny DistilBERT, not "a tiny random bert whatever the architecture": its tokenizer
    emits no token_type_ids, so the export refuses them here as it would in docker build (validate says so
    first: tests/config/test_model_family.py)."""
    with pytest.raises(image_build.RehearsalError) as caught:
        image_build.rehearse(as_distilbert(dev_images["bert-large-classifier"], token_type_ids=True), tmp_path / "w")
    message = str(caught.value)
    assert "\n" not in message
    assert message.endswith(
        f"build step failed (exit 2): export.py: error: export.token_type_ids: the tokenizer of "
        f"container/triton/{image_build.CHECKPOINT_DIR} does not emit token_type_ids"
    ), message


def test_a_distilbert_image_is_rehearsed_with_a_distilbert_stand_in(dev_images, tmp_path):
    report = image_build.rehearse(
        as_distilbert(dev_images["bert-large-classifier"], token_type_ids=False), tmp_path / "w"
    )
    assert any("distilbert-base-uncased -> a tiny random distilbert (its name)" in line for line in report.stand_ins)
    repository = report.image_root / "opt" / "ml" / "model"
    triton_config.check_repository(repository, default_model="bert-large-classifier-text")
    assert "token_type_ids" not in (repository / "bert-large-classifier" / "config.pbtxt").read_text()


def test_a_pipeline_image_is_rehearsed_with_the_users_steps_in_its_repository(dev_images, tmp_path):
    """bert-large-classifier's image built from its file with the example pipeline of docs/how-to/build-a-pipeline.md
    (tests/support/pipeline_example/): the steps' code travels in the spec, as validate loaded it from the model's
    folder, and the export writes each step beside the ensemble and the tokenizer step."""
    from tests.support.pipeline_models import EXAMPLE as example
    from tests.support.pipeline_models import NAME as name
    from tests.support.pipeline_models import with_example_pipeline

    model = with_example_pipeline(tmp_path)
    asset = dev_images[name]
    spec = json.loads(asset.build_args["TRITON_REPOSITORY_SPEC"])
    piped = triton_config.RepositorySpec.of(model).model_dump(mode="json")
    spec.update(pipeline=piped["pipeline"], step_code=piped["step_code"])
    report = image_build.rehearse(
        dataclasses.replace(asset, build_args={**asset.build_args, "TRITON_REPOSITORY_SPEC": json.dumps(spec)}),
        tmp_path / "w",
    )
    repository = report.image_root / "opt" / "ml" / "model"
    triton_config.check_repository(repository, default_model=f"{name}-text")
    assert sorted(p.name for p in repository.iterdir()) == sorted(
        [f"{name}-text", f"{name}-tokenize", name, f"{name}-postprocess", f"{name}-step0", f"{name}-step2"]
    )
    for step, source in ((0, "normalize.py"), (2, "reply.py")):
        assert (repository / f"{name}-step{step}" / "1" / "model.py").read_text() == (
            example / "steps" / source
        ).read_text()
    assert (repository / f"{name}-tokenize" / "1" / "tokenizer" / "tokenizer.json").is_file()


def test_a_packed_build_that_still_sets_model_source_fails_in_one_line(dev_images, tmp_path):
    packed, single = dev_images["intent-pack"], dev_images["intent-bert-inf2"]
    asset = dataclasses.replace(
        packed, build_args={**packed.build_args, "MODEL_SOURCE": single.build_args["MODEL_SOURCE"]}
    )
    with pytest.raises(image_build.RehearsalError) as caught:
        image_build.rehearse(asset, tmp_path / "w")
    message = str(caught.value)
    assert "\n" not in message
    assert message.endswith(
        "build step failed (exit 2): compile.py: error: "
        "--model (MODEL_SOURCE): must be empty when --models-json (MODELS) is set"
    ), message


def test_a_module_the_export_imports_left_out_of_the_context_fails_in_one_line(dev_images, tmp_path):
    """Today's defect, recreated: the ignore file drops a module the export imports."""
    asset = dev_images["bert-large-classifier"]
    with pytest.raises(image_build.RehearsalError) as caught:
        image_build.rehearse(asset, tmp_path / "w", patterns=patterns_of(asset) + ["inferstack/schema/instances.py"])
    message = str(caught.value)
    assert "\n" not in message
    assert "container/triton/Dockerfile:42: build step failed (exit 1)" in message
    assert "cannot import name 'instances' from 'inferstack.schema'" in message


def test_a_module_in_the_context_the_export_never_imports_fails():
    problem = image_build.closure_problem(
        "inferstack", TRITON_CLOSURE, TRITON_CLOSURE | {"inferstack.capacity.planning"}
    )
    assert problem == (
        "the build context holds inferstack.capacity.planning, which the build step never imports "
        "(drop it from the ignore file's allow-list)"
    )
    assert image_build.closure_problem("inferstack", TRITON_CLOSURE, TRITON_CLOSURE) is None


def test_a_requirements_file_left_out_of_the_context_fails(dev_images, tmp_path):
    asset = dev_images["t5-spelling"]
    with pytest.raises(
        image_build.RehearsalError,
        match=r"Dockerfile:\d+: COPY container/triton/requirements-export.txt: not in the build context$",
    ):
        image_build.rehearse(
            asset, tmp_path / "w", patterns=patterns_of(asset) + ["container/triton/requirements-export.txt"]
        )


def test_a_requirement_that_is_not_an_exact_pin_fails():
    with pytest.raises(image_build.RehearsalError, match=r"^requirements.txt:2: 'onnx>=1.20' is not an exact pin"):
        image_build.exact_pins("numpy==2.4.6\nonnx>=1.20\n", source="requirements.txt")
    assert image_build.exact_pins("--extra-index-url https://x\ntritonclient[grpc]==2.73.0  # why\n", source="r") == {
        "tritonclient": "2.73.0"
    }


def test_a_distribution_the_export_imports_but_the_image_does_not_pin_fails(rehearsed):
    imports = set((rehearsed("bert-large-classifier") / "imports.txt").read_text().split())
    providers = image_build.distributions_of(image_build.ENVS_DIR / "triton", image_build.third_party(imports))
    requirements = (image_build.ROOT / "container/triton/requirements-export.txt").read_text()
    pinned = set(image_build.exact_pins(requirements, source="requirements-export.txt"))
    assert "onnxscript" in pinned
    missing, _ = image_build.unpinned_imports(providers, pinned - {"onnxscript"})
    assert missing == ["onnxscript (onnxscript)"]
    assert image_build.unpinned_imports(providers, pinned)[0] == []


def test_an_image_without_a_recipe_is_refused(dev_images):
    asset = dataclasses.replace(dev_images["intent-bert-inf2"], dockerfile="Dockerfile.gpu")
    with pytest.raises(image_build.RehearsalError, match="no rehearsal recipe for Dockerfile.gpu"):
        image_build.recipe_for(asset)
