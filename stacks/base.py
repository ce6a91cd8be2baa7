"""Base for every inferstack stack: availability zones come from config, never from a lookup."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import Construct

from inferstack.config import Environment


class EnvironmentStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, environment: Environment, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self._zones = list(environment.availability_zones)

    @property
    def availability_zones(self) -> list[str]:
        # Overrides cdk.Stack's lookup so synth stays offline and deterministic.
        return self._zones
