"""The outputs of a deployed serving stack (`<env>-<model>`, or `<env>-<fleet>` for the models of a
neuron-cores fleet), read from CloudFormation: how promote and smoke find the cluster, service, endpoint or
URL a model runs behind; and those of an environment's load-test stack (`<env>-LoadTest`)."""

from __future__ import annotations

import json

import botocore.exceptions

from inferstack.command_line import Failure

FOUNDATION = "Foundation"  # the stage's shared stack (stacks/stage.py)
PROBE_FUNCTION_NAME = "SmokeProbeFunctionName"  # output of the foundation: the in-VPC smoke probe
PRIVATE_SUBNETS = "PrivateSubnets"  # output of the foundation: the private subnets' ids, comma-joined
ENDPOINT_NAME = "EndpointName"  # a Triton model's SageMaker endpoint (a fleet's shared one for a component)
INFERENCE_COMPONENT_NAME = "InferenceComponentName"  # a Triton model on a fleet's shared endpoint
# Output of a neuron-cores fleet's stack (`<env>-<fleet>`): JSON {model: path under Url}, one entry per member.
MODEL_PATHS = "ModelPaths"

# The stage's load-test stack (`<env>-LoadTest`, stacks/load_test_stack.py), in environments with `load_test:`.
# Its outputs are what `inferstack loadtest --env` starts tasks from (inferstack/loadtest/fargate.py) and where
# promotion's gate reads a release's results.
LOAD_TEST = "LoadTest"
RESULTS_BUCKET = "ResultsBucket"
CLUSTER = "Cluster"
MASTER_TASK_DEFINITION = "MasterTaskDefinition"
WORKER_TASK_DEFINITION = "WorkerTaskDefinition"
MASTER_CONTAINER = "MasterContainer"
WORKER_CONTAINER = "WorkerContainer"
MASTER_SECURITY_GROUP = "MasterSecurityGroup"
WORKER_SECURITY_GROUP = "WorkerSecurityGroup"
# The tasks run in the foundation's PRIVATE_SUBNETS: read there (an output here would only re-export its imports).
LOAD_TEST_OUTPUTS = (
    RESULTS_BUCKET,
    CLUSTER,
    MASTER_TASK_DEFINITION,
    WORKER_TASK_DEFINITION,
    MASTER_CONTAINER,
    WORKER_CONTAINER,
    MASTER_SECURITY_GROUP,
    WORKER_SECURITY_GROUP,
)


class StackNotFound(Failure):
    pass


def stack_name(env_name: str, model: str) -> str:
    return f"{env_name}-{model}"  # the Stage prefixes its stacks' names (stacks/stage.py)


def model_paths_value(paths: dict[str, str]) -> str:
    """The MODEL_PATHS output's value: sorted, compact JSON (deterministic, readable in the console)."""
    return json.dumps(paths, sort_keys=True, separators=(",", ":"))


def model_path(values: dict[str, str], env_name: str, stack: str, model: str) -> str:
    """A fleet model's path under the fleet stack's Url, from its MODEL_PATHS output."""
    (raw,) = require(values, (MODEL_PATHS,), env_name, stack)
    try:
        paths = json.loads(raw)
    except ValueError:
        paths = None
    if not isinstance(paths, dict) or not isinstance(paths.get(model), str):
        raise StackNotFound(
            f"{model}: stack {stack_name(env_name, stack)} output {MODEL_PATHS} names no path for it ({raw[:120]})"
        )
    return paths[model]


def outputs(cloudformation, env_name: str, model: str) -> dict[str, str]:
    name = stack_name(env_name, model)
    try:
        stacks = cloudformation.describe_stacks(StackName=name)["Stacks"]
    except botocore.exceptions.ClientError as exc:
        if "does not exist" in str(exc):
            raise StackNotFound(f"{model}: stack {name} not found (is {env_name} deployed?)") from None
        raise
    return {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs") or []}


def require(values: dict[str, str], keys: tuple[str, ...], env_name: str, model: str) -> tuple[str, ...]:
    missing = [k for k in keys if not values.get(k)]
    if missing:
        raise StackNotFound(f"{model}: stack {stack_name(env_name, model)} has no output {', '.join(missing)}")
    return tuple(values[k] for k in keys)
