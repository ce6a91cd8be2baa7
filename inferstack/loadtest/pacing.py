"""How a step's rate becomes Locust users: enough users share the rate, each sending one request at a time,
paced to a fixed interval (Locust's constant_throughput, with the interval changed at every step). Each user
sends on its own phase of the interval, so together they send a steady stream, not bursts."""

from __future__ import annotations

import math
from dataclasses import dataclass

from inferstack.loadtest.spec import Step

# A paced user is closed-loop (one request in flight), so it can never exceed 1 / latency requests a second.
# Paced at half of what a user whose every request took the SLO's p99 could send, a user keeps its pace while
# the model meets its SLO and stops keeping it (the step's achieved rate falls short: fail) only once requests
# take twice the SLO, so a slow model shows in the rate as well as in the latencies. Half, not all: a user that
# is always sending would turn every slow answer into a missed request.
HEADROOM = 0.5
# Few users, but not one per 1,000 req/s: at 50 req/s a user's interval (20 ms) stays well above the
# generator's scheduling jitter (gevent, sub-millisecond), and a worker carries thousands of them.
MAX_PER_USER_RATE = 50.0
# Locust's shape changes the users at most a second late (its tick), and spawns them within a quarter second.
SETTLE_S = 1.0
# Users take phases 0, g, 2g, ... (mod 1) of the interval, g the golden ratio's fraction: however many users a
# generator runs, their phases stay evenly spread (a low-discrepancy sequence), so a step's request count over
# any window is its rate times the window within a request or two, not within random phases' square root.
GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


@dataclass(frozen=True)
class Pace:
    users: int  # across every generator
    per_user_rate: float  # requests per second each user sends


def per_user_ceiling(p99_slo_ms: float) -> float:
    return min(MAX_PER_USER_RATE, HEADROOM * 1000.0 / p99_slo_ms)


def pace_for(rate: float, p99_slo_ms: float) -> Pace:
    """As few users as carry `rate` at most per_user_ceiling each; together they send exactly `rate`."""
    users = max(1, math.ceil(rate / per_user_ceiling(p99_slo_ms) - 1e-9))
    return Pace(users=users, per_user_rate=rate / users)


def phase(index: int) -> float:
    """The phase (a fraction of the interval) of a generator's `index`-th user."""
    return (index * GOLDEN) % 1.0


def next_slot(after: float, anchor: float, interval: float, phase: float) -> float:
    """The first time at or after `after` on the user's grid: anchor + (j + phase) * interval for an integer j."""
    j = math.ceil((after - anchor) / interval - phase - 1e-9)
    return anchor + (j + phase) * interval


def settle_s(step: Step, pace: Pace, previous: Pace | None) -> float:
    """How long a step runs before it is measured: SETTLE_S for Locust to start its users, plus the longest
    pacing interval (a user adopts the new pace after its current wait, a new user starts within one
    interval); at most a quarter of the step."""
    longest = max(1.0 / pace.per_user_rate, 1.0 / previous.per_user_rate if previous else 0.0)
    return min(step.seconds / 4.0, SETTLE_S + longest)


def step_at(steps: tuple[Step, ...], run_time: float) -> int | None:
    """The step running `run_time` seconds into the test; None once every step has run."""
    end = 0.0
    for index, step in enumerate(steps):
        end += step.seconds
        if run_time < end:
            return index
    return None
