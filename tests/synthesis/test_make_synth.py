"""`make synth` is quiet: the CDK CLI ends every `cdk synth --quiet` of this app with "Supply a stack id
(Pipeline, cross-region-stack-444444444444:us-west-2) to display its template." (its selection, the app's
top-level stacks, is not one stack), and the Makefile's synth drops that line, and only that line, keeping
the CLI's exit status and what is synthesized."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT

HINT = "Supply a stack id ("
# Run the target as it is, but never its installs: the test runs after `make test`'s setup (or in a
# worktree whose .venv and node_modules are links), and must not rebuild them.
MAKE = ["make", "--no-print-directory", "-o", ".make/python", "-o", ".make/node", "synth"]


def _env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("CI", "MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    env["CDK_DISABLE_CLI_TELEMETRY"] = "true"
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    return env


def _run(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env or _env(), timeout=300
    )


def test_make_synth_drops_the_cli_hint_and_synthesizes_every_top_level_stack(tmp_path):
    outdir = tmp_path / "cdk.out"
    result = _run([*MAKE, f"CDK_OUT={outdir}"])
    assert result.returncode == 0, result.stdout[-3000:]
    lines = result.stdout.splitlines()
    assert not [line for line in lines if line.startswith(HINT)], result.stdout[-3000:]
    assert f"Successfully synthesized to {outdir}" in lines  # the CLI's other output still comes through
    # What is synthesized is unchanged: the two top-level stacks the hint listed, and every environment.
    artifacts = json.loads((outdir / "manifest.json").read_text())["artifacts"]
    assert sorted(a.get("displayName", k) for k, a in artifacts.items() if a["type"] == "aws:cloudformation:stack") == [
        "Pipeline",
        "cross-region-stack-444444444444:us-west-2",
    ]
    assert sorted(k for k, a in artifacts.items() if a["type"] == "cdk:cloud-assembly") == [
        "assembly-dev",
        "assembly-prod",
        "assembly-staging",
    ]
    # The CLI itself still prints the hint for that assembly: the Makefile is what keeps it out.
    direct = _run(["node_modules/.bin/cdk", "synth", "--quiet", "--app", str(outdir)])
    assert direct.returncode == 0, direct.stdout[-3000:]
    assert (
        "Supply a stack id (Pipeline, cross-region-stack-444444444444:us-west-2) to display its template."
        in direct.stdout.splitlines()
    )


def test_make_synth_keeps_a_failing_synth_failing_with_its_messages(tmp_path):
    # A stand-in CLI that fails, printing the hint on both streams (CI=true sends the CLI's messages to stdout).
    fake = tmp_path / "cdk"
    fake.write_text(
        "#!/bin/sh\n"
        f"echo '{HINT}Pipeline) to display its template.'\n"
        "echo 'synth failed: model_configs/intent-bert.yaml:12: compile.neuron_generation: ...' >&2\n"
        f"echo '{HINT}) to display its template.' >&2\n"
        "exit 3\n"
    )
    fake.chmod(0o755)
    result = _run([*MAKE, f"CDK={fake}", f"CDK_OUT={tmp_path / 'out'}"])
    assert result.returncode != 0
    assert "synth failed: model_configs/intent-bert.yaml:12: compile.neuron_generation: ..." in result.stdout
    assert "Error 3" in result.stdout  # make reports the CLI's own status
    assert not [line for line in result.stdout.splitlines() if line.startswith(HINT)], result.stdout
