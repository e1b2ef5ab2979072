"""The fakes' clock: timestamps at millisecond precision, as DynamoDB stores them."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from chalicelib.domain.clock import from_iso, now_iso, to_iso

if TYPE_CHECKING:
    pass


def _ms(moment: datetime) -> datetime:
    """A timestamp as DynamoDB keeps it (ISO text with milliseconds, UTC)."""
    return from_iso(to_iso(moment))


def _now() -> datetime:
    return from_iso(now_iso())


# ---------------------------------------------------------------- tenants and knowledge bases
