"""TorchServe 0.12 handler for benchmarks/peers.py: the serving app's artifact behind TorchServe's own
batching (batchSize, maxBatchDelay), one KServe v2 JSON request per text, the same reply fields.

Packed into the .mar with peer_model.py, standin_accelerator.py (the emulated accelerator, a stand-in for
a NeuronCore) and peer.json ({"standin_ms": null or the batch time}); the artifact's files sit beside them.
"""

import json
import os
from pathlib import Path

from peer_model import PeerModel

_model = None


def handle(data, context):
    global _model
    if _model is None:
        model_dir = Path(context.system_properties["model_dir"])
        settings = json.loads((model_dir / "peer.json").read_text())
        _model = PeerModel(model_dir, settings["standin_ms"], os.environ.get("PEER_STATS_DIR"))
    if data is None:  # TorchServe's warm-up call while the worker registers
        return None
    texts = []
    for row in data:
        body = row.get("body") or row.get("data")
        if isinstance(body, (bytes, bytearray)):
            body = json.loads(body)
        texts.append(body["inputs"][0]["data"][0])
    logits = _model.infer(texts)
    return [json.dumps(_model.reply(row), separators=(",", ":")) for row in logits]
