"""Serving settings from command-line flags and the container's runtime environment.

Flags win over environment variables; each value is validated once here, and a bad one becomes
a SettingsError naming the flag and its variable, so serve.py can exit 2 with one line.
SERVER_MODELS (--models) packs several models into the container (packing.py); each packed
model's worker then runs with for_model()'s settings. SERVER_METRICS* and SERVER_NEURON_MONITOR
shape the CloudWatch metrics the container writes to stdout (emf.py, neuron_monitor.py).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, replace
from pathlib import Path

import packing
from compile_settings import SettingsError, parse_int
from packing import PackedModel


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
    # Benchmarks and tests only: the model replaced by the emulated accelerator (standin_accelerator.py),
    # this many ms per batch. A hidden flag with no environment variable: nothing deployed can set it.
    standin_accelerator_ms: float | None = None

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
        parser.add_argument(flag, dest=name, default=None, help=f"env {env} (default {DEFAULT_HELP.get(name, default)})")
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
        raise SettingsError(f"{_label('model_name')}: must be a non-empty name without '/' or spaces, got {model_name!r}")
    workers = _int(args, "workers", environ, 1, 64)
    max_batch_size = _int(args, "max_batch_size", environ, 1, 1024)
    max_queue_delay_ms = _float(args, "max_queue_delay_ms", environ, 0, 1000)
    raw_models = _raw(args, "models", environ)
    models: tuple[PackedModel, ...] = ()
    if raw_models is not None and raw_models.strip():
        for name in ("model_name", "port"):
            if getattr(args, name) is not None or environ.get(ENVIRONMENT[name][0]):
                raise SettingsError(f"{_label(name)}: not allowed with {_label('models')}, which names each model and its port")
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
        standin_accelerator_ms=_standin(getattr(args, "standin_accelerator_ms", None)),
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
    )
