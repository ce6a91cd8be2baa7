"""Writing profile entries into a model file: only the entry's lines change (every other byte, comments, key
order, flow mappings, long lines and CRLF line endings included, stays), the write is whole or nothing, and
an entry the whole config would not load with is refused with the old file kept."""

from __future__ import annotations

import datetime
import os

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from inferstack import config
from inferstack.profile import writer
from inferstack.profile.writer import WriteRefused
from tests.support.fuzz import fuzz_examples

MEASURED = {
    "throughput_per_second": 812.34,
    "p99_latency_ms": 7.91,
    "source": "inferstack profile 2025-03-04: 1624.7 req/s held on 2 x inf1.xlarge in staging: p99 # 7.91 ms",
    "measured": {
        "date": datetime.date(2025, 3, 4),
        "method": "inferstack profile",
        "environment": "staging",
        "release": "r-42",
        "instances": 2,
        "p99_latency_ms": 7.91,
        "results": "s3://bucket/r-42/intent-bert/run-1/result.json",
    },
}


def split_around(text: str, first: str, after: str) -> tuple[str, str]:
    """The text before the line `first` and from the line `after` on (each a whole line of `text`)."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.rstrip("\r\n") == first)
    end = next(i for i, line in enumerate(lines) if i > start and line.rstrip("\r\n") == after)
    return "".join(lines[:start]), "".join(lines[end:])


def test_replacing_an_entry_keeps_every_other_byte_of_the_shipped_file(config_copy):
    path = config_copy / "intent-bert.yaml"
    old = path.read_bytes().decode()
    writer.write(path, config_copy, {"inf1.xlarge": MEASURED})
    new = path.read_bytes().decode()
    before, after = split_around(old, "  inf1.xlarge:", "capacity:")
    assert new.startswith(before) and new.endswith(after)
    middle = new[len(before) : len(new) - len(after)]
    assert yaml.safe_load(middle) == {"inf1.xlarge": MEASURED}
    assert middle.splitlines()[0] == "  inf1.xlarge:" and all(
        line.startswith("    ") for line in middle.splitlines()[1:]
    )
    point = config.load(config_copy).model("intent-bert").throughput_profile["inf1.xlarge"]
    assert point.throughput_per_second == 812.34 and point.measured.environment == "staging"


# Everything a hand-written model file may hold around its profile: comments above, inside, between and after
# the entries, a flow mapping, a line longer than any dumper's width, a quoted key, CRLF line endings and no
# newline at the end.
TRICKY = (
    "# yaml-language-server: $schema=schema/model.schema.json\r\n"
    "name: tricky   # trailing comment\r\n"
    "kind: neuron-ecs\r\n"
    "description: " + "a very long description that no YAML dumper would leave on one line " * 3 + "\r\n"
    "source: {huggingface_id: bert-base-uncased, task: text-classification, labels: [a, b]}\r\n"
    "compile: {neuron_generation: inf2}\r\n"
    "slo:\r\n"
    "    p99_latency_ms: 10      # odd indentation, kept\r\n"
    "    peak_tps: 100\r\n"
    "throughput_profile:\r\n"
    "  # the estimate we started from\r\n"
    "  'inf2.xlarge':\r\n"
    "    throughput_per_second: 500   # guessed\r\n"
    "\r\n"
    "    # a comment inside the entry\r\n"
    "    p99_latency_ms: 8\r\n"
    "    source: >-\r\n"
    "      folded over\r\n"
    "      two lines\r\n"
    "  # between the entries\r\n"
    "  inf2.8xlarge: {throughput_per_second: 900, p99_latency_ms: 8, source: flow style entry}\r\n"
    "# after the profile\r\n"
    "capacity: {instance_type: inf2.xlarge, min: 1, max: 4}"
)


def test_tricky_layout_survives_a_replacement_and_an_addition():
    new = writer.splice(TRICKY, {"inf2.xlarge": MEASURED, "inf2.24xlarge": MEASURED}, "tricky.yaml")
    head, tail = TRICKY.split("  'inf2.xlarge':\r\n")
    _, rest = tail.split("      two lines\r\n")
    assert new.startswith(head)  # including the comment above the entry
    between, end = rest.split(
        "  inf2.8xlarge: {throughput_per_second: 900, p99_latency_ms: 8, source: flow style entry}"
    )
    assert between == "  # between the entries\r\n"
    assert new.endswith(end.removeprefix("\r\n")) and end.startswith("\r\n# after the profile")
    assert "\n" not in new.replace("\r\n", "")  # the file's line endings throughout
    data = yaml.safe_load(new)
    assert data["throughput_profile"] == {
        "inf2.xlarge": MEASURED,
        "inf2.24xlarge": MEASURED,
        "inf2.8xlarge": {"throughput_per_second": 900, "p99_latency_ms": 8, "source": "flow style entry"},
    }
    assert list(data["throughput_profile"]) == ["inf2.xlarge", "inf2.8xlarge", "inf2.24xlarge"]
    # the added entry follows the last one, before the comment that opens the next section
    assert (
        "entry}\r\n  inf2.24xlarge:\r\n" in new
        and "results: s3://bucket/r-42/intent-bert/run-1/result.json\r\n# after the profile" in new
    )
    assert {k: v for k, v in data.items() if k != "throughput_profile"} == {
        k: v for k, v in yaml.safe_load(TRICKY).items() if k != "throughput_profile"
    }


def test_an_entry_written_in_flow_style_is_replaced_whole():
    new = writer.splice(TRICKY, {"inf2.8xlarge": MEASURED}, "tricky.yaml")
    assert "flow style entry" not in new
    assert yaml.safe_load(new)["throughput_profile"]["inf2.8xlarge"] == MEASURED
    assert new.endswith("\r\n# after the profile\r\ncapacity: {instance_type: inf2.xlarge, min: 1, max: 4}")


def test_a_flow_style_profile_is_refused():
    text = "name: x\nthroughput_profile: {inf2.xlarge: {throughput_per_second: 1, p99_latency_ms: 1, source: s}}\n"
    with pytest.raises(WriteRefused, match=r"^x.yaml: throughput_profile: written in flow style"):
        writer.splice(text, {"inf2.xlarge": MEASURED}, "x.yaml")


def test_an_entry_the_config_would_not_load_with_is_refused_and_the_file_kept(config_copy):
    path = config_copy / "intent-bert.yaml"
    old = path.read_bytes()
    # 10/s per inf1.6xlarge cannot carry prod's 16,000 TPS peak within max 10
    tiny = {**MEASURED, "throughput_per_second": 10.0}
    with pytest.raises(WriteRefused) as caught:
        writer.write(path, config_copy, {"inf1.6xlarge": tiny})
    message = str(caught.value)
    assert message.startswith(f"{path}: not written: with the new entry the config would not load: ")
    assert "intent-bert.yaml" in message and "\n" not in message
    assert path.read_bytes() == old
    assert sorted(p.name for p in config_copy.iterdir()) == sorted(
        p.name for p in config_copy.iterdir() if not p.name.startswith(".")
    )


def test_a_failed_rename_leaves_the_old_file_and_no_temporary(config_copy, monkeypatch):
    path = config_copy / "intent-bert.yaml"
    old = path.read_bytes()

    def refuse(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(WriteRefused, match="cannot write: No space left on device"):
        writer.write(path, config_copy, {"inf1.xlarge": MEASURED})
    assert path.read_bytes() == old
    assert not list(config_copy.glob(".*.tmp"))


def test_the_shipped_files_accept_an_entry_for_every_model(config_copy):
    """Each shipped model file's deployed entry replaced in place loads, with only that entry changed."""
    project = config.load(config_copy)
    for model in project.models:
        path = project.model_files[model.name]
        itype = model.capacity.instance_type
        current = model.throughput_profile[itype]
        data = {
            "throughput_per_second": current.throughput_per_second,
            "p99_latency_ms": current.p99_latency_ms,
            "source": "re-measured",
            "measured": {**MEASURED["measured"], "p99_latency_ms": current.p99_latency_ms},
        }
        before = yaml.safe_load(path.read_text())
        writer.write(path, config_copy, {itype: data})
        after = yaml.safe_load(path.read_text())
        before["throughput_profile"][itype] = data
        assert after == before, model.name
    config.load(config_copy)


@pytest.mark.fuzz
@settings(max_examples=fuzz_examples(150), deadline=None)
@given(
    source=st.text(min_size=1, max_size=80).filter(lambda s: s.strip() == s and s.strip()),
    results=st.from_regex(r"^[!-~]{1,40}$", fullmatch=True),
)
def test_any_one_line_text_is_written_so_that_it_reads_back(source, results):
    if any(c in source for c in "\r\n\x85\u2028\u2029") or not source.isprintable():
        return  # a source line is one printable line; ProfilePoint would take the rest, the writer refuses it
    entry = {**MEASURED, "source": source, "measured": {**MEASURED["measured"], "results": results}}
    new = writer.splice(TRICKY, {"inf2.xlarge": entry}, "tricky.yaml")
    assert yaml.safe_load(new)["throughput_profile"]["inf2.xlarge"] == entry


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(WriteRefused, match=r"missing.yaml: cannot read: No such file or directory$"):
        writer.new_text(tmp_path / "missing.yaml", {"inf2.xlarge": MEASURED})
