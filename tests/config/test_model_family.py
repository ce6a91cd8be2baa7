"""The config against its checkpoint's architecture (inferstack/config/architecture.py): the family from a
local checkpoint's config.json in the image context, else `source.family`, else the hub id's name; a task or
export input the family does not take is one line naming file and key; an unknown family is a warning. The
image rehearsal's stand-in checkpoint is built as the same family."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from inferstack import cli, config
from inferstack.config import architecture
from inferstack.schema import families
from rehearsal import image_build
from tests.support.config_edits import edit_yaml, set_at

NEW = "ticket-router.yaml"


def problems_of(config_dir: Path, root: Path | None = None) -> list[str]:
    with pytest.raises(config.ConfigError) as caught:
        config.load(config_dir, image_context_root=root)
    problems = [str(p) for p in caught.value.problems]
    assert all("\n" not in p for p in problems)
    return problems


def copy_bert_large(config_dir: Path, **source) -> Path:
    """What a newcomer does: copy the shipped BERT-large file, rename it, point it at another checkpoint."""
    path = config_dir / NEW
    shutil.copy(config_dir / "bert-large-classifier.yaml", path)
    edit_yaml(
        path, lambda d: (d.update(name="ticket-router"), d["source"].pop("huggingface_id"), d["source"].update(source))
    )
    return path


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), start=1) if text in line)


@pytest.mark.parametrize(
    "hub_id, family",
    [
        ("bert-base-uncased", "bert"),
        ("google-bert/bert-large-uncased", "bert"),
        ("distilbert-base-uncased", "distilbert"),
        ("distilbert/distilbert-base-uncased-finetuned-sst-2-english", "distilbert"),
        ("roberta-base", "roberta"),
        ("FacebookAI/roberta-large", "roberta"),
        ("cardiffnlp/twitter-roberta-base-sentiment", "roberta"),
        ("distilroberta-base", "roberta"),
        ("t5-small", "t5"),
        ("google/flan-t5-base", "t5"),
        ("google-t5/t5-small", "t5"),
        ("my-org/ticket-model", None),
        ("ProsusAI/finbert", None),
    ],
)
def test_the_family_a_hub_id_names(hub_id, family):
    assert families.from_name(hub_id) == family


def test_the_families_and_what_they_take():
    assert families.FAMILIES["bert"].inputs == ("input_ids", "attention_mask", "token_type_ids")
    assert families.FAMILIES["distilbert"].inputs == ("input_ids", "attention_mask")
    assert families.FAMILIES["roberta"].inputs == ("input_ids", "attention_mask")
    t5 = families.FAMILIES["t5"]
    assert t5.inputs == ("input_ids", "attention_mask") and t5.decoder_inputs == ("decoder_input_ids",)
    assert t5.tasks == ("text2text-generation",) and t5.encoder_decoder


@pytest.mark.parametrize("hub_id, family", [("distilbert-base-uncased", "distilbert"), ("roberta-base", "roberta")])
def test_a_copied_bert_file_with_token_type_ids_is_rejected_for_a_family_without_them(config_copy, hub_id, family):
    path = copy_bert_large(config_copy, huggingface_id=hub_id)
    (problem,) = problems_of(config_copy)
    assert problem.startswith(
        f"model_configs/{NEW}:{line_of(path, 'token_type_ids: true')}: export.token_type_ids: "
        f"{family} (from source.huggingface_id {hub_id}) takes input_ids, attention_mask, not "
        f"token_type_ids"
    )
    assert problem.endswith("set export.token_type_ids: false")

    edit_yaml(path, set_at("export", "token_type_ids", value=False))
    assert config.load(config_copy).model("ticket-router").source.huggingface_id == hub_id


def test_validate_exits_2_with_the_one_line(config_copy, capsys):
    copy_bert_large(config_copy, huggingface_id="distilbert-base-uncased")
    assert cli.main(["validate", "--config-dir", str(config_copy)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "export.token_type_ids: distilbert" in err[0] and err[1] == "1 problem(s) found"


def test_an_explicit_family_is_checked_too(config_copy):
    copy_bert_large(config_copy, huggingface_id="my-org/ticket-model", family="distilbert")
    (problem,) = problems_of(config_copy)
    assert "export.token_type_ids: distilbert (from source.family) takes input_ids, attention_mask" in problem


def test_the_task_must_be_one_the_family_serves(config_copy):
    edit_yaml(
        config_copy / "t5-spelling.yaml", lambda d: d["source"].update(task="text-classification", labels=["a", "b"])
    )
    problems = [p for p in problems_of(config_copy) if "t5-spelling.yaml" in p]
    assert any(
        p.endswith(
            "source.task: t5 (from source.huggingface_id t5-small) is an encoder-decoder model for "
            "text2text-generation, not text-classification"
        )
        for p in problems
    ), problems


def test_an_unknown_family_is_a_warning_not_an_error(config_copy):
    copy_bert_large(config_copy, huggingface_id="my-org/ticket-model")
    project = config.load(config_copy)
    (warning,) = [str(w) for w in project.warnings if NEW in w.file and "family" in w.message]
    assert (
        ": source.huggingface_id: warning: cannot tell the model family from source.huggingface_id "
        "my-org/ticket-model: set source.family (bert, distilbert, roberta, t5)" in warning
    )


def test_a_misspelt_family_is_a_warning_with_a_suggestion(config_copy):
    copy_bert_large(config_copy, huggingface_id="my-org/ticket-model", family="distilbrt")
    (warning,) = [str(w) for w in config.load(config_copy).warnings if NEW in w.file and "family" in w.message]
    assert "source.family: warning: model family distilbrt (from source.family) is not one validate knows" in warning
    assert "did you mean distilbert?" in warning


def test_the_shipped_models_all_resolve_to_a_known_family():
    from tests.support.paths import CONFIG_DIR

    project = config.load(CONFIG_DIR)
    resolved = {m.name: architecture.resolve(m, architecture.REPOSITORY_ROOT)[0].name for m in project.models}
    assert resolved == {
        "bert-large-classifier": "bert",
        "duplicate-bert": "bert",
        "intent-bert": "bert",
        "intent-bert-inf2": "bert",
        "t5-spelling": "t5",
    }
    assert not [w for w in project.warnings if "family" in w.message]


# ---------------------------------------------------------------- a checkpoint in the image context


def checkpoint(root: Path, relative: str, **config_json) -> None:
    directory = root / relative
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(config_json))


def test_a_local_checkpoints_config_json_decides_the_family(config_copy, tmp_path):
    root = tmp_path / "repo"
    checkpoint(root, "container/triton/ticket-router", model_type="distilbert")
    copy_bert_large(config_copy, local_path="container/triton/ticket-router")
    (problem,) = problems_of(config_copy, root)
    assert (
        "export.token_type_ids: distilbert (from the checkpoint's container/triton/ticket-router/config.json) "
        "takes input_ids, attention_mask, not token_type_ids"
    ) in problem


def test_config_json_wins_over_a_contradicting_family(config_copy, tmp_path):
    root = tmp_path / "repo"
    checkpoint(root, "container/triton/ticket-router", model_type="roberta")
    path = copy_bert_large(config_copy, local_path="container/triton/ticket-router", family="bert")
    edit_yaml(path, set_at("export", "token_type_ids", value=False))
    (problem,) = problems_of(config_copy, root)
    assert problem.endswith(
        "source.family: bert, but the checkpoint's container/triton/ticket-router/config.json "
        "says model_type roberta: the export loads the checkpoint; set source.family: roberta or "
        "remove it"
    )


def test_a_neuron_checkpoint_is_read_from_the_neuron_context(config_copy, tmp_path):
    root = tmp_path / "repo"
    checkpoint(root, "container/neuron/models/intent", model_type="t5", d_model=512)
    edit_yaml(
        config_copy / "intent-bert-inf2.yaml",
        lambda d: (d["source"].pop("huggingface_id"), d["source"].update(local_path="./models/intent")),
    )
    problems = problems_of(config_copy, root)
    assert any(
        "intent-bert-inf2.yaml" in p
        and "source.task: t5 (from the checkpoint's "
        "container/neuron/models/intent/config.json) is an encoder-decoder model"
        in p
        for p in problems
    )


def test_a_checkpoint_outside_the_image_context_is_not_read(config_copy, tmp_path):
    """The Triton context is container/triton/: a config.json elsewhere never reaches the export, so the family
    is unknown (a warning) rather than taken from it."""
    root = tmp_path / "repo"
    checkpoint(root, "checkpoints/ticket-router", model_type="distilbert")
    copy_bert_large(config_copy, local_path="checkpoints/ticket-router")
    project = config.load(config_copy, image_context_root=root)
    assert any("cannot tell the model family" in w.message for w in project.warnings if NEW in w.file)


def test_a_t5_hidden_size_other_than_the_checkpoints_d_model_is_rejected(config_copy, tmp_path):
    root = tmp_path / "repo"
    checkpoint(root, "container/triton/spelling", model_type="t5", d_model=768)
    edit_yaml(
        config_copy / "t5-spelling.yaml",
        lambda d: (d["source"].pop("huggingface_id"), d["source"].update(local_path="container/triton/spelling")),
    )
    problems = problems_of(config_copy, root)
    assert any(
        p.endswith(
            "export.hidden_size: 512, but t5 (from the checkpoint's container/triton/spelling/"
            "config.json) has d_model 768"
        )
        for p in problems
    ), problems


def test_an_unreadable_config_json_is_a_problem(config_copy, tmp_path):
    root = tmp_path / "repo"
    (root / "container/triton/ticket-router").mkdir(parents=True)
    (root / "container/triton/ticket-router/config.json").write_text("{not json")
    copy_bert_large(config_copy, local_path="container/triton/ticket-router")
    problems = problems_of(config_copy, root)
    assert any(
        "source.local_path: container/triton/ticket-router/config.json: not a readable checkpoint config" in p
        for p in problems
    )


# ---------------------------------------------------------------- the image rehearsal's stand-in


@pytest.mark.parametrize(
    "source, family, origin",
    [
        ({"huggingface_id": "distilbert-base-uncased"}, "distilbert", "its name"),
        ({"huggingface_id": "my-org/ticket-model", "family": "roberta"}, "roberta", "source.family"),
        ({"huggingface_id": "my-org/ticket-model"}, "bert", "family unknown: the task's default"),
    ],
)
def test_the_triton_stand_in_is_built_as_the_models_family(tmp_path, source, family, origin):
    spec = {
        "name": "ticket-router",
        "source": {**source, "task": "text-classification", "labels": ["a", "b"]},
        "export": {"sequence_length": 32},
        "serving": {"backend": "onnx"},
    }
    args, line = image_build.stand_in_checkpoint(
        image_build.TRITON, {"TRITON_REPOSITORY_SPEC": json.dumps(spec)}, tmp_path
    )
    written = json.loads((tmp_path / "container/triton" / image_build.CHECKPOINT_DIR / "config.json").read_text())
    assert written["model_type"] == family
    assert f"a tiny random {family} ({origin})" in line
    assert (
        json.loads(args["TRITON_REPOSITORY_SPEC"])["source"]["local_path"]
        == f"container/triton/{image_build.CHECKPOINT_DIR}"
    )


def test_the_triton_stand_in_follows_a_local_checkpoints_config_json(tmp_path):
    checkpoint(tmp_path, "container/triton/mine", model_type="roberta")
    assert image_build.stand_in_family(
        "text-classification", source="container/triton/mine", local=True, context=tmp_path, family="bert"
    ) == ("roberta", "its config.json")


def test_the_neuron_stand_in_is_built_as_the_models_family(tmp_path):
    args, line = image_build.stand_in_checkpoint(
        image_build.NEURON_INF2,
        {
            "MODEL_SOURCE": "distilbert-base-uncased",
            "TASK": "text-classification",
            "LABELS": "a,b",
            "SEQUENCE_LENGTH": "32",
        },
        tmp_path,
    )
    written = json.loads((tmp_path / image_build.CHECKPOINT_DIR / "config.json").read_text())
    assert written["model_type"] == "distilbert" and args["MODEL_SOURCE"] == f"./{image_build.CHECKPOINT_DIR}"
    assert "a tiny random distilbert (its name)" in line
    # A hub id that names no family keeps the recipe's BERT.
    assert image_build.stand_in_family(
        "text-classification", source="my-org/x", local=False, context=tmp_path, fallback="bert"
    ) == ("bert", "family unknown: the task's default")
