"""What tells a person (and a deploy) that the service is unwell: per model its SLO, 5xx, readiness, Neuron
execution-error and shedding alarms, per task CPU, memory and capacity shortfall, and one dashboard. L1 resources
built from plain values (inferstack.constructs.cloudwatch_l1): the L2 API costs a jsii round trip per metric, widget and
call, which dominates synth at fleet scale. The template is the one the L2 wrote (same logical ids, properties
and dashboard JSON)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw
from constructs import Construct

from inferstack.constructs import cloudwatch_l1 as cwl1
from inferstack.constructs.neuron_service.context import ServiceContext
from inferstack.constructs.neuron_service.metrics import Metrics
from inferstack.constructs.neuron_service.served import ServedModel, health_check_grace_seconds, model_scope

# An Inferentia instance boots and joins the cluster in minutes; wanting more capacity than the group
# delivers for longer than this means launches fail (e.g. InsufficientInstanceCapacity) or max is reached.
CAPACITY_SHORTFALL_MINUTES = 15
# Shedding (admission's 503s) is short capacity, not failure: it is kept out of the 5xx rate and alarmed on by
# itself, notifying only (never a deployment alarm: a spike during a deploy must not roll it back). The
# scaling policies see the load being shed (the load balancer counts a refused request as one), so they should
# end it within the time it takes an instance to launch and warm, the capacity shortfall's window; shedding
# beyond that means scaling did not: the service at capacity.max, launches failing, or targets set too high.
SHEDDING_MINUTES = CAPACITY_SHORTFALL_MINUTES


def _label(context: ServiceContext, served: ServedModel) -> str:
    return f"{served.name} ({context.name})" if context.packed else served.name


def add_alarms(
    scope: Construct, context: ServiceContext, metrics: Metrics, alarm_topic_arn: str
) -> dict[str, cw.CfnAlarm]:
    """Per model: p99 above its SLO, 5xx rate (admission rejections excluded), targets failing readiness, Neuron
    execution errors, shedding (admission rejections above the model's error-rate limit: callers get 503s that
    often). Per task: CPU, memory, capacity shortfall (a fleet's at the strictest of its models' limits). One
    model keeps the alarm ids it had. Returns them by key: the alarm's id, under `<model>/` in a fleet."""
    s = metrics.service
    name = context.name
    # A new task fails the readiness check until its models are loaded and warm (the grace period):
    # look past that, or every deploy and scale-out would page.
    grace_minutes = math.ceil(health_check_grace_seconds(context.models) / 60)
    either = " in either target group" if context.rollout.shifts_traffic else ""
    per_model: dict[str, dict[str, tuple]] = {}
    for served in context.served:
        m, limits, label = metrics.models[served.name], served.model.alarms, _label(context, served)
        periods = limits.evaluation_minutes
        per_model[served.name] = {
            "LatencyAlarm": (
                m["p99"],
                served.slo_p99_ms / 1000,
                periods,
                f"{label}: p99 target response time above the {served.slo_p99_ms:g} ms SLO{either}",
            ),
            "ErrorRateAlarm": (
                m["error_rate"],
                limits.error_rate_percent,
                periods,
                f"{label}: target 5xx above {limits.error_rate_percent:g}% of requests{either}, "
                f"not counting admission rejections (503 shed for capacity)",
            ),
            "UnhealthyTargetsAlarm": (
                m["unhealthy"],
                0,
                grace_minutes + periods,
                f"{label}: targets failing {served.readiness_path} beyond the warm-up grace period",
            ),
            # neuron-monitor's failed, timed-out or erroneous executions: never expected on a healthy device.
            "NeuronExecutionErrorsAlarm": (
                metrics.emf[served.name]["execution_errors"],
                0,
                periods,
                f"{label}: Neuron runtime execution errors (neuron-monitor) in {periods} consecutive minutes",
            ),
            "SheddingAlarm": (
                m["shed_rate"],
                limits.error_rate_percent,
                SHEDDING_MINUTES,
                f"{label}: more than {limits.error_rate_percent:g}% of requests shed (503, "
                f"admission) for {SHEDDING_MINUTES} minutes: capacity short and scaling has not "
                f"caught up (at capacity.max, launches failing, or targets too high)",
            ),
        }
    cpu = min(m.alarms.cpu_percent for m in context.models)
    memory = min(m.alarms.memory_percent for m in context.models)
    periods = min(m.alarms.evaluation_minutes for m in context.models)
    task_level = {
        "CpuAlarm": (s["cpu"], cpu, periods, f"{name}: service CPU above {cpu:g}%"),
        "MemoryAlarm": (s["memory"], memory, periods, f"{name}: service memory above {memory:g}%"),
        "CapacityShortfallAlarm": (
            s["capacity_reservation"],
            100,
            CAPACITY_SHORTFALL_MINUTES,
            f"{name}: tasks waiting for {context.task.instance_type} capacity for "
            f"{CAPACITY_SHORTFALL_MINUTES} minutes (launch failures or the group at "
            f"its maximum)",
        ),
    }
    alarms: dict[str, cw.CfnAlarm] = {}

    def add(parent: Construct, key: str, alarm_id: str, spec: tuple) -> None:
        metric, threshold, evaluation, description = spec
        alarms[key] = cwl1.alarm(
            parent,
            alarm_id,
            metric=metric,
            threshold=threshold,
            evaluation_periods=evaluation,
            datapoints_to_alarm=evaluation,
            description=description,
            action_arn=alarm_topic_arn,
        )

    if not context.packed:
        (model_specs,) = per_model.values()
        specs = {
            **{k: model_specs[k] for k in ("LatencyAlarm", "ErrorRateAlarm")},
            **{k: task_level[k] for k in ("CpuAlarm", "MemoryAlarm")},
            "UnhealthyTargetsAlarm": model_specs["UnhealthyTargetsAlarm"],
            "CapacityShortfallAlarm": task_level["CapacityShortfallAlarm"],
            "NeuronExecutionErrorsAlarm": model_specs["NeuronExecutionErrorsAlarm"],
            "SheddingAlarm": model_specs["SheddingAlarm"],
        }
        for alarm_id, spec in specs.items():
            add(scope, alarm_id, alarm_id, spec)
        return alarms
    for served in context.served:
        for alarm_id, spec in per_model[served.name].items():
            add(model_scope(scope, served), f"{served.name}/{alarm_id}", alarm_id, spec)
    for alarm_id, spec in task_level.items():
        add(scope, alarm_id, alarm_id, spec)
    return alarms


def add_dashboard(
    scope: Construct, context: ServiceContext, metrics: Metrics, alarms: Mapping[str, cw.CfnAlarm]
) -> cw.CfnDashboard:
    """One dashboard: a dedicated model's rows, or a fleet's task row and two rows per model; `alarms`' states
    at the end."""
    s = metrics.service
    region = cdk.Aws.REGION

    def graph(
        title: str,
        *series: cwl1.AnyMetric,
        width: int,
        right: Sequence[cwl1.AnyMetric] = (),
        left_annotations: Sequence[cwl1.Annotation] = (),
    ) -> cwl1.Widget:
        return cwl1.graph(title, series, region=region, width=width, right=right, left_annotations=left_annotations)

    def serving_row(served: ServedModel, prefix: str) -> list[cwl1.Widget]:
        """What the model's workers report (EMF): concurrency against its scaling target, batching,
        inference latency and its NeuronCores."""
        e = metrics.emf[served.name]
        return [
            graph(
                f"{prefix}in flight and queue depth per worker",
                e["in_flight"],
                e["queue_depth"],
                left_annotations=[cwl1.Annotation(served.in_flight_per_worker, "scaling target")],
                width=6,
            ),
            graph(f"{prefix}batch size (rows)", e["batch_size"], width=6),
            graph(f"{prefix}inference latency (ms)", e["inference_p50"], e["inference_p99"], width=6),
            graph(
                f"{prefix}NeuronCore utilization (%), device memory (bytes)",
                e["core_utilization"],
                right=[e["device_memory"]],
                width=6,
            ),
        ]

    def annotations(served: ServedModel) -> tuple[cwl1.Annotation, cwl1.Annotation]:
        return (
            cwl1.Annotation(served.slo_p99_ms / 1000, "p99 SLO"),
            cwl1.Annotation(served.requests_per_task_per_minute, "scaling target"),
        )

    alarm_arns = [alarm.attr_arn for alarm in alarms.values()]
    if not context.packed:
        (served,) = context.served
        m = metrics.models[served.name]
        slo, target = annotations(served)
        rows = [
            [
                graph("Requests per minute", m["requests"], width=8),
                graph("Requests per task per minute", m["requests_per_task"], left_annotations=[target], width=8),
                graph("Running tasks", s["task_count"], width=8),
            ],
            [
                graph("Target response time (s)", m["p50"], m["p99"], left_annotations=[slo], width=8),
                # the 5xx less shedding, and the shed share beside it
                graph("Target 5xx (% of requests)", m["error_rate"], m["shed_rate"], width=8),
                graph("Targets", m["healthy"], m["unhealthy"], width=8),
            ],
            serving_row(served, ""),
            [
                graph("Service CPU and memory (%)", s["cpu"], s["memory"], width=8),
                graph("NeuronCore utilization, task (%)", metrics.emf[""]["core_utilization"], width=8),
                cwl1.alarm_status("Alarms", alarm_arns, width=8),
            ],
        ]
        return cwl1.dashboard(scope, "Dashboard", rows, start="-PT3H")  # the last three hours
    # A fleet: the task's row, then two rows per model (load balancer, container), then every alarm.
    rows = [
        [
            graph(
                "Requests per minute, by model",
                *[metrics.models[served.name]["requests"] for served in context.served],
                width=6,
            ),
            graph("Running tasks", s["task_count"], width=6),
            graph("Service CPU and memory (%)", s["cpu"], s["memory"], width=6),
            graph("NeuronCore utilization, task (%)", metrics.emf[""]["core_utilization"], width=6),
        ]
    ]
    for served in context.served:
        m = metrics.models[served.name]
        slo, target = annotations(served)
        rows.append(
            [
                graph(
                    f"{served.name}: requests per task per minute",
                    m["requests_per_task"],
                    left_annotations=[target],
                    width=6,
                ),
                graph(f"{served.name}: target response time (s)", m["p50"], m["p99"], left_annotations=[slo], width=6),
                graph(f"{served.name}: target 5xx (% of requests)", m["error_rate"], m["shed_rate"], width=6),
                graph(f"{served.name}: targets", m["healthy"], m["unhealthy"], width=6),
            ]
        )
        rows.append(serving_row(served, f"{served.name}: "))
    rows.append([cwl1.alarm_status("Alarms", alarm_arns, width=24)])
    return cwl1.dashboard(scope, "Dashboard", rows, start="-PT3H")
