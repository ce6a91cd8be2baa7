"""The metrics contract between the serving container and the stacks: inferstack/neuron/metrics.py (what the
stacks alarm and scale on) says exactly what container/neuron/serving/emf.py and neuron_monitor_emf.py write, and
names the variables server_settings.py reads. A rename on one side alone fails here, not in a dark alarm."""

from __future__ import annotations

import subprocess
import sys

import emf
import neuron_monitor_emf
import server_settings

from inferstack.neuron import metrics
from tests.support.paths import ROOT


def test_namespace_and_serving_metric_names_units_and_dimension_sets_match():
    assert emf.NAMESPACE == metrics.NAMESPACE
    assert dict(emf.UNITS) == dict(metrics.SERVING_UNITS)
    names = (
        emf.REQUEST_LATENCY,
        emf.INFERENCE_LATENCY,
        emf.BATCH_SIZE,
        emf.QUEUE_DEPTH,
        emf.IN_FLIGHT,
        emf.REQUESTS,
        emf.ERRORS,
    )
    assert names == (
        metrics.REQUEST_LATENCY,
        metrics.INFERENCE_LATENCY,
        metrics.BATCH_SIZE,
        metrics.QUEUE_DEPTH,
        metrics.IN_FLIGHT,
        metrics.REQUESTS,
        metrics.SERVER_ERRORS,
    )
    assert tuple(map(tuple, emf.DIMENSION_SETS)) == metrics.SERVING_DIMENSION_SETS
    assert metrics.SERVING_DIMENSION_SETS == (
        (metrics.SERVICE, metrics.MODEL),
        (metrics.SERVICE, metrics.MODEL, metrics.WORKER),
    )


def test_neuron_monitor_metric_names_units_and_dimension_sets_match():
    assert dict(neuron_monitor_emf.UNITS) == dict(metrics.NEURON_MONITOR_UNITS)
    assert (
        neuron_monitor_emf.NEURONCORE_UTILIZATION,
        neuron_monitor_emf.DEVICE_MEMORY_USED,
        neuron_monitor_emf.HOST_MEMORY_USED,
        neuron_monitor_emf.EXECUTION_ERRORS,
    ) == (
        metrics.NEURONCORE_UTILIZATION,
        metrics.DEVICE_MEMORY_USED,
        metrics.HOST_MEMORY_USED,
        metrics.EXECUTION_ERRORS,
    )
    assert neuron_monitor_emf.PER_MODEL + neuron_monitor_emf.PER_TASK == metrics.NEURON_MONITOR_DIMENSION_SETS
    # The per-task record is written in the serving namespace too.
    (record,) = [
        r
        for r in neuron_monitor_emf.records(
            {
                "neuron_runtime_data": [
                    {
                        "neuron_runtime_tag": "m/0",
                        "report": {"memory_used": {"neuron_runtime_used_bytes": {"neuron_device": 1}}},
                    }
                ]
            },
            "svc",
            1,
        )
        if "Model" not in r
    ]
    assert record["_aws"]["CloudWatchMetrics"][0]["Namespace"] == metrics.NAMESPACE


def test_the_runtime_variables_are_the_ones_the_container_reads():
    env = {name: variable for name, (variable, _) in server_settings.ENVIRONMENT.items()}
    assert (env["metrics"], env["metrics_service"], env["metrics_interval_s"], env["neuron_monitor"]) == (
        metrics.METRICS_ENV,
        metrics.METRICS_SERVICE_ENV,
        metrics.METRICS_INTERVAL_ENV,
        metrics.NEURON_MONITOR_ENV,
    )
    assert server_settings.ENVIRONMENT["metrics_interval_s"][1] == str(metrics.DEFAULT_INTERVAL_S)


def test_the_contract_module_imports_nothing_but_the_standard_library():
    code = (
        "import sys; before = set(sys.modules); import inferstack.neuron.metrics; "
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] not in sys.stdlib_module_names))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    assert eval(result.stdout) == ["inferstack", "inferstack.neuron", "inferstack.neuron.metrics"]
