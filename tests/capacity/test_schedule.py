"""Off-hours crons: Application Auto Scaling's format (the service's scheduled actions) rewritten as the
Unix cron an EC2 Auto Scaling scheduled action takes, so the instances follow the tasks at the same moments."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from inferstack.capacity import schedule


@pytest.mark.parametrize(
    "aas, unix",
    [
        ("cron(0 20 ? * MON-FRI *)", "0 20 * * MON-FRI"),
        ("cron(30 6 ? * 2-6 *)", "30 6 * * 1-5"),  # 1-7 from SUNDAY -> 0-6 from Sunday
        ("cron(0 */2 ? * 1,7 *)", "0 */2 * * 0,6"),
        ("cron(0 8 ? * 2/2 *)", "0 8 * * 1-6/2"),  # from MONDAY, every other day
        ("cron(0 8 ? * MON/2 *)", "0 8 * * MON-SAT/2"),
        ("cron(15 3 1 * ? *)", "15 3 1 * *"),
        ("cron(0 0 ? JAN-MAR SUN *)", "0 0 * JAN-MAR SUN"),
    ],
)
def test_unix_recurrence(aas, unix):
    assert schedule.unix_recurrence(aas) == unix


@pytest.mark.parametrize(
    "bad", ["cron(0 8 ? * MON 2027)", "cron(0 8 L * ? *)", "cron(0 8 ? * 6#3 *)", "rate(5 minutes)"]
)
def test_what_unix_cron_cannot_say_is_refused(bad):
    with pytest.raises(schedule.CronError):
        schedule.unix_recurrence(bad)


def _unix_days(field: str) -> set[int]:
    """Days of the week (0 = Sunday) a Unix cron field names: numbers, ranges, steps, names."""
    names = {name: i for i, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}
    days: set[int] = set()
    for part in field.split(","):
        values, _, step = part.partition("/")
        first, _, last = ("0-6" if values == "*" else values).partition("-")
        low = names.get(first, None) if first in names else int(first)
        high = (names[last] if last in names else int(last)) if last else (6 if step else low)
        days.update(range(low, high + 1, int(step or 1)))
    return days


@pytest.mark.parametrize("field", ["MON-FRI", "2-6", "1,7", "2/2", "*/3", "SUN", "1-7/3", "3,5-6"])
def test_days_of_the_week_fire_on_the_same_days(field):
    aas = f"cron(0 8 ? * {field} *)"
    matches = schedule._matcher(aas)
    monday = datetime(2025, 1, 6, 8, 0)
    aas_days = {(monday + timedelta(days=d)).isoweekday() % 7 for d in range(7) if matches(monday + timedelta(days=d))}
    unix_field = schedule.unix_recurrence(aas).split()[4]
    assert _unix_days(unix_field) == aas_days, unix_field
    assert aas_days  # every field here fires at least once a week
