"""Baseline (b) for serve_bench.py: the obvious FastAPI server for a traced classifier.

Tokenize, run the model on this one request, reply -- an `async def` handler that never awaits
the model, so exactly one request runs at a time. Same artifact, tokenizer and reply format as
serve.py, no batching.

    python benchmarks/naive_server.py --model-dir ART --port 8081 [--torch-threads 1]
"""

import argparse
import json
from pathlib import Path

import torch
import uvicorn
from fastapi import FastAPI, Request
from tokenizers import Tokenizer


def build_app(model_dir: Path) -> FastAPI:
    metadata = json.loads((model_dir / "metadata.json").read_text())
    model = torch.jit.load(str(model_dir / "model.pt")).eval()
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=metadata["sequence_length"])
    tokenizer.enable_padding(length=metadata["sequence_length"], pad_id=metadata["pad_token_id"])
    labels = metadata["labels"]
    app = FastAPI()

    @app.get("/ping")
    async def ping():
        return {"status": "healthy"}

    @app.post("/v2/models/{name}/infer")
    async def infer(name: str, request: Request):
        body = await request.json()
        encodings = tokenizer.encode_batch(body["inputs"][0]["data"])
        ids = torch.tensor([e.ids for e in encodings])
        mask = torch.tensor([e.attention_mask for e in encodings])
        with torch.inference_mode():
            logits = model(ids, mask)
        return {
            "model_name": name,
            "outputs": [
                {"name": "logits", "datatype": "FP32", "shape": list(logits.shape), "data": logits.flatten().tolist()},
                {
                    "name": "label",
                    "datatype": "BYTES",
                    "shape": [len(encodings)],
                    "data": [labels[i] for i in logits.argmax(1).tolist()],
                },
            ],
        }

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--torch-threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.torch_threads)
    uvicorn.run(build_app(args.model_dir), host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
