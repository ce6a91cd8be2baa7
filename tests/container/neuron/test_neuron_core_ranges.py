"""Partitioning NEURON_RT_VISIBLE_CORES into disjoint per-worker ranges."""

from __future__ import annotations

import pytest

# serving/ and build/'s flat modules, on the path from conftest.py (ruff would count them third-party).
# isort: split
from compile_settings import SettingsError
from core_ranges import parse_cores, partition


def test_ranges_are_contiguous_and_disjoint():
    assert partition("0-15", 4, 1) == ["0-3", "4-7", "8-11", "12-15"]
    assert partition("4-7", 2, 2) == ["4-5", "6-7"]
    assert partition("8-11", 4, 1) == ["8", "9", "10", "11"]
    assert partition("3", 1, 1) == ["3"]


def test_unset_cores_leave_the_variable_alone():
    assert partition(None, 1, 1) == [None]
    assert partition("", 3, 0) == [None, None, None]  # cpu backend: no cores to share


@pytest.mark.parametrize(
    "spec, workers, per_model, needle",
    [
        ("0-2", 2, 1, "do not split evenly"),
        ("0-3", 2, 4, "not a multiple"),
        ("0,1", 1, 1, "NEURON_RT_VISIBLE_CORES"),
        ("3-1", 1, 1, "ends before it starts"),
        (None, 2, 1, "NEURON_RT_VISIBLE_CORES"),
    ],
)
def test_bad_layouts_are_rejected(spec, workers, per_model, needle):
    with pytest.raises(SettingsError, match=needle):
        partition(spec, workers, per_model)


def test_parse_cores():
    assert list(parse_cores(" 2 - 5 ")) == [2, 3, 4, 5]


def test_cpu_backend_splits_labels_without_a_core_size():
    assert partition("0-3", 2, 0) == ["0-1", "2-3"]
