"""Schedule expressions (AWS dialect) and the Scheduler on a driven clock, without moto."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from chalicelib.local.scheduler import (
    CronExpression,
    RateExpression,
    ScheduleExpressionError,
    Scheduler,
    parse_schedule,
)


def dt(*a: int) -> datetime:
    return datetime(*a, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        ("cron(0 3 * * ? *)", dt(2026, 11, 30, 2, 30), dt(2026, 11, 30, 3, 0)),
        ("cron(0 3 * * ? *)", dt(2026, 11, 30, 3, 0), dt(2026, 12, 1, 3, 0)),  # strictly after
        ("cron(0/15 * * * ? *)", dt(2026, 11, 30, 2, 31), dt(2026, 11, 30, 2, 45)),
        ("cron(10-12 8 ? * MON-FRI *)", dt(2026, 11, 28, 9, 0), dt(2026, 11, 30, 8, 10)),  # Sat → Mon
        ("cron(0 12 ? * 1 *)", dt(2026, 11, 30, 0, 0), dt(2026, 12, 6, 12, 0)),  # 1 = Sunday in AWS
        ("cron(0 0 L * ? *)", dt(2026, 2, 1, 0, 0), dt(2026, 2, 28, 0, 0)),
        ("cron(0 0 ? * 6L *)", dt(2026, 11, 1, 0, 0), dt(2026, 11, 27, 0, 0)),  # last Friday
        ("cron(0 0 ? * 2#1 *)", dt(2026, 11, 30, 1, 0), dt(2026, 12, 7, 0, 0)),  # first Monday
        ("cron(0 0 1W * ? *)", dt(2026, 10, 31, 0, 0), dt(2026, 11, 2, 0, 0)),  # Nov 1 2026 is a Sunday
        ("cron(0 0 1 JAN,JUL ? 2027)", dt(2026, 11, 30, 0, 0), dt(2027, 1, 1, 0, 0)),
        ("cron(0 0 1 1 ? 2020)", dt(2026, 11, 30, 0, 0), None),  # years ran out
    ],
)
def test_cron_next_after(expr: str, after: datetime, expected: datetime | None) -> None:
    parsed = parse_schedule(expr)
    assert isinstance(parsed, CronExpression)
    assert parsed.next_after(after) == expected


@pytest.mark.parametrize(
    ("expr", "interval"),
    [("rate(1 minute)", 60), ("rate(5 minutes)", 300), ("rate(1 hour)", 3600), ("rate(2 days)", 172800)],
)
def test_rate(expr: str, interval: int) -> None:
    parsed = parse_schedule(expr)
    assert isinstance(parsed, RateExpression)
    assert parsed.next_after(dt(2026, 1, 1)) == dt(2026, 1, 1) + timedelta(seconds=interval)


@pytest.mark.parametrize(
    "expr",
    [
        "rate(5 minute)",  # EventBridge wants the plural
        "rate(1 minutes)",
        "rate(0 minutes)",
        "rate(5 weeks)",
        "cron(0 3 * * *)",  # 5 fields: Unix cron, not AWS
        "cron(0 3 * * * *)",  # neither day field is '?'
        "cron(0 3 ? * ? *)",
        "cron(61 3 * * ? *)",
        "cron(0 3 * FOO ? *)",
        "every 5 minutes",
    ],
)
def test_invalid_expressions_are_rejected(expr: str) -> None:
    with pytest.raises(ScheduleExpressionError):
        parse_schedule(expr)


def test_scheduler_fires_only_when_due_and_collapses_missed_periods() -> None:
    now = [dt(2026, 11, 30, 2, 30)]
    calls: list[dict[str, Any]] = []
    sched = Scheduler(clock=lambda: now[0])
    sched.add("every10", "rate(10 minutes)", lambda ev, ctx: calls.append(ev), "app-dev-every10")
    assert sched.tick(dt(2026, 11, 30, 2, 39, 59)) == []
    assert len(sched.tick(dt(2026, 11, 30, 2, 40))) == 1
    # An hour later: one invocation for the missed periods, then the next is 10 min after the last due time.
    (late,) = sched.tick(dt(2026, 11, 30, 3, 45))
    assert late.scheduled_time == dt(2026, 11, 30, 2, 50)
    assert sched.tick(dt(2026, 11, 30, 3, 49)) == []
    assert len(sched.tick(dt(2026, 11, 30, 3, 50))) == 1
    assert [c["time"] for c in calls] == [
        "2026-11-30T02:40:00Z",
        "2026-11-30T02:50:00Z",
        "2026-11-30T03:50:00Z",
    ]


def test_a_failing_scheduled_handler_is_recorded_not_raised() -> None:
    sched = Scheduler(clock=lambda: dt(2026, 1, 1))

    def boom(ev: Any, ctx: Any) -> None:
        raise ValueError("nope")

    sched.add("b", "rate(1 minute)", boom)
    (inv,) = sched.tick(dt(2026, 1, 1, 0, 1))
    assert isinstance(inv.error, ValueError)
    assert sched.history == [inv]


def test_background_mode_ticks_on_the_clock() -> None:
    now = [dt(2026, 1, 1)]
    fired: list[str] = []
    sched = Scheduler(clock=lambda: now[0])
    sched.add("m", "rate(1 minute)", lambda ev, ctx: fired.append(ev["time"]))
    sched.start(interval_seconds=0.01)
    try:
        now[0] = dt(2026, 1, 1, 0, 1)
        deadline = time.monotonic() + 10
        while not fired and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        sched.stop()
    assert fired == ["2026-01-01T00:01:00Z"]
