"""Capacity is derived from SLO and profile; these cases are computed by hand from the YAML numbers."""

from __future__ import annotations

import pytest

from inferstack import config
from inferstack.capacity import planning
from tests.support.paths import CONFIG_DIR


@pytest.fixture(scope="module")
def project():
    return config.load(CONFIG_DIR)


def test_target_formula_is_rps_times_safety_times_60():
    assert planning.target_per_minute(53.2, 0.5) == pytest.approx(1596.0)
    assert planning.target_per_minute(4000, 0.75) == pytest.approx(180000.0)


def test_intent_bert_in_prod(project):
    plan = planning.plan(project.model("intent-bert"), "prod", project.environments["prod"])
    # 16,000 TPS / (4,000/s x 0.5) = 8 instances; min/max from the model's capacity block
    assert (plan.instance_type, plan.instances_at_peak, plan.min_capacity, plan.max_capacity) == (
        "inf1.6xlarge",
        8,
        2,
        10,
    )
    assert plan.target_per_instance_per_minute == pytest.approx(4000 * 0.5 * 60)
    assert plan.meets_slo


def test_intent_bert_dev_override(project):
    plan = planning.plan(project.model("intent-bert"), "dev", project.environments["dev"])
    # dev: inf1.xlarge at 1,000/s, peak 400 TPS -> ceil(400 / 500) = 1
    assert (plan.instance_type, plan.throughput_per_instance, plan.instances_at_peak) == ("inf1.xlarge", 1000, 1)
    assert (plan.min_capacity, plan.max_capacity) == (1, 2)


def test_bert_large_prod(project):
    plan = planning.plan(project.model("bert-large-classifier"), "prod", project.environments["prod"])
    # 3,192 invocations/min = 53.2/s; 200 TPS / (53.2 x 0.5) = 7.52 -> 8
    assert plan.instances_at_peak == 8
    assert plan.target_per_instance_per_minute == pytest.approx(1596.0)


def test_exact_multiple_does_not_round_up(project):
    model = project.model("intent-bert")
    exact = model.model_copy(update={"slo": model.slo.model_copy(update={"peak_tps": 6000.0})})
    plan = planning.plan(exact, "prod", project.environments["prod"])
    assert plan.instances_at_peak == 3  # 6,000 / 2,000 exactly


def test_model_safety_factor_overrides_environment_default(project):
    model = project.model("intent-bert")
    tuned = model.model_copy(update={"capacity": model.capacity.model_copy(update={"safety_factor": 0.8})})
    plan = planning.plan(tuned, "prod", project.environments["prod"])
    assert plan.safety_factor == 0.8 and plan.instances_at_peak == 5  # ceil(16000 / 3200)


def test_missing_profile_is_a_planning_error(project):
    model = project.model("intent-bert")
    no_profile = model.model_copy(update={"throughput_profile": {}})
    with pytest.raises(planning.PlanningError, match="no throughput_profile entry for inf1.6xlarge"):
        planning.plan(no_profile, "prod", project.environments["prod"])
