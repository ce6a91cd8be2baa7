"""When requests are due (an open system): one scheduling user per generator, phases spread so that any window
holds the rate's share of requests, and a schedule that never skips or doubles what is owed, however late the
generator is and however the steps change."""

from __future__ import annotations

import pytest

from inferstack.loadtest import pacing
from inferstack.loadtest.spec import Step


def test_one_scheduling_user_per_generator():
    assert [pacing.users_for(n) for n in (0, 1, 2, 10)] == [1, 1, 2, 10]


def _sent_in(window: tuple[float, float], users: int, interval: float, anchor: float = 0.0) -> int:
    start, end = window
    count = 0
    for index in range(users):
        slot = pacing.next_slot(start, anchor, interval, pacing.phase(index))
        while slot < end:
            count += 1
            slot = pacing.next_due(slot, interval, anchor, interval, pacing.phase(index))
    return count


@pytest.mark.parametrize("users", [1, 2, 3, 10, 40])
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


def test_the_next_due_time_follows_the_grid_whatever_the_time_is_now():
    # A generator that fell behind still owes every request: next_due does not look at the clock, so a due time
    # in the past is sent at once (late) instead of being skipped for the first slot from now.
    due, dues = 10.0, []
    for _ in range(5):
        due = pacing.next_due(due, 0.1, anchor=0.0, interval=0.1, phase=0.0)
        dues.append(round(due, 9))
    assert dues == [10.1, 10.2, 10.3, 10.4, 10.5]


def test_a_step_change_neither_skips_nor_doubles_what_was_owed():
    # Step 1: every 0.1 s from 0; step 2 (from 1.05): every 0.05 s. A user whose last request was due at 0.9
    # (late, say) sends the old step's 1.0 next, then joins the new grid at its start, not before.
    old, new, anchor = 0.1, 0.05, 1.05
    due = pacing.next_due(0.9, old, anchor, new, phase=0.0)
    assert due == pytest.approx(1.0)
    due = pacing.next_due(due, old, anchor, new, phase=0.0)
    assert due == pytest.approx(1.05)
    assert pacing.next_due(due, new, anchor, new, phase=0.0) == pytest.approx(1.10)
    # With a phase: the first slot of the new grid at or after its start.
    assert pacing.next_due(0.99, old, anchor, new, phase=0.5) == pytest.approx(1.075)


def test_step_at_walks_the_steps_and_ends_after_the_last():
    steps = (Step(rate=1, seconds=2), Step(rate=2, seconds=3))
    assert [pacing.step_at(steps, t) for t in (0.0, 1.99, 2.0, 4.99, 5.0, 60.0)] == [0, 0, 1, 1, None, None]


def test_settle_covers_start_up_and_one_interval_but_at_most_a_quarter_of_the_step():
    assert pacing.settle_s(Step(rate=5, seconds=60), 0.05, None) == pytest.approx(pacing.SETTLE_S + 0.05)
    assert pacing.settle_s(Step(rate=40, seconds=60), 0.05, 2.0) == pytest.approx(pacing.SETTLE_S + 2.0)
    assert pacing.settle_s(Step(rate=40, seconds=4), 0.05, 2.0) == pytest.approx(1.0)
