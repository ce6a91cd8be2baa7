"""A load test run inside an environment: Locust's master and workers as Fargate tasks of the environment's
LoadTest stack, in its private subnets with no public IP; the master writes the results to the stack's bucket,
and this module reads them back. Every task it starts is stopped again when the run fails or runs over.

    workers = workers_for(max(step.rate for step in spec.steps), load_test.per_worker_rps, load_test.max_workers)
    result = run_in_environment(session, "staging", environment, spec, workers=workers, release=..., run_id=...,
                                timeout=run_timeout(spec, workers))
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import boto3

from inferstack.aws import aws_sessions, stack_outputs
from inferstack.config import Environment
from inferstack.loadtest import results, runner, task
from inferstack.loadtest.results import RunResult
from inferstack.loadtest.runner import SPEC_ENV
from inferstack.loadtest.spec import LoadTestSpec
from inferstack.loadtest.task import MASTER_HOST_ENV, RESULTS_ENV, WORKERS_ENV

# Locust's own distributed mode needs a master and at least one worker; two keep a run's figures from resting on
# one generator, and let a saturated one show against the other.
MIN_WORKERS = 2
RUN_TASK_BATCH = 10  # RunTask starts at most 10 tasks per call
STARTED_BY = "inferstack-loadtest"  # RunTask's startedBy (36 characters at most): lists a run's tasks
# RunTask's overrides are limited to 8 KiB of JSON in all; a spec is a few hundred bytes plus its request bodies.
MAX_OVERRIDES_BYTES = 8192
POLL_S = 5.0
STOP_REASON = "inferstack loadtest: {why}"
# Fargate pulls the image and starts the master (a minute or two), then the workers while the master waits for
# them (task.DEFAULT_WORKER_WAIT_S at most), then the run, then the upload.
FARGATE_START_S = 180.0
UPLOAD_S = 60.0


class FargateRunError(Exception):
    """The run could not start, failed, or ran over; one line. Every task it started has been stopped."""


def workers_for(rate: float, per_worker_rps: float, max_workers: int) -> int:
    """Workers a run at `rate` requests per second needs: ceil(rate / per_worker_rps), at least MIN_WORKERS.
    FargateRunError when that is more than `max_workers` (the run would measure saturated generators)."""
    if not (math.isfinite(rate) and rate > 0) or not (math.isfinite(per_worker_rps) and per_worker_rps > 0):
        raise FargateRunError(f"rate and per_worker_rps must be > 0 (got {rate}, {per_worker_rps})")
    needed = max(MIN_WORKERS, math.ceil(rate / per_worker_rps))
    if needed > max_workers:
        raise FargateRunError(
            f"{rate:g} req/s needs {needed} workers at {per_worker_rps:g} req/s each, more than "
            f"load_test.max_workers ({max_workers}); raise it or test a lower rate"
        )
    return needed


def run_timeout(spec: LoadTestSpec, workers: int) -> float:
    """A bound for a whole run on Fargate: the master's start, its wait for the workers, the run as the master
    bounds it (runner.default_timeout), the upload."""
    return FARGATE_START_S + task.DEFAULT_WORKER_WAIT_S + runner.default_timeout(spec, workers) + UPLOAD_S


@dataclass(frozen=True)
class LoadTestStack:
    """What a run starts from: the LoadTest stack's outputs and the foundation's private subnets."""

    results_bucket: str
    cluster: str
    master_task_definition: str
    worker_task_definition: str
    master_container: str
    worker_container: str
    master_security_group: str
    worker_security_group: str
    subnets: tuple[str, ...]


def read_stack(cloudformation, env_name: str) -> LoadTestStack:
    """stack_outputs.StackNotFound (one line) when the environment has no deployed LoadTest stack."""
    values = stack_outputs.outputs(cloudformation, env_name, stack_outputs.LOAD_TEST)
    found = dict(
        zip(
            stack_outputs.LOAD_TEST_OUTPUTS,
            stack_outputs.require(values, stack_outputs.LOAD_TEST_OUTPUTS, env_name, stack_outputs.LOAD_TEST),
            strict=True,
        )
    )
    foundation = stack_outputs.outputs(cloudformation, env_name, stack_outputs.FOUNDATION)
    (subnets,) = stack_outputs.require(foundation, (stack_outputs.PRIVATE_SUBNETS,), env_name, stack_outputs.FOUNDATION)
    return LoadTestStack(
        results_bucket=found[stack_outputs.RESULTS_BUCKET],
        cluster=found[stack_outputs.CLUSTER],
        master_task_definition=found[stack_outputs.MASTER_TASK_DEFINITION],
        worker_task_definition=found[stack_outputs.WORKER_TASK_DEFINITION],
        master_container=found[stack_outputs.MASTER_CONTAINER],
        worker_container=found[stack_outputs.WORKER_CONTAINER],
        master_security_group=found[stack_outputs.MASTER_SECURITY_GROUP],
        worker_security_group=found[stack_outputs.WORKER_SECURITY_GROUP],
        subnets=tuple(s for s in subnets.split(",") if s),
    )


def results_location(bucket: str, release: str, model: str, run_id: str) -> str:
    """s3://<bucket>/<release>/<model>/<run id>/: where the master writes (results.results_key's layout)."""
    return f"s3://{bucket}/{results.results_prefix(release, model)}{run_id}/"


class _Run:
    """One run's tasks, so that every one of them is stopped when the run ends badly."""

    def __init__(
        self,
        ecs,
        stack: LoadTestStack,
        *,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        deadline: float,
        poll_s: float,
        log: Callable[[str], None],
    ) -> None:
        self.ecs, self.stack, self.clock, self.sleep = ecs, stack, clock, sleep
        self.deadline, self.poll_s, self.log = deadline, poll_s, log
        self.started: list[str] = []

    def run_tasks(
        self, definition: str, container: str, security_group: str, count: int, environment: dict[str, str], run_id: str
    ) -> list[str]:
        overrides = {
            "containerOverrides": [
                {"name": container, "environment": [{"name": k, "value": v} for k, v in sorted(environment.items())]}
            ]
        }
        size = len(json.dumps(overrides).encode())
        if size > MAX_OVERRIDES_BYTES:
            raise FargateRunError(
                f"the run's settings take {size} bytes, more than RunTask's {MAX_OVERRIDES_BYTES}-byte "
                f"limit on overrides (fewer or smaller --payload requests fit)"
            )
        arns: list[str] = []
        while len(arns) < count:
            batch = min(RUN_TASK_BATCH, count - len(arns))
            try:
                answer = self.ecs.run_task(
                    cluster=self.stack.cluster,
                    taskDefinition=definition,
                    launchType="FARGATE",
                    count=batch,
                    networkConfiguration={
                        "awsvpcConfiguration": {
                            "subnets": list(self.stack.subnets),
                            "securityGroups": [security_group],
                            "assignPublicIp": "DISABLED",
                        }
                    },
                    overrides=overrides,
                    startedBy=STARTED_BY,
                    tags=[{"key": "inferstack:loadtest-run", "value": run_id}],
                )
            except aws_sessions.AWS_ERRORS as exc:
                raise FargateRunError(f"RunTask {definition}: {' '.join(str(exc).split())}") from None
            new = [t["taskArn"] for t in answer.get("tasks") or []]
            self.started += new
            arns += new
            if answer.get("failures") or len(new) != batch:
                reasons = (
                    "; ".join(f"{f.get('arn', '')} {f.get('reason', '')}".strip() for f in answer.get("failures") or [])
                    or f"{len(new)} of {batch} started"
                )
                raise FargateRunError(f"RunTask {definition}: {reasons}")
        return arns

    def describe(self, arn: str) -> dict:
        try:
            (task,) = self.ecs.describe_tasks(cluster=self.stack.cluster, tasks=[arn])["tasks"]
        except (ValueError, *aws_sessions.AWS_ERRORS) as exc:
            raise FargateRunError(f"DescribeTasks {arn}: {' '.join(str(exc).split())}") from None
        return task

    def wait_for(self, arn: str, statuses: tuple[str, ...], what: str) -> dict:
        """The task once its lastStatus is one of `statuses` (or STOPPED); FargateRunError past the deadline."""
        while True:
            task = self.describe(arn)
            if task.get("lastStatus") in statuses or task.get("lastStatus") == "STOPPED":
                return task
            if self.clock() >= self.deadline:
                raise FargateRunError(
                    f"timed out waiting for {what} ({arn.rsplit('/', 1)[-1]}: {task.get('lastStatus')})"
                )
            self.sleep(min(self.poll_s, max(0.0, self.deadline - self.clock())))

    def stop_all(self, why: str) -> None:
        """StopTask every task this run started (ECS ignores it for one already stopped)."""
        for arn in self.started:
            try:
                self.ecs.stop_task(cluster=self.stack.cluster, task=arn, reason=STOP_REASON.format(why=why)[:255])
            except aws_sessions.AWS_ERRORS as exc:
                self.log(f"could not stop {arn}: {' '.join(str(exc).split())}")


def private_ip(task: dict) -> str:
    """The task's address on its ENI (awsvpc): where its workers reach the master."""
    for attachment in task.get("attachments") or []:
        if attachment.get("type") == "ElasticNetworkInterface":
            for detail in attachment.get("details") or []:
                if detail.get("name") == "privateIPv4Address" and detail.get("value"):
                    return detail["value"]
    raise FargateRunError(f"task {task.get('taskArn')} has no private IPv4 address on its network interface")


def _stopped_why(task: dict, container: str) -> tuple[int | None, str]:
    (found,) = [c for c in task.get("containers") or [{}] if c.get("name") == container] or [{}]
    reason = "; ".join(r for r in (task.get("stoppedReason"), found.get("reason")) if r)
    return found.get("exitCode"), reason


def run_in_environment(
    session: boto3.Session,
    env_name: str,
    environment: Environment,
    spec: LoadTestSpec,
    *,
    workers: int,
    release: str,
    run_id: str,
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    poll_s: float = POLL_S,
    log: Callable[[str], None] = lambda _line: None,
) -> RunResult:
    """Run `spec` on `workers` Fargate workers of `env_name`'s LoadTest stack and return the master's result,
    with `results_location` set to where it is stored. `timeout` bounds the whole run (start-up, the steps,
    the upload); on it, or on any failure, every task started is stopped and FargateRunError raised."""
    settings = environment.load_test
    if settings is None:
        raise FargateRunError(f"{env_name} has no load_test: in environments.yaml, so no generators to run on")
    if not MIN_WORKERS <= workers <= settings.max_workers:
        raise FargateRunError(
            f"workers: {workers} is outside {MIN_WORKERS}..{settings.max_workers} (load_test.max_workers)"
        )
    try:
        stack = read_stack(session.client("cloudformation"), env_name)
    except stack_outputs.StackNotFound as exc:
        raise FargateRunError(str(exc)) from None
    except aws_sessions.AWS_ERRORS as exc:
        raise FargateRunError(f"{env_name}: cannot read its stacks: {' '.join(str(exc).split())}") from None
    location = results_location(stack.results_bucket, release, spec.model, run_id)
    run = _Run(
        session.client("ecs"), stack, clock=clock, sleep=sleep, deadline=clock() + timeout, poll_s=poll_s, log=log
    )
    try:
        (master,) = run.run_tasks(
            stack.master_task_definition,
            stack.master_container,
            stack.master_security_group,
            1,
            {SPEC_ENV: spec.to_json(), WORKERS_ENV: str(workers), RESULTS_ENV: location},
            run_id,
        )
        log(f"master {master.rsplit('/', 1)[-1]} started; waiting for it to run")
        task = run.wait_for(master, ("RUNNING",), "the master to start")
        if task.get("lastStatus") == "STOPPED":
            code, reason = _stopped_why(task, stack.master_container)
            raise FargateRunError(f"the master stopped before it ran (exit code {code}): {reason or 'no reason given'}")
        host = private_ip(task)
        run.run_tasks(
            stack.worker_task_definition,
            stack.worker_container,
            stack.worker_security_group,
            workers,
            {SPEC_ENV: spec.to_json(), MASTER_HOST_ENV: host},
            run_id,
        )
        log(f"{workers} workers started, master at {host}; waiting for the run to finish")
        task = run.wait_for(master, ("STOPPED",), "the master to finish the run")
    except FargateRunError as exc:
        run.stop_all(str(exc))
        raise
    except BaseException:
        run.stop_all("interrupted")
        raise
    run.stop_all("the master finished")  # workers exit with their master; any left over goes now
    code, reason = _stopped_why(task, stack.master_container)
    if code != 0:
        raise FargateRunError(
            f"the master exited with code {code}: {reason or 'no reason given'}; its log is in "
            f"the LoadTest stack's log group"
        )
    return read_result(session.client("s3"), location)


def read_result(s3, location: str) -> RunResult:
    """The RunResult the master stored under `location` (s3://bucket/prefix/), with results_location set."""
    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    key = f"{prefix}{results.RESULT_FILE}"
    where = f"s3://{bucket}/{key}"
    try:
        text = s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode("utf-8")
    except aws_sessions.AWS_ERRORS as exc:
        raise FargateRunError(f"{where}: cannot read the run's result: {' '.join(str(exc).split())}") from None
    except UnicodeDecodeError:
        raise FargateRunError(f"{where}: not UTF-8 text") from None
    try:
        result = RunResult.from_json(text, where=where)
    except results.ResultError as exc:
        raise FargateRunError(str(exc)) from None
    return dataclasses.replace(result, results_location=where)
