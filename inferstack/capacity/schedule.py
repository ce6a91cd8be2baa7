"""How much of the time an off-hours window is open, from its two Application Auto Scaling crons.

Prices are per hour, so a schedule's saving is the share of a month the window holds reduced capacity.
The crons are evaluated minute by minute over four reference weeks (a Monday to a Sunday, in the
window's own time zone), which covers every weekday pattern; day-of-month and month fields are evaluated
on those real dates, so a monthly schedule gets that month's share.
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from datetime import datetime, timedelta

from inferstack.schema.off_hours import OffHours

REFERENCE_START = datetime(2025, 1, 6)  # a Monday
REFERENCE_DAYS = 28
_DAYS = {"SUN": 1, "MON": 2, "TUE": 3, "WED": 4, "THU": 5, "FRI": 6, "SAT": 7}  # cron day-of-week numbering
_MONTHS = {
    name: i
    for i, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), start=1
    )
}


class CronError(ValueError):
    pass


def _values(field: str, low: int, high: int, names: dict[str, int]) -> frozenset[int] | None:
    """The values a cron field admits; None for `*` and `?` (any)."""
    if field in ("*", "?"):
        return None
    out: set[int] = set()
    for part in field.split(","):
        step = 1
        if "/" in part:
            part, step_text = part.split("/", 1)
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(f"bad step in {field!r}")
            step = int(step_text)
        if part in ("*", "?"):
            first, last = low, high
        elif "-" in part:
            a, b = part.split("-", 1)
            first, last = _number(a, names), _number(b, names)
        else:
            first = _number(part, names)
            last = high if step > 1 else first
        if not (low <= first <= high and low <= last <= high) or last < first:
            raise CronError(f"{field!r} is outside {low}-{high}")
        out.update(range(first, last + 1, step))
    return frozenset(out)


def _number(text: str, names: dict[str, int]) -> int:
    text = text.upper()
    if text in names:
        return names[text]
    if not re.fullmatch(r"\d{1,4}", text):
        raise CronError(f"{text!r} is not a number or a name")
    return int(text)


@functools.lru_cache(maxsize=256)
def _matcher(expression: str):
    match = re.fullmatch(r"cron\((\S+) (\S+) (\S+) (\S+) (\S+) (\S+)\)", expression)
    if not match:
        raise CronError(f"{expression!r} is not cron(minutes hours day-of-month month day-of-week year)")
    minute, hour, dom, month, dow, year = match.groups()
    if "L" in dom or "W" in dom or "#" in dow or "L" in dow:
        raise CronError(f"{expression!r}: L, W and # are not evaluated here")
    sets = (
        _values(minute, 0, 59, {}),
        _values(hour, 0, 23, {}),
        _values(dom, 1, 31, {}),
        _values(month, 1, 12, _MONTHS),
        _values(dow, 1, 7, _DAYS),
    )

    def matches(moment: datetime) -> bool:
        values = (moment.minute, moment.hour, moment.day, moment.month, moment.isoweekday() % 7 + 1)
        return all(allowed is None or value in allowed for allowed, value in zip(sets, values, strict=True))

    return matches


@functools.lru_cache(maxsize=256)
def open_share(start: str, end: str, time_zone: str = "UTC") -> float:
    """Share of the reference weeks (0..1) a window that opens at `start` and closes at `end` is open.
    The state before the first event is the state the reference period ends in (a steady schedule)."""
    opens, closes = _matcher(start), _matcher(end)
    zone = zoneinfo.ZoneInfo(time_zone)
    minutes = REFERENCE_DAYS * 24 * 60
    events = []
    moment = REFERENCE_START.replace(tzinfo=zone)
    step = timedelta(minutes=1)
    for index in range(minutes):
        wall = moment + index * step
        if opens(wall):
            events.append((index, True))
        elif closes(wall):
            events.append((index, False))
    if not events:
        return 0.0
    state = events[-1][1]  # wraps around: the period repeats
    open_minutes, previous = 0, 0
    for index, new_state in events:
        if state:
            open_minutes += index - previous
        state, previous = new_state, index
    if state:
        open_minutes += minutes - previous
    return open_minutes / minutes


def window_share(window: OffHours) -> float:
    return open_share(window.start, window.end, window.time_zone)


def unix_recurrence(expression: str) -> str:
    """An Application Auto Scaling cron (`cron(min hour dom month dow year)`, days of the week 1-7 from SUNDAY)
    as the five-field Unix cron an EC2 Auto Scaling scheduled action's `Recurrence` takes (days of the week
    0-6 from Sunday, no `?`, no year): so the group's schedule fires when the service's does. CronError for
    what Unix cron cannot say (a year other than `*`; `L`, `W`, `#`)."""
    _matcher(expression)  # validates the fields and their ranges
    match = re.fullmatch(r"cron\((\S+) (\S+) (\S+) (\S+) (\S+) (\S+)\)", expression)
    assert match is not None
    minute, hour, dom, month, dow, year = match.groups()
    if year not in ("*", "?"):
        raise CronError(f"{expression!r}: a year field is not expressible in Unix cron")
    return " ".join((minute, hour, _any(dom), month, _any(_shift_days(dow))))


def _any(field: str) -> str:
    return "*" if field == "?" else field


def _shift_days(field: str) -> str:
    """Numeric days of the week from 1-7 (SUN=1) to 0-6 (Sunday=0); names are the same in both. A bare start
    with a step (`2/2`: from MONDAY, every other day) gets its end written out (`1-6/2`), which every Unix
    cron reads the same way."""
    if field in ("*", "?"):
        return field

    def part(text: str) -> str:
        days, _, step = text.partition("/")
        shifted = re.sub(r"\d+", lambda m: str(int(m.group(0)) - 1), days)
        if step and days not in ("*", "?") and "-" not in days:
            shifted += "-6" if days.isdigit() else "-SAT"
        return f"{shifted}/{step}" if step else shifted

    return ",".join(part(p) for p in field.split(","))
