"""The serving app's CloudWatch metrics (container/neuron/emf.py) and the neuron-monitor converter
(container/neuron/neuron_monitor_emf.py): valid EMF by the specification's schema, bounded per interval."""

from __future__ import annotations

import io
import json
import random

import jsonschema
import pytest

import emf
import neuron_monitor_emf
from tests.container.emf_schema import assert_valid_emf, referenced_members_problems, SCHEMA

DIMENSIONS = {"Service": "dev-intent-pack", "Model": "intent-bert", "Worker": "0"}


def test_the_schema_rejects_what_the_specification_forbids():
    good = emf.record("ns", {"Service": "s", "Model": "m"}, {"X": 1.0}, 1, dimension_sets=(("Service", "Model"),))
    assert_valid_emf(good)
    too_many = json.loads(json.dumps(good))
    too_many["_aws"]["CloudWatchMetrics"][0]["Metrics"] = [{"Name": f"m{i}"} for i in range(101)]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(too_many, SCHEMA)
    bad_unit = json.loads(json.dumps(good))
    bad_unit["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"] = "Requests"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad_unit, SCHEMA)
    missing_member = dict(good)
    del missing_member["Model"]
    assert referenced_members_problems(missing_member)


def test_a_worker_interval_is_one_valid_line_with_its_counts_and_samples():
    recorder = emf.Recorder(DIMENSIONS, rng=random.Random(7))
    for i in range(1000):
        recorder.observe(emf.REQUEST_LATENCY, float(i % 10))
        recorder.count(emf.REQUESTS)
    recorder.count(emf.ERRORS, 3)
    recorder.observe(emf.BATCH_SIZE, 16)
    out = io.StringIO()
    publisher = emf.Publisher(recorder, {emf.QUEUE_DEPTH: lambda: 4}, stream=out, clock=lambda: 1700000000.5)
    publisher.sample()
    publisher.flush()
    (text,) = out.getvalue().splitlines()
    data = json.loads(text)
    assert_valid_emf(data)
    assert data["_aws"]["Timestamp"] == 1700000000500
    assert data[emf.REQUESTS] == 1000 and data[emf.ERRORS] == 3
    assert len(data[emf.REQUEST_LATENCY]) == emf.MAX_VALUES  # a uniform sample of the 1000, bounded
    assert set(data[emf.REQUEST_LATENCY]) <= {float(i) for i in range(10)}
    assert data[emf.QUEUE_DEPTH] == [4.0] and data[emf.BATCH_SIZE] == [16.0]
    directive = data["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == emf.NAMESPACE
    assert directive["Dimensions"] == [["Service", "Model"], ["Service", "Model", "Worker"]]
    assert {m["Name"]: m["Unit"] for m in directive["Metrics"]} == {
        name: emf.UNITS[name] for name in (emf.REQUEST_LATENCY, emf.REQUESTS, emf.ERRORS, emf.QUEUE_DEPTH,
                                           emf.BATCH_SIZE)}
    publisher.flush()  # an empty interval writes nothing
    assert len(out.getvalue().splitlines()) == 1


def test_reservoir_keeps_a_uniform_sample():
    reservoir = emf.Reservoir(size=100, rng=random.Random(1))
    for value in range(100_000):
        reservoir.add(value)
    assert reservoir.count == 100_000 and len(reservoir.values) == 100
    assert 30_000 < sum(reservoir.values) / 100 < 70_000  # not just the first or last values


def test_missing_dimension_is_refused():
    with pytest.raises(ValueError, match="EMF dimensions missing: Worker"):
        emf.Recorder({"Service": "s", "Model": "m"})


def test_publisher_thread_writes_on_its_interval_and_on_stop():
    recorder = emf.Recorder(DIMENSIONS)
    out = io.StringIO()
    publisher = emf.Publisher(recorder, {emf.IN_FLIGHT: lambda: 2}, interval_s=0.2, stream=out).start()
    recorder.count(emf.REQUESTS)
    import time
    time.sleep(0.7)
    publisher.stop()
    lines = [json.loads(t) for t in out.getvalue().splitlines()]
    assert lines and all(emf.IN_FLIGHT in line for line in lines)
    assert sum(line.get(emf.REQUESTS, 0) for line in lines) == 1
    for line in lines:
        assert_valid_emf(line)


# A report in the layout the Neuron docs' neuron-monitor user guide gives (two workers of one model and one
# of another, tagged "<model>/<worker>"). Stand-in: neuron-monitor itself needs Neuron hardware.
REPORT = {
    "neuron_runtime_data": [
        {"pid": 101, "neuron_runtime_tag": "intent-bert/0", "error": "", "report": {
            "neuroncore_counters": {"period": 1.0, "neuroncores_in_use": {
                "0": {"neuroncore_utilization": 61.5, "flops": 1}, "1": {"neuroncore_utilization": 58.5}}},
            "memory_used": {"period": 1.0, "neuron_runtime_used_bytes": {"host": 1000, "neuron_device": 5000}},
            "execution_stats": {"execution_summary": {"completed": 900, "completed_with_err": 1, "timed_out": 1,
                                                      "completed_with_num_err": 0, "incorrect_input": 0,
                                                      "failed_to_queue": 0}}}},
        {"pid": 102, "neuron_runtime_tag": "intent-bert/1", "error": "", "report": {
            "neuroncore_counters": {"neuroncores_in_use": {"2": {"neuroncore_utilization": 40.0}}},
            "memory_used": {"neuron_runtime_used_bytes": {"host": 500, "neuron_device": 2500}}}},
        {"pid": 103, "neuron_runtime_tag": "duplicate-bert/0", "error": "", "report": {
            "neuroncore_counters": {"neuroncores_in_use": {"3": {"neuroncore_utilization": 10.0}}}}},
        {"pid": 104, "neuron_runtime_tag": "x/0", "error": "runtime exited", "report": {}},
    ],
    "system_data": {"memory_info": {"memory_total_bytes": 1}},
    "instance_info": {}, "neuron_hardware_info": {"neuron_device_count": 1},
}


def test_neuron_monitor_report_becomes_per_model_and_per_task_emf():
    records = neuron_monitor_emf.records(REPORT, "dev-intent-pack", 1700000000000)
    for record in records:
        assert_valid_emf(record)
    by_model = {r.get("Model"): r for r in records}
    assert set(by_model) == {"intent-bert", "duplicate-bert", None}
    intent = by_model["intent-bert"]
    assert intent[neuron_monitor_emf.NEURONCORE_UTILIZATION] == [61.5, 58.5, 40.0]
    assert intent[neuron_monitor_emf.DEVICE_MEMORY_USED] == 7500 and intent[neuron_monitor_emf.HOST_MEMORY_USED] == 1500
    assert intent[neuron_monitor_emf.EXECUTION_ERRORS] == 2
    task = by_model[None]
    assert task[neuron_monitor_emf.NEURONCORE_UTILIZATION] == [61.5, 58.5, 40.0, 10.0]
    assert task["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Service"]]
    assert intent["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Service", "Model"]]


def test_converter_skips_what_is_not_a_report():
    out = io.StringIO()
    lines = ["neuron-monitor starting\n", json.dumps(REPORT) + "\n", "[1, 2]\n", "{}\n"]
    written = list(neuron_monitor_emf.convert(lines, "svc", out, clock=lambda: 1.0))
    assert written == [0, 3, 0, 0]
    for text in out.getvalue().splitlines():
        assert_valid_emf(json.loads(text))
