"""What one API answer may hold. The API is a Lambda function behind API Gateway: a synchronous answer over
6 MB fails (the caller gets a 502, not an error with a code). So a listing ends its page, and a bounded answer
is cut, before ANSWER_MAX_BYTES, by one rule: `AnswerBudget` (item by item) or `fitting` (a list at once); the
first item always fits, so every answer holds at least one. Items are counted as `json.dumps` writes them
(non-ASCII escaped: a CJK character is 6 bytes, as Lambda encodes the body), a comma between them: at least
what the API's compact JSON takes. The margin to 6 MB is for the envelope and Lambda's own escaping."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

ANSWER_MAX_BYTES = 5 * 1024 * 1024

T = TypeVar("T")


def json_size(value: Any) -> int:
    """`value`'s JSON as the API writes it (non-ASCII escaped)."""
    return len(json.dumps(value, default=str))


class AnswerBudget:
    """An answer's list of items, counted as JSON: `takes(item)` is False once the item would pass the
    budget (`used`: the bytes the rest of the answer takes)."""

    def __init__(
        self, max_bytes: int = ANSWER_MAX_BYTES, used: int = 0, *, at_least_one: bool = True
    ) -> None:
        self.left = max_bytes - used - 2  # the list's brackets
        self.count = 0
        self.at_least_one = at_least_one

    def takes(self, item: Any) -> bool:
        size = json_size(item) + (1 if self.count else 0)  # the comma before it
        if (self.count or not self.at_least_one) and size > self.left:
            return False
        self.left -= size
        self.count += 1
        return True


def fitting(
    items: Iterable[Any], max_bytes: int = ANSWER_MAX_BYTES, used: int = 0, *, at_least_one: bool = True
) -> int:
    """How many of `items`, from the first, fit in `max_bytes` (one at least, when there is one, unless
    `at_least_one` is False: a part of an answer that has other parts)."""
    budget = AnswerBudget(max_bytes, used, at_least_one=at_least_one)
    for item in items:
        if not budget.takes(item):
            break
    return budget.count


def cut_page(
    items: Sequence[T], max_bytes: int = ANSWER_MAX_BYTES, measured: Callable[[T], Any] | None = None
) -> tuple[list[T], T | None]:
    """A page's items that fit (`measured`: what the answer shows of one, the item itself by default), and the
    last of them when the page was cut there (the next page goes on after it), else None."""
    kept = fitting(items if measured is None else map(measured, items), max_bytes)
    return (list(items), None) if kept == len(items) else (list(items[:kept]), items[kept - 1])
