"""Reading templates whose values are read live at deploy time (inferstack.constructs.live_values): what such a
value is when the stack is first created, which is what the planner decided."""

from __future__ import annotations

from typing import Any

READER_TYPE = "Custom::LiveValue"


def reader_of(template: dict, value: Any) -> tuple[str, str, dict] | None:
    """(reader id, attribute, its Read) when `value` is a Fn::GetAtt of a live-value reader, else None."""
    if not (isinstance(value, dict) and set(value) == {"Fn::GetAtt"}):
        return None
    reader_id, attribute = value["Fn::GetAtt"]
    reader = template["Resources"].get(reader_id, {})
    if reader.get("Type") != READER_TYPE:
        return None
    return reader_id, attribute, reader["Properties"]["Read"]


def on_create(template: dict, value: Any) -> Any:
    """`value` itself, or, read live, the planned value the reader answers while nothing is deployed yet."""
    found = reader_of(template, value)
    if found is None:
        return value
    _, attribute, read = found
    planned = read["Planned"]
    positions = {"Primary": 0, "Alternate": 1, "Min": 0, "Max": 1}
    return planned[positions[attribute]] if attribute in positions else planned


def as_created(template: dict) -> dict:
    """A copy of `template` with every live-read value replaced by `on_create`'s: the resources as a first
    deploy makes them (for tests of what the planner and the constructs decide, not of the live wiring)."""

    def replace(value: Any) -> Any:
        if reader_of(template, value) is not None:
            return on_create(template, value)
        if isinstance(value, dict):
            return {key: replace(item) for key, item in value.items()}
        if isinstance(value, list):
            return [replace(item) for item in value]
        return value

    return {
        **template,
        "Resources": {
            logical_id: {**resource, "Properties": replace(resource.get("Properties", {}))}
            if resource.get("Type") != READER_TYPE
            else resource
            for logical_id, resource in template.get("Resources", {}).items()
        },
    }
