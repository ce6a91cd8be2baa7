"""The task sizes Fargate accepts (Linux): each CPU value with the memory values it may be paired with.

From the ECS developer guide's "Task CPU and memory" table (Fargate, Linux platform 1.4.0). The load test's
generator tasks are sized from the config, so a pair Fargate would refuse at RunTask is refused when the
YAML is loaded instead.
"""

from __future__ import annotations

GIB = 1024


def _steps(low_gib: int, high_gib: int, step_gib: int) -> tuple[int, ...]:
    return tuple(range(low_gib * GIB, high_gib * GIB + 1, step_gib * GIB))


# CPU units (1024 = 1 vCPU) -> the memory values (MiB) Fargate accepts with it.
MEMORY_MIB: dict[int, tuple[int, ...]] = {
    256: (512, 1024, 2048),
    512: _steps(1, 4, 1),
    1024: _steps(2, 8, 1),
    2048: _steps(4, 16, 1),
    4096: _steps(8, 30, 1),
    8192: _steps(16, 60, 4),
    16384: _steps(32, 120, 8),
}


def size_problem(cpu: int, memory_mib: int) -> str | None:
    """Why Fargate would refuse this pair, in one line; None when it accepts it."""
    if cpu not in MEMORY_MIB:
        return f"{cpu} is not a Fargate CPU value; one of {', '.join(map(str, MEMORY_MIB))}"
    allowed = MEMORY_MIB[cpu]
    if memory_mib not in allowed:
        step = allowed[1] - allowed[0]
        listed = (
            ", ".join(map(str, allowed)) if len(allowed) <= 3 else f"{allowed[0]} to {allowed[-1]} in steps of {step}"
        )
        return f"Fargate pairs {cpu} CPU units with {listed} MiB, not {memory_mib}"
    return None
