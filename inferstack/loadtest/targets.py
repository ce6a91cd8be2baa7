"""What `--target` names, for `inferstack loadtest` and `inferstack profile`: an http(s) URL of a model's inference
route, or sagemaker:ENDPOINT[/COMPONENT] for a signed InvokeEndpoint."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from inferstack.command_line import UsageError
from inferstack.loadtest.spec import Target

# SageMaker's EndpointName / InferenceComponentName pattern.
SAGEMAKER_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")


def parse_target(value: str, model_name: str, region: str) -> Target:
    if value.startswith("sagemaker:"):
        endpoint, _, component = value.removeprefix("sagemaker:").partition("/")
        for what, name in (("endpoint", endpoint), ("inference component", component)):
            if (name or what == "endpoint") and not SAGEMAKER_NAME.fullmatch(name):
                raise UsageError(
                    f"--target: {what} name {name!r} is not a SageMaker name (letters, digits and hyphens, at most 63)"
                )
        return Target(kind="sagemaker", endpoint=endpoint, component=component or None, region=region)
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        raise UsageError(f"--target: bad port in {value!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--target: {value!r} is neither an http(s) URL nor sagemaker:ENDPOINT[/COMPONENT]")
    if parts.path in ("", "/"):
        value = f"{value.rstrip('/')}/v2/models/{model_name}/infer"
    return Target(kind="http", url=value)
