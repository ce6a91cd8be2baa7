"""The token-id model's overload shedding, derived from the SLO and the throughput profile."""

from __future__ import annotations

import math

from pydantic import Field

from inferstack.schema.base import Frozen
from inferstack.schema.triton_sagemaker import TritonSageMakerModel


class QueuePolicy(Frozen):
    """The token-id model's overload shedding: Triton's `dynamic_batching.default_queue_policy` with
    timeout_action REJECT. Derived by `queue_policy()` from the SLO and the throughput profile."""

    timeout_microseconds: int = Field(ge=1)
    max_queue_size: int = Field(ge=1)


# The queue bound sits this many times the profiled rate x the timeout above what the timeout leaves queued,
# so that up to that overload the timeout sheds and the bound is never reached (see queue_policy).
QUEUE_BOUND_OVERLOAD = 4


def queue_policy(model: TritonSageMakerModel) -> QueuePolicy | None:
    """Overload shedding for the token-id model, so that above capacity Triton answers the excess with 503
    instead of queueing it without bound (None without a dynamic batcher: the policy is one of its fields).
    The token-id model is where requests queue: the text ensemble's tokenizer step ahead of it is fast and
    the ensemble itself has no queue, so a timeout there would measure nothing; the ensemble hands the
    step's rejection to its caller unchanged (503, tests/container/triton/test_overload_shedding.py).

    With S the SLO's p99 (`slo.p99_latency_ms`), L the p99 and R the throughput of the model's instances at
    the profiled operating point (`throughput_profile[capacity.instance_type]`: batching delay, execution
    and network included in L), B `serving.max_batch_size`, D `dynamic_batching.max_queue_delay`:

    - timeout T = max(S - L, D + 1 ms), REJECT. Triton starts it when the request enters the queue; a
      request that waited longer than S - L still needs up to L more, so it would miss the SLO: rejecting
      it is what keeps the admitted p99 within S. Never shorter than the batcher's own wait plus a
      millisecond, so holding a request to fill a batch alone never times it out. This is the shedder.
    - max_queue_size Q = max(ceil(4 x R x T), B): a backstop, not the shedder. Under the timeout the queue
      holds about what arrives in T (rate x T; expired requests leave when the batcher next looks at the
      head), so Q is reached only above about 4x the profiled rate; at least one full batch.

    Why the bound is not the shedder (measured with the real tritonserver 2.51, a one-instance model that
    sleeps 50 ms a request, 20 req/s, offered 40 req/s open-loop for 2.5 s, T 350 ms): with the earlier
    Q = ceil(R x T) = 7 plus the timeout it served 21-28 of the ~50 it could (42-56 % goodput); Q = 7
    alone served 38 with an admitted p99 of 1.3 s; the timeout alone, or with Q = 28 (never reached),
    served 47-50 (94-100 %) with an admitted p99 of about 400 ms. The cause is in Triton's dynamic batcher
    (core r24.09, dynamic_batch_scheduler.cc): any queue policy turns off payload prefetching, and the
    batcher then waits for a free instance, woken by the instance's completion callback, which fires before
    the instance is ready to take work again, or by a request that is enqueued. A request refused by a full
    queue wakes nothing, so with the queue full the batcher sleeps its 500 ms default wait while the instance
    idles, and with a timeout below 500 ms everything queued expires meanwhile. Under the timeout alone every
    arrival is enqueued and wakes it, so an instance idles at most one inter-arrival time after a batch.
    The same wake-up race means a burst queued behind a busy instance with nothing arriving after it can
    wait up to 500 ms (and be rejected if T is shorter): measured in `benchmarks/triton_overload.py`.

    bert-large-classifier: S 300 ms, L 150 ms, R 53.2/s, B 16 -> T 150 ms, Q max(ceil(31.9), 16) = 32.
    t5-spelling: S 50 ms, L 40 ms, R 120/s, B 32 -> T 10 ms, Q max(ceil(4.8), 32) = 32. T5's 10 ms is what
    its profile leaves of the SLO: a request that queued longer would need its p99 execution on top, so it
    is shed even in a burst below capacity; the profile is an estimate, and a measured one (a lower L)
    widens T.

    The model-level SLO and capacity.instance_type, not an environment's overrides: the policy is baked
    into the image, which is promoted unchanged from dev to prod. A profile without that instance type
    falls back to its slowest entry. Triton reports either rejection as UNAVAILABLE, which its SageMaker
    front end answers with 503 (and InvokeEndpoint hands the caller as a ModelError, HTTP 424, with
    OriginalStatusCode 503). Semantics: ModelQueuePolicy in
    https://github.com/triton-inference-server/common/blob/main/protobuf/model_config.proto.
    """
    batching = model.serving.dynamic_batching
    if batching is None:
        return None
    point = model.throughput_profile.get(model.capacity.instance_type) or min(
        model.throughput_profile.values(), key=lambda p: p.throughput_per_second
    )
    slack_us = (model.slo.p99_latency_ms - point.p99_latency_ms) * 1000
    timeout_us = max(math.floor(slack_us), batching.max_queue_delay_microseconds + 1000)
    bound = math.ceil(QUEUE_BOUND_OVERLOAD * point.throughput_per_second * timeout_us / 1e6)
    return QueuePolicy(timeout_microseconds=timeout_us, max_queue_size=max(bound, model.serving.max_batch_size))
