"""Which throughput_profile entry sizes a model (or a fleet's member) in an environment, and whether that
entry was measured (it carries a `measured:` block) or is an estimate, and whether what was measured is a p99;
plan and validate report it."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass

from inferstack.capacity import packing
from inferstack.schema import kinds
from inferstack.schema.fleets import Fleet
from inferstack.schema.kinds import Model
from inferstack.schema.throughput import RECOMMENDER_METHOD, ProfilePoint

ESTIMATE = "estimate"


@dataclass(frozen=True)
class Sizing:
    """The entry `throughput_profile[instance_type]` of `model`; `point` is None where there is none (the
    planner reports that as an error of its own)."""

    model: str
    instance_type: str
    point: ProfilePoint | None
    fleet: str | None = None  # the fleet whose plan uses the entry, where one carries the model

    @property
    def measured(self) -> bool:
        return self.point is not None and self.point.measured is not None

    @property
    def percentile(self) -> str | None:
        """The percentile its latency was measured at ("p99", "p95"); None for an estimate."""
        measured = self.point.measured if self.point is not None else None
        return measured.latency_percentile if measured is not None else None

    @property
    def p99_measured(self) -> bool:
        """What the plan's latency check and a production sizing need: a p99 someone measured."""
        return self.percentile == "p99"

    @property
    def caveat(self) -> str | None:
        """Why a measured entry's p99 is not a measurement (one line), or None."""
        measured = self.point.measured if self.point is not None else None
        if measured is None or measured.latency_percentile == "p99":
            return None
        where = " from Inference Recommender" if measured.method.startswith(RECOMMENDER_METHOD) else ""
        return f"{measured.latency_percentile}{where}, not a p99 measurement"

    def age_days(self, today: datetime.date) -> int | None:
        if self.point is None or self.point.measured is None:
            return None
        return (today - self.point.measured.date).days

    def describe(self, today: datetime.date) -> str:
        """ "measured 2025-06-01 (12 days ago)" or "estimate"; a p95 entry adds its caveat."""
        if self.point is None or self.point.measured is None:
            return ESTIMATE
        age = self.age_days(today)
        when = "today" if age == 0 else f"{age} day{'s' if age != 1 else ''} ago"
        caveat = f": {self.caveat}" if self.caveat else ""
        return f"measured {self.point.measured.date.isoformat()} ({when}){caveat}"

    def short(self, today: datetime.date) -> str:
        """For a table cell: "measured 12d", "measured 12d (p95)" or "estimate"."""
        if not self.measured:
            return ESTIMATE
        return f"measured {self.age_days(today)}d" + ("" if self.p99_measured else f" ({self.percentile})")


def dedicated(model: Model, env_name: str, instance_type: str | None = None) -> Sizing:
    """The entry that sizes the model on its own instances or endpoint (the stacks' plan, or `instance_type`)."""
    itype = instance_type or model.capacity_for(env_name).instance_type
    return Sizing(model.name, itype, model.throughput_profile.get(itype))


def fleet_member(model: Model, fleet_name: str, fleet, env_name: str) -> Sizing:
    """The entry a fleet's plan reads for one member (inferstack/capacity/packing.py): the fleet's instance type
    for NeuronCores; inference_component.profiled_on (else the model's instance type) for a shared endpoint."""
    itype = packing.PLANNERS[kinds.fleet_kind(fleet)].profiled_on(model, fleet, env_name)
    return Sizing(model.name, itype, model.throughput_profile.get(itype), fleet=fleet_name)


def sizing(fleets: Mapping[str, Fleet], model: Model, env_name: str) -> Sizing:
    """What sizes `model` in `env_name`: its fleet's plan where a fleet carries it there (as
    Project.fleet_of decides), else its own."""
    for name, fleet in fleets.items():
        if model.name in fleet.models and fleet.deploys_in(env_name):
            return fleet_member(model, name, fleet, env_name)
    return dedicated(model, env_name)
