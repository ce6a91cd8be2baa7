"""Off-hours windows, a model's or a fleet's, against what its kind can do at zero and its planned max."""

from __future__ import annotations

from collections.abc import Iterator

from inferstack.capacity import schedule
from inferstack.config.checks.common import Finding
from inferstack.config.yaml_source import KeyPath
from inferstack.schema import kinds
from inferstack.schema.kinds import Model
from inferstack.schema.off_hours import OffHours


def check_off_hours(model: Model) -> Iterator[Finding]:
    for env, override in model.environments.items():
        planned_max = model.capacity_for(env).max
        for index, window in enumerate(override.off_hours):
            key = ("environments", env, "off_hours", index)
            yield from check_window(window, key, planned_max, zero=kinds.model_kind(model).at_zero, owner=model.kind)


def check_window(
    window: OffHours, key: KeyPath, planned_max: int, *, zero: kinds.AtZero, owner: str
) -> Iterator[Finding]:
    """`zero`: the kind's at_zero (inferstack.schema.kinds): None where nothing can scale to zero (a dedicated
    real-time endpoint); "closed" where a window at min 0 must also be max 0 (ECS scales on requests per
    target, which no request can raise from zero tasks); "on-demand" where a request scales out from zero
    (inference components)."""
    try:
        schedule.open_share(window.start, window.end, window.time_zone)
        readable = True
    except schedule.CronError as exc:
        readable = False
        yield key + ("start",), f"cannot evaluate the schedule: {exc}"
    if zero == "closed" and readable:  # ECS: the Auto Scaling group follows the window, in its Unix cron
        for field in ("start", "end"):
            expression = getattr(window, field)
            try:
                schedule.unix_recurrence(expression)  # what the stack renders; a readable cron fails only on its year
            except schedule.CronError:
                year = expression.removesuffix(")").split()[-1]
                yield (
                    key + (field,),
                    (
                        f"year {year!r}: the Auto Scaling group's scheduled actions take a 5-field Unix cron, which "
                        f"has no year (https://docs.aws.amazon.com/autoscaling/ec2/APIReference/"
                        f"API_ScheduledUpdateGroupActionRequest.html); use * for every year"
                    ),
                )
    if window.max > planned_max:
        yield (
            key + ("max",),
            (f"off-hours max {window.max} exceeds the planned max {planned_max}; off-hours only scale down"),
        )
    if window.min == 0 and zero is None:
        yield (
            key + ("min",),
            (
                f"a dedicated real-time SageMaker endpoint keeps at least 1 instance; to scale {owner} to zero, "
                f"carry it on a fleet of kind sagemaker-inference-components (environments.yaml fleets:)"
            ),
        )
    elif window.max == 0 and zero is None:
        yield key + ("max",), "a dedicated real-time SageMaker endpoint keeps at least 1 instance"
    elif window.min == 0 and window.max > 0 and zero == "closed":
        yield (
            key + ("max",),
            (
                "an ECS service at 0 tasks has no target to count requests for, so nothing scales it out again "
                "before the window ends: a window at min 0 must be closed (max 0)"
            ),
        )
