"""A hang guard, not a benchmark: fail a call still running after a generous limit. Bounded time is the
behaviour under test (an unbounded alias bomb ran for minutes); figures belong in benchmarks/."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

LIMIT_S = 30.0


@contextlib.contextmanager
def hang_guard(what: str, seconds: float = LIMIT_S) -> Iterator[None]:
    def expire(signum, frame):
        raise TimeoutError(f"{what}: still running after {seconds:g} s (unbounded?)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
