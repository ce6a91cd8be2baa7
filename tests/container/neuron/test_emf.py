"""The serving app's CloudWatch metrics (container/neuron/serving/emf.py) and the neuron-monitor converter
(container/neuron/serving/neuron_monitor_emf.py): valid EMF by the specification's schema, bounded per interval."""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys

import jsonschema
import pytest

# serving/ and build/'s flat modules, on the path from conftest.py (ruff would count them third-party).
# isort: split
import emf
import neuron_monitor_emf

from tests.support.emf_schema import SCHEMA, assert_valid_emf, referenced_members_problems
from tests.support.neuron_server import SERVING_DIR

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
    assert data["_aws"]["Timestamp"] == 1699999980000  # the start of the 60 s interval it covers
    assert data[emf.REQUESTS] == 1000 and data[emf.ERRORS] == 3
    assert len(data[emf.REQUEST_LATENCY]) == emf.MAX_VALUES  # a uniform sample of the 1000, bounded
    assert set(data[emf.REQUEST_LATENCY]) <= {float(i) for i in range(10)}
    assert data[emf.QUEUE_DEPTH] == [4.0] and data[emf.BATCH_SIZE] == [16.0]
    directive = data["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == emf.NAMESPACE
    assert directive["Dimensions"] == [["Service", "Model"], ["Service", "Model", "Worker"]]
    assert {m["Name"]: m["Unit"] for m in directive["Metrics"]} == {
        name: emf.UNITS[name]
        for name in (emf.REQUEST_LATENCY, emf.REQUESTS, emf.ERRORS, emf.QUEUE_DEPTH, emf.BATCH_SIZE)
    }
    publisher.flush()  # an empty interval writes nothing
    assert len(out.getvalue().splitlines()) == 1


def test_records_fall_on_interval_boundaries_stamped_with_the_interval_start():
    """As the load balancer counts a request in the minute it arrived, a record counts its interval's requests at
    that interval's start: the alarms subtract one from the other minute by minute."""
    recorder = emf.Recorder(DIMENSIONS)
    out = io.StringIO()
    publisher = emf.Publisher(recorder, {}, interval_s=0.25, stream=out).start()
    import time

    deadline = time.monotonic() + 1.2
    while time.monotonic() < deadline:
        recorder.count(emf.REQUESTS)
        time.sleep(0.01)
    publisher.stop()
    stamps = [json.loads(t)["_aws"]["Timestamp"] for t in out.getvalue().splitlines()]
    assert len(stamps) >= 4 and stamps == sorted(set(stamps)), stamps
    assert all(stamp % 250 == 0 for stamp in stamps), stamps  # whole intervals of the wall clock
    # One record per interval, none skipped.
    assert all(b - a == 250 for a, b in zip(stamps, stamps[1:], strict=False)), stamps


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
        {
            "pid": 101,
            "neuron_runtime_tag": "intent-bert/0",
            "error": "",
            "report": {
                "neuroncore_counters": {
                    "period": 1.0,
                    "neuroncores_in_use": {
                        "0": {"neuroncore_utilization": 61.5, "flops": 1},
                        "1": {"neuroncore_utilization": 58.5},
                    },
                },
                "memory_used": {"period": 1.0, "neuron_runtime_used_bytes": {"host": 1000, "neuron_device": 5000}},
                "execution_stats": {
                    "execution_summary": {
                        "completed": 900,
                        "completed_with_err": 1,
                        "timed_out": 1,
                        "completed_with_num_err": 0,
                        "incorrect_input": 0,
                        "failed_to_queue": 0,
                    }
                },
            },
        },
        {
            "pid": 102,
            "neuron_runtime_tag": "intent-bert/1",
            "error": "",
            "report": {
                "neuroncore_counters": {"neuroncores_in_use": {"2": {"neuroncore_utilization": 40.0}}},
                "memory_used": {"neuron_runtime_used_bytes": {"host": 500, "neuron_device": 2500}},
            },
        },
        {
            "pid": 103,
            "neuron_runtime_tag": "duplicate-bert/0",
            "error": "",
            "report": {"neuroncore_counters": {"neuroncores_in_use": {"3": {"neuroncore_utilization": 10.0}}}},
        },
        {"pid": 104, "neuron_runtime_tag": "x/0", "error": "runtime exited", "report": {}},
    ],
    "system_data": {"memory_info": {"memory_total_bytes": 1}},
    "instance_info": {},
    "neuron_hardware_info": {"neuron_device_count": 1},
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


@pytest.mark.parametrize("before, added", [(0, 7), (95, 5), (95, 6), (100, 40), (0, 250)])
def test_reservoir_add_many_is_add_for_each_value(before, added):
    one, many = emf.Reservoir(size=100, rng=random.Random(5)), emf.Reservoir(size=100, rng=random.Random(5))
    for value in range(before):
        one.add(value)
        many.add(value)
    values = [float(v) for v in range(before, before + added)]
    for value in values:
        one.add(value)
    many.add_many(values)
    assert (many.count, many.values) == (one.count, one.values)


def test_requests_at_once_record_as_one_request_call_each():
    latencies = [1.5, 2.25, 40.0, 0.5]
    one, many = emf.Recorder(DIMENSIONS, rng=random.Random(2)), emf.Recorder(DIMENSIONS, rng=random.Random(2))
    errors, refused = [False, True, True, False], [False, True, False, False]
    for latency, error, rejected in zip(latencies, errors, refused, strict=True):
        one.request(latency, server_error=error, rejected=rejected)
    many.requests(latencies, server_errors=2, rejected=1)
    many.requests([])  # nothing answered since the last flush: nothing counted
    assert many.drain(1) == one.drain(1)


def test_request_and_batch_record_in_one_call_and_counts_can_always_be_written():
    recorder = emf.Recorder(DIMENSIONS, always_counted=(emf.REQUESTS, emf.ERRORS))
    idle = recorder.drain(1)
    assert (idle[emf.REQUESTS], idle[emf.ERRORS]) == (0, 0) and emf.REQUEST_LATENCY not in idle
    recorder.request(12.3456789)
    recorder.request(1.0, server_error=True)
    recorder.batch(16, 4.25)
    data = recorder.drain(2)
    assert_valid_emf(data)
    assert (data[emf.REQUESTS], data[emf.ERRORS]) == (2, 1)
    # Microseconds are plenty for milliseconds, and whole numbers are written without ".0": shorter lines.
    assert data[emf.REQUEST_LATENCY] == [12.346, 1] and data[emf.BATCH_SIZE] == [16]
    assert data[emf.INFERENCE_LATENCY] == [4.25]
    assert emf.line(data).count(".0,") == 0


def full_record(values_per_metric: int = emf.MAX_VALUES) -> dict:
    recorder = emf.Recorder(DIMENSIONS, rng=random.Random(3))
    for i in range(values_per_metric):
        for name in (emf.REQUEST_LATENCY, emf.INFERENCE_LATENCY, emf.BATCH_SIZE, emf.QUEUE_DEPTH, emf.IN_FLIGHT):
            recorder.observe(name, 100_000 + i + 0.123)  # long values: 10 characters each
        recorder.request(123.456)
    return recorder.drain(1700000000000)


def test_a_record_over_pipe_buf_is_split_into_lines_that_each_fit_and_together_say_the_same():
    data = full_record()
    assert len(emf.line(data)) > emf.MAX_LINE_BYTES
    parts = [json.loads(text) for text in emf.lines(data)]
    assert len(parts) > 1 and all(len(text) < emf.MAX_LINE_BYTES for text in emf.lines(data))
    merged: dict = {}
    for part in parts:
        assert_valid_emf(part)
        assert {k: part[k] for k in DIMENSIONS} == DIMENSIONS and part["_aws"]["Timestamp"] == 1700000000000
        for metric in part["_aws"]["CloudWatchMetrics"][0]["Metrics"]:
            assert metric["Unit"] == emf.UNITS[metric["Name"]]
            value = part[metric["Name"]]
            merged.setdefault(metric["Name"], []).extend(value if isinstance(value, list) else [value])
    for name in data["_aws"]["CloudWatchMetrics"][0]["Metrics"]:
        value = data[name["Name"]]
        assert sorted(merged[name["Name"]]) == sorted(value if isinstance(value, list) else [value])
    small = emf.record("ns", {"Service": "s", "Model": "m"}, {"X": 1.0}, 1)
    assert emf.lines(small) == [emf.line(small)]


WRITER = """
import json, sys
sys.path.insert(0, sys.argv[1])
import emf, random
recorder = emf.Recorder({"Service": "s" * 900, "Model": sys.argv[2], "Worker": "0"}, rng=random.Random(1))
output = emf.LineOutput()
for round_ in range(40):
    for i in range(emf.MAX_VALUES):
        recorder.observe(emf.REQUEST_LATENCY, 100000 + i + 0.5)
        recorder.observe(emf.INFERENCE_LATENCY, 100000 + i + 0.5)
    output.write([recorder.drain(round_ + 1)])
"""


def test_lines_from_several_processes_on_one_pipe_never_interleave():
    """Two processes write lines close to PIPE_BUF to one pipe at once (as the supervisor and the workers share
    the container's stdout): every line read back is whole."""
    read, write = os.pipe()
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(SERVING_DIR), model], stdout=write) for model in ("a", "b")
    ]
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        received = pipe.read().decode().splitlines()
    assert [w.wait(60) for w in writers] == [0, 0]
    records = [json.loads(text) for text in received]  # a torn line would not parse
    assert max(len(text) for text in received) > emf.MAX_LINE_BYTES * 0.6
    for model in ("a", "b"):
        mine = [r for r in records if r["Model"] == model]
        assert len({r["_aws"]["Timestamp"] for r in mine}) == 40
        assert sum(len(r.get(emf.REQUEST_LATENCY, [])) for r in mine) == 40 * emf.MAX_VALUES


def test_a_failed_write_loses_the_line_and_never_raises(caplog):
    read, write = os.pipe()
    os.close(read)
    output = emf.LineOutput(fd=write)
    record = emf.record("ns", {"Service": "s", "Model": "m"}, {"X": 1.0}, 1)
    assert output.write([record]) == 0 and output.write([record]) == 0  # EPIPE: the reader is gone
    os.close(write)
    assert [r.getMessage() for r in caplog.records] == ["cannot write EMF metrics"]  # once


def test_only_the_containers_own_models_count_when_named():
    foreign = json.loads(json.dumps(REPORT))
    foreign["neuron_runtime_data"].append(
        {
            "pid": 9,
            "neuron_runtime_tag": "other-task/0",
            "error": "",
            "report": {"neuroncore_counters": {"neuroncores_in_use": {"7": {"neuroncore_utilization": 99.0}}}},
        }
    )
    records = neuron_monitor_emf.records(foreign, "svc", 1, models={"intent-bert"})
    assert {r.get("Model") for r in records} == {"intent-bert", None}
    task = [r for r in records if "Model" not in r][0]
    assert task[neuron_monitor_emf.NEURONCORE_UTILIZATION] == [61.5, 58.5, 40.0]
