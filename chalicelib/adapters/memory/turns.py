"""The stages' turn books, in memory."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")


class MemoryTurnBook:
    def __init__(self) -> None:
        self._books: dict[str, dict[str, Any]] = {}
        #: each book's TTL (epoch seconds), as the table keeps it (nothing here deletes a book)
        self.expiries: dict[str, int] = {}
        self._lock = threading.Lock()

    def change(
        self,
        stage: str,
        change: Callable[[dict[str, Any]], tuple[R, dict[str, Any]]],
        expires_at: int | None = None,
    ) -> R:
        with self._lock:
            result, changed = change(copy.deepcopy(self._books.get(stage, {})))
            self._books[stage] = copy.deepcopy(changed)
            if expires_at is not None:
                self.expiries[stage] = expires_at
            return result
