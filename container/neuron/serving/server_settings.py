"""Serving settings from command-line flags and the container's runtime environment.

Flags win over environment variables; each value is validated once here, and a bad one becomes
a SettingsError naming the flag and its variable, so serve.py can exit 2 with one line.
SERVER_MODELS (--models) packs several models into the container (packing.py); each packed
model's worker then runs with for_model()'s settings. SERVER_METRICS* and SERVER_NEURON_MONITOR
shape the CloudWatch metrics the container writes to stdout (emf.py, neuron_monitor.py).
SERVER_MAX_RESTARTS and SERVER_RESTART_WINDOW_S bound how often the supervisor restarts a worker.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import packing
from compile_settings import SettingsError, parse_int
from packing import PackedModel


@dataclass(frozen=True)
class Admission:
    """What the batcher admits: a request whose estimated time in the batcher is within ``budget_s``."""

    slo_ms: float
    budget_s: float
    initial_batch_s: float  # the batch time assumed until the first batch is measured


# Of the SLO, the share the batcher may spend (queue and batch): the rest is left to what it does not see
# (the load balancer, the network, parsing and writing the reply) and to the estimate's error.
BUDGET_SHARE = 0.8
# Admission: environment only, no flags. worker.py builds the batcher without them, so the batcher reads them
# from the environment the worker inherits; from_args reads them too, so a bad value stops serve.py (exit 2)
# before any worker starts.
ADMISSION_ENVIRONMENT = {
    "slo_ms": ("SERVER_SLO_MS", None),  # the model's slo.p99_latency_ms; unset: admission off
    "admission": ("SERVER_ADMISSION", "on"),  # off: queue everything (benchmark baselines)
    "initial_batch_ms": ("SERVER_INITIAL_BATCH_MS", "10"),
}


def admission_from_environment(environ: Mapping[str, str] | None = None) -> Admission | None:
    environ = os.environ if environ is None else environ

    def raw(name: str) -> str | None:
        env, default = ADMISSION_ENVIRONMENT[name]
        return environ.get(env) or default

    switch = raw("admission").strip().lower()
    if switch not in ("on", "off"):
        raise SettingsError(f"SERVER_ADMISSION: must be on or off, got {raw('admission')!r}")
    slo_raw = raw("slo_ms")
    if slo_raw is None:
        return None
    slo_ms = _number("SERVER_SLO_MS", slo_raw, 1, 600_000)
    initial_ms = _number("SERVER_INITIAL_BATCH_MS", raw("initial_batch_ms"), 0, 600_000)
    if switch == "off":
        return None
    return Admission(slo_ms=slo_ms, budget_s=slo_ms * BUDGET_SHARE / 1000.0, initial_batch_s=initial_ms / 1000.0)


def _admission_off(environ: Mapping[str, str]) -> bool:
    return (environ.get("SERVER_ADMISSION") or "on").strip().lower() == "off"


def _admission_for(slo_ms: float, current: Admission | None) -> Admission:
    initial_s = (
        current.initial_batch_s
        if current is not None
        else float(os.environ.get("SERVER_INITIAL_BATCH_MS") or ADMISSION_ENVIRONMENT["initial_batch_ms"][1]) / 1000.0
    )
    return Admission(slo_ms=slo_ms, budget_s=slo_ms * BUDGET_SHARE / 1000.0, initial_batch_s=initial_s)


def _number(label: str, raw: str, low: float, high: float) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise SettingsError(f"{label}: expected a number, got {raw!r}") from None
    if not low <= value <= high:  # NaN fails too
        raise SettingsError(f"{label}: must be between {low:g} and {high:g}, got {raw!r}")
    return value


@dataclass(frozen=True)
class ServerSettings:
    model_dir: Path
    host: str
    port: int
    model_name: str
    workers: int
    max_batch_size: int
    max_queue_delay_ms: float
    torch_threads: int
    visible_cores: str | None  # NEURON_RT_VISIBLE_CORES of the whole container
    max_body_bytes: int
    max_text_chars: int
    warmup_iterations: int
    drain_timeout_s: int
    log_level: str
    models: tuple[PackedModel, ...] = ()  # SERVER_MODELS; empty: one model in --model-dir itself
    metrics: bool = True  # SERVER_METRICS=emf: EMF lines on stdout; off: none, and no neuron-monitor
    metrics_service: str = "model"  # the Service dimension
    metrics_interval_s: int = 60
    neuron_monitor: Path | None = None  # the executable the supervisor runs, or None (off)
    # A worker that dies is restarted in place, up to max_restarts times within restart_window_s; one
    # more death in that window is a crash loop, and the supervisor stops the task. 0: never restart.
    max_restarts: int = 3
    restart_window_s: int = 300
    # Benchmarks and tests only: the model replaced by the emulated accelerator (standin_accelerator.py),
    # this many ms per batch. A hidden flag with no environment variable: nothing deployed can set it.
    standin_accelerator_ms: float | None = None
    admission: Admission | None = None  # SERVER_SLO_MS and SERVER_ADMISSION; None: every request is queued
    # SERVER_PIPELINE: prepare each batch while the model runs the one before (batcher.py); off: one at a time,
    # the way batches ran before (benchmark baselines).
    pipeline: bool = True
    # SERVER_TEXT_SCAN: the common TEXT request read, tokenized and replied to in C (text_scan.c) where the image
    # built it, its HTTP head too when a read holds the whole request (on); body: the head through the HTTP parser,
    # the body in C; off: every request through the Python path (protocol.py). The benchmarks' baselines, and kill
    # switches that need no new image.
    text_scan: bool = True
    text_scan_head: bool = True

    def packed_model(self, name: str) -> PackedModel:
        for model in self.models:
            if model.name == name:
                return model
        raise SettingsError(f"--models ({packing.ENV}): no model named {name!r}")


# flag -> (environment variable, default)
ENVIRONMENT = {
    "port": ("PORT", "8080"),
    "model_name": ("MODEL_NAME", "model"),
    "workers": ("SERVER_WORKERS", "1"),
    "max_batch_size": ("SERVER_MAX_BATCH_SIZE", "16"),
    "max_queue_delay_ms": ("SERVER_MAX_QUEUE_DELAY_MS", "0"),
    "torch_threads": ("SERVER_TORCH_THREADS", "1"),
    "visible_cores": ("NEURON_RT_VISIBLE_CORES", None),
    "max_body_bytes": ("SERVER_MAX_BODY_BYTES", str(1 << 20)),
    "max_text_chars": ("SERVER_MAX_TEXT_CHARS", "8192"),
    "warmup_iterations": ("SERVER_WARMUP_ITERATIONS", "3"),
    "drain_timeout_s": ("SERVER_DRAIN_TIMEOUT_S", "25"),
    "log_level": ("SERVER_LOG_LEVEL", "info"),
    "models": (packing.ENV, None),
    "metrics": ("SERVER_METRICS", "emf"),
    "metrics_service": ("SERVER_METRICS_SERVICE", None),
    "metrics_interval_s": ("SERVER_METRICS_INTERVAL_S", "60"),
    "neuron_monitor": ("SERVER_NEURON_MONITOR", None),
    "max_restarts": ("SERVER_MAX_RESTARTS", "3"),
    "restart_window_s": ("SERVER_RESTART_WINDOW_S", "300"),
    "pipeline": ("SERVER_PIPELINE", "on"),
    "text_scan": ("SERVER_TEXT_SCAN", "on"),
}
# Where aws-neuronx-tools installs neuron-monitor in both Neuron base images.
DEFAULT_NEURON_MONITOR = Path("/opt/aws/neuron/bin/neuron-monitor")
# What --help says for defaults that are not a fixed value.
DEFAULT_HELP = {
    "metrics_service": "the model name; packed: the models' names joined by '+'",
    "neuron_monitor": f"{DEFAULT_NEURON_MONITOR} if present, else off",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-dir", required=True, help="artifact directory written by compile.py")
    parser.add_argument("--host", default="0.0.0.0")
    for name, (env, default) in ENVIRONMENT.items():
        flag = "--" + name.replace("_", "-")
        parser.add_argument(
            flag, dest=name, default=None, help=f"env {env} (default {DEFAULT_HELP.get(name, default)})"
        )
    parser.add_argument("--standin-accelerator-ms", dest="standin_accelerator_ms", default=None, help=argparse.SUPPRESS)


def _raw(args: argparse.Namespace, name: str, environ: dict[str, str]) -> str | None:
    value = getattr(args, name)
    if value is not None:
        return value
    env, default = ENVIRONMENT[name]
    return environ.get(env) or default


def _label(name: str) -> str:
    return f"--{name.replace('_', '-')} ({ENVIRONMENT[name][0]})"


def _int(args, name, environ, low, high) -> int:
    return parse_int(_label(name), _raw(args, name, environ), low, high)


def _float(args, name, environ, low, high) -> float:
    raw = _raw(args, name, environ)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise SettingsError(f"{_label(name)}: expected a number, got {raw!r}") from None
    if not low <= value <= high:
        raise SettingsError(f"{_label(name)}: must be between {low} and {high}, got {value}")
    return value


def from_args(args: argparse.Namespace, environ: dict[str, str] | None = None) -> ServerSettings:
    environ = dict(os.environ if environ is None else environ)
    model_dir = Path(args.model_dir)
    if not model_dir.is_dir():
        raise SettingsError(f"--model-dir: directory not found: {args.model_dir}")
    log_level = _raw(args, "log_level", environ).lower()
    if log_level not in ("debug", "info", "warning", "error"):
        raise SettingsError(f"{_label('log_level')}: must be debug, info, warning or error, got {log_level!r}")
    model_name = _raw(args, "model_name", environ)
    if not model_name or "/" in model_name or model_name.strip() != model_name:
        raise SettingsError(
            f"{_label('model_name')}: must be a non-empty name without '/' or spaces, got {model_name!r}"
        )
    workers = _int(args, "workers", environ, 1, 64)
    max_batch_size = _int(args, "max_batch_size", environ, 1, 1024)
    max_queue_delay_ms = _float(args, "max_queue_delay_ms", environ, 0, 1000)
    raw_models = _raw(args, "models", environ)
    models: tuple[PackedModel, ...] = ()
    if raw_models is not None and raw_models.strip():
        for name in ("model_name", "port"):
            if getattr(args, name) is not None or environ.get(ENVIRONMENT[name][0]):
                raise SettingsError(
                    f"{_label(name)}: not allowed with {_label('models')}, which names each model and its port"
                )
        models = packing.parse(
            raw_models,
            label=_label("models"),
            workers=workers,
            max_batch_size=max_batch_size,
            max_queue_delay_ms=max_queue_delay_ms,
        )
    metrics = _raw(args, "metrics", environ).strip().lower()
    if metrics not in ("emf", "off"):
        raise SettingsError(f"{_label('metrics')}: must be emf or off, got {_raw(args, 'metrics', environ)!r}")
    pipeline, text_scan = (_raw(args, name, environ).strip().lower() for name in ("pipeline", "text_scan"))
    if pipeline not in ("on", "off"):
        raise SettingsError(f"{_label('pipeline')}: must be on or off, got {_raw(args, 'pipeline', environ)!r}")
    if text_scan not in ("on", "body", "off"):
        raise SettingsError(f"{_label('text_scan')}: must be on, body or off, got {_raw(args, 'text_scan', environ)!r}")
    service = _raw(args, "metrics_service", environ)
    if service is None:
        service = "+".join(m.name for m in models) if models else model_name
    if metrics == "emf":
        if not models:  # packed model names are [a-z0-9-] already
            _dimension_value("model_name", model_name)
        _dimension_value("metrics_service", service)
    return ServerSettings(
        model_dir=model_dir,
        host=args.host,
        port=_int(args, "port", environ, 0, 65535),
        model_name=model_name,
        workers=workers,
        max_batch_size=max_batch_size,
        max_queue_delay_ms=max_queue_delay_ms,
        torch_threads=_int(args, "torch_threads", environ, 1, 256),
        visible_cores=_raw(args, "visible_cores", environ),
        max_body_bytes=_int(args, "max_body_bytes", environ, 1024, 1 << 30),
        max_text_chars=_int(args, "max_text_chars", environ, 1, 1 << 20),
        warmup_iterations=_int(args, "warmup_iterations", environ, 0, 1_000_000),
        drain_timeout_s=_int(args, "drain_timeout_s", environ, 1, 3600),
        log_level=log_level,
        models=models,
        metrics=metrics == "emf",
        metrics_service=service,
        metrics_interval_s=_int(args, "metrics_interval_s", environ, 1, 3600),
        neuron_monitor=_neuron_monitor(args, environ) if metrics == "emf" else None,
        max_restarts=_int(args, "max_restarts", environ, 0, 1000),
        restart_window_s=_int(args, "restart_window_s", environ, 1, 86400),
        standin_accelerator_ms=_standin(getattr(args, "standin_accelerator_ms", None)),
        admission=admission_from_environment(environ),
        pipeline=pipeline == "on",
        text_scan=text_scan != "off",
        text_scan_head=text_scan == "on",
    )


def _standin(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"--standin-accelerator-ms: expected a number, got {raw!r}") from None
    if not 0 <= value <= 10_000:
        raise SettingsError(f"--standin-accelerator-ms: must be between 0 and 10000, got {value}")
    return value


def _dimension_value(name: str, value: str) -> None:
    """CloudWatch takes dimension values of 1 to 1024 ASCII characters, not all whitespace; a metric with any
    other value is dropped on ingestion, without an error anywhere the task would see."""
    printable = all(" " <= c <= "~" for c in value)
    if not value or len(value) > 1024 or not printable or value.strip() != value:
        raise SettingsError(
            f"{_label(name)}: a metrics dimension (--metrics emf) must be 1 to 1024 printable ASCII characters "
            f"without leading or trailing spaces, got {value[:80]!r}"
        )


def _neuron_monitor(args: argparse.Namespace, environ: dict[str, str]) -> Path | None:
    raw = _raw(args, "neuron_monitor", environ)
    if raw is None:
        found = DEFAULT_NEURON_MONITOR.is_file() and os.access(DEFAULT_NEURON_MONITOR, os.X_OK)
        return DEFAULT_NEURON_MONITOR if found else None
    if raw.strip().lower() == "off":
        return None
    path = Path(raw)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise SettingsError(f"{_label('neuron_monitor')}: {raw!r} is not an executable file (a neuron-monitor, or off)")
    return path.resolve()


def for_model(settings: ServerSettings, model: PackedModel) -> ServerSettings:
    """The settings one packed model's worker runs with: its artifact, name, port, cores and batching."""
    return replace(
        settings,
        model_dir=settings.model_dir / model.name,
        port=model.port,
        model_name=model.name,
        workers=model.workers,
        max_batch_size=model.max_batch_size,
        max_queue_delay_ms=model.max_queue_delay_ms,
        visible_cores=model.visible_cores,
        admission=_model_admission(settings.admission, model.slo_ms),
    )


def _model_admission(container: Admission | None, slo_ms: float | None) -> Admission | None:
    """A packed model admits within its own SLO where SERVER_MODELS gives one (SERVER_ADMISSION=off still turns
    admission off), else as the container's settings say."""
    if slo_ms is None or _admission_off(os.environ):
        return container
    return _admission_for(slo_ms, container)
