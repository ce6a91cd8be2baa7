"""One interface over the three ways to trace, load and replicate a model: cpu, inf1, inf2.

The Neuron backends import torch_neuron / torch_neuronx lazily (only inside the images);
the cpu backend runs the same compile and serve code with torch.jit.trace so it can be tested
anywhere. torch itself is imported lazily too, so the HTTP side can start before it loads.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Protocol

from compile_report import (
    IncompleteCompileError,
    count_operators,
    inf1_problems,
    neuron_graph_problems,
    parse_inf1_log,
)

# Versions recorded in the artifact metadata, whichever of them are installed.
VERSIONED_PACKAGES = (
    "torch",
    "transformers",
    "tokenizers",
    "torch-neuron",
    "neuron-cc",
    "torch-neuronx",
    "neuronx-cc",
)


def load_torchscript(path, **kwargs):
    """torch.jit.load without the deprecation warning recent torch (2.13 here) gives it. The
    artifact has to be TorchScript: torch.neuron.trace and torch_neuronx.trace produce nothing else,
    and the CPU backend stands in for them with the same format."""
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.load` is deprecated", category=DeprecationWarning)
        return torch.jit.load(path, **kwargs)


@dataclass(frozen=True)
class TraceResult:
    module: Any  # torch.jit.ScriptModule
    report: dict


class Backend(Protocol):
    name: str

    def trace(self, model: Any, example_inputs: tuple, compiler_args: tuple[str, ...], workdir: str) -> TraceResult:
        """Trace (and for Neuron, compile) the model at the example inputs' fixed shapes."""

    def load(self, path: str) -> Any:
        """Load a saved traced module in this process."""

    def data_parallel(self, module: Any, pipeline: bool) -> Callable:
        """Wrap the module so one call spreads a batch over this process's visible cores."""


def installed_versions() -> dict[str, str]:
    versions = {}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def graph_kinds(module: Any) -> list[str]:
    return [node.kind() for node in module.inlined_graph.nodes()]


class CpuBackend:
    """torch.jit.trace on the host CPU: the stand-in used by tests and benchmarks."""

    name = "cpu"

    def trace(self, model, example_inputs, compiler_args, workdir):
        import torch

        with torch.inference_mode():
            traced = torch.jit.trace(model, example_inputs)
        # Freezing inlines the weights as constants and folds what depends on them only: a
        # smaller graph (about 30% fewer nodes for BERT) with no attribute lookups per call.
        # It is saved frozen, so the server, the benchmark baseline and the limit all load it.
        module = torch.jit.freeze(traced.eval())
        count = count_operators(graph_kinds(module))
        return TraceResult(module, {"operators": count.to_json(), "compiler_args_ignored": list(compiler_args)})

    def load(self, path):
        return load_torchscript(path, map_location="cpu").eval()

    def data_parallel(self, module, pipeline):
        # One copy on the host: the worker's torch thread count is its parallelism.
        return module


class _NeuronLogCapture(logging.Handler):
    """Collects torch.neuron's INFO lines (logger "Neuron") while a trace runs."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class Inf1Backend:
    """torch-neuron (neuron-cc) for Inferentia 1."""

    name = "inf1"

    def trace(self, model, example_inputs, compiler_args, workdir):
        import torch
        import torch_neuron  # noqa: F401 - registers torch.neuron

        logger = logging.getLogger("Neuron")
        capture = _NeuronLogCapture()
        previous_level = logger.level
        logger.addHandler(capture)
        logger.setLevel(logging.INFO)
        try:
            module = torch.neuron.trace(
                model, example_inputs, compiler_args=list(compiler_args), compiler_workdir=workdir
            )
        finally:
            logger.removeHandler(capture)
            logger.setLevel(previous_level)
        summary = parse_inf1_log("\n".join(capture.lines))
        count = count_operators(graph_kinds(module))
        problems = inf1_problems(summary) + neuron_graph_problems(count)
        if problems:
            raise IncompleteCompileError("; ".join(problems))
        return TraceResult(module, {"neuron_log": summary.to_json(), "operators": count.to_json()})

    def load(self, path):
        import torch_neuron  # noqa: F401 - must precede torch.jit.load to register neuron:: ops

        return load_torchscript(path)

    def data_parallel(self, module, pipeline):
        import torch

        if pipeline:
            # DataParallel cannot run --neuroncore-pipeline-cores models; the runtime already
            # spreads the pipeline over the visible cores.
            return module
        return torch.neuron.DataParallel(module)


class Inf2Backend:
    """torch-neuronx (neuronx-cc) for Inferentia 2: compiles the whole graph or raises."""

    name = "inf2"

    def trace(self, model, example_inputs, compiler_args, workdir):
        import torch_neuronx

        module = torch_neuronx.trace(model, example_inputs, compiler_args=list(compiler_args), compiler_workdir=workdir)
        count = count_operators(graph_kinds(module))
        return TraceResult(module, {"operators": count.to_json()})

    def load(self, path):
        import torch_neuronx  # noqa: F401 - registers the neuron ops before loading

        return load_torchscript(path)

    def data_parallel(self, module, pipeline):
        import torch_neuronx

        return torch_neuronx.DataParallel(module)


_BACKENDS: dict[str, type] = {"cpu": CpuBackend, "inf1": Inf1Backend, "inf2": Inf2Backend}


def get_backend(name: str) -> Backend:
    try:
        return _BACKENDS[name]()
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; expected one of {', '.join(_BACKENDS)}") from None
