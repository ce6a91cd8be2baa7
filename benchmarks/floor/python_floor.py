"""The Python floor of the serving app's cycle (benchmarks/turnaround_floor.py): the cheapest request path the app
could have in Python, on its own stack (uvloop, an asyncio Protocol per connection, httptools), against the same
emulated accelerator.

    python python_floor.py BATCH_MS DELAY_MS [--json | --work MODEL_DIR]

One worker: listens on a loopback port of its own (printed as "port N"), reads each request with httptools,
queues it, and an inference thread sleeps BATCH_MS per batch of up to 16 without the GIL (the app's stand-in
accelerator does the same) and hands the batch back to the event loop, which writes one fixed reply per request.
The batching rules are the app's (batcher.py). ``--json`` also decodes each request's JSON body and takes its
texts, the least the app must do with a request. ``--work`` does the request work the app cannot skip, with the
app's own code on a compiled artifact's metadata and tokenizer: the request parsed and checked
(protocol.ModelInterface.parse), its text tokenized (runner.prepare), the batch stacked into padded arrays and
run on the stand-in accelerator in the inference thread (runner.stack, runner.execute), and each reply built
from its logits row (ModelInterface.response). No metrics, admission, keep-alive bookkeeping or per-request
callbacks: nothing here is the product; it bounds what a Python request path reaches on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import sys
import threading
import time
from pathlib import Path

import httptools
import uvloop

SERVING = Path(__file__).resolve().parents[2] / "container" / "neuron"

ROWS = 16
BODY = (
    b'{"model_name":"model","model_version":"1","outputs":[{"name":"logits","datatype":"FP32","shape":[1,4],'
    b'"data":[12.0,24.0,36.0,48.0]},{"name":"label","datatype":"BYTES","shape":[1],"data":["label_3"]}]}'
)


def http_reply(content: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(content)
    return head + content


REPLY = http_reply(BODY)


class Work:
    """The app's unavoidable request work (``--work``), with its own modules: protocol.ModelInterface and
    runner.ModelRunner on the stand-in accelerator, as serve.py runs them with --standin-accelerator-ms."""

    def __init__(self, model_dir: Path, batch_ms: float) -> None:
        sys.path[:0] = [str(SERVING / "serving"), str(SERVING / "build")]
        from protocol import ModelInterface
        from runner import ModelRunner

        metadata = json.loads((model_dir / "metadata.json").read_text())
        self.interface = ModelInterface(name="model", metadata=metadata, max_rows=ROWS, max_text_chars=8192)
        self.runner = ModelRunner(model_dir, metadata, 1, standin_batch_ms=batch_ms)

    def request(self, body: bytes):
        """(the parsed request, its payload tokenized) on the event loop, as the app's handler does."""
        parsed = self.interface.parse(body, None)
        return parsed, self.runner.prepare(parsed.payload)

    def run(self, batch: list) -> list:
        """The batch stacked and run on the stand-in accelerator (a fixed time per batch, without the GIL), its
        logits split per request: runner.execute(runner.stack(...)), as the app's inference thread calls them."""
        return self.runner.execute(self.runner.stack([payload for _, _, (_, payload) in batch]))

    def reply(self, parsed, logits) -> bytes:
        return http_reply(self.interface.response(parsed, logits)[0])


class Batcher:
    def __init__(self, loop: asyncio.AbstractEventLoop, batch_s: float, delay_s: float, work: Work | None) -> None:
        self.loop, self.batch_s, self.delay_s, self.work = loop, batch_s, delay_s, work
        self.queue: list[tuple[Connection, float, object]] = []
        self.running = False
        self.timer: asyncio.TimerHandle | None = None
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._work, daemon=True).start()

    def submit(self, connection: Connection, request: object = None) -> None:
        self.queue.append((connection, time.monotonic(), request))
        if self.running:
            return
        if len(self.queue) >= ROWS:
            self._send()
        elif self.timer is None:
            self.timer = self.loop.call_later(self.delay_s, self._expire)

    def _expire(self) -> None:
        self.timer = None
        if not self.running and self.queue:
            self._send()

    def _send(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        batch, self.queue = self.queue[:ROWS], self.queue[ROWS:]
        self.running = True
        self.jobs.put(batch)

    def _work(self) -> None:
        while True:
            batch = self.jobs.get()
            if self.work is not None:
                results = self.work.run(batch)  # the stand-in accelerator keeps the batch time
            else:
                results = None
                time.sleep(self.batch_s)  # without the GIL, as the stand-in accelerator sleeps
            self.loop.call_soon_threadsafe(self._finished, batch, results)

    def _finished(self, batch: list[tuple[Connection, float, object]], results: list | None) -> None:
        self.running = False
        if len(self.queue) >= ROWS:
            self._send()
        elif self.queue:
            # The app's rules: the delay counts from the oldest queued request's arrival, or from now when the
            # queue and the rows just answered fit one batch (the clients just answered may fill it).
            start = time.monotonic() if len(self.queue) + len(batch) <= ROWS else self.queue[0][1]
            left = start + self.delay_s - time.monotonic()
            if left <= 0:
                self._send()
            elif self.timer is None:
                self.timer = self.loop.call_later(left, self._expire)
        for k, (connection, _, request) in enumerate(batch):
            if not connection.transport.is_closing():
                if self.work is None:
                    connection.transport.write(REPLY)
                else:
                    connection.transport.write(self.work.reply(request[0], results[k]))


class Connection(asyncio.Protocol):
    def __init__(self, batcher: Batcher, decode: bool, work: Work | None) -> None:
        self.batcher, self.decode, self.work = batcher, decode, work
        self.parser = httptools.HttpRequestParser(self)
        self.body: list[bytes] = []
        self.transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.work is not None:
            request = self.work.request(b"".join(self.body))
            self.body = []
            self.batcher.submit(self, request)
            return
        if self.decode:
            texts = json.loads(b"".join(self.body))["inputs"][0]["data"]
            if not texts:
                self.transport.close()
                return
        self.body = []
        self.batcher.submit(self)


async def serve(batch_s: float, delay_s: float, decode: bool, work: Work | None) -> None:
    loop = asyncio.get_running_loop()
    sys.setswitchinterval(0.0001)  # as the app's worker does: the inference thread gets the GIL back promptly
    batcher = Batcher(loop, batch_s, delay_s, work)
    server = await loop.create_server(lambda: Connection(batcher, decode, work), "127.0.0.1", 0)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    await asyncio.Event().wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("batch_ms", type=float, help="the emulated accelerator's time per batch")
    parser.add_argument("delay_ms", type=float, help="the queue delay")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--json", action="store_true", help="decode each request's JSON body")
    mode.add_argument("--work", type=Path, metavar="MODEL_DIR", help="do the app's request work on this artifact")
    args = parser.parse_args()
    work = Work(args.work, args.batch_ms) if args.work else None
    uvloop.run(serve(args.batch_ms / 1000, args.delay_ms / 1000, args.json, work))
    return 0


if __name__ == "__main__":
    sys.exit(main())
