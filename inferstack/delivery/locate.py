"""Where a deployed model answers, from its serving stack's outputs (stack_outputs.py): the URL a Neuron model's
load balancer routes to it (`Url`, plus the model's path from `ModelPaths` on a neuron-cores fleet's stack), or
the SageMaker endpoint (`EndpointName`, and `InferenceComponentName` on a fleet's shared endpoint) of a Triton
model. One lookup for smoke and invoke."""

from __future__ import annotations

from dataclasses import dataclass

from inferstack.aws import stack_outputs
from inferstack.schema import kinds

URL = "Url"


@dataclass(frozen=True)
class Location:
    stack: str  # the unit whose `<env>-<stack>` stack serves the model: its own, or its fleet's
    url: str | None = None  # Neuron: POST the request here
    endpoint: str | None = None  # Triton: InvokeEndpoint on this endpoint
    component: str | None = None  # ... and this inference component of it

    def describe(self) -> str:
        if self.url is not None:
            return self.url
        return f"endpoint {self.endpoint}" + (f" component {self.component}" if self.component else "")


def locate(cloudformation, env_name: str, model, stack: str | None = None) -> Location:
    """`model`'s Location in `env_name`; `stack`: the unit serving it when not its own (project.image_units).
    StackNotFound naming the stack, or the output it lacks."""
    stack = stack or model.name
    values = stack_outputs.outputs(cloudformation, env_name, stack)
    if kinds.model_kind(model).hosting == "ecs":
        (base,) = stack_outputs.require(values, (URL,), env_name, stack)
        path = (
            f"/v2/models/{model.name}"
            if stack == model.name
            else stack_outputs.model_path(values, env_name, stack, model.name)
        )
        return Location(stack, url=f"{base.rstrip('/')}{path}/infer")
    (endpoint,) = stack_outputs.require(values, (stack_outputs.ENDPOINT_NAME,), env_name, stack)
    return Location(stack, endpoint=endpoint, component=values.get(stack_outputs.INFERENCE_COMPONENT_NAME) or None)
