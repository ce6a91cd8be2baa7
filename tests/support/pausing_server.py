"""A KServe v2 answerer that serves each request in about `service_ms`, and stops the world for `pause_s` every
`period_s` (a garbage collection, a device reset, a noisy neighbour): a request that arrives during a pause is
answered when it ends. The open-system latency such a server gives its users is computed, not guessed:
`expected_p99_ms`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.support.threaded_server import JsonHandler, serving

OUTPUTS = [
    {"name": "logits", "datatype": "FP32", "shape": [1, 3], "data": [0.1, 0.2, 0.7]},
    {"name": "label", "datatype": "BYTES", "shape": [1], "data": ["positive"]},
]
REPLY = json.dumps({"model_name": "m", "outputs": OUTPUTS}).encode()


@dataclass(frozen=True)
class Pauses:
    period_s: float
    pause_s: float
    service_ms: float = 1.0

    def expected_p99_ms(self) -> float:
        """The p99 users arriving at a steady rate see (an open system): a share pause_s / period_s of them arrive
        during a pause, uniformly within it, and wait for the rest of it; the slowest 1 % are those that arrived
        in the first 0.01 x period_s of a pause, so the p99 is pause_s - 0.01 x period_s (plus the service time).
        Over a measured window that is not a whole number of periods the share moves by at most one pause."""
        return 1000.0 * (self.pause_s - 0.01 * self.period_s) + self.service_ms


@dataclass
class PausingServer:
    url: str
    received: int = 0


@contextmanager
def pausing_server(pauses: Pauses | None) -> Iterator[PausingServer]:
    """Serve on a free loopback port; `pauses` None: never pauses."""
    state = PausingServer(url="")
    origin = time.monotonic()

    class Handler(JsonHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            state.received += 1
            if pauses is not None:
                into = (time.monotonic() - origin) % pauses.period_s
                if into < pauses.pause_s:
                    time.sleep(pauses.pause_s - into)
            time.sleep(pauses.service_ms / 1000.0 if pauses else 0.001)
            self.reply(200, REPLY)

    with serving(Handler) as port:
        state.url = f"http://127.0.0.1:{port}/v2/models/m/infer"
        yield state
