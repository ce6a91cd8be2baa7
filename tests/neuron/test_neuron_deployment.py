"""A `deployment:` as an ECS native deployment (inferstack/neuron/deployment.py)."""

from __future__ import annotations

import pytest

from inferstack.neuron import deployment as ecs
from inferstack.schema.deployment import Deployment


@pytest.mark.parametrize(
    "config,expected",
    [
        (None, ecs.EcsRollout("ROLLING")),
        (
            Deployment(strategy="canary", size_percent=10, wait_interval_seconds=600, termination_wait_seconds=300),
            ecs.EcsRollout("CANARY", bake_time_minutes=5, canary_percent=10.0, canary_bake_minutes=10),
        ),
        (
            Deployment(strategy="linear", size_percent=25, wait_interval_seconds=300, termination_wait_seconds=300),
            ecs.EcsRollout("LINEAR", bake_time_minutes=5, step_percent=25.0, step_bake_minutes=5),
        ),
        (
            Deployment(strategy="all-at-once", wait_interval_seconds=60, termination_wait_seconds=120),
            ecs.EcsRollout("BLUE_GREEN", bake_time_minutes=3),
        ),
        (
            Deployment(strategy="rolling", size_percent=25, wait_interval_seconds=0),
            ecs.EcsRollout("ROLLING", maximum_percent=125),
        ),
    ],
)
def test_rollout_mapping(config, expected):
    assert ecs.rollout(config) == expected
    assert list(ecs.problems(config)) == []


def test_only_rolling_keeps_the_circuit_breaker_and_only_the_others_shift_traffic():
    assert ecs.rollout(None).circuit_breaker and not ecs.rollout(None).shifts_traffic
    canary = ecs.rollout(Deployment(strategy="canary", size_percent=5, wait_interval_seconds=60))
    assert canary.shifts_traffic and not canary.circuit_breaker


def test_problems_name_the_key():
    config = Deployment(
        strategy="linear",
        size_percent=20,
        wait_interval_seconds=61,
        termination_wait_seconds=59,
        maximum_execution_timeout_seconds=1200,
    )
    assert [key for key, _ in ecs.problems(config)] == [
        ("wait_interval_seconds",),
        ("termination_wait_seconds",),
        ("maximum_execution_timeout_seconds",),
    ]


def test_peak_percent_is_what_the_instance_group_must_hold():
    # rolling: its maximumPercent (the whole new fleet first without a deployment); the blue/green family
    # scales green to the full count beside blue
    assert ecs.rollout(None).peak_percent == 200
    assert ecs.rollout(Deployment(strategy="rolling", size_percent=25, wait_interval_seconds=0)).peak_percent == 125
    for config in (
        Deployment(strategy="canary", size_percent=10, wait_interval_seconds=600),
        Deployment(strategy="linear", size_percent=25, wait_interval_seconds=300),
        Deployment(strategy="all-at-once", wait_interval_seconds=60, termination_wait_seconds=0),
    ):
        assert ecs.rollout(config).peak_percent == 200
