"""call_with_backoff with an injected sleep and rng: no real waiting, no timing assertions."""

from __future__ import annotations

import pytest

from chalicelib.ports import ModelRequestError, ModelThrottled, ModelUnavailable
from chalicelib.services.backoff import backoff_delay, call_with_backoff


class Flaky:
    def __init__(self, errors: list[BaseException], result: str = "ok") -> None:
        self.errors = list(errors)
        self.calls = 0
        self.result = result

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.result


def test_success_first_try_never_sleeps() -> None:
    sleeps: list[float] = []
    fn = Flaky([])
    assert call_with_backoff(fn, sleep=sleeps.append) == "ok"
    assert fn.calls == 1
    assert sleeps == []


def test_retries_transient_errors_then_succeeds() -> None:
    sleeps: list[float] = []
    fn = Flaky([ModelUnavailable("503"), ModelThrottled("429"), ModelUnavailable("timeout")])
    result = call_with_backoff(
        fn, max_attempts=5, base_delay=1.0, max_delay=100.0, sleep=sleeps.append, rng=lambda: 1.0
    )
    assert result == "ok"
    assert fn.calls == 4
    assert sleeps == [1.0, 2.0, 4.0]  # rng=1.0 gives the full exponential ceiling


def test_full_jitter_uses_rng_and_caps_at_max_delay() -> None:
    assert backoff_delay(0, base_delay=0.5, max_delay=10, rng=lambda: 0.5) == 0.25
    assert backoff_delay(10, base_delay=0.5, max_delay=10, rng=lambda: 1.0) == 10
    assert backoff_delay(1000, base_delay=0.5, max_delay=10, rng=lambda: 0.0) == 0.0
    sleeps: list[float] = []
    fn = Flaky([ModelUnavailable("x")] * 6)
    call_with_backoff(fn, max_attempts=7, base_delay=1.0, max_delay=8.0, sleep=sleeps.append, rng=lambda: 1.0)
    assert sleeps == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_gives_up_after_max_attempts_with_last_error() -> None:
    sleeps: list[float] = []
    errors = [ModelThrottled(f"429 #{i}") for i in range(5)]
    fn = Flaky(errors)
    with pytest.raises(ModelThrottled, match="#2"):
        call_with_backoff(fn, max_attempts=3, sleep=sleeps.append, rng=lambda: 0.0)
    assert fn.calls == 3
    assert len(sleeps) == 2


def test_retry_after_is_honoured_as_a_floor() -> None:
    sleeps: list[float] = []
    fn = Flaky([ModelThrottled("slow down", retry_after=7.5), ModelThrottled("again", retry_after=0.1)])
    assert call_with_backoff(fn, base_delay=1.0, max_delay=20.0, sleep=sleeps.append, rng=lambda: 0.5) == "ok"
    # First wait: max(7.5, 0.5*1) ; second: max(0.1, 0.5*2).
    assert sleeps == [7.5, 1.0]


def test_retry_after_longer_than_limit_is_handed_back_immediately() -> None:
    sleeps: list[float] = []
    fn = Flaky([ModelThrottled("come back in a minute", retry_after=60.0)])
    with pytest.raises(ModelThrottled) as info:
        call_with_backoff(fn, max_attempts=5, max_delay=20.0, sleep=sleeps.append)
    assert info.value.retry_after == 60.0
    assert fn.calls == 1
    assert sleeps == []
    # An explicit, larger limit sleeps it instead.
    fn2 = Flaky([ModelThrottled("come back in a minute", retry_after=60.0)])
    assert call_with_backoff(fn2, max_delay=20.0, max_retry_after=120.0, sleep=sleeps.append) == "ok"
    assert sleeps == [60.0]


def test_permanent_errors_are_not_retried() -> None:
    sleeps: list[float] = []
    fn = Flaky([ModelRequestError("bad input")])
    with pytest.raises(ModelRequestError):
        call_with_backoff(fn, sleep=sleeps.append)
    assert fn.calls == 1
    assert sleeps == []


def test_on_retry_callback_and_custom_retry_on() -> None:
    seen: list[tuple[int, str, float]] = []
    fn = Flaky([KeyError("k"), ModelUnavailable("u")])
    result = call_with_backoff(
        fn,
        retry_on=(KeyError, ModelUnavailable),
        sleep=lambda _: None,
        rng=lambda: 0.0,
        on_retry=lambda n, e, d: seen.append((n, type(e).__name__, d)),
    )
    assert result == "ok"
    assert seen == [(1, "KeyError", 0.0), (2, "ModelUnavailable", 0.0)]


def test_rejects_zero_attempts() -> None:
    with pytest.raises(ValueError):
        call_with_backoff(lambda: 1, max_attempts=0)
