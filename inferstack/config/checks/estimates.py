"""Warnings for production sized from a throughput_profile entry with no measured p99."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from inferstack.capacity import provenance
from inferstack.config.checks.common import Finding, fleet_capacity_key
from inferstack.schema import kinds
from inferstack.schema.environments import EnvironmentsFile
from inferstack.schema.kinds import Model


def _estimate_message(envs: Sequence[str], sizings: Sequence[provenance.Sizing]) -> str:
    """Entries without a measured p99: estimates, and p95 entries (an Inference Recommender job's)."""
    where = f"production environment{'s' if len(envs) > 1 else ''} {', '.join(envs)}"
    estimates = [s for s in sizings if not s.measured]
    reasons = []
    if estimates:
        entries = ", ".join(f"{s.model}'s throughput_profile.{s.instance_type}" for s in estimates)
        reasons.append(f"{entries} {'has' if len(estimates) == 1 else 'have'} no measured: block")
    reasons += [f"{s.model}'s throughput_profile.{s.instance_type} has a {s.caveat}" for s in sizings if s.measured]
    one = len(sizings) == 1
    what = (
        ("an estimate" if one else "estimates")
        if len(estimates) == len(sizings)
        else ("an entry with no measured p99" if one else "entries with no measured p99")
    )
    model = sizings[0].model if one else "MODEL"
    # Not --recommender: its job measures a p95, which leaves this warning standing.
    return (
        f"{where} sized from {what} ({'; '.join(reasons)}): measure {'it' if one else 'them'} with `python -m "
        f"inferstack profile {model} --env ENV` (a load test, which measures p99) in an environment on that "
        f"instance type before relying on the plan"
    )


def estimate_warnings(env_file: EnvironmentsFile, model: Model) -> Iterator[Finding]:
    """A model on its own instances or endpoint in a production environment (EnvironmentsFile.is_production),
    sized from an entry with no measured p99 (an estimate, or an Inference Recommender job's p95): it loads and
    deploys, but nobody measured the p99 it plans with. A fleet member's entries are reported on the fleet
    (fleet_estimate_warnings)."""
    grouped: dict[str, list[str]] = {}
    for env in env_file.environments:
        if not (env_file.is_production(env) and model.deploys_in(env)):
            continue
        sized = provenance.sizing(env_file.fleets, model, env)
        if sized.fleet is None and sized.point is not None and not sized.p99_measured:
            grouped.setdefault(sized.instance_type, []).append(env)
    for itype, envs in grouped.items():
        yield ("throughput_profile", itype), _estimate_message(envs, [provenance.dedicated(model, envs[0])])


def fleet_estimate_warnings(env_file: EnvironmentsFile, models: Mapping[str, Model]) -> Iterator[Finding]:
    """A fleet in a production environment whose plan reads an entry of one of its members with no measured
    p99."""
    for name, fleet in env_file.fleets.items():
        for env in env_file.environments:
            if not (env_file.is_production(env) and fleet.deploys_in(env)):
                continue
            # A member of another kind than the fleet carries is a problem check_fleets reports.
            members = [
                models[m]
                for m in fleet.models
                if m in models and kinds.model_kind(models[m]) is kinds.fleet_kind(fleet).member
            ]
            estimates = [
                s
                for s in (provenance.fleet_member(m, name, fleet, env) for m in members)
                if s.point is not None and not s.p99_measured
            ]
            if estimates:
                yield fleet_capacity_key(name, fleet, env, "instance_type"), _estimate_message([env], estimates)
