"""Running the CLI (`python -m inferstack ...`) and app.py as the CDK CLI would, in a subprocess from the
repository root, and checking that a refused synth wrote nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT


def run(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=300
    )


def assert_nothing_written(outdir: Path) -> None:
    # cdk.App may create the (empty) output directory; no template or manifest may land in it.
    assert not outdir.exists() or not any(outdir.iterdir())


def cdk_env(outdir: Path, **context) -> dict:
    # What the CDK CLI hands app.py: the context (cdk.json plus -c flags) and the output directory.
    settings = json.loads((ROOT / "cdk.json").read_text())
    return {"CDK_CONTEXT_JSON": json.dumps({**settings["context"], **context}), "CDK_OUTDIR": str(outdir)}
