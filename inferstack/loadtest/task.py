"""The load test container's entrypoint: `python -m inferstack.loadtest.task master|worker` (one Fargate
task per role). Bad settings end in one line on stderr and exit 2 before Locust starts.

master: runs the Locust master for the spec in INFERSTACK_LOADTEST_SPEC, waits for INFERSTACK_LOADTEST_WORKERS
workers on port LOCUST_MASTER_PORT (default 5557) of INFERSTACK_LOADTEST_BIND_HOST (--bind-host; default
127.0.0.1, the container sets 0.0.0.0 so workers in other tasks reach it), then stores report.txt, latency.png
and result.json (last: a reader that finds it finds the others) under INFERSTACK_LOADTEST_RESULTS
(s3://bucket/prefix/; encrypted by the bucket's default key). Exit 0 once the result is stored, whatever its
verdict; 1 when the run or the upload failed.

worker: becomes `locust --worker` connecting to LOCUST_MASTER_HOST:LOCUST_MASTER_PORT with the same spec.
Exit: Locust's."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import signal
import sys
import tempfile
from pathlib import Path

from inferstack.loadtest import runner
from inferstack.loadtest.results import PICTURE_FILE, REPORT_FILE, RESULT_FILE
from inferstack.loadtest.spec import LoadTestSpec, SpecError

WORKERS_ENV = "INFERSTACK_LOADTEST_WORKERS"
RESULTS_ENV = "INFERSTACK_LOADTEST_RESULTS"
BIND_HOST_ENV = "INFERSTACK_LOADTEST_BIND_HOST"
WORKER_WAIT_ENV = "INFERSTACK_LOADTEST_WORKER_WAIT_S"
MASTER_HOST_ENV = "LOCUST_MASTER_HOST"
MASTER_PORT_ENV = "LOCUST_MASTER_PORT"
DEFAULT_PORT = 5557  # Locust's
# Fargate starts the worker tasks beside the master's: pulling the image and starting takes a minute or two.
DEFAULT_WORKER_WAIT_S = 300.0
S3_URL = re.compile(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/((?:[^/]+/)*)$")
CONTENT_TYPES = {REPORT_FILE: "text/plain; charset=utf-8", PICTURE_FILE: "image/png", RESULT_FILE: "application/json"}
EXIT_FAILED, EXIT_USAGE = 1, 2


# Not inferstack.command_line.UsageError: the load-test image holds only the modules its entrypoint imports.
class TaskUsageError(Exception):
    """A missing or bad setting: one line naming it, exit 2."""


def _spec(environ: dict[str, str]) -> LoadTestSpec:
    text = environ.get(runner.SPEC_ENV)
    if not text:
        raise TaskUsageError(f"{runner.SPEC_ENV}: not set (the load test spec's JSON)")
    try:
        return LoadTestSpec.from_json(text)
    except SpecError as exc:
        raise TaskUsageError(f"{runner.SPEC_ENV}: {exc}") from None


def _number(environ: dict[str, str], name: str, default: float | None, *, whole: bool, low: float, high: float):
    raw = environ.get(name)
    if raw is None or raw == "":
        if default is None:
            raise TaskUsageError(f"{name}: not set")
        return default
    try:
        value = int(raw) if whole else float(raw)
    except ValueError:
        raise TaskUsageError(f"{name}: {raw!r} is not a {'whole ' if whole else ''}number") from None
    if not low <= value <= high:
        raise TaskUsageError(f"{name}: {value:g} is not within {low:g}..{high:g}")
    return value


def results_location(value: str | None) -> tuple[str, str]:
    """(bucket, key prefix) of an s3://bucket/prefix/ URL."""
    match = S3_URL.fullmatch(value or "")
    if match is None:
        raise TaskUsageError(f"{RESULTS_ENV}: {value!r} is not s3://bucket/prefix/ (a bucket and a prefix ending in /)")
    return match.group(1), match.group(2)


def upload(s3, bucket: str, prefix: str, directory: Path, result_text: str) -> None:
    """report.txt and latency.png, then result.json (with its own location in it)."""
    for name in (REPORT_FILE, PICTURE_FILE):
        s3.put_object(
            Bucket=bucket, Key=prefix + name, Body=(directory / name).read_bytes(), ContentType=CONTENT_TYPES[name]
        )
    s3.put_object(
        Bucket=bucket, Key=prefix + RESULT_FILE, Body=result_text.encode(), ContentType=CONTENT_TYPES[RESULT_FILE]
    )


def master(args: argparse.Namespace, environ: dict[str, str]) -> int:
    spec = _spec(environ)
    workers = _number(environ, WORKERS_ENV, None, whole=True, low=1, high=runner.MAX_WORKERS)
    port = _number(environ, MASTER_PORT_ENV, DEFAULT_PORT, whole=True, low=1, high=65535)
    wait_s = _number(environ, WORKER_WAIT_ENV, DEFAULT_WORKER_WAIT_S, whole=False, low=1, high=3600)
    bucket, prefix = results_location(environ.get(RESULTS_ENV))
    bind_host = args.bind_host or environ.get(BIND_HOST_ENV) or runner.LOOPBACK
    import boto3  # only once the settings hold

    s3 = boto3.client("s3")
    with tempfile.TemporaryDirectory(prefix="inferstack-loadtest-") as scratch:
        out, logs = Path(scratch) / "out", Path(scratch) / "logs"
        out.mkdir()
        logs.mkdir()
        try:
            result = runner.run_processes(
                spec,
                out,
                workers=workers,
                log_dir=logs,
                bind_host=bind_host,
                port=port,
                start_workers=False,
                worker_wait_s=wait_s,
                timeout=runner.default_timeout(spec, workers) + wait_s,
            )
        except runner.LoadTestError as exc:
            print(f"loadtest master: {' '.join(str(exc).split())}", file=sys.stderr)
            return EXIT_FAILED
        location = f"s3://{bucket}/{prefix}{RESULT_FILE}"
        stored = dataclasses.replace(result, results_location=location)
        try:
            upload(s3, bucket, prefix, out, stored.to_json())
        except Exception as exc:  # botocore's errors, and whatever else stops the upload: one line
            print(
                f"loadtest master: cannot store the result under s3://{bucket}/{prefix}: {' '.join(str(exc).split())}",
                file=sys.stderr,
            )
            return EXIT_FAILED
        print((out / REPORT_FILE).read_text(), end="")
    print(f"stored {location} (verdict {stored.verdict})")
    return 0


def worker(args: argparse.Namespace, environ: dict[str, str]) -> int:
    spec = _spec(environ)
    host = environ.get(MASTER_HOST_ENV)
    if not host:
        raise TaskUsageError(f"{MASTER_HOST_ENV}: not set (the master task's address)")
    port = _number(environ, MASTER_PORT_ENV, DEFAULT_PORT, whole=True, low=1, high=65535)
    command = runner.locust_args("worker", port=port, host=host)
    # Locust replaces this process: ECS's SIGTERM reaches it directly.
    os.execve(command[0], command, runner.locust_environment(spec))
    return EXIT_FAILED  # not reached


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferstack.loadtest.task", description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=("master", "worker"))
    parser.add_argument(
        "--bind-host", help=f"master: the address workers connect to (env {BIND_HOST_ENV}; default {runner.LOOPBACK})"
    )
    args = parser.parse_args(argv)
    environ = dict(os.environ if environ is None else environ)
    # ECS stops a task with SIGTERM: end as an exit, so the Locust processes are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return (master if args.role == "master" else worker)(args, environ)
    except TaskUsageError as exc:
        print(f"loadtest {args.role}: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
