"""Triton's own overload shedding (dynamic_batching.default_queue_policy, derived by inferstack/triton/config.py
queue_policy) against no policy, on the real tritonserver 2.51 at twice a model's capacity.

    python benchmarks/triton_overload.py [--seconds 2.5] [--factor 2] [--batch-ms 50] [--slo-ms 600]

The model is a Python-backend model that sleeps --batch-ms per request (one instance, batches of one), so its
capacity (1000 / --batch-ms req/s) is exact and costs no CPU; its SLO is --slo-ms and its profile says
--profile-p99-ms at that capacity. Each server (started as SageMaker's serve script starts it, by
rehearsal/triton_server.py) is offered --factor x capacity as an open system: request i is sent when due
(start + i / rate) whatever happened to the others, and latencies count from then. Rows, side by side:
  policy:   the derived policy (timeout SLO - profiled p99, max_queue_size 4 x rate x timeout);
  bound:    the earlier derivation (max_queue_size rate x timeout, reached at 2x), for comparison;
  baseline: no queue policy (the queue grows).
Then a burst of --burst requests at once, then silence, with the policy and without: Triton 24.09's batcher,
with any queue policy, waits for a new arrival (or 500 ms) to start the next batch (see queue_policy).
The load generator runs on this machine, sharing its cores with tritonserver. Prints figures only, never asserts.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tritonclient.grpc import model_config_pb2 as pb  # noqa: E402 - after sys.path is set

from inferstack.config import load  # noqa: E402 - after sys.path is set
from inferstack.schema.model_file import Capacity, Slo  # noqa: E402 - after sys.path is set
from inferstack.schema.throughput import ProfilePoint  # noqa: E402 - after sys.path is set
from inferstack.schema.triton_sagemaker import DynamicBatching, InstanceGroup  # noqa: E402 - after sys.path is set
from inferstack.triton import config as triton_config  # noqa: E402 - after sys.path is set
from inferstack.triton.config import FolderSpec, QueuePolicy, RepositorySpec, Tensor  # noqa: E402 - after sys.path is set
from rehearsal import triton_server  # noqa: E402 - after sys.path is set

NAME = "sleepy"
BODY = json.dumps({"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [1.0]}]})
FOLDER = FolderSpec(
    NAME, "python", (Tensor("x", pb.TYPE_FP32, (1,)),), (Tensor("y", pb.TYPE_FP32, (1,)),), "model.py", on_gpu=False
)


def model_py(batch_seconds: float) -> str:
    return f"""
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({batch_seconds})
        return [pb_utils.InferenceResponse([pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy())])
                for r in requests]
"""


def sleepy_model(capacity: float, slo_ms: float, profile_p99_ms: float):
    """The shipped bert-large-classifier made into the sleeping model: its SLO, its profile (the exact capacity),
    one CPU instance, batches of one without waiting. One request a batch: with max_queue_delay 0 Triton hands a
    free instance whatever is queued the moment it arrives, so at this rate batches hold one request anyway."""
    model = next(m for m in load(ROOT / "model_configs").models if m.name == "bert-large-classifier")
    itype = model.capacity.instance_type
    return model.model_copy(
        update={
            "name": NAME,
            "slo": Slo(p99_latency_ms=slo_ms, peak_tps=capacity),
            "throughput_profile": {
                itype: ProfilePoint(
                    throughput_per_second=capacity,
                    p99_latency_ms=profile_p99_ms,
                    source="a model that sleeps a fixed time per batch",
                )
            },
            "capacity": Capacity(instance_type=itype, min=1, max=1),
            "serving": model.serving.model_copy(
                update={
                    "tensorrt_acceleration": None,
                    "max_batch_size": 1,
                    "warmup": False,
                    "dynamic_batching": DynamicBatching(max_queue_delay_microseconds=0),
                    "instance_group": InstanceGroup(count=1, kind="KIND_CPU"),
                }
            ),
        }
    )


def write_repository(root: Path, spec: RepositorySpec, batch_seconds: float) -> Path:
    (root / NAME / "1").mkdir(parents=True)
    (root / NAME / "config.pbtxt").write_text(triton_config.config_text(triton_config.build_config(spec, FOLDER)))
    (root / NAME / "1" / "model.py").write_text(model_py(batch_seconds))
    return root


@dataclass(frozen=True)
class Outcome:
    status: int  # 0: no HTTP answer
    latency: float  # seconds from when the request was due
    body: bytes


def offer(port: int, rate: float, count: int) -> list[Outcome]:
    """Open-loop: request i is due at start + i / rate and sent then by a thread of its own (one per request,
    so a slow answer never delays a later send); a new connection each, as independent callers would."""
    outcomes: list[Outcome | None] = [None] * count
    start = time.monotonic() + 0.2

    def one(i: int) -> None:
        due = start + i / rate
        time.sleep(max(0.0, due - time.monotonic()))
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            connection.request("POST", "/invocations", body=BODY, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            outcomes[i] = Outcome(response.status, time.monotonic() - due, response.read())
        except OSError as exc:
            outcomes[i] = Outcome(0, time.monotonic() - due, str(exc).encode())
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=count) as pool:
        list(pool.map(one, range(count)))
    return outcomes  # type: ignore[return-value]


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summary(outcomes: list[Outcome], capacity: float, rate: float, slo_s: float) -> dict:
    """Goodput: requests answered 200 within the SLO, per second from the first request due to the end of the load
    or the last such answer, whichever is later (the drain of what was admitted counts), as a share of capacity."""
    ok = [o.latency for o in outcomes if o.status == 200]
    good = [i / rate + o.latency for i, o in enumerate(outcomes) if o.status == 200 and o.latency <= slo_s]
    rejected = [o for o in outcomes if o.status != 200]
    return {
        "offered": len(outcomes),
        "served": len(ok),
        "within_slo": len(good),
        "rejected": len(rejected),
        "goodput": len(good) / (capacity * max([len(outcomes) / rate, *good])),
        "statuses": sorted({o.status for o in rejected}),
        "messages": sorted(
            {json.loads(o.body).get("error", "") if o.body.startswith(b"{") else o.body.decode() for o in rejected}
        ),
        "served_p50": quantile(ok, 0.5),
        "served_p99": quantile(ok, 0.99),
        "rejected_p50": quantile([o.latency for o in rejected], 0.5),
        "rejected_max": max((o.latency for o in rejected), default=None),
    }


def serve(install, spec: RepositorySpec, batch_seconds: float, work: Path, load) -> list[Outcome]:
    repository = write_repository(work / "model", spec, batch_seconds)
    # The one sleeping folder is the token-id model alone, served as the default model (no text ensemble).
    environment = {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": NAME, "SAGEMAKER_TRITON_LOG_VERBOSE": "0"}
    with triton_server.TritonServer(repository, environment, work_dir=work / "server", install=install) as server:
        status, _ = server.invoke(json.loads(BODY))
        assert status == 200, status  # the model answers before it is measured
        return load(server.port)


def positive(kind):
    def parse(text: str):
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
        return value

    return parse


def ms(value: float | None) -> str:
    return "-" if value is None else f"{1000 * value:,.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=positive(float), default=2.5, help="offered load per server (s)")
    parser.add_argument("--factor", type=positive(float), default=2.0, help="offered rate / capacity")
    parser.add_argument("--batch-ms", type=positive(float), default=50.0, help="the model's time per request")
    parser.add_argument("--slo-ms", type=positive(float), default=600.0)
    parser.add_argument("--profile-p99-ms", type=positive(float), default=250.0)
    parser.add_argument("--burst", type=int, default=5, help="requests sent at once after the load (0 skips)")
    args = parser.parse_args(argv)
    if args.profile_p99_ms >= args.slo_ms:
        parser.error("--profile-p99-ms must be below --slo-ms")

    capacity = 1000.0 / args.batch_ms
    rate = args.factor * capacity
    count = max(1, round(rate * args.seconds))
    model = sleepy_model(capacity, args.slo_ms, args.profile_p99_ms)
    derived = RepositorySpec.of(model)
    timeout_s = derived.queue_policy.timeout_microseconds / 1e6
    earlier = derived.model_copy(
        update={
            "queue_policy": QueuePolicy(
                timeout_microseconds=derived.queue_policy.timeout_microseconds,
                max_queue_size=max(1, math.ceil(capacity * timeout_s)),
            )
        }
    )
    rows = [("policy", derived), ("bound", earlier), ("baseline", derived.model_copy(update={"queue_policy": None}))]
    install = triton_server.TritonInstall.locate()
    print(
        f"tritonserver 2.51 (real), model sleeping {args.batch_ms:g} ms a request, one instance: capacity "
        f"{capacity:g} req/s; SLO p99 {args.slo_ms:g} ms, profiled p99 {args.profile_p99_ms:g} ms"
    )
    print(
        f"offered {rate:g} req/s ({args.factor:g}x) open-loop for {args.seconds:g} s ({count} requests); "
        f"load generator "
        f"on this machine ({os.cpu_count()} cores, shared with tritonserver and whatever else runs); latencies from "
        f"when each request was due"
    )
    print(
        f"{'':>9} | {'timeout':>7} {'queue':>5} | {'offered':>7} {'served':>6} {'in SLO':>6} {'503':>4} {'other':>5} | "
        f"{'goodput':>7} | {'p50 ms':>6} {'p99 ms':>6} | {'503 p50':>7} {'503 max':>7}"
    )
    with tempfile.TemporaryDirectory(prefix="triton-overload-") as tmp:
        for label, spec in rows:
            outcomes = serve(
                install, spec, args.batch_ms / 1000, Path(tmp) / label, lambda port: offer(port, rate, count)
            )
            s = summary(outcomes, capacity, rate, args.slo_ms / 1000)
            policy = spec.queue_policy
            other = sum(1 for o in outcomes if o.status not in (200, 503))
            print(
                f"{label:>9} | {policy.timeout_microseconds / 1000 if policy else '-':>7} "
                f"{policy.max_queue_size if policy else '-':>5} | {s['offered']:>7} {s['served']:>6} "
                f"{s['within_slo']:>6} {s['rejected'] - other:>4} {other:>5} | {s['goodput']:>7.0%} | "
                f"{ms(s['served_p50']):>6} "
                f"{ms(s['served_p99']):>6} | {ms(s['rejected_p50']):>7} {ms(s['rejected_max']):>7}"
            )
        print(
            f"goodput: answers within the SLO per second of capacity, from the first request due to the end of the "
            f"load or the last such answer.\n"
            f"targets for 'policy' (goodput >= 90% of capacity, admitted p99 <= {args.slo_ms:g} ms, every rejection "
            f"503): see the row; not asserted"
        )
        if args.burst > 0:
            for label, spec in (rows[0], rows[2]):
                outcomes = serve(
                    install,
                    spec,
                    args.batch_ms / 1000,
                    Path(tmp) / f"burst-{label}",
                    lambda port: [o for _ in range(3) for o in (offer(port, 1e6, args.burst), time.sleep(1.0))[0]],
                )
                print(
                    f"burst of {args.burst} at once, then silence, 3 times, {label:>8}: "
                    + ", ".join(f"{o.status} {ms(o.latency)} ms" for o in outcomes)
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
