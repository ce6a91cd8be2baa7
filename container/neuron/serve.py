"""Serve a compiled artifact over the KServe v2 / Triton JSON protocol and SageMaker's routes.

    python serve.py --model-dir ARTIFACT_DIR [--port 8080] [--workers 1] [--max-batch-size 16] ...

Every flag falls back to its environment variable (PORT, MODEL_NAME, SERVER_WORKERS,
SERVER_MAX_BATCH_SIZE, SERVER_MAX_QUEUE_DELAY_MS, NEURON_RT_VISIBLE_CORES, ...; see --help).
Bad flags or a bad artifact: one line on stderr and exit 2, before anything starts.
"""

from __future__ import annotations

import argparse
import sys

import jsonlog
from artifact import ArtifactError, read_metadata
from compile_settings import SettingsError
from server_settings import add_arguments, from_args


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
    try:
        args = parser.parse_args(argv)
        settings = from_args(args)
        metadata = read_metadata(settings.model_dir)
    except (UsageError, SettingsError, ArtifactError) as exc:
        print(f"serve.py: error: {exc}", file=sys.stderr)
        return 2
    jsonlog.configure(settings.log_level)
    if args.worker_fd is not None:
        import worker

        return worker.run(settings, metadata, args.worker_fd)
    import supervisor

    try:
        return supervisor.run(settings, metadata, argv)
    except SettingsError as exc:  # e.g. cores that do not split over the workers
        print(f"serve.py: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. the port is taken
        print(f"serve.py: error: --port: cannot listen on {settings.host}:{settings.port}: {exc.strerror}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
