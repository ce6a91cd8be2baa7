"""A model file's `deploy_in`: a model deployed in some environments only is not validated, planned, built,
pinned, promoted or smoke-tested anywhere else; what contradicts it (an unknown environment, an override for
an environment it is not in, a fleet that deploys it where it is not) is one line naming file and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferstack import cli, config
from inferstack.config import release_pin
from inferstack.synthesis.shards import plan_shards
from tests.support.config_edits import edit_yaml, problems_of, set_at

MODEL = "intent-bert-inf2"  # on no fleet: its own stack in every environment today
FILE = f"{MODEL}.yaml"


def deploy_only_in(config_dir: Path, *envs: str, model_file: str = FILE) -> None:
    edit_yaml(config_dir / model_file, set_at("deploy_in", value=list(envs)))


def only(problems: list[str], text: str) -> str:
    matching = [p for p in problems if text in p]
    assert len(matching) == 1, (text, problems)
    assert "\n" not in matching[0]
    return matching[0]


# ---------------------------------------------------------------- what validate rejects


def test_an_unknown_environment_in_deploy_in_is_rejected_with_its_key_and_a_suggestion(config_copy):
    deploy_only_in(config_copy, "dev", "prdo")
    problem = only(problems_of(config_copy), "deploy_in.1:")
    assert problem.startswith(f"model_configs/{FILE}:")
    assert problem.endswith("deploy_in.1: unknown environment 'prdo' (did you mean 'prod'?); known: dev, staging, prod")


def test_a_model_deployed_nowhere_is_rejected(config_copy):
    deploy_only_in(config_copy)
    problem = only(problems_of(config_copy), "deploy_in:")
    assert problem.startswith(f"model_configs/{FILE}:") and "deploy_in: Tuple should have at least 1 item" in problem


def test_repeated_environments_are_rejected(config_copy):
    deploy_only_in(config_copy, "dev", "dev")
    only(problems_of(config_copy), "deploy_in: environments repeat")


def test_an_override_for_an_environment_the_model_is_not_deployed_in_is_rejected(config_copy):
    deploy_only_in(config_copy, "dev")  # the file keeps its staging block
    text = (config_copy / FILE).read_text().splitlines()
    problem = only(problems_of(config_copy), "environments.staging:")
    assert problem == (
        f"model_configs/{FILE}:{text.index('  staging:') + 1}: environments.staging: staging is not in "
        f"deploy_in (dev), so this override would never apply: add staging to deploy_in, or remove "
        f"the block"
    )


def test_a_neuron_cores_fleet_member_missing_from_an_environment_is_rejected_in_environments_yaml(config_copy):
    deploy_only_in(config_copy, "dev", "staging", model_file="duplicate-bert.yaml")
    text = (config_copy / "environments.yaml").read_text().splitlines()
    problem = only(problems_of(config_copy), "fleets.intent-pack.models.1:")
    line = int(problem.split(":")[1])
    assert problem.startswith("model_configs/environments.yaml:") and "duplicate-bert" in text[line - 1]
    assert (
        "duplicate-bert is not deployed in prod (its deploy_in: dev, staging), where fleet intent-pack deploys: "
        "a neuron-cores fleet deploys in every environment"
    ) in problem


def test_an_inference_components_fleet_member_must_be_deployed_where_the_fleet_is(config_copy):
    deploy_only_in(config_copy, "staging", "prod", model_file="t5-spelling.yaml")
    edit_yaml(config_copy / "t5-spelling.yaml", lambda d: d["environments"].pop("dev"))
    problem = only(problems_of(config_copy), "fleets.triton-shared.models.1:")
    assert (
        "t5-spelling is not deployed in dev (its deploy_in: staging, prod), where fleet triton-shared deploys"
        in problem
    )


def test_a_fleet_member_deployed_wherever_the_fleet_is_loads(config_copy):
    """triton-shared deploys in dev only: a member kept out of prod is fine."""
    deploy_only_in(config_copy, "dev", "staging", model_file="t5-spelling.yaml")
    project = config.load(config_copy)
    assert project.fleet_of("t5-spelling", "dev") == "triton-shared"
    assert "t5-spelling" not in {m.name for m in project.models_in("prod")}


# ---------------------------------------------------------------- not validated or planned where it is not deployed


def shrink_prod(config_dir: Path) -> None:
    """prod (no override) gets max 1, which cannot carry intent-bert-inf2's peak of 2,000 TPS."""
    edit_yaml(config_dir / FILE, set_at("capacity", "max", value=1))


def test_an_environment_the_model_is_not_deployed_in_is_not_validated(config_copy):
    shrink_prod(config_copy)
    only(problems_of(config_copy), "capacity.max: peak 2000 TPS needs 3 x inf2.xlarge")  # (environment prod)
    deploy_only_in(config_copy, "dev", "staging")
    project = config.load(config_copy)
    assert project.model(MODEL).deploy_in == ("dev", "staging")


def test_plan_omits_it_and_says_where_it_is_not_deployed(config_copy, capsys):
    shrink_prod(config_copy)
    deploy_only_in(config_copy, "dev", "staging")
    assert cli.main(["plan", "--config-dir", str(config_copy), "--env", "prod"]) == 0
    out = capsys.readouterr().out
    table = out.split("\n\n")[0]
    assert MODEL not in table and "t5-spelling" in table
    assert f"{MODEL}: not deployed in prod (deploy_in: dev, staging)" in out.splitlines()

    assert cli.main(["plan", "--config-dir", str(config_copy), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(r["env"] for r in report["models"] if r["model"] == MODEL) == ["dev", "staging"]
    assert report["not_deployed"] == [{"model": MODEL, "env": "prod", "deploy_in": ["dev", "staging"]}]


def test_plan_compare_leaves_out_a_generation_pair_where_one_is_not_deployed(config_copy, capsys):
    deploy_only_in(config_copy, "dev", "staging")
    assert cli.main(["plan", "--config-dir", str(config_copy), "--compare", "--json"]) == 0
    generations = json.loads(capsys.readouterr().out)["generations"]
    assert {g["env"] for g in generations} == {"dev", "staging"}


# ---------------------------------------------------------------- not built, pinned, promoted or smoke-tested there


def test_image_units_stacks_and_synth_shards_leave_it_out_where_it_is_not_deployed(config_copy):
    from stacks.app_builder import shard_groups

    deploy_only_in(config_copy, "dev", "staging")
    project = config.load(config_copy)
    assert [m.name for m in project.models_in("prod")] == [m.name for m in project.models if m.name != MODEL]
    assert MODEL in {u.name for u in project.image_units("staging")}
    assert MODEL not in {u.name for u in project.image_units("prod")}  # pins, promote --to prod, smoke
    deployed = {env: [m.name for m in project.models_in(env)] for env in project.environments}
    shards = plan_shards(
        list(project.environments), deployed, 3, together=shard_groups(project, list(project.environments))
    )
    placed = {(env, m) for shard in shards for env, models in shard.models.items() for m in models}
    assert ("staging", MODEL) in placed and ("prod", MODEL) not in placed


def test_the_stage_builds_no_stack_where_the_model_is_not_deployed(config_copy):
    import aws_cdk as cdk

    from stacks.stage import add_stages
    from tests.support.config_edits import without_fleets
    from tests.support.paths import ROOT

    without_fleets(config_copy, keep_models=(MODEL, "t5-spelling"))
    deploy_only_in(config_copy, "dev", "staging")
    project = config.load(config_copy)
    context = json.loads((ROOT / "cdk.json").read_text())["context"]  # the feature flags `cdk synth` runs with
    stages = add_stages(cdk.App(context=context), project, ["staging", "prod"])
    assert sorted(stages["staging"].serving) == [MODEL, "t5-spelling"]
    assert sorted(stages["prod"].serving) == ["t5-spelling"]


def _pin(env: str, account: str, region: str, units: list[str]) -> dict:
    return {
        "format": release_pin.PIN_FORMAT,
        "environment": env,
        "promoted_from": "staging",
        "images": {
            u: {
                "repository_uri": f"{account}.dkr.ecr.{region}.amazonaws.com/inferstack/{u}",
                "digest": "sha256:" + "a" * 64,
            }
            for u in units
        },
    }


def test_a_release_pin_covers_only_what_the_environment_deploys(config_copy):
    deploy_only_in(config_copy, "dev", "staging")
    units = [u.name for u in config.load(config_copy).image_units("prod")]
    edit_yaml(
        config_copy / "environments.yaml",
        set_at("environments", "prod", "release", value={"manifest": "releases/prod.json"}),
    )
    (config_copy / "releases").mkdir()
    pin = config_copy / "releases" / "prod.json"
    pin.write_text(json.dumps(_pin("prod", "333333333333", "us-west-2", units)))
    assert config.load(config_copy).releases["prod"].images.keys() == set(units)

    pin.write_text(json.dumps(_pin("prod", "333333333333", "us-west-2", units + [MODEL])))
    only(problems_of(config_copy), f"images.{MODEL}: unknown model or fleet")


def test_smoke_refuses_a_model_not_deployed_in_the_environment(config_copy, capsys):
    deploy_only_in(config_copy, "dev", "staging")
    code = cli.main(["smoke", "--env", "prod", "--model", MODEL, "--config-dir", str(config_copy)])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith(f"smoke: error: --model: {MODEL} not deployed in prod")


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_without_deploy_in_a_model_is_everywhere(env):
    from tests.support.paths import CONFIG_DIR

    project = config.load(CONFIG_DIR)
    assert project.models_in(env) == list(project.models)
