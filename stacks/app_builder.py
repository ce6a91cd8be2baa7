"""Assemble the app: the stages for the chosen environments plus the cdk-nag checks. Shared by app.py
and the tests so both synthesize exactly the same thing."""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk

from inferstack import nag
from inferstack.config import Project
from stacks.stage import InferenceStage, add_stages

# The CDK CLI hands every app failSynthOnValidationErrors=false, so policy findings would only be
# reported. Post-CLI context wins over the CLI's, so an unacknowledged cdk-nag finding fails synth.
POST_CLI_CONTEXT = {"@aws-cdk/core:failSynthOnValidationErrors": True}


def build(app: cdk.App, project: Project, env_names: Sequence[str]) -> dict[str, InferenceStage]:
    stages = add_stages(app, project, env_names)
    nag.add_checks(app)
    return stages
