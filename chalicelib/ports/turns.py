"""Fairness's book: whose turn it is at each stage's door (chalicelib/domain/turns.py decides)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

R = TypeVar("R")


class TurnBook(Protocol):
    """Whose turn it is at each stage's door (chalicelib/domain/turns.py decides; this keeps the book)."""

    def change(self, stage: str, change: Callable[[dict[str, Any]], tuple[R, dict[str, Any]]]) -> R:
        """Applies `change` to the stage's book atomically (a conditional write, retried on a conflict) and
        returns what it returned; raises TurnBookBusy when the conflicts outlast the tries."""
        ...


class TurnBookBusy(Exception):
    """The stage's book kept changing under every try of a conditional write (many writers at once)."""
