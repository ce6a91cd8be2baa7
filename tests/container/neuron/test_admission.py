"""Admission (batcher.py, SERVER_SLO_MS): a request is queued only if it would be answered within the SLO's
budget; the rest get 503 with Retry-After at once, counted in /metrics and the EMF lines.

The rule runs against the batcher's fake clock (test_batching.py's Harness): the tests read what it admits,
not how long anything took. Over real HTTP, the emulated accelerator (standin_accelerator.py) takes a fixed
time per batch, long enough that a burst of connections queues far beyond the budget.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

# serving/ and build/'s flat modules, on the path from conftest.py (ruff would count them third-party).
# isort: split
from batcher import DynamicBatcher, Overloaded
from compile_settings import SettingsError
from server_settings import Admission, admission_from_environment

from tests.support.fake_clock import Clock

MAX_ROWS = 4
BATCH_S = 0.010
BUDGET_S = 0.040  # a 50 ms SLO's
ADMISSION = Admission(slo_ms=50, budget_s=BUDGET_S, initial_batch_s=BATCH_S)  # the Harness's default


class Harness:
    """A batcher with admission whose batches go to a list instead of a model, on a fake clock."""

    def __init__(
        self,
        admission: Admission | None = ADMISSION,
        delay_s: float = 0.0,
    ) -> None:
        self.clock = Clock()
        self.batches: list = []
        self.answers: list = []  # (payload, ok, value)
        self.batcher = DynamicBatcher(
            lambda payloads: payloads,
            max_batch_size=MAX_ROWS,
            max_queue_delay_s=delay_s,
            loop=asyncio.new_event_loop(),
            clock=self.clock,
            call_at=self.clock.call_at,
            execute=lambda batch, trigger: self.batches.append(batch),
            admission=admission,
        )

    def submit(self, payload, rows: int = 1) -> None:
        self.batcher.submit(payload, rows, lambda ok, value: self.answers.append((payload, ok, value)))

    def finish_batch(self, after_s: float) -> None:
        self.clock.now += after_s
        batch = self.batches.pop(0)
        self.batcher.finished(batch, [(True, item.payload) for item in batch])


def test_requests_are_admitted_while_the_batches_ahead_fit_the_budget_and_refused_beyond():
    h = Harness()
    h.submit("running")  # leaves at once (no queue delay): the model is busy for about 10 ms
    for i in range(8):  # 2 batches of 4 queued: 10 ms left of the running one + 2 x 10 ms = 30 ms
        h.submit(i)
    assert h.batcher.estimate_s() == pytest.approx(0.040)  # a 9th would start a third batch: 40 ms, still in
    for i in range(8, 12):
        h.submit(i)
    with pytest.raises(Overloaded) as refused:  # 4 batches ahead: 50 ms > the 40 ms budget
        h.submit("one too many")
    assert refused.value.retry_after_s == 1 and "40 ms budget of the 50 ms SLO" in str(refused.value)
    assert h.batcher.queue_depth == 12  # the refused request was never queued
    h.clock.now += 0.010  # the running batch is due: 10 ms less ahead of the next request
    h.submit("in again")


def test_rows_count_and_a_refusal_leaves_room_for_a_smaller_request():
    h = Harness()
    h.submit("running")
    h.submit("big", rows=MAX_ROWS)
    h.submit("big too", rows=MAX_ROWS)  # 8 rows queued, 30 ms
    h.submit("three", rows=3)  # 11 rows: 3 batches + 10 ms = 40 ms
    with pytest.raises(Overloaded):
        h.submit("two", rows=2)  # 13 rows: 4 batches
    h.submit("one")  # 12 rows: still 3 batches


def test_the_batch_time_is_measured_an_ewma_of_batches_sent_to_answered():
    h = Harness()
    h.submit("a")
    assert h.batcher.batch_s == BATCH_S  # the initial estimate until a batch is measured
    h.finish_batch(after_s=0.030)
    assert h.batcher.batch_s == pytest.approx(0.8 * 0.010 + 0.2 * 0.030)
    for _ in range(30):
        h.submit("x")
        h.finish_batch(after_s=0.030)
    assert h.batcher.batch_s == pytest.approx(0.030, rel=0.01)
    # 30 ms batches: one batch of its own and the queue delay leave room for nothing more in a 40 ms budget.
    h.submit("running")
    with pytest.raises(Overloaded):
        h.submit("second")


def test_an_idle_model_admits_whatever_the_estimate_so_a_batch_time_above_the_budget_cannot_refuse_everything():
    # The intent-bert case: a 10 ms SLO (8 ms budget) and a 10 ms initial estimate, every request over budget.
    h = Harness(Admission(slo_ms=10, budget_s=0.008, initial_batch_s=0.010))
    h.submit("first")  # idle: admitted, and its batch measures the model
    with pytest.raises(Overloaded):
        h.submit("behind it")  # 10 ms of the running batch left + its own 10 ms: over budget
    h.finish_batch(after_s=0.003)
    h.submit("second")  # idle again
    h.finish_batch(after_s=0.003)
    assert h.batcher.batch_s == pytest.approx(0.010 * 0.8**2 + 0.003 * (1 - 0.8**2))
    for _ in range(8):  # ten 3 ms batches in all: the estimate comes down to 3.8 ms
        h.submit("x")
        h.finish_batch(after_s=0.003)
    assert h.batcher.batch_s == pytest.approx(0.003 + 0.007 * 0.8**10)
    h.submit("running")
    h.submit("queued behind it")  # what is left of the running batch + its own: within the 8 ms budget now
    assert [ok for _, ok, _ in h.answers] == [True] * 10 and h.batcher.queue_depth == 1


def test_the_warm_up_measurement_replaces_the_initial_estimate_until_a_live_batch_is_measured():
    h = Harness()
    h.batcher.assume_batch_s(0.002)
    assert h.batcher.batch_s == 0.002
    h.submit("a")
    h.finish_batch(after_s=0.004)
    h.batcher.assume_batch_s(0.050)  # too late: live batches count now
    assert h.batcher.batch_s == pytest.approx(0.8 * 0.002 + 0.2 * 0.004)


def test_a_request_riding_the_next_batch_is_held_to_the_slo_not_the_budget():
    # The reference workload's case: a 10 ms SLO (8 ms budget), 1 ms queue delay, a 3.6 ms batch as the loop
    # sees it. A request that arrives as a batch starts waits for it, the delay and its own batch: 8.2 ms.
    h = Harness(Admission(slo_ms=10, budget_s=0.008, initial_batch_s=0.0036), delay_s=0.001)
    h.submit("running")
    h.clock.advance_to_next_timer()  # the delay ran out: the first batch leaves
    assert len(h.batches) == 1
    h.submit("rides the next batch")  # 3.6 ms left + 1 ms + 3.6 ms = 8.2 ms: over the budget, within the SLO
    for i in range(MAX_ROWS - 1):
        h.submit(i)  # the next batch is full
    with pytest.raises(Overloaded) as refused:  # behind a whole batch: 11.8 ms, judged by the 8 ms budget
        h.submit("behind a backlog")
    assert "8 ms budget of the 10 ms SLO" in str(refused.value)
    h.finish_batch(after_s=0.0036)
    assert [item.payload for item in h.batches[0]] == ["rides the next batch", 0, 1, 2]  # left at once, full


def test_the_next_batch_is_refused_too_when_it_would_end_past_the_slo():
    h = Harness(Admission(slo_ms=10, budget_s=0.008, initial_batch_s=0.0046), delay_s=0.001)
    h.submit("running")
    h.clock.advance_to_next_timer()
    with pytest.raises(Overloaded) as refused:  # 4.6 + 1 + 4.6 = 10.2 ms: past the SLO itself
        h.submit("next")
    assert "beyond the 10 ms SLO" in str(refused.value)
    h.clock.now += 0.0004  # 0.4 ms of the running batch gone: 9.8 ms, within it
    h.submit("next")
    assert h.batcher.queue_depth == 1


def test_the_queue_delay_counts_for_the_next_batch_but_not_behind_a_full_one():
    h = Harness(delay_s=0.005)
    h.submit("running")
    h.clock.advance_to_next_timer()  # the delay ran out: it left alone, the model busy for 10 ms
    assert h.batcher.estimate_s() == pytest.approx(0.010 + 0.005 + 0.010)  # the next batch may wait for company
    for i in range(MAX_ROWS):
        h.submit(i)  # the next batch is full: it leaves as the model comes free, and the one behind it too
    assert h.batcher.estimate_s() == pytest.approx(0.010 + 2 * 0.010)
    h.finish_batch(after_s=0.010)
    assert [item.payload for item in h.batches[0]] == [0, 1, 2, 3]  # at once, no delay waited


def test_the_queue_delay_counts_against_the_budget():
    h = Harness(delay_s=0.025)
    h.submit("a")  # waits for company: 10 ms + 25 ms = 35 ms
    with pytest.raises(Overloaded):
        h.submit("fifth", rows=MAX_ROWS)  # a second batch: 45 ms


def test_a_request_that_could_no_longer_finish_within_the_budget_is_refused_instead_of_run():
    h = Harness()
    h.submit("running")
    for i in range(8):
        h.submit(i)
    h.finish_batch(after_s=0.040)  # the model slowed down: the queued requests have waited 40 ms already
    # Another 16 ms batch (the EWMA) would end past the 40 ms budget and the 50 ms SLO: all eight are refused,
    # none is run.
    refused = [payload for payload, ok, value in h.answers if not ok]
    assert refused == list(range(8)) and all(isinstance(v, Overloaded) for _, ok, v in h.answers if not ok)
    assert h.batches == [] and h.batcher.queue_depth == 0
    h.submit("fresh")  # the model is free: a new request goes at once
    assert [item.payload for item in h.batches[0]] == ["fresh"]


def test_past_the_budget_a_backlog_is_refused_but_the_batch_leaving_now_runs_if_it_ends_within_the_slo():
    h = Harness()
    h.submit("running")
    for i in range(8):  # two batches' worth
        h.submit(i)
    h.finish_batch(after_s=0.035)  # waited 35 ms; the next batch (15 ms, the EWMA) ends at 50 ms: past the budget
    answered = [(payload, ok) for payload, ok, _ in h.answers]
    # The oldest four wait in front of a backlog: refused, so that the four behind them leave now instead of
    # after them. Those four then ride the batch that leaves at once and ends within the 50 ms SLO: run.
    assert set(answered) == {("running", True), (0, False), (1, False), (2, False), (3, False)}
    assert [item.payload for item in h.batches[0]] == [4, 5, 6, 7] and h.batcher.queue_depth == 0


def test_without_admission_everything_is_queued():
    h = Harness(admission=None)
    h.submit("running")
    for i in range(1000):
        h.submit(i)
    assert h.batcher.queue_depth == 1000


@pytest.mark.parametrize(
    "environ, expected",
    [
        ({}, None),
        ({"SERVER_SLO_MS": "100"}, Admission(slo_ms=100.0, budget_s=0.08, initial_batch_s=0.01)),
        ({"SERVER_SLO_MS": "100", "SERVER_ADMISSION": "off"}, None),
        (
            {"SERVER_SLO_MS": "250", "SERVER_INITIAL_BATCH_MS": "40"},
            Admission(slo_ms=250.0, budget_s=0.2, initial_batch_s=0.04),
        ),
    ],
)
def test_admission_settings(environ, expected):
    assert admission_from_environment(environ) == expected


@pytest.mark.parametrize(
    "environ, message",
    [
        ({"SERVER_SLO_MS": "0"}, "SERVER_SLO_MS: must be between 1 and 600000, got '0'"),
        ({"SERVER_SLO_MS": "fast"}, "SERVER_SLO_MS: expected a number, got 'fast'"),
        ({"SERVER_SLO_MS": "nan"}, "SERVER_SLO_MS: must be between 1 and 600000, got 'nan'"),
        ({"SERVER_ADMISSION": "maybe"}, "SERVER_ADMISSION: must be on or off, got 'maybe'"),
    ],
)
def test_bad_admission_settings_are_one_line_errors(environ, message):
    with pytest.raises(SettingsError) as error:
        admission_from_environment(environ)
    assert str(error.value) == message


# -- over real HTTP -------------------------------------------------------------------------------

STANDIN_MS = 100  # per batch of up to 16 rows: a burst of 48 is 3 batches, 300 ms of work
SLO_MS = 300  # budget 240 ms: the running batch and one more


def infer_bytes(keep_alive: bool = True) -> bytes:
    body = json.dumps(
        {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["a fine film"]}]}
    ).encode()
    connection = b"" if keep_alive else b"Connection: close\r\n"
    return (
        b"POST /v2/models/model/infer HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n%s"
        b"Content-Length: %d\r\n\r\n%s" % (connection, len(body), body)
    )


def read_reply(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before a reply"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value for name, value in (line.split(": ", 1) for line in lines[1:])}
    length = int(headers["content-length"])
    while len(body) < length:
        body += sock.recv(65536)
    return int(lines[0].split()[1]), headers, body


def counted(url_port: int) -> str:
    with socket.create_connection(("127.0.0.1", url_port), timeout=30) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        return read_reply(sock)[2].decode()


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def test_a_burst_beyond_the_budget_gets_503_with_retry_after_at_once_counted_and_the_admitted_succeed(
    artifact, start_server
):
    server = start_server(
        artifact,
        env={
            "SERVER_SLO_MS": str(SLO_MS),
            "SERVER_INITIAL_BATCH_MS": str(STANDIN_MS),
            "SERVER_MAX_QUEUE_DELAY_MS": "0",
            "SERVER_MAX_BATCH_SIZE": "16",
            "SERVER_METRICS_INTERVAL_S": "1",
            "SERVER_WARMUP_ITERATIONS": "0",
        },
        args=("--standin-accelerator-ms", str(STANDIN_MS)),
    )
    server.wait_ready()
    sockets = [socket.create_connection(("127.0.0.1", server.port), timeout=60) for _ in range(48)]
    try:
        for sock in sockets:
            sock.sendall(infer_bytes())
        with ThreadPoolExecutor(len(sockets)) as pool:
            replies = list(pool.map(read_reply, sockets))
        statuses = [status for status, _, _ in replies]
        assert set(statuses) == {200, 503}, statuses
        # 48 requests, 300 ms of work, against a 240 ms budget: at most two batches' worth admitted.
        ok, refused = statuses.count(200), statuses.count(503)
        assert 1 <= ok <= 32 and refused >= 16, statuses
        for status, headers, body in replies:
            if status == 503:
                assert int(headers["retry-after"]) >= 1
                assert headers["content-type"] == "application/json" and "connection" not in headers
                assert json.loads(body)["error"].startswith("overloaded: ")
            else:
                assert json.loads(body)["model_name"] == "model"
        # The connection of a refused request stays open and serves the next one.
        again = sockets[statuses.index(503)]
        time.sleep(STANDIN_MS * 4 / 1000)  # generous: the admitted batches are done
        again.sendall(infer_bytes())
        assert read_reply(again)[0] == 200
    finally:
        for sock in sockets:
            sock.close()
    deadline = time.monotonic() + 30

    def rejected(text: str) -> float:
        return sum(
            metric(text, f'inference_rejected_total{{reason="{reason}"}}') for reason in ("admission", "expired")
        )

    while rejected(counted(server.port)) < refused and time.monotonic() < deadline:
        time.sleep(0.1)
    text = counted(server.port)
    assert rejected(text) == refused
    assert metric(text, 'inference_requests_total{route="infer",status="503"}') == refused
    # Those refused at once (most, if not all) have their server time recorded.
    assert (
        1
        <= metric(text, "inference_rejection_duration_seconds_count")
        == metric(text, 'inference_rejected_total{reason="admission"}')
    )
    assert server.stop() == 0
    server.finish_reading()
    records = [json.loads(line) for line in server.lines if line.startswith('{"Service"')]
    assert sum(r.get("Rejected", 0) for r in records) == refused
    assert sum(r.get("Requests", 0) for r in records) == len(sockets) + 1
    assert any({"Name": "Rejected", "Unit": "Count"} in r["_aws"]["CloudWatchMetrics"][0]["Metrics"] for r in records)


def test_a_packed_model_admits_within_its_own_slo(monkeypatch, tmp_path):
    """SERVER_MODELS' slo_ms gives each packed model its own budget; SERVER_ADMISSION=off still turns it off."""
    import packing
    import server_settings

    (model,) = packing.parse(
        '[{"name": "a", "port": 8080, "visible_cores": "0", "slo_ms": 50}]',
        label="SERVER_MODELS",
        workers=1,
        max_batch_size=4,
        max_queue_delay_ms=1,
    )
    assert model.slo_ms == 50
    import argparse

    parser = argparse.ArgumentParser()
    server_settings.add_arguments(parser)
    settings = server_settings.from_args(parser.parse_args(["--model-dir", str(tmp_path)]), environ={})
    monkeypatch.delenv("SERVER_ADMISSION", raising=False)
    admission = server_settings.for_model(settings, model).admission
    assert admission is not None and admission.slo_ms == 50 and admission.budget_s == pytest.approx(0.04)
    monkeypatch.setenv("SERVER_ADMISSION", "off")
    assert server_settings.for_model(settings, model).admission is None
    with pytest.raises(SettingsError, match=r"SERVER_MODELS\[0\].slo_ms: must be between 1"):
        packing.parse(
            '[{"name": "a", "port": 8080, "visible_cores": "0", "slo_ms": 0}]',
            label="SERVER_MODELS",
            workers=1,
            max_batch_size=4,
            max_queue_delay_ms=1,
        )
