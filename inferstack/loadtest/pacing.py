"""When each request of a step is due: an open system. Every generator runs one scheduling user that sends on a
fixed grid (its share of the step's rate), whether or not earlier requests came back; a request that cannot
leave on time leaves as soon as it can, late, and its latency still counts from when it was due. Nothing owed
is skipped: a generator that falls behind sends its backlog late rather than dropping it (the coordinated
omission a closed loop commits, where a slow answer delays the next request it would have measured)."""

from __future__ import annotations

import math

from inferstack.loadtest.spec import Step

# Locust's shape changes the users at most a second late (its tick), and spawns them within a quarter second.
SETTLE_S = 1.0
# Generators take phases 0, g, 2g, ... (mod 1) of the interval, g the golden ratio's fraction: however many run,
# their phases stay evenly spread (a low-discrepancy sequence), so a step's request count over any window is its
# rate times the window within a request or two, and the generators' streams interleave instead of colliding.
GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0
# A generator's timers (gevent's, on libev's epoll backend, which waits in whole milliseconds) fire after the time
# asked for: 0.6 ms median, 1.2 ms at the 99th percentile (measured here). A request woken that late would carry
# the generator's lateness in its latency, counted from when it was due. So a request is woken this much early
# and sent at once: it leaves within about a millisecond of its due time, mostly before it, and its latency
# counts from when it left when that was before it was due (Recorder.ended).
TIMER_LEAD_S = 0.001


def users_for(generators: int) -> int:
    """One scheduling user per generator process: its requests leave from greenlets of their own, so a user is a
    clock, not a connection (Locust's dispatcher gives each worker one when users == workers)."""
    return max(1, generators)


def phase(index: int) -> float:
    """The phase (a fraction of the interval) of the `index`-th scheduling user."""
    return (index * GOLDEN) % 1.0


def next_slot(after: float, anchor: float, interval: float, phase: float) -> float:
    """The first time at or after `after` on the user's grid: anchor + (j + phase) * interval for an integer j."""
    j = math.ceil((after - anchor) / interval - phase - 1e-9)
    return anchor + (j + phase) * interval


def next_due(previous: float, previous_interval: float, anchor: float, interval: float, phase: float) -> float:
    """The request due after the one due at `previous`, whatever the time is now (a due time in the past is sent
    at once, late). `anchor` and `interval`: the current step's grid. A request of an earlier step (due before
    `anchor`) is followed on that step's own interval until its grid reaches the new step's start, so a step
    change neither skips nor doubles what was owed."""
    if previous < anchor:
        following = previous + previous_interval
        if following < anchor:
            return following
        return next_slot(anchor, anchor, interval, phase)
    return next_slot(previous + interval / 2, anchor, interval, phase)


def settle_s(step: Step, interval: float, previous_interval: float | None) -> float:
    """How long a step runs before it is measured: SETTLE_S for Locust to start its users and every generator to
    hear the step, plus the longest pacing interval (a user adopts the new grid after its current wait); at most a
    quarter of the step."""
    return min(step.seconds / 4.0, SETTLE_S + max(interval, previous_interval or 0.0))


def step_at(steps: tuple[Step, ...], run_time: float) -> int | None:
    """The step running `run_time` seconds into the test; None once every step has run."""
    end = 0.0
    for index, step in enumerate(steps):
        end += step.seconds
        if run_time < end:
            return index
    return None
