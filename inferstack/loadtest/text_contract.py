"""The one request and reply every deployed model speaks, whatever serves it (the Neuron app; on SageMaker the
Triton ensemble each endpoint defaults to, which tokenizes inside the server): KServe v2 JSON with the texts as
one BYTES tensor TEXT [n] in, and per task a fixed set of outputs. Smoke tests, load tests, profiles and
`inferstack invoke` all build their requests here, so what they send is what an application sends.

    request  {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [n], "data": ["...", ...]}]}
    text-classification   logits FP32 [n, labels], label BYTES [n]
    text2text-generation  text BYTES [n]

No dependencies beyond the standard library (Locust's processes load what they need of it cheaply)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from inferstack.loadtest.answer import Output
from inferstack.schema.families import TEXT2TEXT_GENERATION, TEXT_CLASSIFICATION

INPUT = "TEXT"
LOGITS, LABEL = "logits", "label"
GENERATED = "text"  # not TEXT: on Triton 2.51 an ensemble whose input and output share a name never answers


def request_body(texts: Sequence[str], outputs: Sequence[str] = ()) -> dict:
    """The request for `texts` (a batch of len(texts)); `outputs`: only these outputs in the reply."""
    if isinstance(texts, str):
        raise TypeError("request_body() takes a sequence of texts, not one string")
    body: dict = {"inputs": [{"name": INPUT, "datatype": "BYTES", "shape": [len(texts)], "data": list(texts)}]}
    if outputs:
        body["outputs"] = [{"name": name} for name in outputs]
    return body


def expected_outputs(model, rows: int) -> tuple[Output, ...]:
    """What a reply to `rows` texts holds for `model`'s task (source.task, source.labels)."""
    task = model.source.task
    if task == TEXT_CLASSIFICATION:
        return (Output(LOGITS, "FP32", (rows, len(model.source.labels))), Output(LABEL, "BYTES", (rows,)))
    if task == TEXT2TEXT_GENERATION:
        return (Output(GENERATED, "BYTES", (rows,)),)
    raise ValueError(f"{model.name}: no text contract for task {task!r}")


@dataclass(frozen=True)
class Answer:
    """One text's answer: a label and each label's logit (highest first), or a generated text."""

    label: str | None = None
    scores: tuple[tuple[str, float], ...] = ()
    text: str | None = None

    def line(self, top: int = 3) -> str:
        if self.text is not None:
            return self.text
        shown = ", ".join(f"{name} {value:.3f}" for name, value in self.scores[:top])
        return f"{self.label} ({shown})" if shown else str(self.label)


def _rows(values: list, width: int) -> list[list]:
    """A v2 tensor's data (flat, or nested row by row) as rows of `width`."""
    flat: list = []
    stack = [values]
    while stack:  # flatten without recursion: nesting depth comes from the reply
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        else:
            flat.append(item)
    return [flat[i : i + width] for i in range(0, len(flat), width)]


def read_reply(reply: bytes, model, rows: int) -> list[Answer]:
    """One Answer per text of a reply already checked against expected_outputs (answer.check)."""
    outputs = {o["name"]: o for o in json.loads(reply)["outputs"] if isinstance(o, dict)}
    if model.source.task == TEXT2TEXT_GENERATION:
        return [Answer(text=str(row[0])) for row in _rows(outputs[GENERATED]["data"], 1)]
    labels = model.source.labels
    logits = _rows(outputs[LOGITS]["data"], len(labels))
    names = [str(row[0]) for row in _rows(outputs[LABEL]["data"], 1)]
    answers = []
    for name, row in zip(names, logits, strict=True):
        scores = sorted(zip(labels, (float(v) for v in row), strict=True), key=lambda pair: -pair[1])
        answers.append(Answer(label=name, scores=tuple(scores)))
    return answers
