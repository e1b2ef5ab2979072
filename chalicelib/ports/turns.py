"""Fairness's book: whose turn it is at each stage's door (chalicelib/domain/turns.py decides)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

R = TypeVar("R")


class TurnBook(Protocol):
    """Whose turn it is at each stage's door (chalicelib/domain/turns.py decides; this keeps the book)."""

    def change(
        self,
        stage: str,
        change: Callable[[dict[str, Any]], tuple[R, dict[str, Any]]],
        expires_at: int | None = None,
    ) -> R:
        """Applies `change` to the stage's book atomically (a conditional write, retried on a conflict) and
        returns what it returned; raises TurnBookBusy when the conflicts outlast the tries. Given
        `expires_at` (epoch seconds), the store may delete the book from then on (a TTL: a book that is
        done with); without it, the book keeps the expiry it had (none for a stage's door)."""
        ...


class TurnBookBusy(Exception):
    """The stage's book kept changing under every try of a conditional write (many writers at once)."""
