"""A tenant's request limit: a fixed window of `WINDOW_SECONDS`, in which a tenant's API keys make at most
its requests per second times the window's length (one noisy tenant no longer spends the stage throttle
every tenant shares)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from chalicelib.domain.errors import AppError

WINDOW_SECONDS = 10
#: a window's count is kept this long past its end (DynamoDB's TTL removes it; nothing reads it again)
KEPT_SECONDS = 60
#: the highest rate an operator may give one tenant
MAX_REQUESTS_PER_SECOND = 10_000


@dataclass(frozen=True)
class RequestWindow:
    #: epoch seconds, a multiple of WINDOW_SECONDS
    start: int
    #: requests the tenant may make in it
    limit: int

    @classmethod
    def at(cls, now: float, requests_per_second: int) -> RequestWindow:
        start = int(now) // WINDOW_SECONDS * WINDOW_SECONDS
        return cls(start, requests_per_second * WINDOW_SECONDS)

    @property
    def expires_at(self) -> int:
        return self.start + WINDOW_SECONDS + KEPT_SECONDS

    def retry_after(self, now: float) -> int:
        """Whole seconds to the window's end (at least 1: `Retry-After: 0` invites an instant retry)."""
        return max(1, math.ceil(self.start + WINDOW_SECONDS - now))


def requests_per_second(tenant_override: int, default: int) -> int:
    """The tenant's rate: the operator's override when set (> 0), else the deployment's (0: no limit)."""
    return tenant_override if tenant_override > 0 else default


class TenantRateLimited(AppError):
    """429: the tenant made its window's requests; `retry_after` seconds to the next window."""

    status = 429
    code = "tenant_rate_limited"

    def __init__(self, requests_per_second: int, retry_after: int) -> None:
        super().__init__(
            f"this tenant's API keys may make {requests_per_second} requests a second "
            f"({requests_per_second * WINDOW_SECONDS} per {WINDOW_SECONDS} s); retry in {retry_after} s",
        )
        self.retry_after = retry_after
