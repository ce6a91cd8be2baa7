"""The open-model generator's drain (inferstack/loadtest/locustfile.py): once the last step is over nothing more is
sent, not even a request whose greenlet was already waiting for its due time when the drain began. Sent, it could
leave after the drain had found nothing in flight and ended the run, and count as "unanswered when the run ended"
(it did in tests/loadtest/test_overload.py, in two of the last six full runs of the suite). Run in a subprocess:
importing Locust patches the standard library for gevent."""

from __future__ import annotations

import subprocess
import sys

import pytest

from inferstack.loadtest.spec import ExpectedOutput, LoadTestSpec, Step, Target
from tests.support.paths import ROOT

pytestmark = pytest.mark.loadtest
SPEC = LoadTestSpec(
    model="m",
    target=Target(kind="http", url="http://127.0.0.1:1/v2/models/m/infer"),
    bodies=({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["hi"]}]},),
    outputs=(ExpectedOutput("logits", "FP32", (1, 2)),),
    steps=(Step(rate=10, seconds=10),),
    p99_slo_ms=50.0,
)

PROBE = """
import os, sys, time
os.environ["INFERSTACK_LOADTEST_SPEC"] = sys.argv[1]
import gevent, gevent.pool
from inferstack.loadtest import locustfile as lf

sent = []

class Probe(lf._OpenArrivals):
    def send(self, body):
        sent.append(body)
        return None, 200, time.monotonic()

probe = Probe.__new__(Probe)
probe._due, probe._interval, probe._phase, probe._body = time.monotonic() + 0.2, 1.0, 0.0, 0
probe._requests = gevent.pool.Group()
waiting = gevent.spawn(probe.arrive)
gevent.sleep(0.05)  # it waits for its due time
lf._drain()  # the last step ends: nothing in flight
waiting.join()
probe._requests.join()
print(f"sent={len(sent)} in_flight={lf._State.in_flight}")
"""


def test_a_request_waiting_for_its_due_time_when_the_drain_begins_is_not_sent():
    result = subprocess.run(
        [sys.executable, "-c", PROBE, SPEC.to_json()], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "sent=0 in_flight=0", result.stdout
