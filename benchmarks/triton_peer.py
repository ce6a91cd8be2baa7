"""tritonserver 2.51 (from nvidia-pytriton 0.7.0) for benchmarks/peers.py: the serving app's artifact as a
Triton model with Triton's dynamic batcher, one model instance per worker (each a Python callback on its
own thread, holding its own copy), KServe v2 on 127.0.0.1. Runs in the peers' side environment.

    .venv-peers/bin/python benchmarks/triton_peer.py --artifact ART --port P [--standin-ms 3]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "container" / "neuron" / "serving")]

from peer_model import PeerModel  # noqa: E402 - after sys.path is set


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-batch-size", type=int, default=16)
    parser.add_argument("--max-queue-delay-ms", type=float, default=1.0)
    parser.add_argument("--standin-ms", type=float, default=None, help="the emulated accelerator's batch time")
    args = parser.parse_args()

    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    def instance():
        model = PeerModel(args.artifact, args.standin_ms, os.environ.get("PEER_STATS_DIR"))

        @batch
        def infer(TEXT):  # Triton's input name
            logits = model.infer([row[0].decode("utf-8") for row in TEXT]).astype(np.float32)
            labels = np.array([[model.labels[i].encode()] for i in logits.argmax(axis=1)], dtype=object)
            return {"logits": logits, "label": labels}

        return infer, len(model.labels)

    instances = [instance() for _ in range(args.workers)]
    config = TritonConfig(
        http_address="127.0.0.1",
        http_port=args.port,
        grpc_address="127.0.0.1",
        grpc_port=0,
        metrics_port=0,
        allow_metrics=False,
        log_verbose=0,
    )
    with Triton(config=config) as triton:
        triton.bind(
            model_name="model",
            infer_func=[infer for infer, _ in instances],
            inputs=[Tensor(name="TEXT", dtype=bytes, shape=(1,))],
            outputs=[
                Tensor(name="logits", dtype=np.float32, shape=(instances[0][1],)),
                Tensor(name="label", dtype=bytes, shape=(1,)),
            ],
            config=ModelConfig(
                max_batch_size=args.max_batch_size,
                batcher=DynamicBatcher(max_queue_delay_microseconds=int(args.max_queue_delay_ms * 1000)),
            ),
            strict=False,
        )
        triton.serve()


if __name__ == "__main__":
    main()
