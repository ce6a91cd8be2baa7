"""CloudWatch alarms and dashboards as L1 resources, built from plain Python values.

Synth time at fleet scale is dominated by Python<->Node (jsii) round trips, and the L2 CloudWatch API
costs one per metric object, alarm, action, widget and method call. These helpers render in Python what
the L2 `Alarm`, `Dashboard`, `GraphWidget`, `AlarmWidget`, `AlarmStatusWidget` and `TextWidget` render
(aws-cdk-lib 2.x), so an alarm or a dashboard costs two round trips (its construct and its L1) and the
templates stay identical: same properties, same logical ids, same dashboard JSON.

Dimension values and ARNs may be CDK string tokens: a DashboardBody with tokens embedded becomes an
Fn::Join, as the L2's does."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aws_cdk import aws_cloudwatch as cw
from constructs import Construct

GRID_WIDTH = 24  # dashboard columns
DEFAULT_PERIOD_SECONDS = 300  # CloudWatch's own default: the L2 leaves it out of graph JSON
DEFAULT_GRAPH_STATISTIC = "Average"  # likewise
# Anything else (p99, tm90, ...) is an extended statistic.
SIMPLE_STATISTICS = frozenset({"SampleCount", "Average", "Sum", "Minimum", "Maximum"})


@dataclass(frozen=True)
class Metric:
    namespace: str
    metric_name: str
    dimensions: Mapping[str, str]
    statistic: str
    period_seconds: int = 60


@dataclass(frozen=True)
class MathExpression:
    expression: str
    using: Mapping[str, Metric]  # by id in the expression; rendered in this order
    label: str
    period_seconds: int = 60


AnyMetric = Metric | MathExpression


@dataclass(frozen=True)
class Annotation:
    """A horizontal line on a graph's left axis."""

    value: float
    label: str


@dataclass(frozen=True)
class Widget:
    type: str
    width: int
    height: int
    properties: dict[str, Any]


# ---------------------------------------------------------------------------------------------- alarms


def alarm(
    scope: Construct,
    construct_id: str,
    *,
    metric: AnyMetric,
    threshold: float,
    evaluation_periods: int,
    datapoints_to_alarm: int,
    description: str,
    action_arn: str,
    comparison_operator: str = "GreaterThanThreshold",
    treat_missing_data: str = "notBreaching",
    notify_ok: bool = True,
) -> cw.CfnAlarm:
    """An alarm notifying `action_arn` when it fires and (`notify_ok`) when it clears, at the construct path
    cw.Alarm uses (`<construct_id>/Resource`): the path is part of the logical id's hash. `comparison_operator`
    and `treat_missing_data` take CloudFormation's values. Its name is `.ref` (not `.alarm_name`, which
    is the unset input property), its ARN `.attr_arn`. An alarm that starts a scaling policy must not
    notify it on OK (the policy would run with a value outside its steps): `notify_ok=False`."""
    return cw.CfnAlarm(
        Construct(scope, construct_id),
        "Resource",
        alarm_description=description,
        comparison_operator=comparison_operator,
        threshold=threshold,
        evaluation_periods=evaluation_periods,
        datapoints_to_alarm=datapoints_to_alarm,
        treat_missing_data=treat_missing_data,
        alarm_actions=[action_arn],
        ok_actions=[action_arn] if notify_ok else None,
        **alarm_metric_properties(metric),
    )


def alarm_metric_properties(metric: AnyMetric) -> dict[str, Any]:
    """CfnAlarm keyword arguments for the metric, as cw.Alarm renders it: a single metric as top-level
    properties, a math expression as a `metrics` list (expression first, then what it uses, hidden)."""
    if isinstance(metric, Metric):
        return {
            "namespace": metric.namespace,
            "metric_name": metric.metric_name,
            "dimensions": [{"name": name, "value": value} for name, value in _sorted_dimensions(metric)],
            "period": metric.period_seconds,
            **_statistic_property(metric.statistic),
        }
    queries: list[dict[str, Any]] = [
        {"expression": metric.expression, "id": "expr_1", "label": metric.label, "returnData": True}
    ]
    for metric_id, used in metric.using.items():
        queries.append(
            {
                "id": metric_id,
                "returnData": False,
                "metricStat": {
                    "metric": {
                        "namespace": used.namespace,
                        "metricName": used.metric_name,
                        "dimensions": [{"name": name, "value": value} for name, value in _sorted_dimensions(used)],
                    },
                    "period": used.period_seconds,
                    "stat": used.statistic,
                },
            }
        )
    return {"metrics": queries}


def _statistic_property(statistic: str) -> dict[str, str]:
    return {"statistic" if statistic in SIMPLE_STATISTICS else "extended_statistic": statistic}


def _sorted_dimensions(metric: Metric) -> list[tuple[str, str]]:
    return sorted(metric.dimensions.items())  # the L2 sorts dimensions by name


# ---------------------------------------------------------------------------------------------- dashboards


def dashboard(
    scope: Construct,
    construct_id: str,
    rows: Sequence[Sequence[Widget]],
    *,
    start: str | None = None,
    period_override: str | None = None,
) -> cw.CfnDashboard:
    """A dashboard at the construct path cw.Dashboard uses (`<construct_id>/Resource`), each of `rows`
    laid out as one cw.Dashboard.add_widgets call would."""
    return cw.CfnDashboard(
        Construct(scope, construct_id),
        "Resource",
        dashboard_body=dashboard_body(rows, start=start, period_override=period_override),
    )


def dashboard_body(
    rows: Sequence[Sequence[Widget]], *, start: str | None = None, period_override: str | None = None
) -> str:
    body: dict[str, Any] = {}
    if start is not None:
        body["start"] = start
    if period_override is not None:
        body["periodOverride"] = period_override
    body["widgets"] = _layout(rows)
    # Compact and unescaped, as JSON.stringify writes it.
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def _layout(rows: Sequence[Sequence[Widget]]) -> list[dict[str, Any]]:
    """cw.Row within cw.Column: left to right, wrapping past the grid width; rows stacked."""
    placed = []
    top = 0
    for row in rows:
        x = y = row_height = 0
        for widget in row:
            if x + widget.width > GRID_WIDTH:
                x, y = 0, row_height
            placed.append(
                {
                    "type": widget.type,
                    "width": widget.width,
                    "height": widget.height,
                    "x": x,
                    "y": top + y,
                    "properties": widget.properties,
                }
            )
            row_height = max(row_height, y + widget.height)
            x += widget.width
        top += row_height
    return placed


def graph(
    title: str,
    left: Sequence[AnyMetric],
    *,
    region: str,
    right: Sequence[AnyMetric] = (),
    left_annotations: Sequence[Annotation] = (),
    width: int = 6,
    height: int = 6,
) -> Widget:
    """cw.GraphWidget (time series)."""
    properties: dict[str, Any] = {"view": "timeSeries", "title": title, "region": region}
    metrics = graph_metrics(left, right)
    if metrics:
        properties["metrics"] = metrics
    if left_annotations:
        properties["annotations"] = {
            "horizontal": [
                {"value": _json_number(a.value), "label": a.label, "yAxis": "left"} for a in left_annotations
            ]
        }
    properties["yAxis"] = {}
    return Widget("metric", width, height, properties)


def alarm_graph(title: str, alarm_arn: str, *, region: str, width: int = 6, height: int = 6) -> Widget:
    """cw.AlarmWidget: the alarm's metric against its threshold."""
    return Widget(
        "metric",
        width,
        height,
        {"view": "timeSeries", "title": title, "region": region, "annotations": {"alarms": [alarm_arn]}, "yAxis": {}},
    )


def alarm_status(title: str, alarm_arns: Sequence[str], *, width: int = 6, height: int = 3) -> Widget:
    """cw.AlarmStatusWidget."""
    return Widget("alarm", width, height, {"title": title, "alarms": list(alarm_arns)})


def text(markdown: str, *, width: int = 6, height: int = 2) -> Widget:
    """cw.TextWidget."""
    return Widget("text", width, height, {"markdown": markdown})


def graph_metrics(left: Sequence[AnyMetric], right: Sequence[AnyMetric] = ()) -> list[list[Any]]:
    """A graph's `metrics` array: each metric in order, a math expression followed by the metrics it
    uses (hidden, by id). Unlike the L2 this does not merge a metric listed twice: that is refused."""
    entries: list[list[Any]] = []
    seen: list[AnyMetric] = []
    for axis, metrics in (("left", left), ("right", right)):
        for metric in metrics:
            if metric in seen:
                raise ValueError(f"{metric} is listed twice in one graph")
            seen.append(metric)
            if isinstance(metric, MathExpression):
                entries.append([_expression_options(metric, axis)])
                entries.extend(_metric_entry(used, hidden_id=used_id) for used_id, used in metric.using.items())
            else:
                entries.append(_metric_entry(metric, axis=axis))
    return entries


def _metric_entry(metric: Metric, *, axis: str | None = None, hidden_id: str | None = None) -> list[Any]:
    entry: list[Any] = [metric.namespace, metric.metric_name]
    for name, value in _sorted_dimensions(metric):
        entry += [name, value]
    # Key order as the L2 writes it: id, visible, period, stat, yAxis.
    options: dict[str, Any] = {}
    if hidden_id is not None:
        options.update(id=hidden_id, visible=False)
    if metric.period_seconds != DEFAULT_PERIOD_SECONDS:
        options["period"] = metric.period_seconds
    if metric.statistic != DEFAULT_GRAPH_STATISTIC:
        options["stat"] = metric.statistic
    if axis == "right":
        options["yAxis"] = "right"
    if options:
        entry.append(options)
    return entry


def _expression_options(expression: MathExpression, axis: str) -> dict[str, Any]:
    options: dict[str, Any] = {"label": expression.label, "expression": expression.expression}
    if expression.period_seconds != DEFAULT_PERIOD_SECONDS:
        options["period"] = expression.period_seconds
    if axis == "right":
        options["yAxis"] = "right"
    return options


def _json_number(value: float | int) -> float | int:
    """JavaScript writes 30000.0 as 30000."""
    return int(value) if isinstance(value, float) and value.is_integer() else value
