"""FAQ entries, leases and import results, in memory."""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from chalicelib.domain.clock import to_iso
from chalicelib.ports import (
    FaqLease,
)
from chalicelib.ports.faq import EntryWriteRefused, QuestionHolder

if TYPE_CHECKING:
    from chalicelib.domain.faq import FaqEntry


class MemoryFaqRepo:
    """FaqRepo in dicts: entries per knowledge base (copied in and out, as a table would), the lease with
    DynamoDB's conditional-write semantics, question reservations, tags and the last import result."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, dict[str, Any]]] = {}
        self._leases: dict[str, FaqLease] = {}
        self._tags: dict[str, set[str]] = {}
        self._results: dict[str, dict[str, Any]] = {}
        self._questions: dict[str, dict[str, QuestionHolder]] = {}
        self._keyed: set[tuple[str, int]] = set()
        self._links: dict[str, set[tuple[str, str]]] = {}
        self._lock = threading.Lock()

    def put_entries(self, entries: Sequence[FaqEntry]) -> None:
        with self._lock:
            for entry in entries:
                self._entries.setdefault(entry.kb_id, {})[entry.id] = entry.to_body()

    def get_entry(self, kb_id: str, entry_id: str) -> FaqEntry | None:
        from chalicelib.domain.faq import FaqEntry

        with self._lock:
            body = self._entries.get(kb_id, {}).get(entry_id)
            return FaqEntry.from_body(copy.deepcopy(body)) if body is not None else None

    def get_entries(self, kb_id: str, entry_ids: Sequence[str]) -> dict[str, FaqEntry]:
        found = {}
        for entry_id in dict.fromkeys(entry_ids):
            entry = self.get_entry(kb_id, entry_id)
            if entry is not None:
                found[entry_id] = entry
        return found

    def put_entry(self, entry: FaqEntry, expected: FaqEntry | None) -> None:
        with self._lock:
            rows = self._entries.setdefault(entry.kb_id, {})
            current = rows.get(entry.id)
            if expected is None and current is not None:
                raise EntryWriteRefused(entry.id, gone=False)
            if expected is not None:
                if current is None:
                    raise EntryWriteRefused(entry.id, gone=True)
                if current["updated_at"] != to_iso(expected.updated_at):
                    raise EntryWriteRefused(entry.id, gone=False)
            rows[entry.id] = entry.to_body()

    def delete_entries(self, kb_id: str, entry_ids: Sequence[str]) -> list[FaqEntry]:
        from chalicelib.domain.faq import FaqEntry

        with self._lock:
            rows = self._entries.get(kb_id, {})
            removed = [rows.pop(entry_id, None) for entry_id in dict.fromkeys(entry_ids)]
        return [FaqEntry.from_body(body) for body in removed if body is not None]

    def page_entries(self, kb_id: str, after: str, limit: int) -> tuple[list[FaqEntry], str]:
        from chalicelib.domain.faq import FaqEntry

        with self._lock:
            ids = sorted(i for i in self._entries.get(kb_id, {}) if i > after)
            page = ids[:limit]
            bodies = [copy.deepcopy(self._entries[kb_id][i]) for i in page]
        more = len(ids) > limit
        return [FaqEntry.from_body(b) for b in bodies], (page[-1] if more and page else "")

    def claim_questions(
        self,
        kb_id: str,
        entry_id: str,
        keys: Sequence[str],
        now: float,
        ttl_seconds: float,
        takeover: Mapping[str, QuestionHolder] | None = None,
    ) -> dict[str, QuestionHolder]:
        refused: dict[str, QuestionHolder] = {}
        with self._lock:
            held = self._questions.setdefault(kb_id, {})
            for key in dict.fromkeys(keys):
                holder = held.get(key)
                free = (
                    holder is None
                    or holder.entry_id == entry_id
                    or (holder.expires_at is not None and holder.expires_at < now)
                    or (takeover or {}).get(key) == holder
                )
                if free:
                    held[key] = QuestionHolder(entry_id, uuid.uuid4().hex, now + ttl_seconds)
                elif holder is not None:
                    refused[key] = holder
        return refused

    def confirm_questions(self, kb_id: str, entry_id: str, keys: Sequence[str]) -> None:
        with self._lock:
            held = self._questions.setdefault(kb_id, {})
            for key in keys:
                holder = held.get(key)
                if holder is not None and holder.entry_id == entry_id:
                    held[key] = QuestionHolder(entry_id, uuid.uuid4().hex, None)

    def release_questions(self, kb_id: str, entry_id: str, keys: Sequence[str]) -> None:
        with self._lock:
            held = self._questions.setdefault(kb_id, {})
            for key in keys:
                holder = held.get(key)
                if holder is not None and holder.entry_id == entry_id:
                    del held[key]

    def question_holders(self, kb_id: str, keys: Sequence[str]) -> dict[str, QuestionHolder]:
        with self._lock:
            held = self._questions.get(kb_id, {})
            return {key: held[key] for key in keys if key in held}

    def clear_questions(self, kb_id: str) -> None:
        with self._lock:
            self._questions.pop(kb_id, None)
            self._links.pop(kb_id, None)
            self._keyed = {mark for mark in self._keyed if mark[0] != kb_id}

    def entries_keyed(self, kb_id: str, rule: int) -> bool:
        with self._lock:
            return (kb_id, rule) in self._keyed

    def mark_entries_keyed(self, kb_id: str, rule: int) -> None:
        with self._lock:
            self._keyed.add((kb_id, rule))

    def link_tags(self, kb_id: str, links: Sequence[tuple[str, str]]) -> None:
        with self._lock:
            self._links.setdefault(kb_id, set()).update((tag, entry_id) for entry_id, tag in links)

    def unlink_tags(self, kb_id: str, links: Sequence[tuple[str, str]]) -> None:
        with self._lock:
            self._links.setdefault(kb_id, set()).difference_update((tag, entry_id) for entry_id, tag in links)

    def tag_users(self, kb_id: str, name: str, limit: int) -> list[str]:
        with self._lock:
            users = sorted(entry_id for tag, entry_id in self._links.get(kb_id, set()) if tag == name)
        return users[:limit]

    def acquire_lease(self, kb_id: str, owner: str, now: float, ttl_seconds: float) -> FaqLease | None:
        with self._lock:
            held = self._leases.get(kb_id)
            if held is not None and held.owner != owner and held.expires_at > now:
                return held
            self._leases[kb_id] = FaqLease(owner, now + ttl_seconds)
            return None

    def release_lease(self, kb_id: str, owner: str) -> bool:
        with self._lock:
            held = self._leases.get(kb_id)
            if held is None or held.owner != owner:
                return False
            del self._leases[kb_id]
            return True

    def get_lease(self, kb_id: str) -> FaqLease | None:
        with self._lock:
            return self._leases.get(kb_id)

    def tags(self, kb_id: str) -> list[str]:
        with self._lock:
            return sorted(self._tags.get(kb_id, set()))

    def add_tags(self, kb_id: str, names: Sequence[str]) -> None:
        with self._lock:
            self._tags.setdefault(kb_id, set()).update(names)

    def remove_tags(self, kb_id: str, names: Sequence[str]) -> None:
        with self._lock:
            self._tags.setdefault(kb_id, set()).difference_update(names)

    def put_last_import(self, kb_id: str, result: Mapping[str, Any]) -> None:
        with self._lock:
            self._results[kb_id] = copy.deepcopy(dict(result))

    def get_last_import(self, kb_id: str) -> dict[str, Any] | None:
        with self._lock:
            result = self._results.get(kb_id)
            return copy.deepcopy(result) if result is not None else None
