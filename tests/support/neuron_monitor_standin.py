"""A stand-in for neuron-monitor (aws-neuronx-tools), which needs Inferentia hardware to run.

Called as the supervisor calls the real one, `neuron-monitor -c CONFIG`: reads the configuration's period,
tag filter and runtime metric groups, and every period prints one report in the layout of the Neuron docs'
neuron-monitor user guide. Its "Neuron applications" are the processes beside it (the supervisor's other
children, the workers) that carry NEURON_PROCESS_TAG, as the real one reports each tagged runtime; their
NeuronCores are the ones in their NEURON_RT_VISIBLE_CORES. Utilisation is 50 % + the core index, device
memory 1,000,000 bytes per core, so a test can tell the runtimes apart.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path


def siblings() -> list[tuple[int, dict[str, str]]]:
    """(pid, environment) of the processes with the same parent as this one."""
    parent, found = os.getppid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            raw = (entry / "environ").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        env = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
        found.append((int(entry.name), env))
    return sorted(found)


def cores(visible: str | None) -> list[int]:
    if not visible:
        return [0]
    first, _, last = visible.partition("-")
    return list(range(int(first), int(last or first) + 1))


def runtime_report(groups: list[str], env: dict[str, str], period: float) -> dict:
    used = cores(env.get("NEURON_RT_VISIBLE_CORES"))
    report: dict = {}
    if "neuroncore_counters" in groups:
        report["neuroncore_counters"] = {
            "period": period,
            "error": "",
            "neuroncores_in_use": {str(core): {"neuroncore_utilization": 50.0 + core, "flops": 1000} for core in used},
        }
    if "memory_used" in groups:
        report["memory_used"] = {
            "period": period,
            "error": "",
            "neuron_runtime_used_bytes": {"host": 5000, "neuron_device": 1_000_000 * len(used)},
            "loaded_models": [],
        }
    if "execution_stats" in groups:
        report["execution_stats"] = {
            "period": period,
            "error": "",
            "execution_summary": {
                "completed": 10,
                "completed_with_err": 0,
                "completed_with_num_err": 0,
                "timed_out": 0,
                "incorrect_input": 0,
                "failed_to_queue": 0,
            },
        }
    return report


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-c", "--config-file", required=True)
    config = json.loads(Path(parser.parse_args().config_file).read_text())
    period = float(re.fullmatch(r"(\d+)s", config["period"]).group(1))
    (runtimes,) = config["neuron_runtimes"]
    tag_filter = re.compile(runtimes.get("tag_filter", ".*"))
    groups = [metric["type"] for metric in runtimes["metrics"]]
    while True:
        time.sleep(period)
        data = []
        for pid, env in siblings():
            tag = env.get("NEURON_PROCESS_TAG")
            if tag is not None and tag_filter.search(tag):
                data.append(
                    {
                        "pid": pid,
                        "address": "",
                        "neuron_runtime_tag": tag,
                        "error": "",
                        "report": runtime_report(groups, env, period),
                    }
                )
        report = {
            "neuron_runtime_data": data,
            "system_data": {},
            "instance_info": {"instance_type": "inf2.xlarge", "error": ""},
            "neuron_hardware_info": {"neuron_device_count": 1, "neuroncore_per_device_count": 2, "error": ""},
        }
        sys.stdout.write(json.dumps(report) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
