"""validate's checks of a triton-sagemaker model's `pipeline:` (inferstack/schema/pipeline.py): the wiring
between steps (`check_wiring`, from checks.py) and the step files in the model's folder (`check_files`, from the
loader, which knows where the file is). One (key path, message) per problem, naming the step and the tensor.

The wiring rules: steps run in the order written; every tensor a step takes is the request's TEXT or produced by
an earlier step, with the same datatype and dims (-1: any size); each tensor has one producer; every tensor a
step produces is taken by a later step or answered by the last step; the model runs once (`model: self`); the
last step answers the task's text contract (what smoke tests, load tests and `inferstack invoke` read)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from inferstack.config.yaml_source import KeyPath
from inferstack.schema import pipeline as p
from inferstack.schema.triton_sagemaker import TritonSageMakerModel

Finding = tuple[KeyPath, str]
# The step files travel to the image build inside the TRITON_REPOSITORY_SPEC build arg (so editing one rebuilds
# the image); Linux caps one command-line argument at 128 KiB (MAX_ARG_STRLEN), JSON escaping included.
MAX_CODE_BYTES = 48 * 1024


def _where(index: int) -> str:
    return f"pipeline.{index}"


def _input_key(step: p.PipelineStep, index: int, position: int, field: str = "name") -> KeyPath:
    if step.model is not None:
        return ("pipeline", index, "input_map", p.TEXT) if p.TEXT in step.input_map else ("pipeline", index, "model")
    return ("pipeline", index, "inputs", position, field)


def _output_key(step: p.PipelineStep, index: int, position: int, own: str, field: str = "name") -> KeyPath:
    if step.model is not None:
        return ("pipeline", index, "output_map", own) if own in step.output_map else ("pipeline", index, "model")
    return ("pipeline", index, "outputs", position, field)


def check_wiring(model: TritonSageMakerModel) -> Iterator[Finding]:
    steps = model.pipeline
    if not steps:
        return
    task, labels = model.source.task, model.source.labels
    selves = [i for i, s in enumerate(steps) if s.model is not None]
    if not selves:
        yield (
            ("pipeline",),
            (
                "no step runs this file's model: add `- model: self` (other models are called "
                f"from a Python step through BLS, {p.HOW_TO})"
            ),
        )
    for again in selves[1:]:
        yield (
            ("pipeline", again, "model"),
            (
                f"model: self again (also {_where(selves[0])}): the model runs once in an ensemble; a step that calls "
                "it again is a Python step with calls: [self]"
            ),
        )

    own_outputs = {t.name for t in p.self_outputs(task, labels)}
    for i, step in enumerate(steps):
        for mapped in step.input_map:
            if mapped != p.TEXT:
                yield (
                    ("pipeline", i, "input_map", mapped),
                    f"{mapped} is not an input of model: self (it takes {p.TEXT})",
                )
        for mapped in step.output_map:
            if mapped not in own_outputs:
                yield (
                    ("pipeline", i, "output_map", mapped),
                    (f"{mapped} is not an output of model: self (it answers {', '.join(sorted(own_outputs))})"),
                )

    # Producers: pipeline tensor -> (step index, tensor as produced).
    produced: dict[str, tuple[int, p.PipelineTensor]] = {p.TEXT: (-1, p.self_inputs()[0])}
    later: dict[str, int] = {}
    for i, step in enumerate(steps):
        for name, _ in p.step_outputs(step, task, labels):
            later.setdefault(name, i)
    used: set[str] = set()
    for i, step in enumerate(steps):
        taken: set[str] = set()
        for j, (name, tensor) in enumerate(p.step_inputs(step)):
            key = _input_key(step, i, j)
            if name in taken:
                yield key, f"{name}: taken twice by {_where(i)}"
                continue
            taken.add(name)
            used.add(name)
            source = produced.get(name)
            if source is None:
                if name in later and later[name] >= i:
                    yield (
                        key,
                        (
                            f"{name}: produced only by {_where(later[name])}, not by an earlier step: steps run "
                            f"in the order written and an ensemble has no cycles (a loop runs inside a Python "
                            f"step, through BLS)"
                        ),
                    )
                else:
                    yield key, (f"{name}: produced by no earlier step; there: {', '.join(sorted(produced))}")
                continue
            by, have = source
            origin = "the request" if by < 0 else _where(by)
            if have.triton_type != tensor.triton_type:
                yield (
                    _input_key(step, i, j, "datatype"),
                    (f"{name}: {tensor.kserve_type} here, but {origin} gives it as {have.describe()}"),
                )
            elif not p.dims_fit(have.dims, tensor.dims):
                yield (
                    _input_key(step, i, j, "dims"),
                    (f"{name}: dims {list(tensor.dims)} here, but {origin} gives it as {have.describe()}"),
                )
        answered: set[str] = set()
        for j, (name, tensor) in enumerate(p.step_outputs(step, task, labels)):
            key = _output_key(step, i, j, tensor.name)
            if name == p.TEXT:
                yield (
                    key,
                    (
                        f"{name}: the request's input; no step may produce it (on Triton 2.51 an ensemble "
                        "whose input and output share a name never answers)"
                    ),
                )
            elif name in p.INTERNAL_TENSORS:
                yield key, f"{name}: a tensor of the text model's own steps; give it another name"
            elif name in answered:
                yield key, f"{name}: produced twice by {_where(i)}"
            elif name in produced:
                yield key, f"{name}: also produced by {_where(produced[name][0])}: each tensor has one producer"
            else:
                produced[name] = (i, tensor)
            answered.add(name)

    last = len(steps) - 1
    final = {name for name, _ in p.step_outputs(steps[last], task, labels)}
    for i, step in enumerate(steps[:last]):
        outputs = p.step_outputs(step, task, labels)
        if step.model is not None:
            if not any(name in used for name, _ in outputs):
                yield (
                    ("pipeline", i, "model"),
                    (
                        f"no later step takes any of its outputs ({', '.join(n for n, _ in outputs)}): a step whose "
                        "answer nobody uses"
                    ),
                )
            for own, name in step.output_map.items():
                if name not in used:
                    yield ("pipeline", i, "output_map", own), f"{name}: taken by no later step"
            continue
        for j, (name, _) in enumerate(outputs):
            if name not in used and name not in final:
                yield (
                    ("pipeline", i, "outputs", j, "name"),
                    (f"{name}: taken by no later step and not answered by the last one: drop it or take it"),
                )
    yield from _check_contract(model, steps[last], last)
    yield from _check_calls(model)


def _check_contract(model: TritonSageMakerModel, step: p.PipelineStep, index: int) -> Iterator[Finding]:
    """The endpoint's answer (the last step's outputs) keeps the task's contract; extra outputs may follow."""
    answered = {
        name: (j, tensor)
        for j, (name, tensor) in enumerate(p.step_outputs(step, model.source.task, model.source.labels))
    }
    for want in p.self_outputs(model.source.task, model.source.labels):
        found = answered.get(want.name)
        contract = (
            f"the {model.source.task} contract that smoke tests, load tests and `inferstack invoke` "
            f"read (inferstack/loadtest/text_contract.py)"
        )
        if found is None:
            key = ("pipeline", index, "model") if step.model is not None else ("pipeline", index, "outputs")
            yield key, f"{want.name}: the last step must answer {want.name} {want.describe()}, {contract}"
            continue
        j, tensor = found
        if tensor.triton_type != want.triton_type or not p.dims_fit(tensor.dims, want.dims):
            yield (
                _output_key(step, index, j, tensor.name),
                (f"{want.name}: {tensor.describe()}, but {contract} is {want.describe()}"),
            )


def call_targets(model: TritonSageMakerModel) -> tuple[str, ...]:
    """What a Python step's `calls` may name: self (the token-id model) and the repository's other model
    folders below the ensemble (a step calling the ensemble it runs in would recurse)."""
    from inferstack.triton import config as triton_config

    spec = triton_config.RepositorySpec.of(model)
    ids = triton_config.ids_folders(spec)
    names = [f.name for f in ids] + [
        triton_config.tokenize_model_name(spec),
        triton_config.postprocess_model_name(spec),
    ]
    names += [triton_config.step_model_name(spec, i) for i, s in enumerate(model.pipeline or ()) if s.python]
    return (p.SELF, *names)


def _check_calls(model: TritonSageMakerModel) -> Iterator[Finding]:
    if not any(s.calls for s in model.pipeline or ()):
        return
    from inferstack.triton import config as triton_config

    targets = call_targets(model)
    for i, step in enumerate(model.pipeline or ()):
        own = triton_config.step_model_name(model, i)
        for j, name in enumerate(step.calls):
            if name == own:
                yield ("pipeline", i, "calls", j), f"{name}: the step itself"
            elif name not in targets:
                yield (
                    ("pipeline", i, "calls", j),
                    (f"{name}: no such model in this repository; it has {', '.join(t for t in targets if t != own)}"),
                )


def check_files(model: TritonSageMakerModel, model_dir: Path, shown: str) -> Iterator[Finding]:
    """Each python step's file exists in `model_dir` (shown as `shown`), stays inside it, is UTF-8 Python
    defining class TritonPythonModel with execute(); its text is kept on the step for the image build."""
    total = 0
    for i, step in enumerate(model.pipeline or ()):
        if step.python is None:
            continue
        key = ("pipeline", i, "python")
        path = model_dir / step.python
        where = f"{shown}/{step.python}"
        try:
            inside = path.resolve().is_relative_to(model_dir.resolve())
        except OSError:
            inside = False
        if not path.is_file():
            yield key, f"{where}: no such file (a step's file lives in the model's folder, {shown}/)"
            continue
        if not inside:
            yield key, f"{where}: leads outside the model's folder {shown}/"
            continue
        raw = path.read_bytes()
        total += len(raw)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            yield key, f"{where}: not UTF-8 text"
            continue
        try:
            tree = ast.parse(text, filename=where)
        except SyntaxError as exc:
            yield key, f"{where}:{exc.lineno}: {exc.msg}"
            continue
        classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TritonPythonModel"]
        if not classes or not any(isinstance(n, ast.FunctionDef) and n.name == "execute" for n in classes[0].body):
            yield (
                key,
                (
                    f"{where}: defines no class TritonPythonModel with an execute() method (Triton's Python "
                    "backend runs that class)"
                ),
            )
            continue
        step._code = text
    if total > MAX_CODE_BYTES:
        yield (
            ("pipeline",),
            (
                f"the step files hold {total} bytes, above the {MAX_CODE_BYTES} the image build's "
                "TRITON_REPOSITORY_SPEC argument carries: keep the steps smaller"
            ),
        )
