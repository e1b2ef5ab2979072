"""The tenants' request counts per window (chalicelib/domain/request_limits.py decides the window)."""

from __future__ import annotations

from typing import Protocol


class RequestCounter(Protocol):
    def count(self, tenant_id: str, window_start: int, limit: int, expires_at: int) -> bool:
        """Counts one request in the tenant's window unless it holds `limit` already (one conditional write):
        False when it did (nothing counted). `expires_at` (epoch seconds): when the count may go. Raises
        ServiceUnreachable when the store does not answer (throttled, unavailable)."""
        ...
