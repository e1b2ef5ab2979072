"""call_with_backoff: retries a model call on ModelThrottled / ModelUnavailable.

Exponential backoff with full jitter (delay = U(0, min(max_delay, base_delay * 2**n))), raised to at
least a throttle's `retry_after`. Hand-written rather than tenacity because the policy is ~30 lines
and must honour `ModelThrottled.retry_after` and hand long waits back to the caller: when a provider
asks for a wait longer than `max_retry_after`, the ModelThrottled is re-raised at once so a stage
can re-queue its message with that delay instead of sleeping inside a Lambda.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from chalicelib.ports import ModelThrottled, ModelUnavailable, ServiceUnreachable

T = TypeVar("T")

RETRYABLE: tuple[type[BaseException], ...] = (ModelThrottled, ModelUnavailable)


def backoff_delay(attempt: int, *, base_delay: float, max_delay: float, rng: Callable[[], float]) -> float:
    """Full-jitter delay before retry number `attempt` (0 = first retry)."""
    ceiling = min(max_delay, base_delay * (2.0 ** min(attempt, 62)))
    return rng() * ceiling


def call_with_backoff(
    fn: Callable[[], T],
    *,
    max_attempts: int = 5,
    base_delay: float = 0.5,
    max_delay: float = 20.0,
    max_retry_after: float | None = None,
    retry_on: tuple[type[BaseException], ...] = RETRYABLE,
    sleep: Callable[[float], None] = time.sleep,
    rng: Callable[[], float] = random.random,
    on_retry: Callable[[int, BaseException, float], None] | None = None,
) -> T:
    """Calls `fn` up to `max_attempts` times; re-raises the last error when attempts run out.

    - Only exceptions in `retry_on` are retried; anything else (e.g. ModelRequestError) propagates.
    - A ModelThrottled with `retry_after` waits max(retry_after, jittered delay).
    - `max_retry_after` (default: `max_delay`): a longer `retry_after` is not slept; the error is
      re-raised immediately with its retry_after intact.
    - `on_retry(attempt_number, error, delay)` is called before each sleep (for logs/metrics).
    """
    if max_attempts < 1:
        raise ValueError("max_attempts must be >= 1")
    limit = max_delay if max_retry_after is None else max_retry_after
    attempt = 0
    while True:
        try:
            return fn()
        except retry_on as exc:
            attempt += 1
            if attempt >= max_attempts:
                raise
            delay = backoff_delay(attempt - 1, base_delay=base_delay, max_delay=max_delay, rng=rng)
            retry_after = exc.retry_after if isinstance(exc, ModelThrottled) else None
            if retry_after is not None:
                if retry_after > limit:
                    raise
                delay = max(delay, retry_after)
            if on_retry is not None:
                on_retry(attempt, exc, delay)
            sleep(delay)


#: sends of a message an API answer (or an announcement) waits on, before the caller gives up on the queue
BRIEF_TRIES = 3


def send_briefly(send: Callable[[], T], sleep: Callable[[float], None], tries: int = BRIEF_TRIES) -> T:
    """`send` tried `tries` times while the queue does not answer (ServiceUnreachable), 0.1-0.5 s apart:
    short waits, since an upload's or an edit's answer waits on them. Raises the last ServiceUnreachable."""
    return call_with_backoff(
        send, max_attempts=tries, base_delay=0.1, max_delay=0.5, retry_on=(ServiceUnreachable,), sleep=sleep
    )
