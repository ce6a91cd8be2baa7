"""Synth is deterministic, and adding a model touches nothing but its own new stack."""

from __future__ import annotations

from inferstack import config
from tests.support.synth import synth


def test_synth_twice_gives_identical_templates(project, synthesized, tmp_path):
    again = synth(project, list(project.environments), tmp_path)
    assert again.templates == synthesized.templates
    assert again.root_templates == synthesized.root_templates


def test_adding_a_model_changes_no_other_stack(synthesized, config_copy, tmp_path):
    # one model of each kind
    for source, name in (("t5-spelling", "t5-grammar"), ("intent-bert", "intent-bert-eu")):
        text = (config_copy / f"{source}.yaml").read_text()
        (config_copy / f"{name}.yaml").write_text(text.replace(f"name: {source}", f"name: {name}"))
    extended = config.load(config_copy)
    after = synth(extended, ["dev"], tmp_path)
    before = synthesized.templates["dev"]
    assert set(after.templates["dev"]) == set(before) | {"t5-grammar", "intent-bert-eu"}
    for stack, template in before.items():
        assert after.templates["dev"][stack] == template, f"{stack} changed when a model was added"


def test_synthesized_fixture_covers_every_environment_and_model(project, synthesized):
    assert set(synthesized.templates) == set(project.environments)
    for env, stacks in synthesized.templates.items():
        # image units (a model's own stack, a neuron-cores fleet's) and every fleet's stack (an inference-
        # components fleet's holds the shared endpoint; its members keep their own); the load-test stack where
        # the environment has load_test
        load_test = {"LoadTest"} if project.environments[env].load_test else set()
        assert set(stacks) == (
            {"Foundation", *project.fleets_in(env)} | {u.name for u in project.image_units(env)} | load_test
        ), env
