"""Per-environment diagrams: DOT from the real dev assembly's construct tree, stacks as clusters,
library-level constructs as nodes, cross-stack references as edges, changes coloured, output stable."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from pathlib import Path

import pytest

from inferstack import config
from inferstack.review import assembly, diagram, diff
from tests.support import review_assemblies as ra
from tests.support.cli import run
from tests.support.paths import CONFIG_DIR

NODE = re.compile(r'^\s*"([^"]+)" \[label="([^"]*)"(?:, fillcolor="([^"]+)")?\];$', re.M)
PROJECT = config.load(CONFIG_DIR)
EDGE = re.compile(r'^\s*"([^"]+)" -> "([^"]+)" \[label="([^"]*)"\];$', re.M)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return ra.base(tmp_path_factory)


@pytest.fixture(scope="module")
def dev_dot(base) -> str:
    return diagram.build(assembly.load(base), "dev")


def nodes(dot: str) -> dict[str, tuple[str, str | None]]:
    return {path: (label, fill) for path, label, fill in NODE.findall(dot)}


def test_stacks_are_clusters_and_constructs_are_nodes(dev_dot):
    for stack, name in [
        ("Foundation", "dev-Foundation"),
        ("intent-bert-inf2", "dev-intent-bert-inf2"),
        ("intent-pack", "dev-intent-pack"),
        ("bert-large-classifier", "dev-bert-large-classifier"),
        ("t5-spelling", "dev-t5-spelling"),
    ]:
        assert f'subgraph "cluster_{stack}" {{\n    label="{stack} ({name})";' in dev_dot
    found = nodes(dev_dot)
    assert found["dev/Foundation/Network/Vpc"][0].startswith(r"Vpc\nec2.Vpc\nAWS::EC2::VPC (+")
    assert found["dev/Foundation/PlatformKey/Key"][0] == r"Key\nkms.Key\nAWS::KMS::Key"
    assert found["dev/intent-bert-inf2/Logs"][0] == r"Logs\nlogs.LogGroup\nAWS::Logs::LogGroup"
    # L2s are not opened up: no node per subnet, route or L1 "Resource".
    assert not [p for p in found if "/Vpc/" in p or p.endswith("/Resource")]
    # The Network construct (an L3 written in Python, fqn constructs.Construct) is a sub-cluster.
    assert 'subgraph "cluster_dev/Foundation/Network" {\n      label="Network"; style=dashed;' in dev_dot
    # Four interface endpoints of one class fold into one node; the ECS service is named by its own L1.
    assert found["dev/Foundation/Network/*ec2.InterfaceVpcEndpoint"][0] == (
        r"4 × ec2.InterfaceVpcEndpoint\nAWS::EC2::VPCEndpoint\nEcrApi, EcrDocker, Logs, SageMakerRuntime"
    )
    assert "dev/Foundation/Network/EcrApi" not in found
    assert found["dev/intent-bert-inf2/Neuron/Service"][0].startswith(r"Service\necs.Ec2Service\nAWS::ECS::Service")
    # An L1 kept at its L2's path (a plain construct holding "Resource") is drawn like that L2.
    assert found["dev/intent-bert-inf2/Neuron/*cloudwatch.CfnAlarm"][0].startswith(
        r"8 × cloudwatch.CfnAlarm\nAWS::CloudWatch::Alarm\nCapacityShortfallAlarm, "
    )
    assert found["dev/intent-bert-inf2/Neuron/Dashboard"][0] == (
        r"Dashboard\ncloudwatch.CfnDashboard\nAWS::CloudWatch::Dashboard"
    )
    assert dev_dot.count("{") == dev_dot.count("}")


def test_cross_stack_references_are_edges(dev_dot):
    edges = EDGE.findall(dev_dot)
    declared = set(nodes(dev_dot))
    assert all(source in declared and target in declared for source, target, _ in edges)
    # Each serving stack's log group imports the platform key's ARN exported by Foundation.
    for stack in ("bert-large-classifier", "intent-bert-inf2", "intent-pack", "t5-spelling"):
        assert (f"dev/{stack}/Logs", "dev/Foundation/PlatformKey/Key", "Arn") in edges
    # References go to the foundation's exports, and from an inference-components fleet's members to its stack.
    fleets = [f"dev/{f}/" for f in PROJECT.fleets_in("dev")]
    assert all(
        target.startswith(("dev/Foundation/", *fleets))
        and not source.startswith("dev/Foundation/")
        and target.split("/")[1] != source.split("/")[1]
        for source, target, _ in edges
    )
    for member in PROJECT.fleets["triton-shared"].models:
        assert (f"dev/{member}/Triton/SharedEndpointAccess", "dev/triton-shared/Endpoint/ExecutionRole", "Ref") in edges


def test_output_is_deterministic(base, dev_dot, tmp_path):
    copy = tmp_path / "elsewhere"
    shutil.copytree(base, copy)
    assert diagram.build(assembly.load(copy), "dev") == dev_dot


def test_changed_nodes_are_coloured(base, tmp_path_factory):
    head = assembly.load(ra.head_config(tmp_path_factory))
    report = diff.diff(assembly.load(base), head)
    found = nodes(diagram.build(head, "dev", report.environments[0]))
    assert found["dev/Foundation/Network/Vpc"][1] == diagram.CHANGE_COLOURS["replaced"]
    assert found["dev/t5-grammar/Logs"][1] == diagram.CHANGE_COLOURS["added"]
    assert found["dev/Foundation/Alarms/Topic"][1] == ""  # untouched by a CIDR change: no fill


def _fake_dot(directory: Path) -> None:
    # Graphviz is not a project dependency; this stand-in for `dot` proves the CLI calls it and reports the SVG.
    script = directory / "dot"
    script.write_text('#!/bin/sh\nwhile [ "$1" != "-o" ]; do shift; done\necho "<svg/>" > "$2"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.mark.parametrize("with_dot", [False, True])
def test_cli_writes_diagrams_next_to_the_report(base, tmp_path, with_dot):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if with_dot:
        _fake_dot(bin_dir)
    out = tmp_path / "review" / "diff.md"
    out.parent.mkdir()
    result = run(
        "-m",
        "inferstack",
        "diff",
        str(base),
        str(base),
        "--out",
        str(out),
        env={"PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    assert (out.parent / "dev.dot").read_text() == diagram.build(assembly.load(base), "dev")
    report = out.read_text()
    if with_dot:
        assert (out.parent / "dev.svg").read_text() == "<svg/>\n"
        assert "- dev: `dev.dot`, rendered as `dev.svg`" in report
        assert result.stderr.startswith(f"wrote {out.parent / 'dev.dot'} and {out.parent / 'dev.svg'}")
    else:
        assert not (out.parent / "dev.svg").exists()
        assert "- dev: `dev.dot` (SVG not rendered: graphviz `dot` is not on PATH)" in report
        assert "SVG not rendered: graphviz `dot` is not on PATH" in result.stderr


def test_diagrams_option_and_json_listing(base, tmp_path):
    result = run(
        "-m", "inferstack", "diff", str(base), str(base), "--format", "json", "--diagrams", str(tmp_path / "pictures")
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "pictures" / "dev.dot").is_file()
    (listed,) = json.loads(result.stdout)["diagrams"]
    assert listed["environment"] == "dev" and listed["dot"] == str(tmp_path / "pictures" / "dev.dot")
