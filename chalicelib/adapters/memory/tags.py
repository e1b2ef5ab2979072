"""Tags and their relations, in memory."""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from chalicelib.adapters.memory.clock import _ms, _now
from chalicelib.domain.tags import Tag, TagCapReached, TagNameTaken, name_key

if TYPE_CHECKING:
    pass


class MemoryTagRepo:
    """The tags table: tags, their names (unique per knowledge base), a count per knowledge base for the
    cap, and relations keyed (tag, created_at, knowledge) — all under one lock, as one transaction."""

    def __init__(self) -> None:
        self._tags: dict[tuple[str, str], Tag] = {}
        self._relations: set[tuple[str, str, str, str]] = set()  # (kb, tag, created_at, knowledge)
        self._lock = threading.RLock()

    def _name_holder(self, kb_id: str, name: str, but: str = "") -> str | None:
        key = name_key(name)
        return next(
            (
                t.id
                for (kb, _), t in self._tags.items()
                if kb == kb_id and t.id != but and name_key(t.name) == key
            ),
            None,
        )

    def create(self, tag: Tag, cap: int) -> None:
        with self._lock:
            holder = self._name_holder(tag.kb_id, tag.name)
            if holder is not None:
                raise TagNameTaken(holder)
            if sum(1 for kb, _ in self._tags if kb == tag.kb_id) >= cap:
                raise TagCapReached()
            stored = replace(
                copy.deepcopy(tag), created_at=_ms(tag.created_at), updated_at=_ms(tag.updated_at)
            )
            self._tags[(tag.kb_id, tag.id)] = stored

    def get(self, kb_id: str, tag_id: str) -> Tag | None:
        with self._lock:
            tag = self._tags.get((kb_id, tag_id))
            return copy.deepcopy(tag) if tag else None

    def list_kb(self, kb_id: str) -> list[Tag]:
        with self._lock:
            tags = [copy.deepcopy(t) for (kb, _), t in self._tags.items() if kb == kb_id]
        return sorted(tags, key=lambda t: (name_key(t.name), t.id))

    def update(
        self,
        kb_id: str,
        tag_id: str,
        *,
        name: str | None = None,
        color: str | None = None,
        status: str | None = None,
    ) -> Tag | None:
        with self._lock:
            tag = self._tags.get((kb_id, tag_id))
            if tag is None:
                return None
            if name is not None:
                holder = self._name_holder(kb_id, name, but=tag_id)
                if holder is not None:
                    raise TagNameTaken(holder)
                tag.name = name
            if color is not None:
                tag.color = color
            if status is not None:
                tag.status = status
            tag.updated_at = _now()
            return copy.deepcopy(tag)

    def delete(self, kb_id: str, tag_id: str) -> bool:
        with self._lock:
            return self._tags.pop((kb_id, tag_id), None) is not None

    def relate(self, kb_id: str, knowledge_id: str, created_at: str, tag_ids: Sequence[str]) -> None:
        with self._lock:
            self._relations.update((kb_id, t, created_at, knowledge_id) for t in tag_ids)

    def unrelate(self, kb_id: str, knowledge_id: str, created_at: str, tag_ids: Sequence[str]) -> None:
        with self._lock:
            self._relations.difference_update((kb_id, t, created_at, knowledge_id) for t in tag_ids)

    def remove_knowledge(self, knowledge_id: str) -> int:
        with self._lock:
            gone = {r for r in self._relations if r[3] == knowledge_id}
            self._relations -= gone
            return len(gone)

    def tagged(
        self,
        kb_id: str,
        tag_id: str,
        *,
        created_from: str | None = None,
        created_to: str | None = None,
        after: tuple[str, str] | None = None,
        limit: int = 20,
    ) -> list[tuple[str, str]]:
        with self._lock:
            keys = sorted(
                ((c, k) for kb, t, c, k in self._relations if kb == kb_id and t == tag_id), reverse=True
            )
        out = [
            key
            for key in keys
            if (created_from is None or key[0] >= created_from)
            and (created_to is None or key[0] <= created_to)
            and (after is None or key < after)
        ]
        return out[:limit]

    def delete_kb(self, kb_id: str) -> int:
        with self._lock:
            tags = [key for key in self._tags if key[0] == kb_id]
            relations = {r for r in self._relations if r[0] == kb_id}
            for key in tags:
                del self._tags[key]
            self._relations -= relations
            return len(tags) + len(relations)


# ---------------------------------------------------------------- FAQ
