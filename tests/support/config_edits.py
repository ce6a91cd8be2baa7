"""Mark throughput_profile entries of a config copy as measured (a support module: no tests here)."""

from __future__ import annotations

from pathlib import Path

import yaml


def mark_measured(config_dir: Path, model: str, *instance_types: str, date: str = "2025-03-04",
                  environment: str | None = "staging") -> None:
    """Give each entry a measured: block with its own p99, as `inferstack profile` would have written it."""
    path = config_dir / f"{model}.yaml"
    data = yaml.safe_load(path.read_text())
    for itype in instance_types:
        point = data["throughput_profile"][itype]
        point["measured"] = {"date": date, "method": "inferstack profile", "instances": 2,
                             "p99_latency_ms": point["p99_latency_ms"],
                             "results": f"s3://inferstack-loadtest/r-1/{model}/run-1/result.json"}
        if environment is not None:
            point["measured"]["environment"] = environment
    path.write_text(yaml.safe_dump(data, sort_keys=False))
