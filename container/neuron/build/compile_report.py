"""Decide whether a Neuron compile covered the whole graph.

torch.neuron (inf1) silently falls back to CPU for operators or sub-graphs it cannot compile;
a partially compiled model still "works" but is slow, so the build must fail instead. The
verdict comes from the compiler's own log lines and from counting operators in the traced graph.
torch_neuronx (inf2) compiles the whole graph or raises, so it only needs the operator count.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

_SUBGRAPHS_CREATED = re.compile(r"neuron partitioner created (\d+) sub-graphs")
_SUBGRAPHS_COMPILED = re.compile(
    r"Neuron successfully compiled (\d+) sub-graphs, Total fused subgraphs = (\d+), "
    r"Percent of model sub-graphs successfully compiled = ([\d.]+)%"
)
_OPERATORS = re.compile(
    r"Number of arithmetic operators \(post-compilation\) before = (\d+), compiled = (\d+), "
    r"percent(?: compiled)? = ([\d.]+)%"
)
_OP_LINE = re.compile(r"=> (\S+): (\d+)")

# TorchScript nodes that only move shapes and constants around; they run on the host
# even in a fully compiled model and are not a sign of CPU fallback.
GLUE_OPS = frozenset(
    {
        "aten::size",
        "aten::Int",
        "aten::ScalarImplicit",
        "aten::contiguous",
        "aten::detach",
        "aten::to",
    }
)


class IncompleteCompileError(RuntimeError):
    """The model did not compile entirely for the NeuronCores."""


@dataclass(frozen=True)
class Inf1CompileSummary:
    subgraphs_created: int | None = None
    subgraphs_compiled: int | None = None
    subgraphs_fused: int | None = None
    subgraph_percent: float | None = None
    operators_before: int | None = None
    operators_compiled: int | None = None
    operator_percent: float | None = None
    not_compiled_operators: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


def parse_inf1_log(text: str) -> Inf1CompileSummary:
    """Read torch.neuron.trace's INFO log (logger "Neuron") into numbers."""
    values: dict = {}
    if m := _SUBGRAPHS_CREATED.search(text):
        values["subgraphs_created"] = int(m.group(1))
    # The summary line repeats per partition on some versions: the last one is the total.
    compiled = _SUBGRAPHS_COMPILED.findall(text)
    if compiled:
        done, fused, pct = compiled[-1]
        values.update(subgraphs_compiled=int(done), subgraphs_fused=int(fused), subgraph_percent=float(pct))
    operators = _OPERATORS.findall(text)
    if operators:
        before, done, pct = operators[-1]
        values.update(operators_before=int(before), operators_compiled=int(done), operator_percent=float(pct))
    not_compiled: dict[str, int] = {}
    in_not_compiled = False
    for line in text.splitlines():
        if "Not compiled operators" in line:
            in_not_compiled = True
        elif "Compiled these operators" in line:
            in_not_compiled = False
        elif in_not_compiled and (m := _OP_LINE.search(line)):
            not_compiled[m.group(1)] = int(m.group(2))
    return Inf1CompileSummary(**values, not_compiled_operators=not_compiled)


def inf1_problems(summary: Inf1CompileSummary) -> list[str]:
    """Reasons the inf1 compile is not a whole-graph compile; empty when it is."""
    if summary.subgraph_percent is None:
        return ["no 'Percent of model sub-graphs successfully compiled' line in the Neuron log: nothing was compiled"]
    problems = []
    if summary.subgraph_percent < 100.0:
        problems.append(f"only {summary.subgraph_percent}% of model sub-graphs compiled to Neuron (need 100.0%)")
    if summary.subgraphs_created is not None and summary.subgraphs_created != 1:
        # More than one Neuron sub-graph means CPU operators run between them.
        problems.append(f"the partitioner split the model into {summary.subgraphs_created} sub-graphs (need 1)")
    return problems


@dataclass(frozen=True)
class OperatorCount:
    neuron: int
    cpu: int
    glue: int
    cpu_operators: dict[str, int]

    def to_json(self) -> dict:
        return asdict(self)


def count_operators(kinds: Iterable[str]) -> OperatorCount:
    """Split TorchScript node kinds into Neuron ops, host glue and real CPU compute."""
    cpu: Counter[str] = Counter()
    neuron = glue = 0
    for kind in kinds:
        if kind.startswith("neuron::"):
            neuron += 1
        elif kind.startswith("prim::") or kind in GLUE_OPS:
            glue += 1
        elif kind.startswith("aten::"):
            cpu[kind] += 1
        else:
            glue += 1
    return OperatorCount(neuron=neuron, cpu=sum(cpu.values()), glue=glue, cpu_operators=dict(sorted(cpu.items())))


def neuron_graph_problems(count: OperatorCount) -> list[str]:
    """A compiled graph must contain Neuron ops and no CPU compute around them."""
    problems = []
    if count.neuron == 0:
        problems.append("the traced graph contains no neuron:: operator")
    if count.cpu:
        ops = ", ".join(f"{name} x{n}" for name, n in count.cpu_operators.items())
        problems.append(f"{count.cpu} operators left on CPU: {ops}")
    return problems
