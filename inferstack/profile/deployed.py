"""What a model runs as in an environment, read from its serving stack's outputs and the services behind them:
the target a load test calls, how many instances serve it now, and the SageMaker Model an endpoint serves."""

from __future__ import annotations

from inferstack.aws import stack_outputs
from inferstack.loadtest.spec import Target
from inferstack.schema import kinds

URL, CLUSTER, SERVICE = "Url", "ClusterName", "ServiceName"  # a Neuron model's stack outputs


class NotDeployed(Exception):
    """The stack or the service behind it is missing (one line)."""


def _outputs(cloudformation, env_name: str, model: str, keys: tuple[str, ...]) -> tuple[str, ...]:
    try:
        return stack_outputs.require(stack_outputs.outputs(cloudformation, env_name, model), keys, env_name, model)
    except stack_outputs.StackNotFound as exc:
        raise NotDeployed(str(exc)) from None


def target_and_count(session, env_name: str, model) -> tuple[Target, int]:
    """The model's own endpoint or load balancer, and the instances serving it (a Neuron service runs one task
    per instance: its running tasks; a SageMaker variant: its current instance count)."""
    cloudformation = session.client("cloudformation")
    if kinds.model_kind(model).hosting == "ecs":
        url, cluster, service = _outputs(cloudformation, env_name, model.name, (URL, CLUSTER, SERVICE))
        found = session.client("ecs").describe_services(cluster=cluster, services=[service]).get("services") or []
        if not found:
            raise NotDeployed(f"{model.name}: ECS service {service} not found in cluster {cluster}")
        return Target(kind="http", url=f"{url.rstrip('/')}/v2/models/{model.name}/infer"), found[0]["runningCount"]
    (endpoint,) = _outputs(cloudformation, env_name, model.name, (stack_outputs.ENDPOINT_NAME,))
    variants = session.client("sagemaker").describe_endpoint(EndpointName=endpoint).get("ProductionVariants") or []
    if not variants:
        raise NotDeployed(f"{model.name}: endpoint {endpoint} has no production variant")
    count = variants[0].get("CurrentInstanceCount") or 0
    return Target(kind="sagemaker", endpoint=endpoint, region=session.region_name), count


def model_name(cloudformation, sagemaker, env_name: str, model: str) -> str:
    """The SageMaker Model the model's endpoint serves now: the stack's EndpointName output, its endpoint
    config, the variant's ModelName. CloudFormation names the Model (no physical names), so this is the only
    way to it, and it is the one serving now, after any rollback."""
    (endpoint,) = _outputs(cloudformation, env_name, model, (stack_outputs.ENDPOINT_NAME,))
    config_name = sagemaker.describe_endpoint(EndpointName=endpoint)["EndpointConfigName"]
    variants = sagemaker.describe_endpoint_config(EndpointConfigName=config_name)["ProductionVariants"]
    names = [v["ModelName"] for v in variants if v.get("ModelName")]
    if not names:
        raise NotDeployed(f"{model}: endpoint {endpoint}'s config {config_name} names no model")
    return names[0]
