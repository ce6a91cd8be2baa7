"""The JSON arrays of model objects the packed image takes (build arg MODELS, runtime SERVER_MODELS):
parsing and the checks every entry shares, each failure a one-line SettingsError naming the entry's key."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from compile_settings import SettingsError

NAME = re.compile(r"^[a-z][a-z0-9-]*$")


def array(raw: str, label: str) -> list:
    """The non-empty JSON array `raw`."""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{label}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, list) or not value:
        raise SettingsError(f"{label}: expected a non-empty JSON array of model objects")
    return value


def entry(where: str, raw, *, known: Sequence[str], required: Sequence[str], joiner: str = ", ") -> dict:
    """`raw` as an object with only `known` keys, every `required` one among them, and a valid `name`."""
    if not isinstance(raw, dict):
        raise SettingsError(f"{where}: expected an object with {joiner.join(required)}, got {json.dumps(raw)[:60]}")
    for key in raw:
        if key not in known:
            raise SettingsError(f"{where}.{key}: unknown key (known: {', '.join(known)})")
    for key in required:
        if key not in raw:
            raise SettingsError(f"{where}.{key}: required")
    name = raw["name"]
    if not isinstance(name, str) or not NAME.match(name):
        raise SettingsError(f"{where}.name: expected a name like intent-bert ([a-z][a-z0-9-]*), got {json.dumps(name)}")
    return raw


def integer(label: str, value, low: int | None = None, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SettingsError(f"{label}: expected an integer, got {json.dumps(value)}")
    if low is not None and high is not None and not low <= value <= high:
        raise SettingsError(f"{label}: must be between {low} and {high}, got {value}")
    return value
