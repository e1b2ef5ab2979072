"""The Lambda deadline of the stage being run: the runner sets it from the invocation's context, long work
(indexing slices, transcription polling) asks `out_of_time()` and hands over to a fresh invocation."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

#: monotonic time by which a long stage should hand over to a fresh invocation (None: no limit known)
stage_deadline: ContextVar[float | None] = ContextVar("stage_deadline", default=None)
#: time kept back for the hand-over itself (the checkpoint write and the SQS send)
DEADLINE_MARGIN_SECONDS = 30.0


def deadline_of(context: Any) -> float | None:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return None
    return time.monotonic() + remaining() / 1000 - DEADLINE_MARGIN_SECONDS


def out_of_time() -> bool:
    deadline = stage_deadline.get()
    return deadline is not None and time.monotonic() >= deadline


@contextmanager
def share_of_time(fraction: float) -> Iterator[None]:
    """Within the block, `out_of_time()` comes once `fraction` of the time left now is spent: work that must
    leave the rest of the invocation to other work (no limit known: none here either)."""
    deadline = stage_deadline.get()
    if deadline is None:
        yield
        return
    now = time.monotonic()
    token = stage_deadline.set(now + max(0.0, deadline - now) * fraction)
    try:
        yield
    finally:
        stage_deadline.reset(token)
