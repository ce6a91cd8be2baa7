"""How many tasks run, and with them how many instances: target tracking per model on its requests per task
(read over both target groups while a rollout may have moved the tasks) and on its requests in the server, and
the off-hours windows that scale the service and its Auto Scaling group down and back."""

from __future__ import annotations

from collections.abc import Callable

import aws_cdk as cdk
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_ecs as ecs
from constructs import Construct

from inferstack.capacity import schedule
from inferstack.constructs import cloudwatch_l1 as cwl1
from inferstack.constructs.live_values import LiveValues
from inferstack.constructs.neuron_service.context import ServiceContext
from inferstack.constructs.neuron_service.metrics import METRICS_INTERVAL_SECONDS, Metrics, model_dimensions
from inferstack.constructs.neuron_service.routing import Routes
from inferstack.constructs.neuron_service.served import ServedModel
from inferstack.constructs.scale_in_release import ScaleInProtectionRelease
from inferstack.neuron import metrics as serving_metrics


def add_scaling(
    context: ServiceContext, ecs_service: ecs.Ec2Service, routes: Routes, metrics: Metrics
) -> ecs.ScalableTaskCount:
    """Returns the service's scalable task count, which the off-hours windows schedule."""
    scalable_task_count = ecs_service.auto_scale_task_count(
        min_capacity=context.capacity.min_capacity, max_capacity=context.capacity.max_capacity
    )
    # One task per instance, so the planned per-instance target is the per-task target. Per model two
    # policies: its requests per task (the load balancer's count) and its requests in the server at once
    # (the app's InFlight). Application Auto Scaling scales out when any policy asks and in only when all
    # agree (target-tracking-scaling-policy-overview, "Multiple scaling policies").
    for served in context.served:
        scaling = served.model.scaling
        suffix = f"-{served.name}" if context.packed else ""
        scale_out = cdk.Duration.seconds(scaling.scale_out_cooldown_seconds)
        scale_in = cdk.Duration.seconds(scaling.scale_in_cooldown_seconds)
        if context.rollout.shifts_traffic:
            _scale_on_requests_of_both_target_groups(scalable_task_count, metrics, f"RequestsPerTask{suffix}", served)
        else:
            scalable_task_count.scale_on_request_count(
                f"RequestsPerTask{suffix}",
                requests_per_target=served.requests_per_task_per_minute,
                target_group=routes.target_groups[served.name],
                scale_out_cooldown=scale_out,
                scale_in_cooldown=scale_in,
            )
        # Concurrency falls as tasks are added, as target tracking needs. Average over the model's workers
        # (each emits its own InFlight under the model's dimensions) is per worker: the planner's per-task
        # target divided by the workers of a task.
        scalable_task_count.scale_to_track_custom_metric(
            f"InFlightPerTask{suffix}",
            metric=cw.Metric(
                namespace=serving_metrics.NAMESPACE,
                metric_name=serving_metrics.IN_FLIGHT,
                dimensions_map=model_dimensions(context, served),
                statistic="Average",
                period=cdk.Duration.seconds(METRICS_INTERVAL_SECONDS),
            ),
            target_value=served.in_flight_per_worker,
            scale_out_cooldown=scale_out,
            scale_in_cooldown=scale_in,
        )
    return scalable_task_count


def _scalable_target(scalable_task_count: ecs.ScalableTaskCount) -> appscaling.ScalableTarget:
    target = scalable_task_count.node.find_child("Target")
    assert isinstance(target, appscaling.ScalableTarget)
    return target


def _scale_on_requests_of_both_target_groups(
    scalable_task_count: ecs.ScalableTaskCount, metrics: Metrics, policy_id: str, served: ServedModel
) -> None:
    """ALBRequestCountPerTarget follows one target group, and a traffic-shifting deployment leaves the tasks
    in the other one every second time: the policy would read zero and scale in. The sum of both groups'
    RequestCountPerTarget is the requests per task whichever holds them, and during a shift too (each group
    holds the full task count). Metric math needs the L1 (CDK's target tracking renders one metric); it
    takes the construct path and name the L2 policy had, so a change of strategy updates it in place."""
    scalable_target = _scalable_target(scalable_task_count)
    scope = Construct(scalable_target, policy_id)
    per_target = metrics.models[served.name]["requests_per_task"]
    assert isinstance(per_target, cwl1.MathExpression)
    queries = [
        appscaling.CfnScalingPolicy.TargetTrackingMetricDataQueryProperty(
            id=query_id,
            return_data=False,
            metric_stat=appscaling.CfnScalingPolicy.TargetTrackingMetricStatProperty(
                stat=metric.statistic,
                metric=appscaling.CfnScalingPolicy.TargetTrackingMetricProperty(
                    namespace=metric.namespace,
                    metric_name=metric.metric_name,
                    dimensions=[
                        appscaling.CfnScalingPolicy.TargetTrackingMetricDimensionProperty(name=k, value=v)
                        for k, v in sorted(metric.dimensions.items())
                    ],
                ),
            ),
        )
        for query_id, metric in per_target.using.items()
    ]
    queries.append(
        appscaling.CfnScalingPolicy.TargetTrackingMetricDataQueryProperty(
            id="requests_per_task", expression=per_target.expression, label=per_target.label, return_data=True
        )
    )
    scaling = served.model.scaling
    appscaling.CfnScalingPolicy(
        scope,
        "Resource",
        policy_name=cdk.Names.unique_id(scope),
        policy_type="TargetTrackingScaling",
        scaling_target_id=scalable_target.scalable_target_id,
        target_tracking_scaling_policy_configuration=(
            appscaling.CfnScalingPolicy.TargetTrackingScalingPolicyConfigurationProperty(
                target_value=served.requests_per_task_per_minute,
                scale_out_cooldown=scaling.scale_out_cooldown_seconds,
                scale_in_cooldown=scaling.scale_in_cooldown_seconds,
                customized_metric_specification=appscaling.CfnScalingPolicy.CustomizedMetricSpecificationProperty(
                    metrics=queries
                ),
            )
        ),
    )


def add_off_hours(
    context: ServiceContext,
    scalable_task_count: ecs.ScalableTaskCount,
    auto_scaling_group: autoscaling.AutoScalingGroup,
    scale_in_release: ScaleInProtectionRelease,
    live_values: Callable[[], LiveValues],
) -> None:
    """Each window scales the service to its range at `start` (its zone) and back to the planned range at
    `end`; the Auto Scaling group's minimum follows, so ECS managed scaling can empty the group (it never
    changes a group's minimum or maximum itself, and scales out only while the maximum is above zero:
    cluster-auto-scaling) and the planned instances return with the tasks. The group's maximum is left
    alone. With managed termination protection ECS releases an instance's scale-in protection once its
    tasks have stopped (managed-termination-protection), so an emptied service lets the group drain.
    `live_values`: the service's reader of live values, made on first use."""
    planned = context.capacity
    for index, window in enumerate(context.off_hours, start=1):
        zone = cdk.TimeZone.of(window.time_zone)
        scalable_task_count.scale_on_schedule(
            f"OffHours{index}Start",
            schedule=appscaling.Schedule.expression(window.start),
            min_capacity=window.min,
            max_capacity=window.max,
            time_zone=zone,
        )
        scalable_task_count.scale_on_schedule(
            f"OffHours{index}End",
            schedule=appscaling.Schedule.expression(window.end),
            min_capacity=planned.min_capacity,
            max_capacity=planned.max_capacity,
            time_zone=zone,
        )
        for suffix, cron, minimum in (("Start", window.start, window.min), ("End", window.end, planned.min_capacity)):
            recurrence = autoscaling.Schedule.expression(schedule.unix_recurrence(cron))
            action = auto_scaling_group.scale_on_schedule(
                f"OffHours{index}{suffix}", schedule=recurrence, min_capacity=minimum, time_zone=window.time_zone
            )
            # Deleted before the scale-in release runs (deletion follows dependencies backwards), so no
            # window's end can raise the minimum again while the stack empties the group.
            action.node.add_dependency(scale_in_release.resource)
    # A deploy inside a window keeps the window's range instead of registering the planned one (which would
    # start the tasks until the next window starts).
    target = _scalable_target(scalable_task_count)
    if context.off_hours:
        live_values().window_range(
            "TaskRange",
            target=target,
            planned=(planned.min_capacity, planned.max_capacity),
            windows=[(window.min, window.max) for window in context.off_hours],
        )
