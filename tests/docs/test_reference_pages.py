"""The generated reference pages (docs/reference/, written by docs/gen/reference.py) are what the code generates
now; every config key is described, with an example that is either a shipped file's value (cited, and really
in that file) or a curated one the schema accepts; the CLI page has every command and argument the parser has."""

from __future__ import annotations

import argparse
import copy
import re

import pytest
import yaml

from inferstack import cli
from inferstack.config import json_schema
from tests.support.paths import ROOT

REFERENCE = ROOT / "docs" / "reference"
EXAMPLE = re.compile(r"Example \(from `model_configs/(?P<file>[^`]+)`\):\n\n```yaml\n(?P<yaml>.*?)```", re.S)


def test_committed_reference_pages_are_up_to_date(generator):
    stale = [str(path.relative_to(ROOT)) for path in generator.stale()]
    assert stale == [], f"{stale} out of date: run `make docs-reference`"


def test_check_reports_a_stale_page_and_writes_nothing(generator, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(generator, "REFERENCE", tmp_path)
    (tmp_path / "cli.md").write_text("# Command line reference\n\nhand-edited\n")
    assert generator.main(["--check"]) == 1
    assert (tmp_path / "cli.md").read_text() == "# Command line reference\n\nhand-edited\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cli.md"]
    named = sorted(line.split()[0].rsplit("/", 1)[1] for line in capsys.readouterr().err.splitlines())
    assert named == ["cli.md", "constructs.md", "environments-file.md", "model-file.md"]
    monkeypatch.setattr(generator, "REFERENCE", REFERENCE)
    assert generator.main(["--check"]) == 0


@pytest.mark.parametrize("page", ["model-file.md", "environments-file.md"])
def test_every_key_has_a_description_type_and_example(page):
    text = (REFERENCE / page).read_text()
    sections = re.split(r"\n(?=#{2,3} `)", text)[1:]
    keys = [s for s in sections if s.startswith("### `")]
    assert len(keys) > 40
    for section in keys:
        heading, _, body = section.partition("\n")
        description = body.strip().split("\n\n")[0]
        assert description.endswith(".") and not description.startswith("**Type:**"), f"{heading}: no description"
        assert "**Type:**" in body, f"{heading}: no type"
        links_elsewhere = "Its keys are those of" in body or "(the keys below)" in body or " to mapping" in body
        assert links_elsewhere or "Example" in body, f"{heading}: no example"


@pytest.mark.parametrize("page", ["model-file.md", "environments-file.md"])
def test_cited_examples_are_in_the_files_they_cite(page):
    cited = list(EXAMPLE.finditer((REFERENCE / page).read_text()))
    assert len(cited) > 30
    for match in cited:
        example = yaml.safe_load(match["yaml"])
        shipped = yaml.safe_load((ROOT / "model_configs" / match["file"]).read_text())
        assert _within(example, shipped), f"{match['file']} does not hold {match['yaml']}"


def _within(example, document) -> bool:
    """Every key of `example` is in `document` with the same value; a one-item list is one of its items."""
    if isinstance(example, dict):
        return isinstance(document, dict) and all(k in document and _within(v, document[k]) for k, v in example.items())
    if isinstance(example, list) and len(example) == 1 and isinstance(example[0], dict):
        return isinstance(document, list) and any(_within(example[0], item) for item in document)
    return example == document


def _without_description(schema: dict, definition: str, key: str) -> dict:
    schema = copy.deepcopy(schema)
    schema["$defs"][definition]["properties"][key].pop("description")
    return schema


def test_a_key_without_description_fails_generation(generator, monkeypatch):
    real = json_schema.SCHEMAS["model.schema.json"]
    monkeypatch.setitem(
        json_schema.SCHEMAS, "model.schema.json", lambda: _without_description(real(), "NeuronServing", "port")
    )
    with pytest.raises(generator.GenerationError, match=r"model.schema.json: serving.port: no description"):
        generator.config_pages()


def test_a_curated_example_the_schema_rejects_fails_generation(generator, monkeypatch, tmp_path):
    examples = yaml.safe_load(generator.EXAMPLES.read_text())
    examples["model.schema.json"]["serving.root_volume_gib"] = 8  # below the schema's minimum, 30
    path = tmp_path / "examples.yaml"
    path.write_text(yaml.safe_dump(examples))
    monkeypatch.setattr(generator, "EXAMPLES", path)
    with pytest.raises(generator.GenerationError, match=r"serving.root_volume_gib: 8 does not validate"):
        generator.config_pages()


def test_a_key_without_any_example_fails_generation_and_a_needless_one_too(generator, monkeypatch, tmp_path):
    examples = yaml.safe_load(generator.EXAMPLES.read_text())
    del examples["model.schema.json"]["load_balancer.public"]
    examples["model.schema.json"]["compile.batch_size"] = 2  # a shipped file sets it: cited from there
    path = tmp_path / "examples.yaml"
    path.write_text(yaml.safe_dump(examples))
    monkeypatch.setattr(generator, "EXAMPLES", path)
    with pytest.raises(generator.GenerationError) as failure:
        generator.config_pages()
    assert "load_balancer.public: no example" in str(failure.value)
    assert "compile.batch_size: not a leaf key path the page needs" in str(failure.value)


def test_the_cli_page_has_every_command_and_argument():
    text = (REFERENCE / "cli.md").read_text()
    (commands,) = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert re.findall(r"^## `([a-z-]+)`", text, re.M) == list(commands.choices)
    for name, parser in commands.choices.items():
        section = text.split(f"## `{name}`", 1)[1].split("\n## ", 1)[0]
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            shown = action.option_strings[0] if action.option_strings else (action.metavar or action.dest)
            assert f"`{shown}" in section, f"{name}: {shown} missing"


def test_the_api_page_renders_every_constructs_module():
    text = (REFERENCE / "constructs.md").read_text()
    package = ROOT / "inferstack" / "constructs"
    # A subpackage's __init__.py is the subpackage itself (neuron_service); the top one is `::: inferstack.constructs`.
    names = [p.relative_to(package).with_suffix("").parts for p in package.rglob("*.py")]
    names = [parts[:-1] if parts[-1] == "__init__" else parts for parts in names]
    modules = sorted(".".join(parts) for parts in names if parts and not any(part.startswith("_") for part in parts))
    assert re.findall(r"^::: inferstack\.constructs\.([\w.]+)$", text, re.M) == modules
