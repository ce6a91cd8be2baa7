"""Server-side dynamic batching: many small requests become one model execution.

Requests are queued from the asyncio event loop; one inference thread takes as many as fit in
max_batch_size rows, waiting at most max_queue_delay after the oldest arrived (Triton's rule),
runs them together and resolves every request's future with its own slice of the result.
Even with no delay, everything that queued while the previous batch ran goes into the next one,
so batches grow with load. A single inference thread keeps DataParallel (or the CPU's threads)
fed without contention.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

log = logging.getLogger("batcher")


@dataclass
class Pending:
    payload: Any
    rows: int
    future: asyncio.Future
    enqueued: float = field(default_factory=time.monotonic)


class BatcherClosed(RuntimeError):
    """The server is shutting down and takes no new work."""


class DynamicBatcher:
    def __init__(
        self,
        run_batch: Callable[[Sequence[Any]], Sequence[Any]],
        *,
        max_batch_size: int,
        max_queue_delay_s: float,
        on_batch: Callable[[int, float], None] = lambda rows, seconds: None,
        on_queue_depth: Callable[[int], None] = lambda depth: None,
    ) -> None:
        self._run_batch = run_batch
        self._max_rows = max_batch_size
        self._max_delay = max_queue_delay_s
        self._on_batch = on_batch
        self._on_queue_depth = on_queue_depth
        self._queue: collections.deque[Pending] = collections.deque()
        self._queued_rows = 0
        self._cond = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._loop, name="inference", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def queue_depth(self) -> int:
        """Requests waiting for the model now (read from any thread)."""
        return len(self._queue)

    def submit(self, payload: Any, rows: int) -> asyncio.Future:
        """Queue one request (called on the event loop); await the returned future."""
        if rows > self._max_rows:
            raise ValueError(f"{rows} rows exceed max batch size {self._max_rows}")
        future = asyncio.get_running_loop().create_future()
        with self._cond:
            if self._closing:
                raise BatcherClosed("server is shutting down")
            self._queue.append(Pending(payload, rows, future))
            self._queued_rows += rows
            depth = len(self._queue)
            self._cond.notify()
        self._on_queue_depth(depth)
        return future

    def close(self, timeout: float | None = None) -> None:
        """Stop taking work, finish everything already queued, then stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _take(self) -> list[Pending] | None:
        with self._cond:
            while not self._queue:
                if self._closing:
                    return None
                self._cond.wait()
            deadline = self._queue[0].enqueued + self._max_delay
            while self._queued_rows < self._max_rows and not self._closing:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            batch, rows = [], 0
            while self._queue and rows + self._queue[0].rows <= self._max_rows:
                item = self._queue.popleft()
                batch.append(item)
                rows += item.rows
            self._queued_rows -= rows
            depth = len(self._queue)
        self._on_queue_depth(depth)
        return batch

    def _loop(self) -> None:
        while (batch := self._take()) is not None:
            started = time.perf_counter()
            try:
                results = self._run_batch([item.payload for item in batch])
                outcome: list[tuple[bool, Any]] = [(True, result) for result in results]
            except Exception as exc:  # a failed batch fails its requests, never the worker
                log.exception("batch of %d requests failed", len(batch))
                outcome = [(False, exc)] * len(batch)
            self._on_batch(sum(item.rows for item in batch), time.perf_counter() - started)
            loop = batch[0].future.get_loop()
            try:
                # One wake-up of the event loop per batch, not one per request.
                loop.call_soon_threadsafe(_resolve, [item.future for item in batch], outcome)
            except RuntimeError:  # the loop is already closed: nobody is waiting any more
                return


def _resolve(futures: list[asyncio.Future], outcome: list[tuple[bool, Any]]) -> None:
    for future, (ok, value) in zip(futures, outcome):
        if future.done():  # the client went away and the request was cancelled
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
