"""NeuronCore utilisation and device memory from `neuron-monitor` into CloudWatch, as EMF lines.

`neuron-monitor` (package aws-neuronx-tools, in both Neuron base images, for Inf1 and Inf2) writes one JSON
report per period on stdout. The supervisor runs it next to the workers (neuron_monitor.py), reads its
reports and writes EMF lines per report (emf.py): one per model (the workers tag their runtime with
NEURON_PROCESS_TAG "<model>/<worker>") and one per task. Report layout: the Neuron docs' neuron-monitor user
guide (awsdocs-neuron.readthedocs-hosted.com/en/latest/tools/neuron-sys-tools/neuron-monitor-user-guide.html).

    neuron-monitor -c neuron-monitor.json | python neuron_monitor_emf.py --service dev-intent-pack
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Collection, Iterable, Iterator
from typing import IO

import emf

NEURONCORE_UTILIZATION = "NeuronCoreUtilization"  # percent, one value per core in use
DEVICE_MEMORY_USED = "NeuronDeviceMemoryUsed"  # bytes held on the Neuron devices by the runtime(s)
HOST_MEMORY_USED = "NeuronHostMemoryUsed"  # bytes of host memory the runtime(s) hold
EXECUTION_ERRORS = "NeuronExecutionErrors"  # failed, timed-out or erroneous executions in the period
UNITS = {
    NEURONCORE_UTILIZATION: "Percent",
    DEVICE_MEMORY_USED: "Bytes",
    HOST_MEMORY_USED: "Bytes",
    EXECUTION_ERRORS: "Count",
}
PER_MODEL = (("Service", "Model"),)
PER_TASK = (("Service",),)
# What the workers set NEURON_PROCESS_TAG to: the model, a slash, the worker index.
TAG_SEPARATOR = "/"
ERROR_KINDS = ("completed_with_err", "completed_with_num_err", "timed_out", "incorrect_input", "failed_to_queue")


def _runtime_values(report: dict) -> dict[str, float | list[float]]:
    values: dict[str, float | list[float]] = {}
    cores = (report.get("neuroncore_counters") or {}).get("neuroncores_in_use") or {}
    utilization = [
        float(c["neuroncore_utilization"])
        for c in cores.values()
        if isinstance(c, dict) and isinstance(c.get("neuroncore_utilization"), (int, float))
    ]
    if utilization:
        values[NEURONCORE_UTILIZATION] = utilization
    used = (report.get("memory_used") or {}).get("neuron_runtime_used_bytes") or {}
    if isinstance(used.get("neuron_device"), (int, float)):
        values[DEVICE_MEMORY_USED] = float(used["neuron_device"])
    if isinstance(used.get("host"), (int, float)):
        values[HOST_MEMORY_USED] = float(used["host"])
    summary = (report.get("execution_stats") or {}).get("execution_summary") or {}
    errors = [summary.get(kind) for kind in ERROR_KINDS]
    if any(isinstance(e, (int, float)) for e in errors):
        values[EXECUTION_ERRORS] = float(sum(e for e in errors if isinstance(e, (int, float))))
    return values


def _merge(into: dict[str, float | list[float]], values: dict[str, float | list[float]]) -> None:
    for name, value in values.items():
        if isinstance(value, list):
            into[name] = (into.get(name) or []) + value  # type: ignore[operator]
        else:
            into[name] = float(into.get(name) or 0.0) + value  # type: ignore[arg-type]


def records(report: dict, service: str, timestamp_ms: int, models: Collection[str] | None = None) -> list[dict]:
    """EMF records of one neuron-monitor report: one per model (its workers' runtimes summed, their cores'
    utilisations listed) and one for the whole task. Runtimes without a model tag count for the task only;
    with `models` (the container's own), only runtimes tagged with one of them count at all, so another
    container's runtimes on the same instance never add to this task's figures."""
    per_model: dict[str, dict[str, float | list[float]]] = {}
    task: dict[str, float | list[float]] = {}
    for runtime in report.get("neuron_runtime_data") or []:
        if not isinstance(runtime, dict) or runtime.get("error"):
            continue
        tag = str(runtime.get("neuron_runtime_tag") or "")
        model = tag.split(TAG_SEPARATOR, 1)[0] if TAG_SEPARATOR in tag else None
        if models is not None and model not in models:
            continue
        values = _runtime_values(runtime.get("report") or {})
        _merge(task, values)
        if model is not None:
            _merge(per_model.setdefault(model, {}), values)
    out = []
    for model, values in sorted(per_model.items()):
        out.append(
            emf.record(
                emf.NAMESPACE,
                {"Service": service, "Model": model},
                _capped(values),
                timestamp_ms,
                dimension_sets=PER_MODEL,
                units=UNITS,
            )
        )
    if task:
        out.append(
            emf.record(
                emf.NAMESPACE, {"Service": service}, _capped(task), timestamp_ms, dimension_sets=PER_TASK, units=UNITS
            )
        )
    return out


def _capped(values: dict[str, float | list[float]]) -> dict[str, float | list[float]]:
    """EMF takes at most 100 values per metric: more cores than that (none today) are averaged in pairs."""
    out = dict(values)
    for name, value in values.items():
        while isinstance(value, list) and len(value) > emf.MAX_VALUES:
            value = [sum(value[i : i + 2]) / len(value[i : i + 2]) for i in range(0, len(value), 2)]
        out[name] = value
    return out


def convert(
    lines: Iterable[str],
    service: str,
    out: IO[str] | emf.LineOutput | None = None,
    clock=time.time,
    models: Collection[str] | None = None,
) -> Iterator[int]:
    """Each report line to EMF lines on `out` (default: stdout, emf.LineOutput); yields the number of records
    written per report. A line that is not a report (neuron-monitor's own messages) is skipped, never fatal:
    metrics must not stop the server."""
    output = out if isinstance(out, emf.LineOutput) else emf.LineOutput(out)
    for text in lines:
        try:
            report = json.loads(text)
        except ValueError:
            yield 0
            continue
        if not isinstance(report, dict):
            yield 0
            continue
        emf_records = records(report, service, int(clock() * 1000), models)
        output.write(emf_records)
        yield len(emf_records)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service", required=True, help="the Service dimension (the stacks set it)")
    args = parser.parse_args(argv)
    for _ in convert(sys.stdin, args.service):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
