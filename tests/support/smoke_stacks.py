"""Stacks and replies the smoke and invoke tests share: model-file edits, a dev stack's outputs pointing at a local
server, and moto's canned InvokeEndpoint replies."""

from __future__ import annotations

import json
from pathlib import Path

import requests
import yaml

from inferstack.aws import stack_outputs
from tests.support import aws_fakes

FLEET = "intent-pack"  # the shipped neuron-cores fleet: intent-bert and duplicate-bert


def edit_model(config_dir: Path, name: str, change) -> None:
    path = config_dir / f"{name}.yaml"
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def deploy_url(url: str, model: str = "intent-bert") -> None:
    """The stack that serves `model` in dev: the fleet's (its Url, and every member's path) for the shipped
    fleet's members, else the model's own."""
    if model in ("intent-bert", "duplicate-bert"):
        paths = {m: f"/v2/models/{m}" for m in ("intent-bert", "duplicate-bert")}
        aws_fakes.create_stack(
            aws_fakes.session("dev"),
            f"dev-{FLEET}",
            {"Url": url, stack_outputs.MODEL_PATHS: stack_outputs.model_paths_value(paths)},
        )
    else:
        aws_fakes.create_stack(aws_fakes.session("dev"), f"dev-{model}", {"Url": url})


def queue_replies(*bodies: dict | str) -> None:
    """moto answers InvokeEndpoint from this queue, one entry per distinct request (then repeats it)."""
    results = [{"Body": b if isinstance(b, str) else json.dumps(b), "ContentType": "application/json"} for b in bodies]
    response = requests.post(
        "http://motoapi.amazonaws.com/moto-api/static/sagemaker/endpoint-results",
        json={"account_id": aws_fakes.ACCOUNTS["dev"], "region": "us-east-1", "results": results},
        timeout=10,
    )
    assert response.status_code == 201, response.text
