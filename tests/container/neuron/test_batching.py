"""The batching behaviours the serving app's speed depends on, pinned without timing anything.

The batcher's rules (batcher.py) run against a fake clock and a fake timer: the tests read when it
would send a batch, not how long anything took. Over real HTTP, with the emulated accelerator (a
stand-in for a NeuronCore, standin_accelerator.py) and a queue delay far longer than any test, a batch
that leaves full can only have filled from every connection, and the server reports each batch's
size and what sent it (inference_batches_total{trigger}).
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

# serving/ and build/'s flat modules, on the path from conftest.py (ruff would count them third-party).
# isort: split
from batcher import DELAY, DRAIN, FULL, BatcherClosed, DynamicBatcher, Pending
from server_settings import Admission

from tests.support.fake_clock import Clock
from tests.support.fuzz import fuzz_examples

DELAY_S = 0.001


class Harness:
    """A batcher whose batches go to a list instead of a model, on a fake clock."""

    def __init__(self, max_batch_size: int = 4, delay_s: float = DELAY_S) -> None:
        self.clock = Clock()
        self.sent: list[tuple[list, str, float]] = []  # (payloads, trigger, when)
        self.answers: list = []
        self.batcher = DynamicBatcher(
            lambda payloads: payloads,
            max_batch_size=max_batch_size,
            max_queue_delay_s=delay_s,
            loop=asyncio.new_event_loop(),
            clock=self.clock,
            call_at=self.clock.call_at,
            execute=self._execute,
        )
        self._batches: list = []

    def _execute(self, batch, trigger) -> None:
        self._batches.append(batch)
        self.sent.append(([item.payload for item in batch], trigger, self.clock.now))

    def submit(self, payload, rows: int = 1) -> None:
        self.batcher.submit(payload, rows, lambda ok, value: self.answers.append((payload, ok, value)))

    def finish_batch(self) -> None:
        """The model hands back the oldest batch it was given."""
        batch = self._batches.pop(0)
        self.batcher.finished(batch, [(True, item.payload) for item in batch])


def test_a_lone_request_waits_the_queue_delay_and_no_longer():
    h = Harness()
    h.submit("a")
    assert h.sent == [] and h.clock.pending() == [100.0 + DELAY_S]
    h.clock.advance_to_next_timer()
    assert h.sent == [(["a"], DELAY, 100.0 + DELAY_S)]
    h.finish_batch()
    assert h.answers == [("a", True, "a")]


def test_a_full_batch_leaves_at_once_and_cancels_the_timer():
    h = Harness(max_batch_size=4)
    for payload in "abcd":
        h.submit(payload)
    assert h.sent == [(list("abcd"), FULL, 100.0)]
    assert h.clock.pending() == []


def test_rows_count_not_requests_and_a_batch_never_exceeds_the_limit():
    h = Harness(max_batch_size=4)
    h.submit("three", rows=3)
    h.submit("two", rows=2)  # 5 rows queued: the first batch takes what fits
    assert h.sent == [(["three"], FULL, 100.0)]
    h.finish_batch()
    assert h.clock.pending() == [100.0 + DELAY_S]  # "two" waits for company, at most the delay
    with pytest.raises(ValueError):
        h.submit("five", rows=5)


def test_requests_queued_while_the_model_was_busy_wait_for_the_clients_it_answers_if_they_fit():
    h = Harness(max_batch_size=4)
    h.submit("a")
    h.submit("b")
    h.clock.advance_to_next_timer()  # a batch of 2 leaves by the delay
    h.clock.now = 100.002
    h.submit("c")
    h.submit("d")
    assert len(h.sent) == 1 and h.clock.pending() == []  # the model is busy: no timer, no batch
    h.clock.now = 100.004
    h.finish_batch()
    # "c" and "d" have waited 2 ms, but with the 2 rows just answered they would fit one batch: they wait
    # up to the delay again, counted from when the model became free, for a, b's clients to come back.
    assert h.clock.pending() == [pytest.approx(100.004 + DELAY_S)]
    h.clock.now = 100.0045
    h.submit("a2")
    h.submit("b2")  # the batch fills before the delay runs out
    assert h.sent[-1] == (["c", "d", "a2", "b2"], FULL, 100.0045)


def test_requests_queued_while_the_model_was_busy_go_at_once_when_the_answered_could_not_join_them():
    h = Harness(max_batch_size=4)
    for payload in "abcd":
        h.submit(payload)  # full: with the model
    h.clock.now = 100.002
    h.submit("e")
    h.submit("f")
    h.clock.now = 100.003
    h.finish_batch()
    # 2 queued + 4 answered would not fit one batch: Triton's rule, and "e" has waited its delay already.
    assert h.sent[-1] == (["e", "f"], DELAY, 100.003)


def test_without_a_delay_whatever_queued_goes_as_soon_as_the_model_is_free():
    h = Harness(max_batch_size=4, delay_s=0.0)
    h.submit("a")
    assert h.sent == [(["a"], DELAY, 100.0)]
    h.submit("b")
    h.submit("c")
    assert len(h.sent) == 1  # busy
    h.finish_batch()
    assert h.sent[-1] == (["b", "c"], DELAY, 100.0)


def test_drain_sends_what_is_queued_without_waiting_and_refuses_more():
    h = Harness(max_batch_size=4)
    h.submit("a")

    async def drain() -> None:
        task = asyncio.ensure_future(h.batcher.drain(timeout=5))
        await asyncio.sleep(0)
        assert h.sent == [(["a"], DRAIN, 100.0)]
        with pytest.raises(BatcherClosed):
            h.submit("late")
        h.finish_batch()
        await task

    asyncio.run(drain())
    assert h.answers == [("a", True, "a")]


def test_the_model_thread_hands_results_back_in_order_and_a_failed_batch_fails_its_requests():
    async def run() -> list:
        loop = asyncio.get_running_loop()
        calls: list[list] = []

        def model(payloads):
            calls.append(list(payloads))
            if "boom" in payloads:
                raise RuntimeError("model fault")
            return [p.upper() for p in payloads]

        batcher = DynamicBatcher(model, max_batch_size=2, max_queue_delay_s=60, loop=loop)
        batcher.start()
        results: list = []
        done = asyncio.Event()

        def answer(payload):
            def on(ok, value):
                results.append((payload, ok, value if ok else str(value)))
                if len(results) == 4:
                    done.set()

            return on

        for payload in ("a", "b", "boom", "c"):
            batcher.submit(payload, 1, answer(payload))
        await asyncio.wait_for(done.wait(), 60)
        await batcher.drain(timeout=60)
        return calls, results

    calls, results = asyncio.run(run())
    assert calls == [["a", "b"], ["boom", "c"]]  # full batches: the 60 s delay never came into it
    assert results == [("a", True, "A"), ("b", True, "B"), ("boom", False, "model fault"), ("c", False, "model fault")]


def test_a_batch_s_metrics_are_written_on_the_loop_before_any_of_its_replies():
    async def run() -> list:
        loop = asyncio.get_running_loop()
        events: list = []
        done = asyncio.Event()

        def on_batch(rows, seconds, trigger):
            events.append(("batch", rows, trigger, seconds > 0, threading.get_ident()))

        def on(ok, value):
            events.append(("reply", value))
            if len(events) == 3:
                done.set()

        batcher = DynamicBatcher(
            lambda payloads: payloads, max_batch_size=2, max_queue_delay_s=60, loop=loop, on_batch=on_batch
        )
        batcher.start()
        for payload in ("a", "b"):
            batcher.submit(payload, 1, on)
        await asyncio.wait_for(done.wait(), 60)
        await batcher.drain(timeout=60)
        return events

    events = asyncio.run(run())
    # Whichever worker answers a scrape, whoever has read a reply finds its batch counted.
    assert events == [("batch", 2, "full", True, threading.get_ident()), ("reply", "a"), ("reply", "b")]


def test_a_model_that_answers_fewer_rows_than_it_was_given_fails_every_request_of_the_batch():
    async def run() -> list:
        loop = asyncio.get_running_loop()
        batcher = DynamicBatcher(lambda payloads: payloads[:1], max_batch_size=2, max_queue_delay_s=60, loop=loop)
        batcher.start()
        results: list = []
        done = asyncio.Event()

        def on(ok, value):
            results.append((ok, value if ok else str(value)))
            if len(results) == 2:
                done.set()

        for payload in ("a", "b"):
            batcher.submit(payload, 1, on)
        await asyncio.wait_for(done.wait(), 60)  # before, "b" was never answered
        await batcher.drain(timeout=60)
        return results

    assert asyncio.run(run()) == [(False, "the model answered 1 of 2 requests")] * 2


# -- over HTTP, with the emulated accelerator ---------------------------------------------------

BODY = b'{"inputs":[{"name":"TEXT","datatype":"BYTES","shape":[1],"data":["a query from connection %d"]}]}'


def exchange(sock: socket.socket, request: bytes) -> bytes:
    """Send one HTTP/1.1 request on a keep-alive connection; the whole reply (head and body)."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536) or b"!"  # the server closing would end the loop with a bad reply
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?im)^content-length: *(\d+)", head).group(1))
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def infer_request(i: int) -> bytes:
    body = BODY % i
    return b"POST /v2/models/model/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def metrics_on(sock: socket.socket) -> str:
    return exchange(sock, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").decode()


def counters(text: str) -> dict[str, float]:
    found = {
        f"batches_{trigger}": float(value)
        for trigger, value in re.findall(r'^inference_batches_total\{trigger="(\w+)"\} (\S+)$', text, re.M)
    }
    for name in ("inference_batch_size_count", "inference_batch_size_sum"):
        match = re.search(rf"^{name} (\S+)$", text, re.M)
        found[name] = float(match.group(1)) if match else 0.0
    return found


def open_connections(sock: socket.socket) -> list[float]:
    return [float(v) for v in re.findall(r"^inference_open_connections(?:\{[^}]*\})? (\S+)$", metrics_on(sock), re.M)]


def open_evenly(port: int, connections: int, workers: int) -> list[socket.socket]:
    """``connections`` keep-alive connections, as many on each worker (the workers say so on /metrics).
    A connection the client closed just before may still count on its worker for a moment and tip the
    split; then the connections are opened again."""
    deadline = time.monotonic() + 60
    while True:
        socks = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(connections)]
        while sum(per_worker := open_connections(socks[0])) < connections:  # not all accepted yet
            assert time.monotonic() < deadline, per_worker
            time.sleep(0.02)
        if per_worker == [connections / workers] * workers:
            return socks
        for sock in socks:
            sock.close()
        assert time.monotonic() < deadline, per_worker
        time.sleep(0.1)


@pytest.mark.parametrize("workers", [1, 2])
def test_batches_fill_from_every_connection(artifact: Path, start_server, workers):
    # Max batch 8 per worker and a 1 s delay (the most there is): a batch leaves before it only when 8 requests, from
    # 8 different connections, are queued in one worker. With 2 workers the 16 connections split 8/8.
    server = start_server(
        artifact,
        env={
            "SERVER_WORKERS": str(workers),
            "SERVER_MAX_BATCH_SIZE": "8",
            "SERVER_MAX_QUEUE_DELAY_MS": "1000",
            "SERVER_WARMUP_ITERATIONS": "0",
        },
        args=("--standin-accelerator-ms", "1"),
    )
    server.wait_ready()
    deadline = time.monotonic() + 60
    while len([e for e in server.logs() if e.get("msg") == "model ready"]) < workers:  # ready is any one's
        assert time.monotonic() < deadline, "\n".join(server.lines)
        time.sleep(0.05)
    socks = open_evenly(server.port, 8 * workers, workers)
    try:
        before = counters(metrics_on(socks[0]))
        replies: list[bytes] = [b""] * len(socks)

        def send(i: int) -> None:
            replies[i] = exchange(socks[i], infer_request(i))

        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(socks))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        after = counters(metrics_on(socks[0]))
    finally:
        for sock in socks:
            sock.close()
    assert all(reply.startswith(b"HTTP/1.1 200") for reply in replies), replies
    assert after["inference_batch_size_count"] - before["inference_batch_size_count"] == workers
    assert after["inference_batch_size_sum"] - before["inference_batch_size_sum"] == 8 * workers
    assert after["batches_full"] - before["batches_full"] == workers
    assert after["batches_delay"] == before["batches_delay"]


def test_a_lone_request_leaves_by_the_delay_in_a_batch_of_its_own(artifact: Path, start_server):
    server = start_server(
        artifact,
        env={"SERVER_MAX_BATCH_SIZE": "16", "SERVER_MAX_QUEUE_DELAY_MS": "50", "SERVER_WARMUP_ITERATIONS": "0"},
        args=("--standin-accelerator-ms", "1"),
    )
    server.wait_ready()
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        before = counters(metrics_on(sock))
        reply = exchange(sock, infer_request(0))
        after = counters(metrics_on(sock))
    assert reply.startswith(b"HTTP/1.1 200")
    # The server sent it when its queue delay ran out (the delay's bound itself is pinned above, on the
    # batcher's clock), alone, not held for company that never came.
    assert after["batches_delay"] - before["batches_delay"] == 1
    assert after["inference_batch_size_sum"] - before["inference_batch_size_sum"] == 1
    assert after["batches_full"] == before["batches_full"]


# -- submit's shortcut (a request that cannot change _schedule's decision skips it) --------------------------------


class Unshortcut(DynamicBatcher):
    """The reference: submit as it was before the shortcut, every request asking _schedule."""

    def submit(self, payload, rows: int, done) -> None:
        if rows > self._max_rows:
            raise ValueError(f"{rows} rows exceed max batch size {self._max_rows}")
        if self._closing:
            raise BatcherClosed("server is shutting down")
        self.admit(rows)
        self._queue.append(Pending(payload, rows, done, self._clock()))
        self._queued_rows += rows
        if not self._busy:
            self._schedule()
        elif self._running < self._depth and self._queued_rows >= self._max_rows:
            self._send(FULL)


def drive(batcher_class, operations, admission, pipeline: bool) -> list:
    """Everything a batcher did under ``operations`` on a fake clock: its batches (payloads, trigger, when), each
    answer or refusal, and its pending timers after each step."""
    clock, trace, running = Clock(), [], []

    def execute(batch, trigger) -> None:
        running.append(batch)
        trace.append(("sent", [item.payload for item in batch], trigger, clock.now))

    batcher = batcher_class(
        lambda payloads: payloads,
        pipeline=pipeline,
        max_batch_size=4,
        max_queue_delay_s=DELAY_S,
        loop=asyncio.new_event_loop(),
        clock=clock,
        call_at=clock.call_at,
        execute=execute,
        admission=admission,
    )
    for i, (kind, value) in enumerate(operations):
        if kind == "submit":
            try:
                batcher.submit(i, value, lambda ok, result, i=i: trace.append(("answer", i, ok, type(result).__name__)))
            except Exception as exc:  # Overloaded at the door
                trace.append(("refused", i, type(exc).__name__))
        elif kind == "advance":
            target = clock.now + value
            while any(not cancelled and when <= target for when, _, cancelled in clock.timers):
                clock.advance_to_next_timer()
            clock.now = target
        elif kind == "busy":  # time passes with the loop busy elsewhere: no timer has fired yet
            clock.now += value
        elif running:  # "finish": the model hands back its oldest batch
            batch = running.pop(0)
            batcher.finished(batch, [(True, item.payload) for item in batch])
        trace.append(("timers", clock.pending()))
    return trace


operations = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.sampled_from([1, 1, 1, 2, 4])),
        st.tuples(st.just("advance"), st.sampled_from([0.0, 0.0002, 0.0007, 0.001, 0.003, 0.02])),
        st.tuples(st.just("busy"), st.sampled_from([0.0003, 0.0012, 0.01])),
        st.tuples(st.just("finish"), st.none()),
    ),
    max_size=30,
)
admissions = st.one_of(
    st.none(),
    st.builds(
        lambda slo, budget_share, batch_ms: Admission(
            slo_ms=slo, budget_s=slo * budget_share / 1000, initial_batch_s=batch_ms / 1000
        ),
        st.sampled_from([2.0, 5.0, 10.0, 50.0]),
        st.sampled_from([0.5, 0.8]),
        st.sampled_from([0.5, 1.0, 3.0]),
    ),
)


@settings(max_examples=fuzz_examples(1000), deadline=None)
@given(operations, admissions, st.booleans())
# The head waited while the model was busy; once it is free, a request arrives after the head has outlived what
# the SLO allows but before the delay runs out: submit must still expire it.
@example(
    [("submit", 2), ("advance", 0.001), ("submit", 1), ("busy", 0.0012), ("finish", None), ("busy", 0.0003)]
    + [("submit", 1)],
    Admission(slo_ms=2.0, budget_s=0.0018, initial_batch_s=0.0005),
    False,
)
@pytest.mark.fuzz
def test_submit_s_shortcut_decides_as_asking_schedule_every_time(operations, admission, pipeline):
    assert drive(DynamicBatcher, operations, admission, pipeline) == drive(Unshortcut, operations, admission, pipeline)
