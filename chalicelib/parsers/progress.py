"""What a parser has done so far (pages read, seconds of audio transcribed), told to whoever listens while
it still works: the docreader stage writes it into its span, so a long OCR or transcription moves live in
the stage tree instead of jumping from nothing to done. Without a listener a report costs nothing."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

Listener = Callable[[Mapping[str, Any]], None]

#: the least time between two reports a listener gets (each is a write), unless a report is forced
MIN_INTERVAL_SECONDS = 1.0


class _Throttled:
    def __init__(self, listener: Listener, min_interval: float) -> None:
        self.listener = listener
        self.min_interval = min_interval
        self.last = float("-inf")

    def __call__(self, fields: Mapping[str, Any], force: bool) -> None:
        now = time.monotonic()
        if force or now - self.last >= self.min_interval:
            self.last = now
            self.listener(fields)


_listener: ContextVar[_Throttled | None] = ContextVar("weknora_parse_progress", default=None)


@contextmanager
def progress_listener(listener: Listener, min_interval: float = MIN_INTERVAL_SECONDS) -> Iterator[None]:
    token = _listener.set(_Throttled(listener, min_interval))
    try:
        yield
    finally:
        _listener.reset(token)


def report(fields: Mapping[str, Any], *, force: bool = False) -> None:
    """`force`: a step slow enough that every one is worth a write (an OCR'd page)."""
    listener = _listener.get()
    if listener is not None:
        listener(fields, force)
