"""How a step's rate becomes paced users: exactly the rate, few users, each able to keep its pace within the
SLO, and phases spread so that any window holds the rate's share of requests."""

from __future__ import annotations

import pytest

from inferstack.loadtest import pacing
from inferstack.loadtest.spec import Step


@pytest.mark.parametrize("rate, slo_ms", [(1.0, 10.0), (7.5, 100.0), (333.0, 10.0), (20.0, 2000.0), (16000.0, 10.0)])
def test_users_together_send_exactly_the_rate_and_each_can_keep_up_within_the_slo(rate, slo_ms):
    pace = pacing.pace_for(rate, slo_ms)
    assert pace.users * pace.per_user_rate == pytest.approx(rate)
    # One request in flight per user: at the SLO's p99 a user still has half its interval to spare.
    assert pace.per_user_rate * slo_ms / 1000.0 <= pacing.HEADROOM + 1e-9
    assert pace.per_user_rate <= pacing.MAX_PER_USER_RATE + 1e-9
    # As few users as that allows: one user fewer could not carry the rate.
    assert pace.users == 1 or rate / (pace.users - 1) > pacing.per_user_ceiling(slo_ms)


def _sent_in(window: tuple[float, float], users: int, interval: float, anchor: float = 0.0) -> int:
    start, end = window
    count = 0
    for index in range(users):
        slot = pacing.next_slot(start, anchor, interval, pacing.phase(index))
        while slot < end:
            count += 1
            slot = pacing.next_slot(slot + interval / 2, anchor, interval, pacing.phase(index))
    return count


@pytest.mark.parametrize("users", [3, 10, 40, 97])
def test_phases_spread_so_any_window_holds_the_rate_to_a_request_or_two(users):
    interval = 0.7  # each user's rate is 1 / 0.7 per second
    rate = users / interval
    for start in (0.0, 0.123, 1.5, 2.9):
        for length in (0.5, 1.7, 3.0):
            sent = _sent_in((start, start + length), users, interval, anchor=0.05)
            assert abs(sent - rate * length) <= 2.5, (start, length, sent, rate * length)


def test_next_slot_is_on_the_users_grid_and_never_in_the_past():
    for after in (0.0, 0.01, 0.33, 5.0, 5.3):
        slot = pacing.next_slot(after, anchor=1.0, interval=0.5, phase=0.25)
        assert slot >= after - 1e-9
        assert slot - 0.5 < after  # the first one at or after `after`
        j = (slot - 1.0) / 0.5 - 0.25
        assert abs(j - round(j)) < 1e-6


def test_step_at_walks_the_steps_and_ends_after_the_last():
    steps = (Step(rate=1, seconds=2), Step(rate=2, seconds=3))
    assert [pacing.step_at(steps, t) for t in (0.0, 1.99, 2.0, 4.99, 5.0, 60.0)] == [0, 0, 1, 1, None, None]


def test_settle_covers_start_up_and_one_interval_but_at_most_a_quarter_of_the_step():
    slow, fast = pacing.Pace(users=10, per_user_rate=0.5), pacing.Pace(users=2, per_user_rate=20.0)
    assert pacing.settle_s(Step(rate=5, seconds=60), fast, None) == pytest.approx(pacing.SETTLE_S + 0.05)
    assert pacing.settle_s(Step(rate=40, seconds=60), fast, slow) == pytest.approx(pacing.SETTLE_S + 2.0)
    assert pacing.settle_s(Step(rate=40, seconds=4), fast, slow) == pytest.approx(1.0)
