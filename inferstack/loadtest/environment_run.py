"""One model's load test inside its environment: what it runs there (the image digest, which names the
release under test), where it answers from inside the VPC (the internal load balancer's URL, or its SageMaker
endpoint and component), the rate its plan gives the instances under test, and the Fargate run (fargate.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import boto3

from inferstack.aws import aws_sessions, ecr_images, stack_outputs
from inferstack.capacity import planning
from inferstack.config import Project
from inferstack.loadtest import fargate, report, results, shape
from inferstack.loadtest.results import RunResult
from inferstack.loadtest.spec import SpecError, Target
from inferstack.schema import kinds

# Fargate's start (image pull included) and the master's upload, beyond the steps themselves.
START_AND_UPLOAD_S = 600.0


class EnvironmentRunError(Exception):
    """The run could not be prepared, started or read back; one line."""


def target_in(cloudformation, env_name: str, environment, model, stack: str) -> Target:
    """Where `model` answers inside the environment, from its serving stack's outputs (as smoke finds it)."""
    values = stack_outputs.outputs(cloudformation, env_name, stack)
    if kinds.model_kind(model).hosting == "ecs":
        (base,) = stack_outputs.require(values, ("Url",), env_name, stack)
        path = (
            f"/v2/models/{model.name}"
            if stack == model.name
            else stack_outputs.model_path(values, env_name, stack, model.name)
        )
        return Target(kind="http", url=f"{base.rstrip('/')}{path}/infer")
    (endpoint,) = stack_outputs.require(values, (stack_outputs.ENDPOINT_NAME,), env_name, stack)
    return Target(
        kind="sagemaker",
        endpoint=endpoint,
        component=values.get(stack_outputs.INFERENCE_COMPONENT_NAME) or None,
        region=environment.region,
    )


def digest_in(session: boto3.Session, env_name: str, unit) -> str:
    """The image digest the unit (the model's own stack, or its neuron-cores fleet) runs in `env_name`."""
    reference = ecr_images.ImageRef.parse(ecr_images.running_image(session, env_name, unit))
    ecr = session.client("ecr", region_name=reference.region)
    return ecr_images.resolve(ecr, reference).digest


def run_model(
    session: boto3.Session,
    project: Project,
    env_name: str,
    model,
    *,
    instances: int | None,
    rate: float | None,
    hold: float | None,
    fractions: tuple[float, ...],
    timeout_s: float,
    bodies: tuple[dict, ...] | None = None,
    log: Callable[[str], None] = lambda _line: None,
    **fargate_options,
) -> RunResult:
    """`instances`: behind the target (default: the plan's minimum in `env_name`, what runs at rest); the rate
    defaults to what the plan gives them. `fargate_options`: passed to fargate.run_in_environment (clock, sleep,
    poll_s: tests)."""
    environment = project.environments[env_name]
    (unit,) = [u for u in project.image_units(env_name) if model.name in {m.name for m in u.models}]
    try:
        if instances is None:
            instances = max(1, planning.plan(model, env_name, environment).min_capacity)
        cloudformation = session.client("cloudformation")
        target = target_in(cloudformation, env_name, environment, model, unit.name)
        digest = digest_in(session, env_name, unit)
        spec = shape.spec_for(
            model,
            env_name,
            environment,
            target=target,
            instances=instances,
            rate=rate,
            hold=hold,
            fractions=fractions,
            release=digest,
            timeout_s=timeout_s,
            bodies=bodies,
            instance_type=model.capacity_for(env_name).instance_type,
        )
        settings = environment.load_test
        if settings is None:  # the command refuses such an environment first, as fargate.run_in_environment does
            raise fargate.FargateRunError(
                f"{env_name} has no load_test: in environments.yaml, so no generators to run on"
            )
        workers = fargate.workers_for(
            max(step.rate for step in spec.steps), settings.per_worker_rps, settings.max_workers
        )
        highest = max(step.rate for step in spec.steps)
        log(
            f"{model.name}: {digest} on {instances} {spec.instance_type} instance(s), {len(spec.steps)} steps through "
            f"{spec.judged_rate:g} req/s"
            + (f" (up to {highest:g})" if highest > spec.judged_rate else "")
            + f", {workers} workers"
        )
        return fargate.run_in_environment(
            session,
            env_name,
            environment,
            spec,
            workers=workers,
            release=digest,
            run_id=results.new_run_id(),
            timeout=spec.seconds + START_AND_UPLOAD_S,
            log=log,
            **fargate_options,
        )
    except (
        stack_outputs.StackNotFound,
        ecr_images.NotRunning,
        ecr_images.ImageError,
        SpecError,
        planning.PlanningError,
        fargate.FargateRunError,
    ) as exc:
        raise EnvironmentRunError(str(exc)) from None
    except aws_sessions.AWS_ERRORS as exc:
        raise EnvironmentRunError(f"AWS: {' '.join(str(exc).split())}") from None


def save(result: RunResult, directory: Path) -> None:
    """A local copy of a stored run: result.json, report.txt, latency.png."""
    directory.mkdir(parents=True, exist_ok=True)
    report.write(result, directory)
