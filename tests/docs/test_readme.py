"""What the README and the documentation site tell a newcomer holds: the "Add a model" examples
(docs/how-to/add-a-model.md) validate as written (and the shared
endpoint's additions are each required where the page says so), and no document sends a reader to files
that are not in the repository (REFERENCE.md, DESIGN.md, STYLE.md, ../shared): each figure cites its public
source instead."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from inferstack import config
from tests.support.paths import CONFIG_DIR, ROOT

README = ROOT / "README.md"
OUTSIDE_THE_REPOSITORY = re.compile(r"REFERENCE\.md|DESIGN\.md|STYLE\.md|\.\./shared")
# Not documentation of this repository: installed packages, build outputs, tool caches.
SKIPPED_DIRECTORIES = {"node_modules", "cdk.out", "__pycache__"}


def documents() -> list[Path]:
    """README.md, every file under docs/, and every other Markdown file of the checkout."""
    found = {README}
    for directory, subdirectories, files in os.walk(ROOT):
        subdirectories[:] = [
            d
            for d in subdirectories
            if not d.startswith(".") and d not in SKIPPED_DIRECTORIES and not d.startswith("cdk.out")
        ]
        here = Path(directory)
        in_docs = here == ROOT / "docs" or (ROOT / "docs") in here.parents
        found.update(here / f for f in files if in_docs or f.endswith(".md"))
    return sorted(found)


def test_no_document_cites_files_outside_the_repository():
    cited = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in documents()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1)
        if OUTSIDE_THE_REPOSITORY.search(line)
    ]
    assert cited == []


def test_the_documents_checked_include_the_readmes_and_docs():
    names = {str(p.relative_to(ROOT)) for p in documents()}
    assert {"README.md", "container/neuron/README.md", "container/triton/README.md"} <= names
    assert not any(n.startswith(("node_modules/", ".venv")) for n in names)


# ------------------------------------------------------------------------------- "Adding a model"

ADD_A_MODEL = ROOT / "docs" / "how-to" / "add-a-model.md"


def adding_a_model_sections() -> dict[str, str]:
    """Where adding a model is documented (the README links there)."""
    return {"docs/how-to/add-a-model.md": ADD_A_MODEL.read_text()}


@pytest.fixture(params=sorted(adding_a_model_sections()))
def section(request) -> str:
    return adding_a_model_sections()[request.param]


def adding_a_model_blocks(section: str) -> dict[str, dict]:
    """The YAML blocks of an "Add a model" text, by their `name:` (the shared endpoint's additions, which
    have none, as "shared-additions")."""
    blocks = {}
    for block in re.findall(r"```yaml\n(.*?)```", section, re.S):
        data = yaml.safe_load(block)
        blocks[data.get("name", "shared-additions")] = data
    return blocks


def with_models(tmp_path: Path, *models: dict, fleet_member: str | None = None) -> Path:
    configs = tmp_path / "model_configs"
    shutil.copytree(CONFIG_DIR, configs)
    for model in models:
        (configs / f"{model['name']}.yaml").write_text(yaml.safe_dump(model, sort_keys=False))
    if fleet_member:
        path = configs / "environments.yaml"
        environments = yaml.safe_load(path.read_text())
        environments["fleets"]["triton-shared"]["models"].append(fleet_member)
        path.write_text(yaml.safe_dump(environments, sort_keys=False))
    return configs


def problems(configs: Path) -> list[str]:
    try:
        config.load(configs)
    except config.ConfigError as exc:
        return [str(p) for p in exc.problems]
    return []


def shared(dedicated: dict, additions: dict) -> dict:
    """The dedicated example with the shared endpoint's additions merged in (mappings key by key)."""

    def merge(base, extra):
        if isinstance(base, dict) and isinstance(extra, dict):
            return {**base, **{k: merge(base.get(k), v) for k, v in extra.items()}}
        return extra

    return merge(dedicated, additions)


def test_readme_has_a_neuron_and_a_minimal_triton_example_and_the_shared_endpoint_additions(section):
    blocks = adding_a_model_blocks(section)
    assert set(blocks) == {"ticket-router", "review-sentiment", "shared-additions"}
    triton = blocks["review-sentiment"]
    # minimal: only what the schema requires, plus deploy_in and per-environment overrides
    assert set(triton) == {
        "name",
        "kind",
        "deploy_in",
        "source",
        "serving",
        "slo",
        "throughput_profile",
        "capacity",
        "environments",
    }
    assert triton["serving"] == {"backend": "onnx"}
    assert set(blocks["shared-additions"]) == {"serving", "export", "inference_component", "environments"}


@pytest.mark.parametrize("name", ["ticket-router", "review-sentiment"])
def test_each_readme_example_validates_as_a_new_file(tmp_path, section, name):
    assert problems(with_models(tmp_path, adding_a_model_blocks(section)[name])) == []


def test_the_triton_example_validates_on_the_shared_endpoint_with_the_additions(tmp_path, section):
    blocks = adding_a_model_blocks(section)
    model = shared(blocks["review-sentiment"], blocks["shared-additions"])
    project = config.load(with_models(tmp_path, model, fleet_member="review-sentiment"))
    assert project.fleet_of("review-sentiment", "dev") == "triton-shared"
    assert project.fleet_of("review-sentiment", "staging") is None  # a dedicated endpoint there


@pytest.mark.parametrize(
    "left_out, expected",
    [
        (("inference_component",), "review-sentiment needs inference_component"),
        (("serving", "inference_ami_version"), "give them the same serving.inference_ami_version"),
        (("environments", "dev", "slo", "cold_start_seconds"), "but its SLO has no slo.cold_start_seconds"),
    ],
)
def test_each_shared_endpoint_addition_is_required_as_the_readme_says(tmp_path, section, left_out, expected):
    blocks = adding_a_model_blocks(section)
    model = shared(blocks["review-sentiment"], blocks["shared-additions"])
    node = model
    for key in left_out[:-1]:
        node = node[key]
    del node[left_out[-1]]
    found = problems(with_models(tmp_path, model, fleet_member="review-sentiment"))
    assert len(found) == 1 and expected in found[0], found


def test_the_cold_start_estimate_the_readme_quotes_is_the_planners(tmp_path, section):
    blocks = adding_a_model_blocks(section)
    model = shared(blocks["review-sentiment"], blocks["shared-additions"])
    del model["environments"]["dev"]["slo"]["cold_start_seconds"]
    (found,) = problems(with_models(tmp_path, model, fleet_member="review-sentiment"))
    estimate = re.search(r"wait about (\d+) s", found).group(1)
    assert f"(here about {estimate} s)" in section
    assert blocks["shared-additions"]["environments"]["dev"]["slo"]["cold_start_seconds"] >= int(estimate)
