"""The CloudWatch metrics the service is judged by, as plain values (inferstack.constructs.cloudwatch_l1): the
task's (ECS and its capacity provider), each model's at the load balancer (both target groups while a rollout
shifts traffic), and what the task writes itself (EMF, names in inferstack.neuron.metrics). One definition
for the alarms, the dashboard and the scaling policies, so they read the same series."""

from __future__ import annotations

import functools

from aws_cdk import aws_elasticloadbalancingv2 as elbv2

from inferstack.constructs import cloudwatch_l1 as cwl1
from inferstack.constructs.neuron_service.scope import ServiceScope
from inferstack.constructs.neuron_service.served import ServedModel
from inferstack.neuron import metrics as serving_metrics

# The serving app's EMF flush interval: one data point per minute and dimension set, what the alarms and the
# scaling policies evaluate (60 s periods).
METRICS_INTERVAL_SECONDS = 60


def model_dimensions(service: ServiceScope, served: ServedModel) -> dict[str, str]:
    return {serving_metrics.SERVICE: service.metrics_service, serving_metrics.MODEL: served.name}


class Metrics:
    """Read once the load balancer's target groups exist, each set on first use. Each token-valued name is read
    once: every read is a jsii round trip, which dominates synth at fleet scale."""

    def __init__(self, service: ServiceScope) -> None:
        self._service = service

    @functools.cached_property
    def service(self) -> dict[str, cwl1.Metric]:
        """The task's (service, cluster, capacity provider), shared by alarms and dashboard."""
        cluster_name = self._service.cluster.cluster_name
        ecs_service = {"ClusterName": cluster_name, "ServiceName": self._service.service.service_name}
        return {
            "capacity_reservation": cwl1.Metric(
                "AWS/ECS/ManagedScaling", "CapacityProviderReservation",
                {"ClusterName": cluster_name,
                 "CapacityProviderName": self._service.capacity_provider.capacity_provider_name}, "Minimum"),
            "cpu": cwl1.Metric("AWS/ECS", "CPUUtilization", ecs_service, "Average"),
            "memory": cwl1.Metric("AWS/ECS", "MemoryUtilization", ecs_service, "Average"),
            "task_count": cwl1.Metric("ECS/ContainerInsights", "RunningTaskCount", ecs_service, "Average"),
        }

    @functools.cached_property
    def models(self) -> dict[str, dict[str, cwl1.AnyMetric]]:
        """Per served model, from its target group (and its alternate, with a traffic-shifting rollout)."""
        out = {}
        for index, served in enumerate(self._service.served):
            group = self._service.target_groups[served.name]
            alternate = self._service.alternate_target_groups.get(served.name)
            out[served.name] = (_target_group_metrics(group) if alternate is None
                                else _target_group_pair_metrics(group, alternate, index))
        return out

    @functools.cached_property
    def emf(self) -> dict[str, dict[str, cwl1.Metric]]:
        """What the task writes itself (inferstack.neuron.metrics, EMF through the awslogs driver), per served
        model under (Service, Model), and the task's NeuronCores under (Service) alone (key "" below)."""
        namespace, m = serving_metrics.NAMESPACE, serving_metrics

        def metric(name: str, dimensions: dict[str, str], statistic: str) -> cwl1.Metric:
            return cwl1.Metric(namespace, name, dimensions, statistic, METRICS_INTERVAL_SECONDS)

        out = {}
        for served in self._service.served:
            dims = model_dimensions(self._service, served)
            out[served.name] = {
                "in_flight": metric(m.IN_FLIGHT, dims, "Average"),
                "queue_depth": metric(m.QUEUE_DEPTH, dims, "Average"),
                "batch_size": metric(m.BATCH_SIZE, dims, "Average"),
                "inference_p50": metric(m.INFERENCE_LATENCY, dims, "p50"),
                "inference_p99": metric(m.INFERENCE_LATENCY, dims, "p99"),
                "core_utilization": metric(m.NEURONCORE_UTILIZATION, dims, "Average"),
                "device_memory": metric(m.DEVICE_MEMORY_USED, dims, "Maximum"),
                "execution_errors": metric(m.EXECUTION_ERRORS, dims, "Sum"),
            }
        out[""] = {"core_utilization": metric(m.NEURONCORE_UTILIZATION,
                                              {m.SERVICE: self._service.metrics_service}, "Average")}
        return out


def _alb_metric_factory(tg: elbv2.ApplicationTargetGroup):
    # As tg.metrics names them: the load balancer by the full name in the first listener's ARN.
    alb = {"LoadBalancer": tg.first_load_balancer_full_name, "TargetGroup": tg.target_group_full_name}

    def target_group(metric_name: str, statistic: str) -> cwl1.Metric:
        return cwl1.Metric("AWS/ApplicationELB", metric_name, alb, statistic)
    return target_group


def _target_group_pair_metrics(primary: elbv2.ApplicationTargetGroup, alternate: elbv2.ApplicationTargetGroup,
                               index: int) -> dict[str, cwl1.AnyMetric]:
    """A model behind two target groups (ECS native blue/green, linear, canary): the tasks sit in either, and
    in both while a deployment shifts traffic. Counts are summed over the two; latency, error rate and
    unhealthy targets are the worse of the two, so a failing canary alarms (and rolls back) even while it
    takes a small share of the requests. Missing data (an empty group reports nothing) counts as 0. Ids carry
    the model's index: a fleet's graph may show several models' expressions, and ids must be unique there."""
    sources = (_alb_metric_factory(primary), _alb_metric_factory(alternate))

    def pair(key: str, metric_name: str, statistic: str) -> tuple[tuple[str, cwl1.Metric], ...]:
        return tuple((f"{key}_{index}{suffix}", source(metric_name, statistic))
                     for suffix, source in zip(("", "_alt"), sources))

    def combined(label: str, template: str, *pairs: tuple[tuple[str, cwl1.Metric], ...]) -> cwl1.MathExpression:
        ids = [query_id for p in pairs for query_id, _ in p]
        using = {query_id: metric for p in pairs for query_id, metric in p}
        return cwl1.MathExpression(expression=template.format(*ids), using=using, label=label)

    requests = pair("requests", "RequestCount", "Sum")
    errors = pair("errors", "HTTPCode_Target_5XX_Count", "Sum")
    (r1, _), (r2, _) = requests
    (e1, _), (e2, _) = errors
    rate = "IF(FILL({r}, 0) > 0, 100 * FILL({e}, 0) / FILL({r}, 1), 0)"
    return {
        "requests": combined("requests (both target groups)", "FILL({}, 0) + FILL({}, 0)", requests),
        "requests_per_task": combined("requests per task (both target groups)", "FILL({}, 0) + FILL({}, 0)",
                                      pair("per_task", "RequestCountPerTarget", "Sum")),
        "p99": combined("p99 (worse target group)", "MAX([FILL({}, 0), FILL({}, 0)])",
                        pair("p99", "TargetResponseTime", "p99")),
        "p50": combined("p50 (worse target group)", "MAX([FILL({}, 0), FILL({}, 0)])",
                        pair("p50", "TargetResponseTime", "p50")),
        "error_rate": cwl1.MathExpression(
            expression=f"MAX([{rate.format(r=r1, e=e1)}, {rate.format(r=r2, e=e2)}])",
            using=dict(requests + errors), label="target 5xx, % of requests (worse target group)"),
        "unhealthy": combined("unhealthy targets (worse target group)", "MAX([FILL({}, 0), FILL({}, 0)])",
                              pair("unhealthy", "UnHealthyHostCount", "Maximum")),
        "healthy": combined("healthy targets (both target groups)", "FILL({}, 0) + FILL({}, 0)",
                            pair("healthy", "HealthyHostCount", "Minimum")),
    }


def _target_group_metrics(tg: elbv2.ApplicationTargetGroup) -> dict[str, cwl1.AnyMetric]:
    target_group = _alb_metric_factory(tg)
    requests = target_group("RequestCount", "Sum")
    return {
        "requests": requests,
        "requests_per_task": target_group("RequestCountPerTarget", "Sum"),
        "p99": target_group("TargetResponseTime", "p99"),
        "p50": target_group("TargetResponseTime", "p50"),
        "error_rate": cwl1.MathExpression(
            expression="IF(requests > 0, 100 * FILL(errors, 0) / requests, 0)",
            using={"requests": requests, "errors": target_group("HTTPCode_Target_5XX_Count", "Sum")},
            label="target 5xx, % of requests"),
        "unhealthy": target_group("UnHealthyHostCount", "Maximum"),
        "healthy": target_group("HealthyHostCount", "Minimum"),
    }
