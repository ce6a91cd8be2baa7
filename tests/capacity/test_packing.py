"""The fleet planner (inferstack/capacity/packing.py): NeuronCore splits, inference-component copies, the
off-hours share of a month, and the costs `plan` prints, checked against their definitions."""

from __future__ import annotations

import math

import pytest

from inferstack import config
from inferstack.capacity import packing, planning, pricing, schedule
from inferstack.schema import instances
from tests.support.cli import run


@pytest.fixture(scope="module")
def project():
    from tests.support.paths import CONFIG_DIR

    return config.load(CONFIG_DIR)


def fleet_plan(project, fleet: str, env: str):
    return packing.plan_fleet(
        fleet, project.fleets[fleet], project.fleet_members(fleet), env, project.environments[env]
    )


# ---------------------------------------------------------------- neuron-cores


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_neuron_fleet_splits_every_core_into_disjoint_ranges_that_carry_each_peak(project, env):
    result = fleet_plan(project, "intent-pack", env)
    cores = instances.get(result.instance_type).neuron_cores
    used = [core for share in result.shares for core in range(share.first_core, share.first_core + share.cores)]
    assert sorted(used) == list(range(cores)), "each core belongs to exactly one model"
    assert result.spare_cores == 0
    for share in result.shares:
        model = project.model(share.model)
        assert share.cores % model.compile.neuron_cores_per_model == 0
        assert (share.cores // model.compile.neuron_cores_per_model) % share.workers == 0
        assert share.workers <= model.serving.workers
        carried = result.instances_at_peak * share.cores * share.throughput_per_core * result.safety_factor
        assert carried >= share.peak_tps
    # Each member on its own serving.port, whatever its place in the fleet.
    assert (
        [s.port for s in result.shares] == [project.model(s.model).serving.port for s in result.shares] == [8080, 8081]
    )


def test_neuron_fleet_is_the_smallest_that_fits(project):
    """One instance fewer cannot give every model the cores its peak needs."""
    result = fleet_plan(project, "intent-pack", "prod")
    smaller = result.instances_at_peak - 1
    needed = sum(
        math.ceil(s.peak_tps / (smaller * s.throughput_per_core * result.safety_factor)) for s in result.shares
    )
    assert needed > result.neuron_cores
    assert (result.instances_at_peak, [s.cores for s in result.shares]) == (13, [10, 6])


def test_neuron_target_per_task_is_the_model_cores_at_the_safety_factor(project):
    result = fleet_plan(project, "intent-pack", "staging")
    intent = result.share("intent-bert")
    assert result.target_per_task_per_minute("intent-bert") == pytest.approx(
        planning.target_per_minute(intent.cores * 4000 / 16, 0.5)
    )


def test_spare_cores_go_to_the_model_with_the_least_headroom():
    cores = packing._spread_spare([2, 1], unit=[1, 1], peaks=[100.0, 100.0], per_core=[100.0, 10.0], total=6)
    assert cores == [2, 4]  # the second model is the tighter one (10/s per core) until all 6 are used


def test_neuron_fleet_whose_models_cannot_share_an_instance(project):
    fleet = project.fleets["intent-pack"].model_copy(update={"models": ("intent-bert", "duplicate-bert")})
    members = [
        m.model_copy(update={"compile": m.compile.model_copy(update={"neuron_cores_per_model": 3})})
        for m in project.fleet_members("intent-pack")
    ]
    with pytest.raises(packing.PackingError, match="need at least 6 NeuronCores per instance"):
        packing.plan_neuron_fleet("intent-pack", fleet, members, "dev", project.environments["dev"])


# ---------------------------------------------------------------- inference components


def test_component_fleet_copies_and_instances(project):
    result = fleet_plan(project, "triton-shared", "dev")
    assert result.scales_to_zero and result.min_capacity == 0
    bert, t5 = result.share("bert-large-classifier"), result.share("t5-spelling")
    assert (bert.copies_at_peak, t5.copies_at_peak) == (1, 1)
    assert (bert.min_copies, bert.max_copies) == (0, 4)  # one T4 per copy, one per ml.g4dn.xlarge, 4 instances
    assert result.instances_at_peak == 2 and sorted(map(len, result.placement)) == [1, 1]
    assert result.target_per_copy_per_minute("t5-spelling") == pytest.approx(planning.target_per_minute(120, 0.5))


def test_copies_pack_onto_a_multi_gpu_instance(project):
    """On ml.g4dn.12xlarge (4 T4s) both models' copies share one instance; a copy's throughput is the
    profiled single-GPU instance's, since it holds one of its GPUs."""
    fleet = project.fleets["triton-shared"]
    fleet = fleet.model_copy(
        update={"capacity": fleet.capacity.model_copy(update={"instance_type": "ml.g4dn.12xlarge"})}
    )
    result = packing.plan_component_fleet(
        "triton-shared", fleet, project.fleet_members("triton-shared"), "dev", project.environments["dev"]
    )
    assert result.instances_at_peak == 1 and len(result.placement[0]) == 2
    assert result.share("bert-large-classifier").max_copies == 16
    assert result.share("bert-large-classifier").throughput_per_copy == 53.2


def test_cold_start_is_alarm_launch_and_start_up(project):
    t5 = project.model("t5-spelling")
    from inferstack.triton import startup

    assert packing.cold_start_seconds(t5) == (
        packing.NO_CAPACITY_ALARM_SECONDS + packing.INSTANCE_LAUNCH_SECONDS + startup.estimated_seconds(t5)
    )
    assert fleet_plan(project, "triton-shared", "dev").share(
        "t5-spelling"
    ).cold_start_seconds == packing.cold_start_seconds(t5)


# ---------------------------------------------------------------- schedules and cost


@pytest.mark.parametrize(
    "start,end,hours_per_week",
    [
        ("cron(0 20 ? * MON-FRI *)", "cron(0 7 ? * MON-FRI *)", 4 * 11 + 59),  # weeknights, and Fri 20:00 to Mon 07:00
        ("cron(0 19 ? * FRI *)", "cron(0 6 ? * MON *)", 59),  # the weekend
        ("cron(30 22 * * ? *)", "cron(30 6 * * ? *)", 7 * 8),  # every night, minutes honoured
        ("cron(0 0 1 * ? *)", "cron(0 0 2 * ? *)", None),  # the first day of each month (day-of-month field)
    ],
)
def test_window_share_of_the_week(start, end, hours_per_week):
    share = schedule.open_share(start, end, "UTC")
    if hours_per_week is None:
        assert share == pytest.approx(24 / (28 * 24))  # one day in the 28 reference days (February 1st)
    else:
        assert share == pytest.approx(hours_per_week / 168)


@pytest.mark.parametrize(
    "expression,message",
    [
        ("cron(0 25 ? * MON-FRI *)", "outside 0-23"),
        ("cron(0 7 L * ? *)", "L, W and # are not evaluated"),
        ("cron(0 7 ? * FUNDAY *)", "not a number or a name"),
        ("cron(*/0 7 ? * MON *)", "bad step"),
    ],
)
def test_unreadable_crons_are_errors(expression, message):
    with pytest.raises(schedule.CronError, match=message):
        schedule.open_share(expression, "cron(0 7 ? * MON *)")


def test_fleet_cost_against_one_model_per_accelerator(project):
    env = project.environments["dev"]
    result = fleet_plan(project, "intent-pack", "dev")
    cost = packing.cost(result, project.fleet_members("intent-pack"), env)
    price = pricing.price("inf1.xlarge").usd_per_hour
    assert cost.monthly_at_peak == pytest.approx(result.instances_at_peak * price * pricing.HOURS_PER_MONTH)
    night = schedule.open_share("cron(0 20 ? * MON-FRI *)", "cron(0 7 ? * MON-FRI *)", "Europe/Berlin")
    # closed at night (max 0): only the daytime share of the month is paid
    assert cost.monthly_with_off_hours == pytest.approx(cost.monthly_at_peak * (1 - night))
    assert cost.monthly_at_min == pytest.approx(1 * price * pricing.HOURS_PER_MONTH * (1 - night))
    dedicated = [planning.plan(m, "dev", env) for m in project.fleet_members("intent-pack")]
    assert cost.dedicated_instances_at_peak == sum(p.instances_at_peak for p in dedicated)
    assert cost.dedicated_monthly_at_min == pytest.approx(
        sum(p.min_capacity for p in dedicated) * price * pricing.HOURS_PER_MONTH
    )
    assert cost.monthly_saving_at_min == pytest.approx(cost.dedicated_monthly_at_min - cost.monthly_at_min)


def test_scale_to_zero_costs_nothing_at_the_floor(project):
    result = fleet_plan(project, "triton-shared", "dev")
    cost = packing.cost(result, project.fleet_members("triton-shared"), project.environments["dev"])
    assert cost.monthly_at_min == 0
    assert cost.dedicated_monthly_at_min == pytest.approx(2 * 0.736 * pricing.HOURS_PER_MONTH)


def test_plan_prints_the_layout_and_the_saving():
    result = run("-m", "inferstack", "plan", "--env", "dev")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "fleet intent-pack (neuron-cores) in dev: inf1.xlarge x 1..3, 2 at peak, SLO met" in text
    assert "  intent-bert: cores 0-2, port 8080, 3 workers;" in text
    assert "  duplicate-bert: cores 3, port 8081, 1 worker;" in text
    assert "fleet triton-shared (sagemaker-inference-components) in dev: ml.g4dn.xlarge x 0..4" in text
    saving = [line for line in text.splitlines() if line.startswith("  saving")]
    assert len(saving) == 2 and all(float(line.split()[1].replace(",", "")) > 0 for line in saving)


def test_plan_json_carries_the_fleets():
    import json

    result = run("-m", "inferstack", "plan", "--json", "--env", "prod")
    fleets = json.loads(result.stdout)["fleets"]
    assert [f["fleet"] for f in fleets] == ["intent-pack"]  # triton-shared deploys in dev only
    assert fleets[0]["instances_at_peak"] == 13
    assert fleets[0]["cost"]["monthly_saving_at_min"] == pytest.approx(
        fleets[0]["cost"]["dedicated_monthly_at_min"] - fleets[0]["cost"]["monthly_at_min"]
    )


def test_in_flight_target_is_littles_law_at_the_request_target(project):
    """Concurrency per task = arrival rate at the request-count target x time in the server (profiled p99)."""
    env = project.environments["prod"]
    dedicated = planning.plan(project.model("intent-bert"), "prod", env)
    assert dedicated.target_in_flight_per_instance == pytest.approx(4000 * 0.5 * 0.008)
    result = fleet_plan(project, "intent-pack", "prod")
    share = result.share("duplicate-bert")
    assert result.target_in_flight_per_task("duplicate-bert") == pytest.approx(
        result.target_per_task_per_minute("duplicate-bert") / 60 * share.profile_p99_ms / 1000
    )
