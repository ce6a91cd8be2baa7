"""One snapshot per environment, so a pull request shows its infrastructure diff.

Refresh after an intended change with `UPDATE_SNAPSHOTS=1 make test` and commit the result."""

from __future__ import annotations

import os

import pytest

from tests.support.paths import ROOT
from tests.support.snapshot import normalise

SNAPSHOTS = ROOT / "tests" / "snapshots"


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_environment_matches_snapshot(synthesized, env):
    current = normalise(synthesized.templates[env])
    path = SNAPSHOTS / f"{env}.json"
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(current)
    assert path.exists(), f"no snapshot {path.name}; create it with UPDATE_SNAPSHOTS=1"
    assert current == path.read_text(), (
        f"{env} infrastructure changed; review the diff and refresh with UPDATE_SNAPSHOTS=1"
    )


def test_normalise_hides_asset_hashes_only():
    a = {"S": {"Resources": {"F": {"Properties": {"Key": "0" * 64 + ".zip", "Size": 1}}}}}
    b = {"S": {"Resources": {"F": {"Properties": {"Key": "f" * 64 + ".zip", "Size": 1}}}}}
    c = {"S": {"Resources": {"F": {"Properties": {"Key": "f" * 64 + ".zip", "Size": 2}}}}}
    assert normalise(a) == normalise(b) != normalise(c)
