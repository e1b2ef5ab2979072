"""Knowledge bases, in memory."""

from __future__ import annotations

import copy
import threading
from dataclasses import replace
from typing import TYPE_CHECKING

from chalicelib.adapters.memory.clock import _ms
from chalicelib.domain.types import (
    KnowledgeBase,
    utcnow,
)

if TYPE_CHECKING:
    pass


class MemoryKnowledgeBaseRepo:
    def __init__(self) -> None:
        self._rows: dict[str, KnowledgeBase] = {}
        self._lock = threading.Lock()

    def get(self, kb_id: str, *, consistent: bool = False) -> KnowledgeBase | None:
        with self._lock:
            row = self._rows.get(kb_id)
            return copy.deepcopy(row) if row else None

    def update(self, kb: KnowledgeBase) -> KnowledgeBase | None:
        bumped = replace(copy.deepcopy(kb), version=kb.version + 1, updated_at=_ms(utcnow()))
        with self._lock:
            current = self._rows.get(kb.id)
            if current is None or current.version != kb.version:
                return None
            self._rows[kb.id] = bumped
            return copy.deepcopy(bumped)

    def put(self, kb: KnowledgeBase) -> None:
        stored = replace(copy.deepcopy(kb), created_at=_ms(kb.created_at), updated_at=_ms(kb.updated_at))
        with self._lock:
            self._rows[kb.id] = stored

    def by_name(self, tenant_id: str, name: str) -> KnowledgeBase | None:
        return next((kb for kb in self.list(tenant_id) if kb.name == name), None)

    def delete(self, kb_id: str) -> None:
        with self._lock:
            self._rows.pop(kb_id, None)

    def list(self, tenant_id: str) -> list[KnowledgeBase]:
        """Ordered by name, as the tenant index's range key orders them."""
        with self._lock:
            rows = [copy.deepcopy(kb) for kb in self._rows.values() if kb.tenant_id == tenant_id]
        return sorted(rows, key=lambda kb: kb.name)


# ---------------------------------------------------------------- knowledge
