"""The numbers an inference-components fleet deploys that the packing planner adds for the stacks: the
variant's initial instances, each component's initial copies, copies per instance, and copy counts inside
the fleet's off-hours windows (inferstack.capacity.packing)."""

from __future__ import annotations

from inferstack import config
from inferstack.capacity import packing
from inferstack.schema.fleets import FleetCapacity, FleetEnvironmentOverride
from inferstack.schema.off_hours import OffHours
from tests.support.paths import CONFIG_DIR

PROJECT = config.load(CONFIG_DIR)
FLEET = "triton-shared"


def plan(fleet=None, env: str = "dev") -> packing.ComponentFleetPlan:
    result = packing.plan_fleet(
        FLEET, fleet or PROJECT.fleets[FLEET], PROJECT.fleet_members(FLEET), env, PROJECT.environments[env]
    )
    assert isinstance(result, packing.ComponentFleetPlan)
    return result


def window(min_: int, max_: int) -> OffHours:
    return OffHours(
        start="cron(0 20 ? * MON-FRI *)", end="cron(0 7 ? * MON-FRI *)", min=min_, max=max_, time_zone="Europe/Berlin"
    )


def test_a_fleet_at_zero_starts_one_instance_and_one_copy_of_each_model():
    shipped = plan()
    assert (shipped.min_capacity, shipped.initial_instances) == (0, 1)  # InitialInstanceCount's minimum is 1
    for share in shipped.shares:
        assert (share.min_copies, share.initial_copies) == (0, 1)
        # one T4 per ml.g4dn.xlarge and one GPU per copy: one copy of the model alone per instance
        assert share.copies_per_instance == 1
        assert share.max_copies == share.copies_per_instance * shipped.max_capacity
    assert shipped.smallest_copy_count("bert-large-classifier") == 0


def test_windows_as_copy_counts():
    fleet = PROJECT.fleets[FLEET].model_copy(
        update={
            "capacity": FleetCapacity(instance_type="ml.g4dn.xlarge", min=2, max=4),
            "environments": {"dev": FleetEnvironmentOverride(off_hours=(window(1, 2),))},
        }
    )
    kept = plan(fleet)
    (night,) = kept.windows
    share = kept.share("t5-spelling")
    assert (share.min_copies, share.initial_copies, kept.initial_instances) == (1, 1, 2)
    # inside: the window's minimum as copies, its maximum instances' worth of copies
    assert kept.window_copies("t5-spelling", night) == (1, 2 * share.copies_per_instance)
    assert kept.smallest_copy_count("t5-spelling") == 1
    closed = plan(
        fleet.model_copy(update={"environments": {"dev": FleetEnvironmentOverride(off_hours=(window(0, 1),))}})
    )
    assert closed.scales_to_zero
    assert closed.window_copies("t5-spelling", closed.windows[0]) == (0, 1)
    assert closed.smallest_copy_count("t5-spelling") == 0
