"""Synthesize the app exactly as `cdk synth` does (same feature flags from cdk.json, same nag checks, the
pipeline under the same rule as app.py), into a directory of the test's choosing, and hand back the
templates per environment and stack, plus those of the stacks at the root of the assembly (the pipeline)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk

from inferstack.config import Project
from stacks.app_builder import POST_CLI_CONTEXT, build, pipeline_wanted
from stacks.stage import InferenceStage
from tests.support.paths import ROOT


def cdk_json_context() -> dict:
    settings = json.loads((ROOT / "cdk.json").read_text())
    context = dict(settings.get("context", {}))
    context["aws:cdk:version-reporting"] = settings.get("versionReporting", True)
    return context


@dataclass
class Synthesized:
    outdir: Path
    stages: dict[str, InferenceStage]
    templates: dict[str, dict[str, dict]]  # env -> stack id ("Foundation", model name) -> template
    report: dict | None  # CDK's validation report (cdk-nag and friends)
    root_templates: dict[str, dict]  # stacks outside any stage, by construct id: the pipeline and its support stacks

    def template(self, env: str, stack: str) -> dict:
        return self.templates[env][stack]


class ValidationFailed(AssertionError):
    pass


def synth(
    project: Project, env_names: list[str], outdir: Path, *, extend=None, pipeline: bool | None = None
) -> Synthesized:
    """`extend(stages)` may add constructs before synth (used to prove the checks can fail); `pipeline`
    None decides as `cdk synth` without `-c pipeline` does."""
    # What the CLI passes (cdk.json context, and failSynthOnValidationErrors=false), overridden as app.py does.
    context = cdk_json_context() | {
        "@aws-cdk/core:validationReportJson": True,
        "@aws-cdk/core:failSynthOnValidationErrors": False,
    }
    app = cdk.App(outdir=str(outdir), context=context, post_cli_context=POST_CLI_CONTEXT)
    if pipeline is None:
        pipeline = pipeline_wanted(project, env_names, None)
    stages = build(app, project, env_names, pipeline=pipeline)
    if extend:
        extend(stages)
    report_path = outdir / "validation-report.json"
    try:
        assembly = app.synth()
    except RuntimeError as exc:
        if "ValidationFailed" not in str(exc):
            raise
        raise ValidationFailed(violation_summary(json.loads(report_path.read_text()))) from None
    templates: dict[str, dict[str, dict]] = {}
    for env in env_names:
        nested = assembly.get_nested_assembly(f"assembly-{env}")
        templates[env] = {s.hierarchical_id.split("/", 1)[1]: s.template for s in nested.stacks}
    root_templates = {s.hierarchical_id: s.template for s in assembly.stacks}
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    return Synthesized(outdir, stages, templates, report, root_templates)


def violations(report: dict | None, plugin: str | None = None) -> list[dict]:
    if not report:
        return []
    return [v for p in report["pluginReports"] if plugin is None or p["pluginName"] == plugin for v in p["violations"]]


def violation_summary(report: dict) -> str:
    lines = []
    for plugin in report["pluginReports"]:
        for v in plugin["violations"]:
            paths = ", ".join(c["constructPath"] for c in v["violatingConstructs"])
            lines.append(
                f"{plugin['pluginName']} {v['ruleName']} ({v.get('severity')}): {paths}: {v['description'][:120]}"
            )
    return "\n".join(lines)
