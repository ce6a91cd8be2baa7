"""A one-shot timer with microsecond precision on the event loop: a timerfd (Linux) the loop watches.

The batcher's queue delay (1 ms by default) needs a timer far finer than the loop's own, whose timers and clock
tick in whole milliseconds (a 1 ms delay sent batches anywhere from at once to 2 ms late). The inference thread
kept that time before: every batch woke it once just to set its timeout, and on cores the event loop shares with
it, that wake-up and the GIL changing hands twice cost the thread about 30 us of CPU per batch, between a
batch's first request and its last. A timerfd is armed and disarmed with one system call each from the loop's
own thread, and wakes the loop itself when it expires. Python 3.11 has no os.timerfd_create (3.13 does), so the
calls go through ctypes; where they are missing (not Linux), ``LoopTimer.create`` returns None and the caller
keeps its own timer.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import math
import os
from collections.abc import Callable

log = logging.getLogger("loop_timer")

CLOCK_MONOTONIC = 1  # time.monotonic's clock on Linux
TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    except (OSError, AttributeError):  # no libc by that name, or one without timerfd
        return None
    return libc


class LoopTimer:
    """At most one pending ``callback`` at a time monotonic instant, called on the loop; ``call_at`` replaces
    the one pending. Not thread-safe: the loop's thread only."""

    def __init__(self, loop: asyncio.AbstractEventLoop, libc: ctypes.CDLL, fd: int) -> None:
        self._loop = loop
        self._settime = libc.timerfd_settime
        self._fd = fd
        self._spec = _Itimerspec()  # reused: arming allocates nothing
        self._spec_ref = ctypes.byref(self._spec)
        self._callback: Callable[[], None] | None = None
        loop.add_reader(fd, self._expired)

    @classmethod
    def create(cls, loop: asyncio.AbstractEventLoop) -> LoopTimer | None:
        """A timer on ``loop`` (call on its thread), or None where there is no timerfd."""
        libc = _libc()
        if libc is None:
            return None
        fd = libc.timerfd_create(CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            log.warning("no timerfd (%s): the caller keeps its own timer", os.strerror(ctypes.get_errno()))
            return None
        return cls(loop, libc, fd)

    def call_at(self, when: float, callback: Callable[[], None]) -> LoopTimer:
        """``callback()`` on the loop at ``when`` (time.monotonic) or as soon after as the loop gets to it; at
        once (on the loop's next turn) when ``when`` has passed. Returns the timer: ``cancel()`` stops it."""
        self._callback = callback
        # An instant already past would disarm the timerfd (a zero it_value does): the earliest non-zero one fires.
        when = max(when, 1e-9)
        fraction, seconds = math.modf(when)
        self._arm(int(seconds), int(fraction * 1e9))
        return self

    def cancel(self) -> None:
        if self._callback is not None:
            self._callback = None
            self._arm(0, 0)

    def close(self) -> None:
        self._callback = None
        self._loop.remove_reader(self._fd)
        os.close(self._fd)

    def _arm(self, seconds: int, nanoseconds: int) -> None:
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = seconds, nanoseconds
        if self._settime(self._fd, TFD_TIMER_ABSTIME, self._spec_ref, None) < 0:
            raise OSError(ctypes.get_errno(), f"timerfd_settime: {os.strerror(ctypes.get_errno())}")

    def _expired(self) -> None:
        try:
            os.read(self._fd, 8)  # the expiry count: reading it re-arms the fd's readiness
        except BlockingIOError:  # disarmed or re-armed since the loop saw it readable
            return
        callback, self._callback = self._callback, None
        if callback is not None:
            callback()
