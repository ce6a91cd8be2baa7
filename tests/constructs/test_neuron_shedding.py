"""Load shedding is not a broken deploy (issue 32). The serving app refuses what it cannot answer within the SLO
with 503 + Retry-After and counts it as EMF `Rejected`; the load balancer counts the same 503s in
HTTPCode_Target_5XX_Count. The 5xx alarm (a deployment alarm: ECS rolls back on it) must count only the other
5xx, and the shedding has an alarm of its own that notifies and never rolls back. The alarms' metric math is
evaluated here on numbers by a small evaluator of the CloudWatch metric math these expressions use."""

from __future__ import annotations

import re

import pytest

from inferstack import config
from inferstack.capacity import packing
from inferstack.constructs.neuron_service.observability import SHEDDING_MINUTES
from inferstack.neuron import deployment as neuron_deployment
from inferstack.neuron import metrics
from inferstack.schema.deployment import Deployment
from tests.support.neuron_service import FLEET, build_direct
from tests.support.paths import CONFIG_DIR
from tests.support.templates import only

TOPIC = "arn:aws:sns:us-east-1:111111111111:alarms"  # build_direct's
# Logical ids of the dedicated service's alarms before shedding was told apart (construct paths unchanged):
# an alarm that exists keeps its id, and with it its name, dashboards and deployment-alarm entry.
STABLE_IDS = {
    "LatencyAlarm": "NeuronLatencyAlarm7B7C9E3C",
    "ErrorRateAlarm": "NeuronErrorRateAlarm9CAECE15",
    "CpuAlarm": "NeuronCpuAlarm24407D38",
    "MemoryAlarm": "NeuronMemoryAlarmDFD37197",
    "UnhealthyTargetsAlarm": "NeuronUnhealthyTargetsAlarm6A0C5854",
    "CapacityShortfallAlarm": "NeuronCapacityShortfallAlarmF4DA9501",
    "NeuronExecutionErrorsAlarm": "NeuronNeuronExecutionErrorsAlarmA2D19A39",
}


# ----------------------------------------------------------------------------- metric math, one period


class _Value:
    """One period's value of a series; None is no data point, which arithmetic and comparisons carry on."""

    def __init__(self, x: float | None) -> None:
        self.x = x

    def _op(self, other, f, reflected=False):
        o = other.x if isinstance(other, _Value) else other
        if self.x is None or o is None:
            return _Value(None)
        a, b = (o, self.x) if reflected else (self.x, o)
        return _Value(f(a, b))

    def __add__(self, o):
        return self._op(o, lambda a, b: a + b)

    def __radd__(self, o):
        return self._op(o, lambda a, b: a + b, True)

    def __sub__(self, o):
        return self._op(o, lambda a, b: a - b)

    def __rsub__(self, o):
        return self._op(o, lambda a, b: a - b, True)

    def __mul__(self, o):
        return self._op(o, lambda a, b: a * b)

    def __rmul__(self, o):
        return self._op(o, lambda a, b: a * b, True)

    def __truediv__(self, o):
        return self._op(o, lambda a, b: a / b if b else None)

    def __rtruediv__(self, o):
        return self._op(o, lambda a, b: a / b if b else None, True)

    def __gt__(self, o):
        return self._op(o, lambda a, b: float(a > b))

    def __lt__(self, o):
        return self._op(o, lambda a, b: float(a < b))


def _wrap(v) -> _Value:
    return v if isinstance(v, _Value) else _Value(v)


def _if(condition, yes, no) -> _Value:
    c = _wrap(condition).x
    return _Value(None) if c is None else _wrap(yes if c else no)


def _fill(series, value) -> _Value:
    return _Value(value) if _wrap(series).x is None else _wrap(series)


def _max(items) -> _Value:
    present = [v.x for v in map(_wrap, items) if v.x is not None]
    return _Value(max(present) if present else None)


def evaluate(expression: str, values: dict[str, float | None]) -> float | None:
    """The expression's value in one period, given each query id's (None: no data point). Ids are lower case,
    functions upper case, as in every expression these constructs write."""
    assert re.fullmatch(r"[A-Za-z0-9_ ()\[\],.+\-*/<>]+", expression), expression
    python = re.sub(r"\b([a-z][A-Za-z0-9_]*)\b", lambda m: f"_v[{m.group(1)!r}]", expression)
    result = eval(python, {"IF": _if, "FILL": _fill, "MAX": _max, "_v": {k: _Value(v) for k, v in values.items()}})
    return _wrap(result).x


def test_the_evaluator():
    assert evaluate("IF(a > 0, 100 * FILL(b, 0) / a, 0)", {"a": 4, "b": None}) == 0
    assert evaluate("IF(a > 0, 100 * FILL(b, 0) / a, 0)", {"a": 4, "b": 1}) == 25
    assert evaluate("IF(a > 0, b / a, 0)", {"a": None, "b": 1}) is None  # no data point: none out
    assert evaluate("IF(FILL(a, 0) > 0, 1 / a, 0)", {"a": 0}) == 0  # the branch not taken may divide by 0
    assert evaluate("MAX([a, b - 3])", {"a": 1, "b": 5}) == 2


# ----------------------------------------------------------------------------- helpers


def alarm(tpl, description_part: str) -> tuple[str, dict]:
    (found,) = [
        (k, r["Properties"])
        for k, r in tpl.find_resources("AWS::CloudWatch::Alarm").items()
        if description_part in r["Properties"]["AlarmDescription"]
    ]
    return found


def queries(props: dict) -> tuple[str, dict[str, dict]]:
    """(the expression, query id -> its metric)."""
    (expression,) = [q["Expression"] for q in props["Metrics"] if "Expression" in q]
    return expression, {q["Id"]: q["MetricStat"]["Metric"] for q in props["Metrics"] if "MetricStat" in q}


def deployment_alarm_ids(tpl) -> list[str]:
    _, service = only(tpl, "AWS::ECS::Service")
    return [name["Ref"] for name in service["Properties"]["DeploymentConfiguration"]["Alarms"]["AlarmNames"]]


@pytest.fixture(scope="module")
def project_config():
    return config.load(CONFIG_DIR)


@pytest.fixture(scope="module")
def rolling(project_config):
    return build_direct(project_config.model("intent-bert"), "inf1.xlarge")


@pytest.fixture(scope="module")
def canary(project_config):
    rollout = neuron_deployment.rollout(
        Deployment(strategy="canary", size_percent=5, wait_interval_seconds=120, termination_wait_seconds=60)
    )
    return build_direct(project_config.model("intent-bert"), "inf1.xlarge", rollout=rollout)


# ----------------------------------------------------------------------------- one target group


def test_the_error_rate_reads_the_apps_rejections_of_the_same_model(rolling):
    _, props = alarm(rolling, "target 5xx above")
    _, used = queries(props)
    assert {q["MetricName"] for q in used.values()} == {"RequestCount", "HTTPCode_Target_5XX_Count", metrics.REJECTED}
    (rejected,) = [q for q in used.values() if q["MetricName"] == metrics.REJECTED]
    assert rejected["Namespace"] == metrics.NAMESPACE
    # what the app writes (emf.DIMENSION_SETS' per-model set); Service is the task's SERVER_METRICS_SERVICE
    assert {d["Name"]: d["Value"] for d in rejected["Dimensions"]} == {
        metrics.SERVICE: "test-direct",
        metrics.MODEL: "intent-bert",
    }
    assert "admission rejections" in props["AlarmDescription"]


@pytest.mark.parametrize(
    "requests, errors, rejected, percent",
    [
        (100, 32, 30, 2.0),  # 30 shed, 2 failed: 2 %, not 32 %
        (100, 30, 30, 0.0),  # shedding alone is no failure
        (100, 5, None, 5.0),  # no rejection in the minute: no data point, 0
        (100, 2, 30, 0.0),  # rejections flushed a minute after the load balancer counted them: clamped, not -28 %
        (None, None, None, 0.0),  # a quiet minute reads 0 %, not no data
        (100, None, None, 0.0),
    ],
)
def test_the_error_rate_is_the_5xx_less_the_rejections(rolling, requests, errors, rejected, percent):
    _, props = alarm(rolling, "target 5xx above")
    expression, used = queries(props)
    by_name = {"RequestCount": requests, "HTTPCode_Target_5XX_Count": errors, metrics.REJECTED: rejected}
    assert evaluate(expression, {i: by_name[q["MetricName"]] for i, q in used.items()}) == pytest.approx(percent)


@pytest.mark.parametrize(
    "requests, rejected, percent", [(100, 30, 30.0), (100, None, 0.0), (0, None, 0.0), (None, None, 0.0)]
)
def test_the_shed_share_is_the_apps_rejections_over_its_requests(rolling, requests, rejected, percent):
    _, props = alarm(rolling, "shed (503")
    expression, used = queries(props)
    assert {q["MetricName"] for q in used.values()} == {metrics.REQUESTS, metrics.REJECTED}
    assert all(
        q["Namespace"] == metrics.NAMESPACE and {d["Value"] for d in q["Dimensions"]} == {"test-direct", "intent-bert"}
        for q in used.values()
    )
    by_name = {metrics.REQUESTS: requests, metrics.REJECTED: rejected}
    assert evaluate(expression, {i: by_name[q["MetricName"]] for i, q in used.items()}) == pytest.approx(percent)


def test_the_shedding_alarm_notifies_and_never_rolls_a_deploy_back(rolling, project_config):
    shedding_id, props = alarm(rolling, "shed (503")
    limit = project_config.model("intent-bert").alarms.error_rate_percent
    assert (props["Threshold"], props["ComparisonOperator"], props["TreatMissingData"]) == (
        limit,
        "GreaterThanThreshold",
        "notBreaching",
    )
    assert props["EvaluationPeriods"] == props["DatapointsToAlarm"] == SHEDDING_MINUTES == 15
    assert props["AlarmActions"] == props["OKActions"] == [TOPIC]
    assert "capacity" in props["AlarmDescription"]
    assert shedding_id == "NeuronSheddingAlarm5787A12F"
    assert shedding_id not in deployment_alarm_ids(rolling)


def test_existing_alarms_keep_their_logical_ids_and_the_deployment_alarms_stay_p99_and_5xx(rolling):
    alarms = rolling.find_resources("AWS::CloudWatch::Alarm")
    assert set(STABLE_IDS.values()) < set(alarms)
    assert deployment_alarm_ids(rolling) == [STABLE_IDS["LatencyAlarm"], STABLE_IDS["ErrorRateAlarm"]]
    assert "target 5xx above" in alarms[STABLE_IDS["ErrorRateAlarm"]]["Properties"]["AlarmDescription"]


# ----------------------------------------------------------------------------- two target groups (a canary)


def _pair_values(used: dict[str, dict], blue: tuple, green: tuple, rejected) -> dict[str, float | None]:
    """(requests, 5xx) per target group, by query id (the alternate group's ids end in _alt)."""
    out = {}
    for query_id, metric in used.items():
        if metric["MetricName"] == metrics.REJECTED:
            out[query_id] = rejected
        else:
            requests, errors = green if query_id.endswith("_alt") else blue
            out[query_id] = {"RequestCount": requests, "HTTPCode_Target_5XX_Count": errors}[metric["MetricName"]]
    return out


@pytest.mark.parametrize(
    "blue, green, rejected, percent",
    [
        ((100, 32), (None, None), 30, 2.0),  # one group serving: as above
        ((90, 27), (10, 3), 30, 0.0),  # both groups shedding, nothing failing
        ((90, 30), (10, 10), 30, 100.0),  # blue sheds while the canary fails every request: the canary's 100 %
        ((90, 30), (10, 2), 30, 20.0),  # ... or 2 of its 10
        ((None, None), (None, None), None, 0.0),
    ],
)
def test_a_canary_failing_while_the_other_group_sheds_still_alarms(canary, blue, green, rejected, percent):
    _, props = alarm(canary, "target 5xx above")
    expression, used = queries(props)
    assert len([q for q in used.values() if q["MetricName"] == metrics.REJECTED]) == 1
    assert len(expression) <= 1024  # well inside CloudWatch's 2048 characters for a query's expression
    assert evaluate(expression, _pair_values(used, blue, green, rejected)) == pytest.approx(percent)
    shedding_id, _ = alarm(canary, "shed (503")
    assert shedding_id not in deployment_alarm_ids(canary)
    assert len(deployment_alarm_ids(canary)) == 2


# ----------------------------------------------------------------------------- a fleet


def test_each_fleet_member_has_its_shedding_alarm_outside_the_deployment_alarms(project_config):
    members = project_config.fleet_members(FLEET)
    plan = packing.plan_fleet(
        FLEET, project_config.fleets[FLEET], members, "staging", project_config.environments["staging"]
    )
    tpl = build_direct(members[0], plan.instance_type, models=members, capacity=plan)
    deployment = deployment_alarm_ids(tpl)
    assert len(deployment) == 2 * len(members)
    for member in members:
        shedding_id, props = alarm(tpl, f"{member.name} ({FLEET}): more than")
        assert shedding_id not in deployment
        _, used = queries(props)
        assert {d["Value"] for q in used.values() for d in q["Dimensions"]} == {"test-direct", member.name}
        _, errors = alarm(tpl, f"{member.name} ({FLEET}): target 5xx above")
        _, used = queries(errors)
        (rejected,) = [q for q in used.values() if q["MetricName"] == metrics.REJECTED]
        assert {d["Name"]: d["Value"] for d in rejected["Dimensions"]} == {
            metrics.SERVICE: "test-direct",
            metrics.MODEL: member.name,
        }
