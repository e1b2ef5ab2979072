"""Knowledge bases, in memory."""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
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
        with self._lock:
            found = [kb for kb in self._rows.values() if kb.tenant_id == tenant_id and kb.name == name]
        return copy.deepcopy(min(found, key=lambda kb: kb.id)) if found else None

    def delete(self, kb_id: str) -> None:
        with self._lock:
            self._rows.pop(kb_id, None)

    def page(self, tenant_id: str, after: tuple[str, str] | None, limit: int) -> list[KnowledgeBase]:
        """By (name, id), as the tenant index's range key (name) orders them."""
        with self._lock:
            rows = [copy.deepcopy(kb) for kb in self._rows.values() if kb.tenant_id == tenant_id]
        rows.sort(key=lambda kb: (kb.name, kb.id))
        return [kb for kb in rows if after is None or (kb.name, kb.id) > after][:limit]

    def count(self, tenant_id: str, up_to: int) -> int:
        with self._lock:
            return min(up_to, sum(kb.tenant_id == tenant_id for kb in self._rows.values()))

    def get_many(self, kb_ids: Sequence[str]) -> dict[str, KnowledgeBase]:
        with self._lock:
            return {kb_id: copy.deepcopy(self._rows[kb_id]) for kb_id in kb_ids if kb_id in self._rows}


# ---------------------------------------------------------------- knowledge
