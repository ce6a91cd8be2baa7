"""The L1 CloudWatch helpers render what the L2 constructs they replace render: one stack built with the L2
API and one with the helpers, same construct ids, must give the same template. Run on every CDK upgrade."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_sns as sns

from inferstack.constructs import cloudwatch_l1 as cwl1
from tests.support.dashboard_body import render_dashboard_body

MINUTE = cdk.Duration.minutes(1)


def _names(stack: cdk.Stack) -> tuple[sns.Topic, str, str]:
    """The alarm topic (a Ref), and token-valued dimensions (a GetAtt, an Fn::Join)."""
    topic = sns.Topic(stack, "Topic")
    return topic, topic.topic_name, f"app/{topic.topic_name}/{cdk.Aws.ACCOUNT_ID}"


def _l2(stack: cdk.Stack) -> None:
    topic, name, joined = _names(stack)
    dims = {"Name": name, "Joined": joined}
    requests = cw.Metric(namespace="NS", metric_name="Requests", dimensions_map=dims, statistic="Sum", period=MINUTE)
    errors = cw.Metric(namespace="NS", metric_name="Errors", dimensions_map=dims, statistic="Sum", period=MINUTE)
    p99 = cw.Metric(namespace="NS", metric_name="Latency", dimensions_map=dims, statistic="p99", period=MINUTE)
    average = cw.Metric(namespace="NS", metric_name="Cpu", dimensions_map=dims, statistic="Average", period=MINUTE)
    rate = cw.MathExpression(
        expression="100 * errors / requests",
        label="error %",
        period=MINUTE,
        using_metrics={"requests": requests, "errors": errors},
    )
    action = cw_actions.SnsAction(topic)
    alarms = []
    for alarm_id, metric, threshold, operator in [
        ("Latency", p99, 0.25, cw.ComparisonOperator.GREATER_THAN_THRESHOLD),
        ("Rate", rate, 5.0, cw.ComparisonOperator.GREATER_THAN_THRESHOLD),
        ("Cpu", average, 90, cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD),
    ]:
        alarm = cw.Alarm(
            stack,
            alarm_id,
            metric=metric,
            threshold=threshold,
            comparison_operator=operator,
            evaluation_periods=5,
            datapoints_to_alarm=3,
            alarm_description=f"{alarm_id} high",
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(action)
        alarm.add_ok_action(action)
        alarms.append(alarm)
    dashboard = cw.Dashboard(stack, "Dashboard", default_interval=cdk.Duration.hours(3))
    dashboard.add_widgets(cw.TextWidget(markdown='# "quoted" `name` é', width=24, height=1))
    dashboard.add_widgets(
        cw.GraphWidget(
            title="Traffic",
            left=[requests],
            right=[average],
            width=10,
            left_annotations=[cw.HorizontalAnnotation(value=3000.0, label="target")],
        ),
        cw.GraphWidget(title="Errors", left=[rate], width=10),
        cw.AlarmWidget(alarm=alarms[0], title="Latency", width=10),  # wraps to a second line
        cw.AlarmStatusWidget(title="All", alarms=alarms, width=14),
    )
    dashboard.add_widgets(cw.GraphWidget(title="Latency", left=[p99, average], width=12))


def _l1(stack: cdk.Stack) -> None:
    topic, name, joined = _names(stack)
    topic_arn = topic.topic_arn
    dims = {"Name": name, "Joined": joined}
    requests = cwl1.Metric("NS", "Requests", dims, "Sum")
    errors = cwl1.Metric("NS", "Errors", dims, "Sum")
    p99 = cwl1.Metric("NS", "Latency", dims, "p99")
    average = cwl1.Metric("NS", "Cpu", dims, "Average")
    rate = cwl1.MathExpression("100 * errors / requests", {"requests": requests, "errors": errors}, "error %")
    alarms = [
        cwl1.alarm(
            stack,
            alarm_id,
            metric=metric,
            threshold=threshold,
            comparison_operator=operator,
            evaluation_periods=5,
            datapoints_to_alarm=3,
            description=f"{alarm_id} high",
            action_arn=topic_arn,
        )
        for alarm_id, metric, threshold, operator in [
            ("Latency", p99, 0.25, "GreaterThanThreshold"),
            ("Rate", rate, 5.0, "GreaterThanThreshold"),
            ("Cpu", average, 90, "GreaterThanOrEqualToThreshold"),
        ]
    ]
    region = cdk.Aws.REGION
    arns = [alarm.attr_arn for alarm in alarms]
    cwl1.dashboard(
        stack,
        "Dashboard",
        [
            [cwl1.text('# "quoted" `name` é', width=24, height=1)],
            [
                cwl1.graph(
                    "Traffic",
                    [requests],
                    right=[average],
                    region=region,
                    width=10,
                    left_annotations=[cwl1.Annotation(3000.0, "target")],
                ),
                cwl1.graph("Errors", [rate], region=region, width=10),
                cwl1.alarm_graph("Latency", arns[0], region=region, width=10),
                cwl1.alarm_status("All", arns, width=14),
            ],
            [cwl1.graph("Latency", [p99, average], region=region, width=12)],
        ],
        start="-PT3H",
    )


def _template(build) -> dict:
    app = cdk.App()
    stack = cdk.Stack(app, "Stack", env=cdk.Environment(account="111111111111", region="us-east-1"))
    build(stack)
    return app.synth().get_stack_by_name("Stack").template


@pytest.fixture(scope="module")
def templates() -> tuple[dict, dict]:
    return _template(_l2), _template(_l1)


def test_alarms_are_the_l2_alarms(templates):
    l2, l1 = ({k: r for k, r in t["Resources"].items() if r["Type"] == "AWS::CloudWatch::Alarm"} for t in templates)
    assert len(l2) == 3 and l1 == l2  # logical ids included


def test_dashboard_is_the_l2_dashboard(templates):
    l2, l1 = ({k: r for k, r in t["Resources"].items() if r["Type"] == "AWS::CloudWatch::Dashboard"} for t in templates)
    assert l1.keys() == l2.keys()
    (logical_id,) = l2
    body = render_dashboard_body(l1[logical_id]["Properties"]["DashboardBody"])
    assert body == render_dashboard_body(l2[logical_id]["Properties"]["DashboardBody"])
    assert [(w["x"], w["y"]) for w in body["widgets"]] == [(0, 0), (0, 1), (10, 1), (0, 7), (10, 7), (0, 13)]
    assert l1 == l2  # and written the same way, down to how the Fn::Join is split


def test_graph_refuses_a_metric_twice():
    metric = cwl1.Metric("NS", "M", {}, "Sum")
    with pytest.raises(ValueError, match="twice"):
        cwl1.graph_metrics([metric], [metric])


def test_statistics_and_numbers():
    assert cwl1.alarm_metric_properties(cwl1.Metric("NS", "M", {"B": "2", "A": "1"}, "p99", 300)) == {
        "namespace": "NS",
        "metric_name": "M",
        "period": 300,
        "extended_statistic": "p99",
        "dimensions": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
    }
    assert cwl1.graph_metrics([cwl1.Metric("NS", "M", {}, "Average", 300)]) == [["NS", "M"]]
    assert cwl1.graph(title="t", left=[], region="r", left_annotations=[cwl1.Annotation(2.0, "x")]).properties[
        "annotations"
    ] == {"horizontal": [{"value": 2, "label": "x", "yAxis": "left"}]}


def test_render_dashboard_body_reads_joins_as_concatenation():
    flat = {"Fn::Join": ["", ['{"a":"', {"Ref": "X"}, "/", {"Fn::GetAtt": ["Y", "Arn"]}, '"}']]}
    nested = {"Fn::Join": ["", ['{"a":"', {"Fn::Join": ["/", [{"Ref": "X"}, {"Fn::GetAtt": ["Y", "Arn"]}]]}, '"}']]}
    assert render_dashboard_body(flat) == render_dashboard_body(nested) == {"a": "<Ref X>/<GetAtt Y.Arn>"}
    assert render_dashboard_body('{"b":1}') == {"b": 1}


def test_an_alarm_that_starts_a_scaling_policy_does_not_notify_it_on_ok():
    stack = cdk.Stack(cdk.App(), "S")
    metric = cwl1.Metric("AWS/SageMaker", "NoCapacityInvocationFailures", {"InferenceComponentName": "c"}, "Sum")
    alarm = cwl1.alarm(
        stack,
        "Wake",
        metric=metric,
        threshold=1,
        evaluation_periods=1,
        datapoints_to_alarm=1,
        description="wake up",
        action_arn="arn:aws:autoscaling:policy",
        notify_ok=False,
    )
    from aws_cdk.assertions import Template

    assert alarm.ok_actions is None
    (resource,) = Template.from_stack(stack).find_resources("AWS::CloudWatch::Alarm").values()
    assert resource["Properties"]["AlarmActions"] == ["arn:aws:autoscaling:policy"]
    assert "OKActions" not in resource["Properties"]
