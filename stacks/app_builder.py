"""Assemble the app: the stages for the chosen environments plus the cdk-nag checks. Shared by app.py
and the tests so both synthesize exactly the same thing."""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk

from inferstack import nag
from inferstack.config import Project
from stacks.stage import InferenceStage, add_stages


def build(app: cdk.App, project: Project, env_names: Sequence[str]) -> dict[str, InferenceStage]:
    stages = add_stages(app, project, env_names)
    nag.add_checks(app)
    return stages
