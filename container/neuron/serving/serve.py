"""Serve a compiled artifact over the KServe v2 / Triton JSON protocol and SageMaker's routes.

    python serve.py --model-dir ARTIFACT_DIR [--port 8080] [--workers 1] [--max-batch-size 16] ...

Every flag falls back to its environment variable (PORT, MODEL_NAME, SERVER_WORKERS,
SERVER_MAX_BATCH_SIZE, SERVER_MAX_QUEUE_DELAY_MS, NEURON_RT_VISIBLE_CORES, ...; see --help).
With SERVER_MODELS (--models) one container serves several models, each compiled into
<model-dir>/<name>/ and served on its own port, cores and workers (packing.py).
SERVER_SLO_MS (or SERVER_MODELS' slo_ms) turns admission on: what could not be answered within the SLO gets
503 with Retry-After at once (SERVER_ADMISSION=off queues everything). A worker that dies is restarted in
place, up to SERVER_MAX_RESTARTS in SERVER_RESTART_WINDOW_S (supervisor.py).
Bad flags or a bad artifact: one line on stderr and exit 2, before anything starts.
"""

from __future__ import annotations

import argparse
import os
import sys

# The serving part reads what the build part wrote through its modules (artifact, backends, compile
# settings): ../build beside this folder, in the image as in the repository. Workers start as this script.
BUILD_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build")
if BUILD_DIR not in sys.path:
    sys.path.insert(1, BUILD_DIR)

import jsonlog  # noqa: E402 - after build/ is on sys.path, as all below
from artifact import ArtifactError, read_metadata  # noqa: E402 - from build/
from compile_settings import SettingsError  # noqa: E402 - from build/
from packing import preflight  # noqa: E402 - imports build/'s artifact
from readiness import PackedReadiness  # noqa: E402 - after build/ is on sys.path
from server_settings import ServerSettings, add_arguments, for_model, from_args  # noqa: E402 - imports build/


class UsageError(Exception):
    pass


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise UsageError(message)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = OneLineParser(prog="serve.py", description=__doc__.splitlines()[0])
    add_arguments(parser)
    # Internal: set by the supervisor when it starts a worker on the inherited socket.
    parser.add_argument("--worker-fd", type=int, default=None, help=argparse.SUPPRESS)
    # Internal, several workers: the connection-count table and wake pipe they share (connection_share.py).
    parser.add_argument("--worker-share", default=None, help=argparse.SUPPRESS)
    # Internal, packed models only: the worker's model and the supervisor's ready-marker directory.
    parser.add_argument("--worker-model", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--ready-dir", default=None, help=argparse.SUPPRESS)
    try:
        args = parser.parse_args(argv)
        settings = from_args(args)
        if settings.models:
            return serve_packed(settings, args, argv)
        metadata = read_metadata(settings.model_dir)
    except (UsageError, SettingsError, ArtifactError) as exc:
        print(f"serve.py: error: {exc}", file=sys.stderr)
        return 2
    jsonlog.configure(settings.log_level)
    if args.worker_fd is not None:
        import worker

        return worker.run(settings, metadata, args.worker_fd, share=worker_share(args))
    import supervisor

    try:
        return supervisor.run(settings, metadata, argv)
    except SettingsError as exc:  # e.g. cores that do not split over the workers
        print(f"serve.py: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. the port is taken
        print(
            f"serve.py: error: --port: cannot listen on {settings.host}:{settings.port}: {exc.strerror}",
            file=sys.stderr,
        )
        return 2


def worker_share(args: argparse.Namespace):
    if args.worker_share is None:
        return None
    from connection_share import ConnectionShare

    return ConnectionShare(
        [int(fd) for fd in args.worker_share.split(",")], int(os.environ.get("SERVER_WORKER_INDEX", "0"))
    )


def serve_packed(settings: ServerSettings, args: argparse.Namespace, argv: list[str]) -> int:
    """Several models: the supervisor checks every artifact, core range and port before starting
    any worker; each worker serves its own model (--worker-model) on its own port."""
    if args.worker_fd is not None:
        import worker

        model = settings.packed_model(args.worker_model)
        own = for_model(settings, model)
        metadata = read_metadata(own.model_dir)
        packed = PackedReadiness(
            args.ready_dir, {m.name: m.port for m in settings.models}, {m.name: m.workers for m in settings.models}
        )
        jsonlog.configure(settings.log_level)
        return worker.run(own, metadata, args.worker_fd, packed, share=worker_share(args))
    plans = preflight(settings.models, settings.model_dir, settings.visible_cores)
    jsonlog.configure(settings.log_level)
    import supervisor

    return supervisor.run_packed(settings, plans, argv)


if __name__ == "__main__":
    sys.exit(main())
