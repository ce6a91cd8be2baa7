"""A load test's result for people: a text report (what was tested and against which rates; per step: offered,
sent late, answered, goodput, rejections, timeouts, errors, latency percentiles from the due time; the
generators' CPU; the verdict and its reasons), a line per step as the run goes, and a picture of latency and
rate over time with the SLO and the step boundaries. `write` stores both beside result.json."""

from __future__ import annotations

import io
from pathlib import Path

from inferstack import atomic_write
from inferstack.loadtest.results import PICTURE_FILE, REPORT_FILE, RESULT_FILE, RunResult, StepResult


def text(result: RunResult) -> str:
    where = ", ".join(
        filter(
            None,
            [
                f"env {result.environment}" if result.environment else None,
                f"release {result.release}" if result.release else None,
                (f"{result.instances} x {result.instance_type}" if result.instances and result.instance_type else None),
            ],
        )
    )
    generators = (
        f"{result.workers} worker{'s' if result.workers > 1 else ''}" if result.workers else "one local generator"
    )
    planned = (
        f"planned {result.planned_rate:g} req/s for {result.plan_basis}"
        if result.planned_rate is not None
        else "no planned rate known"
    )
    lines = [
        f"load test of {result.model} at {result.target}" + (f" ({where})" if where else ""),
        f"SLO: p99 <= {result.p99_slo_ms:g} ms, errors <= {result.error_budget_percent:g} %; full rate "
        f"{result.judged_rate:g} req/s ({planned}); {generators}; {result.started} to {result.finished}",
        "open system: requests sent on schedule whatever the server does; latency counts from when each was due"
        + (
            f"; a send more than {result.late_after_ms:g} ms after it was due is late"
            if result.late_after_ms is not None
            else ""
        ),
        f"percentiles: {result.resolution or 'not stated'}",
    ]
    if result.instance_type is None:
        lines.append("instance type: not known (a run against a URL: whatever serves it)")
    if result.below_plan:
        lines.append(f"WARNING: {result.below_plan}")
    lines.append("")
    header = (
        "step",
        "offered/s",
        "%",
        "sent",
        "late",
        "answered",
        "goodput/s",
        "rejected",
        "timeouts",
        "errors",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "",
    )
    rows = [header]
    for number, step in enumerate(result.steps, 1):
        rows.append(
            (
                str(number),
                f"{step.offered_rps:g}",
                f"{100 * step.offered_rps / result.judged_rate:.0f}",
                str(step.offered),
                str(step.late),
                str(step.answered),
                f"{step.goodput_rps:.1f}",
                str(step.rejected),
                str(step.timeouts),
                f"{step.failures} ({step.error_percent:.2f} %)",
                _ms(step.p50_ms),
                _ms(step.p90_ms),
                _ms(step.p99_ms),
                _ms(step.max_ms),
                status(result, number, step),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines += [
        "  ".join(
            cell.rjust(width) if i < len(header) - 1 else cell
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
    for number, step in enumerate(result.steps, 1):
        if step.errors:
            kinds = ", ".join(f"{kind}: {count}" for kind, count in sorted(step.errors.items(), key=lambda kv: -kv[1]))
            lines.append(f"step {number} errors: {kinds}")
    lines.append("")
    lines.append(
        "generators' CPU (max / mean): "
        + (
            "; ".join(
                f"{g.name} {g.max_cpu_percent:.0f} % / {g.mean_cpu_percent:.0f} %"
                + (" SATURATED" if g.saturated else "")
                for g in result.generators
            )
            or "none reported"
        )
    )
    lines.append(f"verdict: {result.verdict.upper()}")
    lines += [f"  - {reason}" for reason in result.reasons]
    best = result.highest_rate_within_slo
    lines.append("highest rate within the SLO: " + (f"{best:.1f} req/s" if best is not None else "none"))
    return "\n".join(lines) + "\n"


def status(result: RunResult, number: int, step: StepResult) -> str:
    """Step `number`'s judgement in a word or two: ok / outside SLO up to the full rate; held / not held above it."""
    if result.step_invalid_reasons(number, step):
        return "invalid: generators behind"
    if result.overload(step):
        return "overload held" if result.step_held(step) else "overload not held"
    return "ok" if result.step_held(step) else "outside SLO"


def progress(result: RunResult, number: int, step: StepResult) -> str:
    """One line as a step ends (its figures so far; requests still in flight are not yet counted)."""
    return (
        f"{result.step_label(number, step)} of {len(result.steps)}: sent {step.offered} ({step.late} late), "
        f"answered {step.answered}, goodput {step.goodput_rps:.1f}/s, rejected {step.rejected}, timeouts "
        f"{step.timeouts}, errors {step.failures}, p99 {_ms(step.p99_ms)} ms (SLO {result.p99_slo_ms:g}): "
        f"{status(result, number, step)}"
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def picture(result: RunResult) -> bytes:
    """A PNG: p50 and p99 per second with the SLO line above, the rate per second with each step's offered rate
    below, the step boundaries on both. Drawn with matplotlib's object API (no pyplot, no display)."""
    from matplotlib.figure import Figure  # heavy: only when a picture is drawn

    figure = Figure(figsize=(10, 6), dpi=100, layout="constrained")
    latency, rate = figure.subplots(2, 1, sharex=True)
    t = [s.t for s in result.timeline]
    for attribute, label in (("p50_ms", "p50"), ("p99_ms", "p99")):
        points = [(s.t, getattr(s, attribute)) for s in result.timeline if getattr(s, attribute) is not None]
        latency.plot([p[0] for p in points], [p[1] for p in points], marker=".", label=label)
    latency.axhline(result.p99_slo_ms, color="red", linestyle="--", label=f"SLO p99 {result.p99_slo_ms:g} ms")
    latency.set_ylabel("latency per second (ms)")
    latency.set_ylim(bottom=0)
    rate.plot(t, [s.rps for s in result.timeline], marker=".", label="completed req/s")
    rate.plot(t, [s.failures_per_s for s in result.timeline], color="red", label="failed req/s")
    starts = [s.started_s for s in result.steps]
    for index, step in enumerate(result.steps):
        start = starts[index]
        if start is None:
            continue
        if index + 1 < len(starts) and starts[index + 1] is not None:
            end = starts[index + 1]
        else:
            end = max(t[-1] + 1 if t else 0.0, start + step.seconds)
        rate.hlines(
            step.offered_rps, start, end, colors="grey", linestyles=":", label="offered" if index == 0 else None
        )
        for axes in (latency, rate):
            axes.axvline(start, color="grey", linewidth=0.8)
    rate.set_ylabel("requests per second")
    rate.set_xlabel("seconds since the start")
    rate.set_ylim(bottom=0)
    latency.legend(loc="upper left", fontsize="small")
    rate.legend(loc="upper left", fontsize="small")
    figure.suptitle(f"{result.model}: {result.verdict.upper()} ({result.target})", fontsize="medium")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def write(result: RunResult, directory: Path) -> None:
    """The report, the picture, then result.json last: a reader that finds result.json finds the others."""
    atomic_write.write_text(directory / REPORT_FILE, text(result))
    atomic_write.write_bytes(directory / PICTURE_FILE, picture(result))
    atomic_write.write_text(directory / RESULT_FILE, result.to_json())
