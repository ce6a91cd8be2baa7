"""Promotion's load test gate: a release reaches an environment behind an approval (prod) only with a
passing load test of the very images it promotes, run in the source environment (staging).

Results are where `inferstack loadtest --env` stores them: the source's results bucket (its LoadTest stack's
output), `<release>/<model>/<run id>/result.json`, the release being the image digest the model's unit ran
(promote copies that digest unchanged, so the gate checks the exact image it promotes, whatever a commit or
tag calls it). The newest run of each model (by run id) decides: a pass followed by a fail is a fail. Verdicts are
recomputed from the measured figures (results.RunResult), never read from the file; a pass at a full rate below
the planned one does not open the gate, nor does a result from before the open-model load test (schema 1)."""

from __future__ import annotations

from dataclasses import dataclass

from inferstack.aws import aws_sessions, stack_outputs
from inferstack.config import Project
from inferstack.config.release_pin import LoadTestEvidence, LoadTestRecord
from inferstack.loadtest import results

# A result file is a few KB; anything far larger is not one (read is bounded).
MAX_RESULT_BYTES = 4 * 1024 * 1024


class GateError(Exception):
    """The gate cannot be evaluated (no results bucket, unreadable result); exit 1."""


@dataclass(frozen=True)
class Finding:
    model: str
    passed: bool
    line: str  # one line for the promote output
    evidence: LoadTestEvidence | None = None


def required(project: Project, source_env: str, target_env: str) -> str | None:
    """Why the gate applies to this promotion, or None: when the target serves production (its `production`
    setting, else the pipeline's last stage) or is behind an approval in the pipeline (`approval_before`),
    or the source runs load tests (`load_test:` in its environment)."""
    pipeline = project.pipeline
    if project.is_production(target_env):
        return f"{target_env} serves production (environments.{target_env}.production, else the pipeline's last stage)"
    if pipeline is not None and target_env in pipeline.approval_before:
        return f"{target_env} is deployed after an approval (pipeline.approval_before)"
    if project.environments[source_env].load_test is not None:
        return f"{source_env} runs load tests (load_test in environments.yaml)"
    return None


def _newest_result(s3, bucket: str, prefix: str) -> tuple[str, results.RunResult] | None:
    newest = None
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", ()):
            # Run ids sort in time order (results.new_run_id).
            if item["Key"].endswith("/" + results.RESULT_FILE) and (newest is None or item["Key"] > newest["Key"]):
                newest = item
    if newest is None:
        return None
    where = f"s3://{bucket}/{newest['Key']}"
    if newest.get("Size", 0) > MAX_RESULT_BYTES:
        raise GateError(f"{where}: {newest['Size']} bytes is not a load test result")
    body = s3.get_object(Bucket=bucket, Key=newest["Key"])["Body"].read(MAX_RESULT_BYTES + 1)
    try:
        return where, results.RunResult.from_json(body.decode("utf-8", "replace"), where)
    except results.ResultError as exc:
        raise GateError(str(exc)) from None


def evaluate(session, project: Project, source_env: str, units: dict[str, str]) -> list[Finding]:
    """One finding per model of the promoted units. `units`: image unit -> the digest promoted."""
    try:
        values = stack_outputs.outputs(session.client("cloudformation"), source_env, stack_outputs.LOAD_TEST)
        (bucket,) = stack_outputs.require(values, (stack_outputs.RESULTS_BUCKET,), source_env, stack_outputs.LOAD_TEST)
    except stack_outputs.StackNotFound:
        raise GateError(
            f"stack {stack_outputs.stack_name(source_env, stack_outputs.LOAD_TEST)} with output "
            f"{stack_outputs.RESULTS_BUCKET} not found: {source_env} has no load test results to check "
            f"(load_test in environments.yaml deploys it)"
        ) from None
    s3 = session.client("s3")
    members = {unit.name: [m.name for m in unit.models] for unit in project.image_units(source_env)}
    findings = []
    for unit, digest in sorted(units.items()):
        for model in sorted(members.get(unit, [unit])):
            try:
                found = _newest_result(s3, bucket, results.results_prefix(digest, model))
            except aws_sessions.AWS_ERRORS as exc:
                raise GateError(
                    f"{model}: reading s3://{bucket}/{results.results_prefix(digest, model)}: "
                    f"{' '.join(str(exc).split())}"
                ) from None
            if found is None:
                findings.append(
                    Finding(
                        model,
                        False,
                        f"{model}: no load test of {digest} in {source_env} "
                        f"(s3://{bucket}/{results.results_prefix(digest, model)})",
                    )
                )
                continue
            where, result = found
            if (result.model, result.release, result.environment) != (model, digest, source_env):
                findings.append(
                    Finding(
                        model,
                        False,
                        f"{model}: {where} is a test of {result.model} "
                        f"{result.release} in {result.environment}, not of this image",
                    )
                )
                continue
            full = result.full_step or result.steps[-1]
            summary = (
                f"{result.verdict} at {full.offered_rps:g} req/s offered ({full.goodput_rps:.0f} within the "
                f"SLO), p99 {results.ms_text(full.p99_ms)} (SLO {result.p99_slo_ms:g} ms), errors "
                f"{full.error_percent:.2f} %, {result.finished}"
            )
            # A pass at a rate below the plan's shows nothing about the rate prod will be asked to carry.
            passed = result.verdict == results.PASS and result.below_plan is None
            line = f"{model}: load test {summary}, {where}"
            if not passed:
                line += ": " + "; ".join(
                    result.reasons if result.verdict != results.PASS else [result.below_plan or ""]
                )
            evidence = LoadTestEvidence(
                location=where,
                verdict=result.verdict,
                finished=result.finished,
                achieved_rps=round(full.held_rps, 3),
                p99_ms=full.p99_ms,
            )
            findings.append(Finding(model, passed, line, evidence))
    return findings


def record(gate: str, findings: list[Finding], *, skipped: bool) -> LoadTestRecord:
    """What the pin keeps: why the gate applied, and the evidence of each model or that it was skipped."""
    return LoadTestRecord(
        gate=gate, skipped=skipped, results={f.model: f.evidence for f in findings if f.evidence is not None}
    )
