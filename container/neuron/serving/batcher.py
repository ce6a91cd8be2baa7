"""Server-side dynamic batching: many small requests become one model execution.

Requests are queued on the asyncio event loop, which also decides when a batch leaves: as soon as
max_batch_size rows are queued, else when the queue delay runs out, counted from the oldest queued
request's arrival (Triton's rule: a request reaching an idle model waits at most the delay). One
exception: when the model has just become free and what is queued would fit in one batch with the
rows it has just answered, the delay counts from then, so the requests that queued while it was busy
may wait that long again for the answered clients' next requests. Under Triton's rule alone, a closed
loop of 16 clients on a 16-row model split into two halves that took turns for good, each half-full
batch costing as much model time as a full one; waiting after every batch instead (TorchServe's
rule) idled the model for the delay at each batch of a steady open-loop load. Even with no delay,
everything that queued while the previous batch ran goes into the next one, so batches grow with load.

One inference thread runs the batches, one at a time, which keeps DataParallel (or the CPU's
threads) fed without contention; it hands each batch's results back to the event loop in one
callback, which starts the next batch before it delivers the replies.

Pipelined (SERVER_PIPELINE, on in the server), the host's work on a batch overlaps the model's on the one
before: a prepare thread turns a batch's payloads into model inputs (``prepare_batch``: tokenizing,
stacking) while the inference thread runs the previous batch, and the inference thread starts it as soon
as that one ends, without waiting for the event loop; the loop writes a batch's replies while the next one
runs. A batch that leaves while the model is free skips the prepare thread (the inference thread prepares
it, as unpipelined), so the pipeline costs no extra thread wake-up when there is nothing to overlap. So one
batch may leave the queue while another runs, but only one that cannot grow any more (full, or draining):
a batch that is not full still waits for the model to come free, under the rules above. Off, one thread
prepares and runs each batch in turn, and a batch leaves only when the model is free. The decisions stay on the
event loop, so the two threads meet twice per batch (a queue put, a loop wake-up) instead of taking
turns at a condition variable, and at the GIL, per request. When a batch comes back and the next one goes
straight to the inference thread, the loop waits (at most HANDOFF_WAIT_S, the GIL released) until the thread
has started the model before it writes the replies: otherwise the thread waited for the GIL through them, with
the model idle. It does not wait when the thread's last stack took longer than that (texts the fast tokenizer
cannot take, which the library tokenizes without the GIL anyway). The queue delay's time is kept by a timerfd the
loop watches (loop_timer.py): the event loop's timers (and uvloop's clock) tick in whole milliseconds, which for a
1 ms delay sent batches anywhere from at once to 2 ms late. Where there is no timerfd the inference thread keeps
it while it waits for work, at the cost of a wake-up per batch to set it.

Admission (SERVER_SLO_MS): a request is queued if it would be answered within the budget (80 % of the SLO). The
estimate: the batches ahead of it and its own (queued rows over the max batch size, rounded up, plus one already
sent behind the running batch) times the batch time (an EWMA of batches as the event loop sees them, from sent,
or from when the one before was answered if later, to answered), plus what is left of the batch now running, plus
the queue delay where the batching rule waits it: for the next batch to leave (and, the model idle, for all
behind it), never for a batch behind a full one, which leaves at once. Two cases bypass the budget. An idle model
admits whatever the estimate (its batch measures the batch time, so a wrong estimate cannot refuse everything for
good). A request that rides the next batch to leave is admitted if that batch ends within the SLO itself: it
waits for no backlog, only for the running batch and the queue delay, which no refusal shortens. The budget's
reserve is for a backlog, where the estimate's error adds up batch by batch; applied to the next batch too, it
refused requests at any load wherever the batch as the loop sees it took over (budget - delay) / 2: 0.2-0.3 % at
half load on a 16-core host, 1-2 % on two cores (docs/explanation/performance.md). Otherwise submit raises
Overloaded at once: a queue bounded by the SLO instead of one that grows until every request waits. A request
that still waits when its batch could no longer finish within the budget (the batch time grew after it was
admitted) is failed with Overloaded rather than run while a backlog waits behind it; once the rest of the queue
fits the batch about to leave, only if that batch would end past the SLO, as at the door. Both cost O(1) per
request on the event loop.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from loop_timer import LoopTimer
from server_settings import Admission, admission_from_environment

log = logging.getLogger("batcher")

# Why a batch left the queue: it was full; the queue delay ran out; or the server is draining and
# sends whatever is queued.
FULL, DELAY, DRAIN = "full", "delay", "drain"

Done = Callable[[bool, Any], None]  # (True, result) or (False, exception), called on the event loop
_WAKE = object()  # the inference thread's queue: (_WAKE, when, callback) sets its timer (where there is no timerfd)
_NO_LOOP_TIMER: Any = object()


def _no_wakeup_preemption() -> None:
    """Put the calling thread (a batcher thread) under SCHED_BATCH: the same share of the CPU, but its wake-ups do
    not preempt the thread running. Woken while the event loop holds the GIL (a batch handed over), the thread
    used to take the loop's core only to wait for the GIL and hand it back: two context switches for nothing on
    a core the two share. Now it runs once the loop blocks or yields the GIL. Where cores are free, the kernel
    puts it on one of them either way. Skipped where the system has no such policy."""
    if not hasattr(os, "SCHED_BATCH"):
        return
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except OSError as exc:  # not allowed in this container, say: the thread runs under the default policy
        log.warning("the batcher's thread keeps the default scheduling policy: %s", exc)


class _NoCancel:
    def cancel(self) -> None:
        pass


@dataclass(slots=True)
class Pending:
    payload: Any
    rows: int
    done: Done
    enqueued: float


class BatcherClosed(RuntimeError):
    """The server is shutting down and takes no new work."""


class Overloaded(RuntimeError):
    """The request would not be answered within the SLO: refused (503), to be retried after ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: int, queued: bool = False) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.reason = "expired" if queued else "admission"  # refused after waiting in the queue, or at the door


# Weight of the latest batch in the batch-time estimate: about the last ten batches count.
EWMA_WEIGHT = 0.2
# How long the loop waits for the inference thread to start a batch handed to it as the one before came back,
# before writing that one's replies anyway. A stack of pre-tokenized rows takes about 0.05 ms.
HANDOFF_WAIT_S = 0.0005
_FROM_ENVIRONMENT: Any = object()


class DynamicBatcher:
    def __init__(
        self,
        run_batch: Callable[[Any], Sequence[Any]],
        *,
        prepare_batch: Callable[[Sequence[Any]], Any] | None = None,
        prepare_now: Callable[[Sequence[Any]], Any] | None = None,
        pipeline: bool = False,
        max_batch_size: int,
        max_queue_delay_s: float,
        loop: asyncio.AbstractEventLoop,
        on_batch: Callable[[int, float, str], None] = lambda rows, seconds, trigger: None,
        on_send: Callable[[], None] = lambda: None,
        on_delivered: Callable[[], None] = lambda: None,
        clock: Callable[[], float] | None = None,
        call_at: Callable[[float, Callable[[], None]], Any] | None = None,
        execute: Callable[[list[Pending], str], None] | None = None,
        admission: Admission | None = _FROM_ENVIRONMENT,
        handoff_wait_s: float = HANDOFF_WAIT_S,
    ) -> None:
        """A batch runs as ``run_batch(prepare_batch(payloads))`` (``prepare_batch`` default: the payloads
        as a list), both off the loop, or as ``run_batch(prepare_now(payloads))`` where ``prepare_now`` (on the
        loop, so only for what takes microseconds) gives inputs rather than None; ``pipeline``: prepare a batch on
        its own thread while the one before runs (see above; the server turns it on through SERVER_PIPELINE).
        Everything but ``prepare_batch`` and ``run_batch`` runs on ``loop``; ``on_send`` is told when a batch
        leaves the queue (its depth changed), ``on_batch`` of each executed batch (rows, seconds stacking and
        running it, trigger) as it comes back, before its results are handed out (whoever has read a reply finds
        its batch in the metrics, whichever worker answers the scrape), ``on_delivered`` once they have been.
        ``clock``, ``call_at`` (the queue-delay timer) and ``execute`` (hand a batch to the model) default
        to time.monotonic, a timerfd on the loop and the inference thread; tests replace them to drive the rules
        without waiting. ``admission``: the budget requests are admitted within (None: all are queued); by default
        SERVER_SLO_MS's, from the environment the worker inherited. ``handoff_wait_s``: at most how long
        ``finished`` waits for the inference thread to start the batch it handed over (see above)."""
        self._run_batch = run_batch
        self._prepare_batch = prepare_batch or list
        self._prepare_now = prepare_now
        # Batches with the model at once: the one running and, pipelined, the next one being prepared.
        self._depth = 2 if pipeline else 1
        self._max_rows = max_batch_size
        self._max_delay = max_queue_delay_s
        self._loop = loop
        self._on_batch = on_batch
        self._on_send = on_send
        self._on_delivered = on_delivered
        self._clock = clock or time.monotonic
        self._call_at = call_at or self._wake_at
        self._execute = execute or self._to_thread
        self._queue: collections.deque[Pending] = collections.deque()
        self._queued_rows = 0
        self._running = 0  # batches sent and not yet answered (at most self._depth)
        # Decided as the model comes free: do the queued rows and the rows just answered fit one batch?
        self._wait_for_answered = False
        self._free_since = self._clock()  # when the model last became free
        self._timer: Any = None
        self._settled_until = 0.0  # with the model free and the timer set: when _schedule could next decide otherwise
        self._loop_timer: Any = None  # the queue delay's timerfd (loop_timer.py), made as a delay is first waited
        self._closing = False
        self._idle: asyncio.Event | None = None  # set once closing and nothing is left (drain)
        # The inference thread's: batches (prepared or not), and the timer's wake-ups while it is idle.
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._to_prepare: queue.SimpleQueue = queue.SimpleQueue()  # pipelined: batches sent behind a running one
        self._via_prepare: collections.deque[list[Pending]] = collections.deque()  # sent there, not answered yet
        self._threads = [threading.Thread(target=self._work, name="inference", daemon=True)]
        if pipeline:
            self._threads.append(threading.Thread(target=self._prepare_work, name="prepare", daemon=True))
        self._admission = admission_from_environment() if admission is _FROM_ENVIRONMENT else admission
        self._batch_s = self._admission.initial_batch_s if self._admission is not None else 0.0
        self._sent: collections.deque[float] = collections.deque()  # when each batch with the model left the queue
        self._answered_at = 0.0  # when the loop last got a batch's results
        self._measured = False  # a live batch has updated the estimate
        self._handoff_wait_s = handoff_wait_s
        self._started = threading.Event()  # set by the inference thread as it starts a batch
        self._handed_over = False  # finished() sent the next batch straight to the inference thread
        self._stack_s = 0.0  # how long the thread's last stack of a batch handed straight to it took

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    @property
    def _busy(self) -> bool:
        """A batch is with the model (running, or prepared to run next)."""
        return self._running > 0

    @property
    def queue_depth(self) -> int:
        """Requests waiting for the model now."""
        return len(self._queue)

    def assume_batch_s(self, seconds: float) -> None:
        """Start the estimate from a measured batch time (the warm-up's full batches) instead of the initial
        setting; ignored once a live batch has been measured."""
        if self._admission is not None and seconds > 0 and not self._measured:
            self._batch_s = seconds

    @property
    def batch_s(self) -> float:
        """The batch time admission assumes: recent batches' (EWMA), or the initial estimate before any."""
        return self._batch_s

    # -- on the event loop ----------------------------------------------------------------------

    def estimate_s(self, rows: int = 1) -> float:
        """When a request of ``rows`` queued now would be answered, from now: the batches ahead of it and
        its own, what is left of the running batch, and the queue delay where the batching rule waits it."""
        batches = -(-(self._queued_rows + rows) // self._max_rows) + max(0, self._running - 1)
        wait = batches * self._batch_s
        if not self._busy:
            return wait + self._max_delay  # the next batch waits out the delay, and everything behind it
        wait += max(0.0, self._batch_s - (self._clock() - self._running_since()))
        if self._rides_next(rows):
            wait += self._max_delay  # the batch may wait for company once the model is free; a full one never does
        return wait

    def _rides_next(self, rows: int) -> bool:
        """A request of ``rows`` queued now would leave in the next batch: nothing but the running batch ahead."""
        return self._running <= 1 and self._queued_rows + rows <= self._max_rows

    def _running_since(self) -> float:
        """When the oldest batch with the model started, as the loop sees it: when it left the queue, or
        when the batch ahead of it was answered if that was later."""
        return max(self._sent[0], self._answered_at)

    def admit(self, rows: int = 1) -> None:
        """Raise Overloaded if a request of ``rows`` would not be answered within the budget; the HTTP
        handler asks before parsing (rows=1), so a refusal costs no parsing and no tokenizing."""
        admission = self._admission
        if admission is None:
            return
        if not self._running and not self._queue:
            # An idle model takes the request whatever the estimate says: refusing it would leave the estimate
            # unmeasured, and a stale or too-high one (a batch time above the budget) would refuse everything
            # for good. Its batch is the measurement that corrects the estimate.
            return
        wait = self.estimate_s(rows)
        if self._rides_next(rows):
            # It waits only for the running batch and the queue delay, which no refusal shortens.
            if wait > admission.slo_ms / 1000.0:
                raise Overloaded(
                    f"overloaded: the next batch would answer in about {wait * 1000:.0f} ms, beyond the "
                    f"{admission.slo_ms:g} ms SLO; retry later",
                    max(1, math.ceil(wait)),
                )
            return
        if wait > admission.budget_s:
            raise Overloaded(
                f"overloaded: about {wait * 1000:.0f} ms of queued work exceeds the {admission.budget_s * 1000:.0f} ms "
                f"budget of the {admission.slo_ms:g} ms SLO; retry later",
                max(1, math.ceil(wait)),
            )

    def submit(self, payload: Any, rows: int, done: Done) -> None:
        """Queue one request; ``done`` gets its result, on the event loop. Raises Overloaded when the
        request would miss the admission budget."""
        if rows > self._max_rows:
            raise ValueError(f"{rows} rows exceed max batch size {self._max_rows}")
        if self._closing:
            raise BatcherClosed("server is shutting down")
        self.admit(rows)
        now = self._clock()
        self._queue.append(Pending(payload, rows, done, now))
        self._queued_rows += rows
        if not self._busy:
            if self._timer is not None and self._queued_rows < self._max_rows and now < self._settled_until:
                return  # what _schedule would decide: the batch's timer stands, nothing has expired or fallen due
            self._schedule()
        elif self._running < self._depth and self._queued_rows >= self._max_rows:
            self._send(FULL)  # pipelined: prepared while the model runs the batch ahead

    def _schedule(self) -> None:
        """The model is free: send a batch now, or set the timer for when the queue delay runs out."""
        expired = self._expire() if self._admission is not None and self._queue else None
        self._decide()
        if expired:
            self._refuse(expired)

    def _expire(self) -> list[Pending]:
        """The queued requests, oldest first, that could no longer be answered within the budget even if
        their batch left now: failed rather than run, which leaves the model to requests that can. Once the
        rest of the queue fits the batch about to leave, no one waits behind it: then only what would end
        past the SLO itself goes (as at the door, see admit)."""
        queue, expired, admission = self._queue, [], self._admission
        if self._batch_s + self._max_delay > admission.budget_s:
            return expired  # not even a batch of its own fits: the estimate must be measured first (see admit)
        ends = self._clock() + self._batch_s
        while queue:
            limit = admission.budget_s if self._queued_rows > self._max_rows else admission.slo_ms / 1000.0
            if queue[0].enqueued >= ends - limit:
                break
            item = queue.popleft()
            self._queued_rows -= item.rows
            expired.append(item)
        return expired

    def _refuse(self, expired: list[Pending]) -> None:
        """After the batcher's state is settled: a reply may bring the next request in at once."""
        error = Overloaded(
            f"overloaded: waited longer than the {self._admission.slo_ms:g} ms SLO allows; retry later",
            max(1, math.ceil(self.estimate_s())),
            queued=True,
        )
        for item in expired:
            try:
                item.done(False, error)
            except Exception:
                log.exception("delivering a refusal failed")

    def _decide(self) -> None:
        if not self._queue or self._running >= self._depth:
            return
        if self._queued_rows >= self._max_rows:
            self._send(FULL)
            return
        if self._closing:
            self._send(DRAIN)
            return
        if self._busy:  # a batch that can still grow waits for the model to come free
            return
        start = self._queue[0].enqueued
        if self._wait_for_answered:
            start = max(start, self._free_since)  # the clients just answered may come back and fill it
        deadline = start + self._max_delay
        if deadline <= self._clock():
            self._send(DELAY)
            return
        if self._timer is None:
            self._timer = self._call_at(deadline, self._deadline)
        # Until then, with the model free and this head, a request that does not fill the batch changes nothing here
        # or in _expire (its limit for a batch that fits is the SLO): submit skips asking again (a microsecond each).
        self._settled_until = deadline
        if self._admission is not None and self._batch_s + self._max_delay <= self._admission.budget_s:
            self._settled_until = min(
                deadline, self._queue[0].enqueued + self._admission.slo_ms / 1000.0 - self._batch_s
            )

    def _deadline(self) -> None:
        self._timer = None
        if not self._busy:
            self._schedule()

    def _send(self, trigger: str) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        queue, batch, rows = self._queue, [], 0
        while queue and rows + queue[0].rows <= self._max_rows:
            item = queue.popleft()
            batch.append(item)
            rows += item.rows
        self._queued_rows -= rows
        self._running += 1
        self._sent.append(self._clock())
        self._execute(batch, trigger)
        self._on_send()

    def finished(
        self, batch: list[Pending], outcome: list[tuple[bool, Any]], measured: tuple[int, float, str] | None = None
    ) -> None:
        """A batch came back from the model: start the next one, tell ``on_batch`` ``measured`` (its rows, its stack
        and model time, its trigger), then deliver the results."""
        now = self._clock()
        # The batch as its requests lived it (sent, or the batch ahead answered, to answered, the hand-offs
        # included), on the loop's clock.
        self._batch_s += EWMA_WEIGHT * ((now - self._running_since()) - self._batch_s)
        self._measured = True
        self._sent.popleft()
        if self._via_prepare and self._via_prepare[0] is batch:
            self._via_prepare.popleft()
        self._answered_at = now
        self._running -= 1
        if not self._busy:
            self._free_since = now
            self._wait_for_answered = self._queued_rows + sum(item.rows for item in batch) <= self._max_rows
        self._started.clear()
        self._handed_over = False
        self._schedule()
        if self._handed_over and self._stack_s <= self._handoff_wait_s:
            # The model is free and its next batch waits for the inference thread to stack it, which takes the GIL.
            # Writing the replies first kept the thread waiting for it through them (the model idle a median
            # 0.35 ms of every cycle at 80 % load, docs/explanation/performance.md); the wait releases the GIL.
            self._started.wait(self._handoff_wait_s)
        if measured is not None:  # before the replies: whoever has read one finds its batch in the metrics
            self._on_batch(*measured)
        for item, (ok, value) in zip(batch, outcome, strict=True):
            try:
                item.done(ok, value)
            except Exception:  # one reply that cannot be written must not cost the others theirs
                log.exception("delivering a result failed")
        self._on_delivered()
        if self._closing and not self._busy and not self._queue and self._idle is not None:
            self._idle.set()

    async def drain(self, timeout: float) -> None:
        """Take no new work, run everything queued (without waiting for fuller batches), stop the thread."""
        self._closing = True
        self._idle = asyncio.Event()
        if self._running < self._depth:
            self._schedule()
        if self._busy or self._queue:
            try:
                await asyncio.wait_for(self._idle.wait(), timeout)
            except asyncio.TimeoutError:
                log.warning("drain timed out with batches left", extra={"queued": len(self._queue)})
        # Pipelined, the prepare thread passes the stop on to the inference thread, after what it still holds.
        (self._to_prepare if len(self._threads) > 1 else self._jobs).put(None)
        for thread in self._threads:
            if thread.is_alive():
                await self._loop.run_in_executor(None, thread.join, timeout)
        if self._loop_timer not in (None, _NO_LOOP_TIMER):
            self._loop_timer.close()
            self._loop_timer = _NO_LOOP_TIMER

    # -- the inference thread -------------------------------------------------------------------

    def _to_thread(self, batch: list[Pending], trigger: str) -> None:
        # A batch ``prepare_now`` can prepare (a few microseconds: every request pre-tokenized) is prepared here and
        # goes to the inference thread ready to run, so the thread only starts the model, and no prepare thread is
        # woken for it; unless a batch sent before it is still with the prepare thread, which it must not overtake.
        # Any other batch sent while the model is free goes straight to the inference thread, which prepares it
        # itself: a detour through the prepare thread would only add a thread wake-up before the model starts. One
        # sent behind a running batch is prepared meanwhile, and reaches the inference thread after that batch (it
        # was sent later), so the batches run in the order they were sent.
        straight = self._running <= 1
        if self._prepare_now is not None and not self._via_prepare:
            started = time.perf_counter()
            try:
                inputs = self._prepare_now([item.payload for item in batch])
            except Exception:  # left to prepare_batch, which fails the batch's requests if it fails too
                inputs = None
            if inputs is not None:
                seconds = time.perf_counter() - started
                if straight:
                    self._handed_over, self._stack_s = True, seconds
                self._jobs.put((batch, trigger, True, inputs, seconds))
                return
        if not straight:
            self._via_prepare.append(batch)
            self._to_prepare.put((batch, trigger))
        else:
            self._handed_over = True
            self._jobs.put((batch, trigger))

    def _wake_at(self, when: float, callback: Callable[[], None]) -> Any:
        """The queue-delay timer: ``callback`` on the loop at ``when`` (time.monotonic), unless a batch comes first.
        A timerfd the loop watches (loop_timer.py), made on first use, on the loop's thread; where there is none,
        the idle inference thread keeps the time and calls back. A late or stale wake-up is harmless: the
        callback checks the clock and the queue again."""
        timer = self._loop_timer
        if timer is None:
            timer = self._loop_timer = LoopTimer.create(self._loop) or _NO_LOOP_TIMER
        if timer is not _NO_LOOP_TIMER:
            return timer.call_at(when, callback)
        self._jobs.put((_WAKE, when, callback))
        return _NoCancel()

    def _prepare(self, batch: list[Pending]) -> tuple[bool, Any, float]:
        """(ok, the model inputs or the exception, seconds it took)."""
        started = time.perf_counter()
        try:
            return True, self._prepare_batch([item.payload for item in batch]), time.perf_counter() - started
        except Exception as exc:  # a batch that cannot be prepared fails its requests, never the worker
            return False, exc, time.perf_counter() - started

    def _prepare_work(self) -> None:
        """Pipelined: the prepare thread, for batches sent while the model runs the one before."""
        _no_wakeup_preemption()
        while True:
            job = self._to_prepare.get()
            if job is None:
                self._jobs.put(None)
                return
            batch, trigger = job
            self._jobs.put((batch, trigger, *self._prepare(batch)))

    def _work(self) -> None:
        _no_wakeup_preemption()
        wake: tuple[float, Callable[[], None]] | None = None
        while True:
            try:
                job = self._jobs.get(timeout=None if wake is None else max(0.0, wake[0] - time.monotonic()))
            except queue.Empty:
                self._loop.call_soon_threadsafe(wake[1])
                wake = None
                continue
            if job is None:
                return
            if job[0] is _WAKE:
                wake = (job[1], job[2])
                continue
            wake = None
            if len(job) == 2:  # not prepared yet: the model is free, so this thread prepares it
                batch, trigger = job
                ok, inputs, seconds = self._prepare(batch)
                self._stack_s = seconds  # the loop waits for the next such hand-off only if this fits its bound
            else:
                batch, trigger, ok, inputs, seconds = job
            self._started.set()  # the loop may write the last batch's replies now (a failed stack runs nothing)
            started = time.perf_counter()
            try:
                if not ok:
                    raise inputs
                results = self._run_batch(inputs)
                if len(results) != len(batch):  # every request gets an answer: a short batch fails them all
                    raise RuntimeError(f"the model answered {len(results)} of {len(batch)} requests")
                outcome: list[tuple[bool, Any]] = [(True, result) for result in results]
            except Exception as exc:  # a failed batch fails its requests, never the worker
                log.exception("batch of %d requests failed", len(batch))
                outcome = [(False, exc)] * len(batch)
            # Its metrics are written on the loop (finished): here they held the GIL while the loop waited for it to
            # write the replies, about 40 us of every cycle on two shared cores.
            measured = (sum(item.rows for item in batch), seconds + time.perf_counter() - started, trigger)
            try:
                self._loop.call_soon_threadsafe(self.finished, batch, outcome, measured)
            except RuntimeError:  # the loop is already closed: nobody is waiting any more
                return
