"""Timestamps are stored as ISO-8601 UTC strings with milliseconds and a `Z`, the format Step Functions'
`$$.State.EnteredTime` uses, so rows written by Lambdas and by the state machine sort together."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def to_iso(moment: datetime) -> str:
    """UTC to the millisecond, its year in four digits (strftime's %Y leaves years before 1000 short, which
    put `0999-…` after `2026-…` in every comparison of these strings)."""
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def from_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def now_iso() -> str:
    return to_iso(datetime.now(UTC))


def iso_before(seconds: float, now: datetime | None = None) -> str:
    return to_iso((now or datetime.now(UTC)) - timedelta(seconds=seconds))
