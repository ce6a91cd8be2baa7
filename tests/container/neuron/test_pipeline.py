"""The pipelined batcher (batcher.py, SERVER_PIPELINE): a batch is prepared while the one before runs.

The order of events is pinned without timing anything: the model stage of one batch waits until the prepare
stage of the next has begun, which only a pipeline can do (a serial batcher would wait out the test's
timeout and fail). The batching and admission rules run on the fake clock of test_batching.py's Harness.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

# serving/ and build/'s flat modules, on the path from conftest.py (ruff would count them third-party).
# isort: split
from batcher import DRAIN, FULL, DynamicBatcher, Overloaded
from compile_settings import SettingsError
from server_settings import Admission

from tests.support.fake_clock import Clock

DELAY_S = 0.001  # the queue delay of test_batching.py's harness

WAIT_S = 30  # how long a stage waits for the other before the test fails (never reached when it passes)


class Stages:
    """prepare_batch and run_batch stubs that record, in order, when each batch's stages begin and end."""

    def __init__(self, hold_first: bool = True) -> None:
        self.hold_first = hold_first  # the first batch ends only once the next one is being prepared
        self.events: list[tuple[str, tuple]] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    def _record(self, event: str, batch: tuple) -> None:
        with self._changed:
            self.events.append((event, batch))
            self._changed.notify_all()

    def wait_for_another_prepare(self, batch: tuple) -> bool:
        with self._changed:
            return self._changed.wait_for(
                lambda: any(event == "prepare" and other != batch for event, other in self.events), WAIT_S
            )

    def prepare(self, payloads):
        batch = tuple(payloads)
        self._record("prepare", batch)
        if "bad" in batch:
            raise ValueError("cannot tokenize")
        self._record("prepared", batch)
        return batch

    def run(self, batch):
        self._record("run", batch)
        if self.hold_first and not any(event == "ran" for event, _ in self.events):
            self.wait_for_another_prepare(batch)
        self._record("ran", batch)
        return [payload.upper() for payload in batch]


def serve(payloads, *, stages: Stages, drain_after: int | None = None, pipeline: bool = True, prepare_now=None):
    """Submit ``payloads`` to a real two-row batcher (threads and all, a 60 s queue delay), then drain it;
    the answers in the order they came."""

    async def go() -> list:
        loop = asyncio.get_running_loop()
        batcher = DynamicBatcher(
            stages.run,
            prepare_batch=stages.prepare,
            prepare_now=prepare_now,
            pipeline=pipeline,
            max_batch_size=2,
            max_queue_delay_s=60,
            loop=loop,
            admission=None,
        )
        batcher.start()
        answers: list = []
        all_answered = asyncio.Event()
        expected = len(payloads) if drain_after is None else drain_after

        def answer(payload):
            def on(ok, value):
                answers.append((payload, ok, value if ok else str(value)))
                if len(answers) == expected:
                    all_answered.set()

            return on

        for payload in payloads:
            batcher.submit(payload, 1, answer(payload))
        await asyncio.wait_for(all_answered.wait(), WAIT_S)
        await batcher.drain(timeout=WAIT_S)
        return answers

    return asyncio.run(go())


def test_the_next_batch_is_prepared_while_the_model_runs_the_one_before():
    stages = Stages()
    answers = serve(["a", "b", "c", "d"], stages=stages)
    events = stages.events
    assert events.index(("prepare", ("c", "d"))) < events.index(("ran", ("a", "b")))
    assert events.index(("ran", ("a", "b"))) < events.index(("run", ("c", "d")))  # one batch with the model at a time
    assert answers == [("a", True, "A"), ("b", True, "B"), ("c", True, "C"), ("d", True, "D")]


def test_without_the_pipeline_a_batch_is_prepared_only_after_the_one_before_ran():
    stages = Stages(hold_first=False)
    answers = serve(["a", "b", "c", "d"], stages=stages, pipeline=False)
    assert stages.events.index(("ran", ("a", "b"))) < stages.events.index(("prepare", ("c", "d")))
    assert [value for _, _, value in answers] == ["A", "B", "C", "D"]


@pytest.mark.parametrize(
    "payloads", [["x", "bad", "e", "f"], ["e", "f", "x", "bad"]], ids=["while-free", "behind-a-batch"]
)
def test_a_batch_that_cannot_be_prepared_fails_its_requests_only(payloads):
    stages = Stages(hold_first="bad" not in payloads[:2])  # the failing batch is prepared while "e", "f" runs
    answers = serve(payloads, stages=stages)
    assert sorted(answers) == [
        ("bad", False, "cannot tokenize"),
        ("e", True, "E"),
        ("f", True, "F"),
        ("x", False, "cannot tokenize"),
    ]
    assert ("run", ("x", "bad")) not in stages.events  # never reached the model
    if payloads[0] == "e":
        assert stages.events.index(("prepare", ("x", "bad"))) < stages.events.index(("ran", ("e", "f")))


def test_drain_runs_everything_queued_through_both_stages():
    stages = Stages()
    # Two full batches, then one request the 60 s delay would hold: the drain sends it at once.
    answers = serve(["e", "f", "g", "h", "i"], stages=stages, drain_after=4)
    assert answers[-1] == ("i", True, "I")  # answered by the drain, not by the delay
    assert [payload for payload, _, _ in answers] == list("efghi")


class NowStages(Stages):
    """Stages with a ``prepare_now`` that prepares, on the loop, any batch without a "t" (a text the thread must
    tokenize) and records where it ran; "boom" makes it raise."""

    def __init__(self, slow: dict[tuple, float] | None = None) -> None:
        super().__init__(hold_first=False)
        self.slow = slow or {}
        self.now_threads: set[int] = set()

    def prepare_now(self, payloads):
        batch = tuple(payloads)
        self.now_threads.add(threading.get_ident())
        if "boom" in batch:
            raise RuntimeError("a bug in the quick stage")
        if any(payload.startswith("t") for payload in batch):
            return None
        self._record("prepared now", batch)
        return batch

    def prepare(self, payloads):
        time.sleep(self.slow.get(tuple(payloads), 0.0))
        return super().prepare(payloads)


@pytest.mark.parametrize("pipeline", [True, False], ids=["pipelined", "serial"])
def test_a_batch_prepared_on_the_loop_goes_to_the_model_ready_and_any_other_through_the_prepare_stage(pipeline):
    stages = NowStages()
    payloads = ["a", "b", "t1", "t2", "boom", "c"]
    answers = serve(payloads, stages=stages, pipeline=pipeline, prepare_now=stages.prepare_now)
    assert sorted(answers) == [(p, True, p.upper()) for p in ["a", "b", "boom", "c", "t1", "t2"]]
    prepared = [(event, batch) for event, batch in stages.events if event.startswith("prepare")]
    assert ("prepared now", ("a", "b")) in prepared and ("prepare", ("a", "b")) not in prepared
    assert ("prepare", ("t1", "t2")) in prepared  # declined: the thread tokenizes it
    assert ("prepare", ("boom", "c")) in prepared  # the quick stage raised: the thread's prepare took it
    assert stages.now_threads == {threading.main_thread().ident}  # on the loop (asyncio.run's thread)


def test_a_batch_prepared_on_the_loop_never_overtakes_one_still_with_the_prepare_thread():
    # ("t1", "t2") is sent behind ("a", "b") and takes the prepare thread 0.3 s; ("c", "d"), which the loop could
    # prepare at once, is sent behind it as ("a", "b") comes back, and must still run after it.
    stages = NowStages(slow={("t1", "t2"): 0.3})
    answers = serve(["a", "b", "t1", "t2", "c", "d"], stages=stages, prepare_now=stages.prepare_now)
    runs = [batch for event, batch in stages.events if event == "run"]
    assert runs == [("a", "b"), ("t1", "t2"), ("c", "d")]
    assert [payload for payload, _, _ in answers] == ["a", "b", "t1", "t2", "c", "d"]


# -- the rules, on the fake clock ---------------------------------------------------------------


class Harness:
    """A pipelined batcher whose batches go to a list instead of a model, on a fake clock."""

    def __init__(self, max_batch_size: int = 4, delay_s: float = DELAY_S, admission: Admission | None = None) -> None:
        self.clock = Clock()
        self.sent: list[tuple[list, str]] = []
        self._batches: list = []
        self.answers: list = []
        self.batcher = DynamicBatcher(
            lambda inputs: inputs,
            pipeline=True,
            max_batch_size=max_batch_size,
            max_queue_delay_s=delay_s,
            loop=asyncio.new_event_loop(),
            clock=self.clock,
            call_at=self.clock.call_at,
            execute=self._execute,
            admission=admission,
        )

    def _execute(self, batch, trigger) -> None:
        self._batches.append(batch)
        self.sent.append(([item.payload for item in batch], trigger))

    def submit(self, payload, rows: int = 1) -> None:
        self.batcher.submit(payload, rows, lambda ok, value: self.answers.append((payload, ok, value)))

    def finish_batch(self, after_s: float = 0.0) -> None:
        self.clock.now += after_s
        batch = self._batches.pop(0)
        self.batcher.finished(batch, [(True, item.payload) for item in batch])


def test_only_a_batch_that_cannot_grow_leaves_while_another_runs_and_only_one():
    h = Harness(max_batch_size=4)
    for payload in "abcd":
        h.submit(payload)
    h.submit("e")
    assert h.sent == [(list("abcd"), FULL)] and h.clock.pending() == []  # "e" could still grow: it waits
    for payload in "fgh":
        h.submit(payload)
    assert h.sent[-1] == (list("efgh"), FULL)  # full: prepared while "abcd" runs
    for payload in "ijkl":
        h.submit(payload)
    assert len(h.sent) == 2  # two batches with the model already
    h.finish_batch()
    assert h.sent[-1] == (list("ijkl"), FULL)
    h.finish_batch()
    h.finish_batch()
    assert [payload for payload, _, _ in h.answers] == list("abcdefghijkl")


def test_the_rules_for_a_batch_that_can_grow_are_unchanged_by_the_pipeline():
    h = Harness(max_batch_size=4)
    h.submit("a")
    h.clock.advance_to_next_timer()  # leaves by the delay
    h.submit("b")
    assert len(h.sent) == 1 and h.clock.pending() == []
    h.clock.now += 0.002
    h.finish_batch()
    # "b" and the answered "a" fit one batch: "b" waits the delay from when the model came free.
    assert h.clock.pending() == [pytest.approx(h.clock.now + DELAY_S)]


def test_drain_sends_the_last_batch_behind_the_running_one():
    h = Harness(max_batch_size=4)
    for payload in "abcde":
        h.submit(payload)

    async def drain() -> None:
        task = asyncio.ensure_future(h.batcher.drain(timeout=5))
        await asyncio.sleep(0)
        assert h.sent == [(list("abcd"), FULL), (["e"], DRAIN)]
        h.finish_batch()
        h.finish_batch()
        await task

    asyncio.run(drain())
    assert len(h.answers) == 5


def test_admission_counts_the_batch_waiting_behind_the_running_one_and_times_each_batch_from_its_start():
    budget = Admission(slo_ms=50, budget_s=0.040, initial_batch_s=0.010)
    h = Harness(delay_s=0.0, admission=budget)
    h.submit("running")  # leaves at once: the model is busy for about 10 ms
    for i in range(4):
        h.submit(i)  # full: sent behind the running batch
    for i in range(4, 8):
        h.submit(i)  # queued
    assert h.batcher.queue_depth == 4 and len(h.sent) == 2
    # 10 ms left of the running batch + the one behind it + the queued one + its own: 40 ms, still in.
    assert h.batcher.estimate_s() == pytest.approx(0.040)
    for i in range(8, 12):
        h.submit(i)
    with pytest.raises(Overloaded):  # 4 batches ahead: 50 ms > the 40 ms budget
        h.submit("one too many")
    h.finish_batch(after_s=0.010)  # "running" took 10 ms
    h.finish_batch(after_s=0.010)  # the one behind it: sent at 100.0, but it ran from 100.010 to 100.020
    assert h.batcher.batch_s == pytest.approx(0.010)


class SlowStages(Stages):
    """Stages whose prepare of a batch takes ``slow[batch]`` seconds (time.sleep, the GIL released, as the
    tokenizers library releases it), and whose model stage of ("c",) waits for "d" to be queued."""

    def __init__(self, slow: dict[tuple, float]) -> None:
        super().__init__(hold_first=False)
        self.slow = slow
        self.d_queued = threading.Event()

    def prepare(self, payloads):
        time.sleep(self.slow.get(tuple(payloads), 0.0))
        return super().prepare(payloads)

    def run(self, batch):
        if batch == ("c",):
            self.d_queued.wait(WAIT_S)
        return super().run(batch)


def hand_over(stages: SlowStages, handoff_wait_s: float) -> list[tuple[str, tuple]]:
    """A full batch (one request "ab" of 2 rows) runs while "c" queues; as it comes back "c" goes straight to the
    model (no queue delay), and "d", queued while "c" runs, as "c" comes back. Every stage and every answer, in
    the order they happened."""

    async def go() -> None:
        batcher = DynamicBatcher(
            stages.run,
            prepare_batch=stages.prepare,
            pipeline=True,
            max_batch_size=2,
            max_queue_delay_s=0.0,
            loop=asyncio.get_running_loop(),
            admission=None,
            handoff_wait_s=handoff_wait_s,
        )
        batcher.start()
        answered = asyncio.Event()

        def on(payload):
            def answer(ok, value):
                stages._record("answer", (payload,))
                if payload == "ab":  # "c" is with the thread: "d" queues behind it
                    batcher.submit("d", 1, on("d"))
                    stages.d_queued.set()
                if payload == "d":
                    answered.set()

            return answer

        for payload, rows in (("ab", 2), ("c", 1)):  # one go, on the loop: "c" is queued before "ab" comes back
            batcher.submit(payload, rows, on(payload))
        await asyncio.wait_for(answered.wait(), WAIT_S)
        await batcher.drain(timeout=WAIT_S)

    asyncio.run(go())
    return stages.events


def answered_before_stacked(events, answer: str, stacked: str) -> bool:
    """Was ``answer``'s reply written before the batch of ``stacked`` was stacked (prepared)?"""
    return events.index(("answer", (answer,))) < events.index(("prepared", (stacked,)))


def test_the_next_batch_is_stacked_before_the_replies_of_the_one_before_are_written():
    """Otherwise the inference thread waits for the GIL while the loop writes them, and the model idles."""
    events = hand_over(SlowStages({("c",): 0.2, ("d",): 0.2}), handoff_wait_s=WAIT_S)
    assert not answered_before_stacked(events, "ab", "c") and not answered_before_stacked(events, "c", "d")
    assert [batch[0] for event, batch in events if event == "answer"] == ["ab", "c", "d"]


def test_the_replies_wait_no_longer_than_the_bound_and_not_at_all_after_a_hand_off_past_it():
    """A stack longer than the bound (texts the fast tokenizer cannot take) costs the loop the bound once: the
    next hand-off is not waited for, however short its own stack."""
    events = hand_over(SlowStages({("c",): 1.0, ("d",): 0.2}), handoff_wait_s=0.5)
    assert answered_before_stacked(events, "ab", "c")  # waited 0.5 s of the 1 s, then wrote the reply
    assert answered_before_stacked(events, "c", "d")  # 0.2 s would fit the bound: not waited for
    assert [batch[0] for event, batch in events if event == "answer"] == ["ab", "c", "d"]


def test_server_pipeline_is_on_by_default_and_off_for_baselines(tmp_path):
    import argparse

    from server_settings import add_arguments, from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--model-dir", str(tmp_path)])
    assert from_args(args, {}).pipeline is True
    assert from_args(args, {"SERVER_PIPELINE": "off"}).pipeline is False
    with pytest.raises(SettingsError, match="SERVER_PIPELINE"):
        from_args(args, {"SERVER_PIPELINE": "sometimes"})
