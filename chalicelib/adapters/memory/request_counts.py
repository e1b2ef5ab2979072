"""The tenants' request counts, in memory."""

from __future__ import annotations

import threading

from chalicelib.ports import ServiceUnreachable


class MemoryRequestCounter:
    def __init__(self) -> None:
        #: (tenant id, window start) -> requests counted
        self.counts: dict[tuple[str, int], int] = {}
        #: set by a test: every count raises it, as a throttled or unavailable table does
        self.unreachable = False
        self._lock = threading.Lock()

    def count(self, tenant_id: str, window_start: int, limit: int, expires_at: int) -> bool:
        if self.unreachable:
            raise ServiceUnreachable("the request counts did not answer (ThrottlingException)")
        with self._lock:
            made = self.counts.get((tenant_id, window_start), 0)
            if made >= limit:
                return False
            self.counts[(tenant_id, window_start)] = made + 1
            return True
