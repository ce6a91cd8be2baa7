"""The CloudWatch metrics the service is judged by, as plain values (inferstack.constructs.cloudwatch_l1): the
task's (ECS and its capacity provider), each model's at the load balancer (both target groups while a rollout
shifts traffic), and what the task writes itself (EMF, names in inferstack.neuron.metrics). One definition
for the alarms, the dashboard and the scaling policies, so they read the same series.

The 5xx error rate counts failures only: the load balancer's target 5xx less the server's admission rejections
(EMF Rejected, 503 + Retry-After for a request it could not answer within the SLO), which are load shed for want
of capacity, not a broken deploy; the shed share is a metric of its own. The two counts come from two clocks (the
load balancer's minute, the worker's EMF interval, stamped when it is flushed), so a minute's rejections may land
in the next minute: the difference is clamped at 0, and the alarms need several breaching minutes in a row."""

from __future__ import annotations

import functools

from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2

from inferstack.constructs import cloudwatch_l1 as cwl1
from inferstack.constructs.neuron_service.context import ServiceContext
from inferstack.constructs.neuron_service.routing import Routes
from inferstack.constructs.neuron_service.served import ServedModel
from inferstack.neuron import metrics as serving_metrics

# The serving app's EMF flush interval: one data point per minute and dimension set, what the alarms and the
# scaling policies evaluate (60 s periods).
METRICS_INTERVAL_SECONDS = 60


def model_dimensions(context: ServiceContext, served: ServedModel) -> dict[str, str]:
    return {serving_metrics.SERVICE: context.metrics_service, serving_metrics.MODEL: served.name}


class Metrics:
    """Made once the load balancer's target groups exist (`routes`), each set read on first use. Each
    token-valued name is read once: every read is a jsii round trip, which dominates synth at fleet scale."""

    def __init__(
        self,
        context: ServiceContext,
        cluster: ecs.Cluster,
        ecs_service: ecs.Ec2Service,
        capacity_provider: ecs.AsgCapacityProvider,
        routes: Routes,
    ) -> None:
        self._context = context
        self._cluster = cluster
        self._ecs_service = ecs_service
        self._capacity_provider = capacity_provider
        self._routes = routes

    @functools.cached_property
    def service(self) -> dict[str, cwl1.Metric]:
        """The task's (service, cluster, capacity provider), shared by alarms and dashboard."""
        cluster_name = self._cluster.cluster_name
        ecs_service = {"ClusterName": cluster_name, "ServiceName": self._ecs_service.service_name}
        return {
            "capacity_reservation": cwl1.Metric(
                "AWS/ECS/ManagedScaling",
                "CapacityProviderReservation",
                {"ClusterName": cluster_name, "CapacityProviderName": self._capacity_provider.capacity_provider_name},
                "Minimum",
            ),
            "cpu": cwl1.Metric("AWS/ECS", "CPUUtilization", ecs_service, "Average"),
            "memory": cwl1.Metric("AWS/ECS", "MemoryUtilization", ecs_service, "Average"),
            "task_count": cwl1.Metric("ECS/ContainerInsights", "RunningTaskCount", ecs_service, "Average"),
        }

    @functools.cached_property
    def models(self) -> dict[str, dict[str, cwl1.AnyMetric]]:
        """Per served model, from its target group (and its alternate, with a traffic-shifting rollout), the error
        rate less the model's admission rejections, and (`shed_rate`) those rejections' share of its requests."""
        out = {}
        for index, served in enumerate(self._context.served):
            group = self._routes.target_groups[served.name]
            alternate = self._routes.alternate_target_groups.get(served.name)
            emf = self.emf[served.name]
            out[served.name] = (
                _target_group_metrics(group, emf["rejected"])
                if alternate is None
                else _target_group_pair_metrics(group, alternate, index, emf["rejected"])
            )
            out[served.name]["shed_rate"] = _shed_rate(emf["rejected"], emf["requests"], index)
        return out

    @functools.cached_property
    def emf(self) -> dict[str, dict[str, cwl1.Metric]]:
        """What the task writes itself (inferstack.neuron.metrics, EMF through the awslogs driver), per served
        model under (Service, Model), and the task's NeuronCores under (Service) alone (key "" below)."""
        namespace, m = serving_metrics.NAMESPACE, serving_metrics

        def metric(name: str, dimensions: dict[str, str], statistic: str) -> cwl1.Metric:
            return cwl1.Metric(namespace, name, dimensions, statistic, METRICS_INTERVAL_SECONDS)

        out = {}
        for served in self._context.served:
            dims = model_dimensions(self._context, served)
            out[served.name] = {
                "in_flight": metric(m.IN_FLIGHT, dims, "Average"),
                "queue_depth": metric(m.QUEUE_DEPTH, dims, "Average"),
                "batch_size": metric(m.BATCH_SIZE, dims, "Average"),
                "inference_p50": metric(m.INFERENCE_LATENCY, dims, "p50"),
                "inference_p99": metric(m.INFERENCE_LATENCY, dims, "p99"),
                "core_utilization": metric(m.NEURONCORE_UTILIZATION, dims, "Average"),
                "device_memory": metric(m.DEVICE_MEMORY_USED, dims, "Maximum"),
                "execution_errors": metric(m.EXECUTION_ERRORS, dims, "Sum"),
                "requests": metric(m.REQUESTS, dims, "Sum"),  # every answered request, rejections included
                "rejected": metric(m.REJECTED, dims, "Sum"),
            }
        out[""] = {
            "core_utilization": metric(m.NEURONCORE_UTILIZATION, {m.SERVICE: self._context.metrics_service}, "Average")
        }
        return out


def _alb_metric_factory(tg: elbv2.ApplicationTargetGroup):
    # As tg.metrics names them: the load balancer by the full name in the first listener's ARN.
    alb = {"LoadBalancer": tg.first_load_balancer_full_name, "TargetGroup": tg.target_group_full_name}

    def target_group(metric_name: str, statistic: str) -> cwl1.Metric:
        return cwl1.Metric("AWS/ApplicationELB", metric_name, alb, statistic)

    return target_group


def _shed_rate(rejected: cwl1.Metric, requests: cwl1.Metric, index: int) -> cwl1.MathExpression:
    """Rejections as a share of the requests the model's servers answered: both from the same EMF record, so no
    clock skew. Rejected has no data point in a minute without one: 0. Ids carry the model's index (a fleet's
    graphs), and differ from the error rate's, which shares a graph with this."""
    shed, received = f"shed_{index}", f"received_{index}"
    return cwl1.MathExpression(
        expression=f"IF(FILL({received}, 0) > 0, 100 * FILL({shed}, 0) / FILL({received}, 1), 0)",
        using={received: requests, shed: rejected},
        label="shed by admission (503), % of requests",
    )


def _target_group_pair_metrics(
    primary: elbv2.ApplicationTargetGroup, alternate: elbv2.ApplicationTargetGroup, index: int, rejected: cwl1.Metric
) -> dict[str, cwl1.AnyMetric]:
    """A model behind two target groups (ECS native blue/green, linear, canary): the tasks sit in either, and
    in both while a deployment shifts traffic. Counts are summed over the two; latency, error rate and
    unhealthy targets are the worse of the two, so a failing canary alarms (and rolls back) even while it
    takes a small share of the requests. Missing data (an empty group reports nothing) counts as 0. Ids carry
    the model's index: a fleet's graph may show several models' expressions, and ids must be unique there.

    The rejections are the model's, not a group's (both fleets write the same dimensions). A group's failures:
    its 5xx, but no more than the model's failures (both groups' 5xx less every rejection). So shedding alone
    counts 0 in each group, while a failing canary's 5xx still count in full when the other group sheds."""
    sources = (_alb_metric_factory(primary), _alb_metric_factory(alternate))

    def pair(key: str, metric_name: str, statistic: str) -> tuple[tuple[str, cwl1.Metric], ...]:
        return tuple(
            (f"{key}_{index}{suffix}", source(metric_name, statistic))
            for suffix, source in zip(("", "_alt"), sources, strict=True)
        )

    def combined(label: str, template: str, *pairs: tuple[tuple[str, cwl1.Metric], ...]) -> cwl1.MathExpression:
        ids = [query_id for p in pairs for query_id, _ in p]
        using = {query_id: metric for p in pairs for query_id, metric in p}
        return cwl1.MathExpression(expression=template.format(*ids), using=using, label=label)

    requests = pair("requests", "RequestCount", "Sum")
    errors = pair("errors", "HTTPCode_Target_5XX_Count", "Sum")
    (r1, _), (r2, _) = requests
    (e1, _), (e2, _) = errors
    shed = f"rejected_{index}"
    failed = _clamped(f"FILL({e1}, 0) + FILL({e2}, 0) - FILL({shed}, 0)")
    rate = "IF(FILL({r}, 0) > 0, 100 * IF(FILL({e}, 0) < {failed}, FILL({e}, 0), {failed}) / FILL({r}, 1), 0)"
    return {
        "requests": combined("requests (both target groups)", "FILL({}, 0) + FILL({}, 0)", requests),
        "requests_per_task": combined(
            "requests per task (both target groups)",
            "FILL({}, 0) + FILL({}, 0)",
            pair("per_task", "RequestCountPerTarget", "Sum"),
        ),
        "p99": combined(
            "p99 (worse target group)", "MAX([FILL({}, 0), FILL({}, 0)])", pair("p99", "TargetResponseTime", "p99")
        ),
        "p50": combined(
            "p50 (worse target group)", "MAX([FILL({}, 0), FILL({}, 0)])", pair("p50", "TargetResponseTime", "p50")
        ),
        "error_rate": cwl1.MathExpression(
            expression=f"MAX([{rate.format(r=r1, e=e1, failed=failed)}, {rate.format(r=r2, e=e2, failed=failed)}])",
            using={**dict(requests + errors), shed: rejected},
            label="target 5xx less admission rejections, % of requests (worse target group)",
        ),
        "unhealthy": combined(
            "unhealthy targets (worse target group)",
            "MAX([FILL({}, 0), FILL({}, 0)])",
            pair("unhealthy", "UnHealthyHostCount", "Maximum"),
        ),
        "healthy": combined(
            "healthy targets (both target groups)",
            "FILL({}, 0) + FILL({}, 0)",
            pair("healthy", "HealthyHostCount", "Minimum"),
        ),
    }


def _clamped(difference: str) -> str:
    """max(difference, 0), per data point: MAX([...]) takes time series only."""
    return f"IF({difference} > 0, {difference}, 0)"


def _target_group_metrics(tg: elbv2.ApplicationTargetGroup, rejected: cwl1.Metric) -> dict[str, cwl1.AnyMetric]:
    target_group = _alb_metric_factory(tg)
    requests = target_group("RequestCount", "Sum")
    # No data point in a minute without requests (or rejections): 0, so a quiet minute reads 0 %, not nothing.
    failed = _clamped("FILL(errors, 0) - FILL(rejected, 0)")
    return {
        "requests": requests,
        "requests_per_task": target_group("RequestCountPerTarget", "Sum"),
        "p99": target_group("TargetResponseTime", "p99"),
        "p50": target_group("TargetResponseTime", "p50"),
        "error_rate": cwl1.MathExpression(
            expression=f"IF(FILL(requests, 0) > 0, 100 * {failed} / FILL(requests, 1), 0)",
            using={
                "requests": requests,
                "errors": target_group("HTTPCode_Target_5XX_Count", "Sum"),
                "rejected": rejected,
            },
            label="target 5xx less admission rejections, % of requests",
        ),
        "unhealthy": target_group("UnHealthyHostCount", "Maximum"),
        "healthy": target_group("HealthyHostCount", "Minimum"),
    }
