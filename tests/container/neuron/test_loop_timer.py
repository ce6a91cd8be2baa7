"""loop_timer.LoopTimer, the queue delay's timerfd, on both loops the server may run (uvloop, asyncio's own): a
callback runs on the loop at its instant and never before it, at once for an instant past, never once cancelled
or replaced; the batcher keeps its delay on it, and on the inference thread where there is no timerfd. And the
batcher's threads run under SCHED_BATCH, the loop under the default policy."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest
import uvloop

# serving/ and build/'s flat modules, on the path from conftest.py (ruff would count them third-party).
# isort: split
import batcher as batcher_module
import loop_timer
from batcher import DynamicBatcher
from loop_timer import LoopTimer

LOOPS = {"uvloop": uvloop.new_event_loop, "asyncio": asyncio.new_event_loop}


def run_on(kind: str, scenario):
    loop = LOOPS[kind]()
    try:
        return loop.run_until_complete(scenario())
    finally:
        loop.close()


@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_a_callback_runs_on_the_loop_at_its_instant_never_before(kind):
    async def scenario():
        loop = asyncio.get_running_loop()
        timer = LoopTimer.create(loop)
        assert timer is not None  # Linux: the server's platform
        fired = loop.create_future()
        due = time.monotonic() + 0.003
        timer.call_at(due, lambda: fired.set_result((time.monotonic(), threading.get_ident())))
        at, thread = await asyncio.wait_for(fired, 30)
        timer.close()
        return due, at, thread

    due, at, thread = run_on(kind, scenario)
    assert at >= due and thread == threading.get_ident()


@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_an_instant_past_fires_at_once_and_a_cancelled_or_replaced_one_never(kind):
    async def scenario():
        loop = asyncio.get_running_loop()
        timer = LoopTimer.create(loop)
        calls: list[str] = []
        timer.call_at(time.monotonic() + 0.002, lambda: calls.append("cancelled"))
        timer.cancel()
        timer.cancel()  # twice: nothing pending, nothing to do
        timer.call_at(time.monotonic() + 0.002, lambda: calls.append("replaced"))
        fired = loop.create_future()
        timer.call_at(0.0, lambda: fired.set_result(calls.append("past")))  # the clock's own zero: long past
        await asyncio.wait_for(fired, 30)
        await asyncio.sleep(0.05)  # well past the two that must not run
        timer.call_at(time.monotonic() + 0.001, lambda: calls.append("re-armed"))
        while len(calls) < 2:
            await asyncio.sleep(0.001)
        timer.close()
        return calls

    assert run_on(kind, scenario) == ["past", "re-armed"]


def test_no_timerfd_means_no_timer_and_the_caller_keeps_its_own(monkeypatch):
    monkeypatch.setattr(loop_timer, "_libc", lambda: None)

    async def scenario():
        return LoopTimer.create(asyncio.get_running_loop())

    assert run_on("uvloop", scenario) is None


@pytest.mark.parametrize("timerfd", [True, False], ids=["timerfd", "inference thread"])
def test_a_lone_request_leaves_when_the_delay_runs_out_on_either_timer(timerfd, monkeypatch):
    if not timerfd:
        monkeypatch.setattr(loop_timer, "_libc", lambda: None)
    delay = 0.02

    async def scenario():
        loop = asyncio.get_running_loop()
        sent: list[float] = []

        def model(payloads):
            sent.append(time.monotonic())
            return payloads

        batcher = DynamicBatcher(model, max_batch_size=4, max_queue_delay_s=delay, loop=loop, admission=None)
        batcher.start()
        answered = loop.create_future()
        queued = time.monotonic()
        batcher.submit("alone", 1, lambda ok, value: answered.set_result((ok, value)))
        result = await asyncio.wait_for(answered, 30)
        kept_by = batcher._loop_timer
        await batcher.drain(timeout=30)
        return queued, sent, result, kept_by

    queued, sent, result, kept_by = run_on("uvloop", scenario)
    assert result == (True, "alone") and len(sent) == 1
    assert sent[0] >= queued + delay  # held for company for the whole delay, not sent early
    if timerfd:
        assert isinstance(kept_by, LoopTimer)
    else:
        assert kept_by is batcher_module._NO_LOOP_TIMER


def test_the_batcher_s_threads_run_without_wakeup_preemption_and_the_loop_as_it_was():
    policies: dict[str, int] = {}

    async def scenario():
        loop = asyncio.get_running_loop()

        def model(payloads):
            policies[threading.current_thread().name] = os.sched_getscheduler(0)  # the calling thread's
            return payloads

        def prepare(payloads):
            policies[threading.current_thread().name] = os.sched_getscheduler(0)
            return list(payloads)

        batcher = DynamicBatcher(
            model,
            prepare_batch=prepare,
            pipeline=True,
            max_batch_size=1,
            max_queue_delay_s=0,
            loop=loop,
            admission=None,
        )
        batcher.start()
        answered = [loop.create_future() for _ in range(3)]
        for i in range(3):  # the second and third are sent behind a running batch: the prepare thread's
            batcher.submit(i, 1, lambda ok, value, i=i: answered[i].set_result(ok))
        await asyncio.wait_for(asyncio.gather(*answered), 30)
        await batcher.drain(timeout=30)
        policies["loop"] = os.sched_getscheduler(0)

    run_on("uvloop", scenario)
    assert policies == {"inference": os.SCHED_BATCH, "prepare": os.SCHED_BATCH, "loop": os.SCHED_OTHER}
