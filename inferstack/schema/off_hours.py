"""Scheduled windows of reduced capacity, a model's or a fleet's (`off_hours:` of an environment)."""

from __future__ import annotations

import zoneinfo
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from inferstack.schema.base import Frozen

# Application Auto Scaling cron: six fields, minutes to year (e.g. "cron(0 20 ? * MON-FRI *)").
CRON_PATTERN = r"^cron\(\S+ \S+ \S+ \S+ \S+ \S+\)$"


def _time_zone(value: str) -> str:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown IANA time zone {value!r} (e.g. UTC, Europe/Berlin)") from None
    return value


class OffHours(Frozen):
    """A recurring window (nights, weekends) with reduced capacity. Capacity returns to the planned
    min/max at `end`, so a scale-down can never be left without its scale-up."""

    start: str = Field(pattern=CRON_PATTERN, description="cron(...) when the window opens")
    end: str = Field(pattern=CRON_PATTERN, description="cron(...) when planned capacity returns")
    min: int = Field(
        ge=0,
        description="minimum inside the window; 0 (scale to zero) where the model runs on a "
        "fleet that allows it (config/checks/off_hours.py): a dedicated real-time endpoint needs 1",
    )
    max: int = Field(ge=0, description="maximum inside the window; 0 closes a neuron-cores fleet for the window")
    time_zone: Annotated[str, AfterValidator(_time_zone)] = Field("UTC", description="IANA zone of the crons")

    @model_validator(mode="after")
    def _window(self) -> OffHours:
        if self.min > self.max:
            raise ValueError(f"min {self.min} > max {self.max}")
        if self.start == self.end:
            raise ValueError("start and end are the same schedule")
        return self
