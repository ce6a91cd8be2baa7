"""benchmarks/serve_bench.py end to end on the tiny artifact: (a), (b) and (c) all run and the report
has a row per concurrency level and a verdict per level >= 16; (d) has a row with admission on and off and
its verdict; (e) has a row per SERVER_PIPELINE mode and level, a paced row per mode and its verdict. Figures are
printed, never asserted."""

from __future__ import annotations

import re

import pytest

from tests.support.neuron_server import run_script
from tests.support.paths import ROOT

SERVE_BENCH = ROOT / "benchmarks" / "serve_bench.py"


def test_serve_bench_reports_every_level(artifact):
    result = run_script(
        SERVE_BENCH,
        "--model-dir",
        str(artifact),
        "--workers",
        "1",
        "--concurrency",
        "2,16",
        "--duration",
        "0.3",
        "--warmup",
        "0.1",
        "--rounds",
        "1",
        "--limit-seconds",
        "0.05",
        "--overload-seconds",
        "0.5",
        "--pipeline-seconds",
        "0.3",
        "--pipeline-concurrency",
        "4,8",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert re.search(r"^\(c\) limit: [\d,]+ seq/s \(1 x 1 threads, batch \d+\)$", out, re.M), out
    rows = {int(m.group(1)): m.group(0) for m in re.finditer(r"^\s+(\d+) \|.*\| (\d+)/(\d+)$", out, re.M)}
    assert sorted(rows) == [2, 16], out
    # Every request of (a) and (b) answered without an error.
    assert all(row.endswith("| 0/0") for row in rows.values()), out
    verdicts = re.findall(
        r"^  concurrency (\d+): 2x throughput (met|MISSED), p99 no worse (met|MISSED), "
        r"70% of limit (met|MISSED)$",
        out,
        re.M,
    )
    assert [int(v[0]) for v in verdicts] == [16], out
    overload = re.findall(r"^\s+(on|off) \| +(\d+) +(\d+) +(\d+) +(\d+) +(\d+) \|", out, re.M)
    assert [row[0] for row in overload] == ["on", "off"], out
    # Every request sent was answered (200 or 503); without admission nothing is refused.
    for _mode, sent, ok, refused, other, lost in overload:
        assert int(ok) + int(refused) == int(sent) and (other, lost) == ("0", "0"), out
    assert overload[1][3] == "0", out
    assert re.search(
        r"^targets with admission on: goodput >= 90% of capacity (met|MISSED), admitted p99 within the "
        r"SLO (met|MISSED), refusals within 1 ms of server time (met|MISSED)$",
        out,
        re.M,
    ), out
    pipeline = re.findall(r"^\s+(off|on) +(\d+) \| +[\d,]+ +\d+% \|.*\| (\d+)$", out, re.M)
    assert [(mode, level, errors) for mode, level, errors in pipeline] == [
        ("off", "4", "0"),
        ("on", "4", "0"),
        ("off", "8", "0"),
        ("on", "8", "0"),
    ], out
    paced = re.findall(r"^\s+(off|on) \| offered +[\d,]+ req/s \| +[\d,]+ req/s \| p50 .* \| errors (\d+)$", out, re.M)
    assert paced == [("off", "0"), ("on", "0")], out
    assert re.search(
        r"^targets with the pipeline on: 85% of the limit at 4,8 connections (met|MISSED), p99 at 80% "
        r"<= 2 x batch \+ delay \([\d.]+ ms\) (met|MISSED), CPU per request no more than off (met|MISSED)$",
        out,
        re.M,
    ), out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--limit-seconds", "0"], "--limit-seconds: must be greater than 0, got 0.0"),
        (["--rounds", "-1"], "--rounds: must be greater than 0, got -1"),
        (["--concurrency", "4,x"], "--concurrency: a comma-separated list of positive integers, got '4,x'"),
        (["--concurrency", "0"], "--concurrency: a comma-separated list of positive integers, got '0'"),
        (["--warmup", "-1"], "--warmup and --max-queue-delay-ms: must not be negative"),
        (["--overload-seconds", "-1"], "--overload-seconds: must not be negative, got -1.0"),
        (["--overload-factor", "0"], "--overload-factor: must be greater than 0, got 0.0"),
        (["--slo-ms", "nan"], "--slo-ms: must be greater than 0, got nan"),
        (["--pipeline-seconds", "-1"], "--pipeline-seconds: must not be negative, got -1.0"),
        (
            ["--pipeline-concurrency", "32,"],
            "--pipeline-concurrency: a comma-separated list of positive integers, got '32,'",
        ),
        (["--pipeline-batch-ms", "0"], "--pipeline-batch-ms: must be greater than 0, got 0.0"),
    ],
)
def test_serve_bench_rejects_bad_arguments(args, message):
    result = run_script(SERVE_BENCH, *args, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith(message), result.stderr
    assert "Traceback" not in result.stderr
