"""FAQ knowledge bases: entries, import leases and their repository port."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from chalicelib.domain.faq import FaqEntry


@dataclass(frozen=True)
class FaqLease:
    """Who holds a knowledge base's import lease (the import task's id) and until when (epoch seconds)."""

    owner: str
    expires_at: float


class FaqRepo(Protocol):
    """FAQ entries (`chalicelib.domain.faq.FaqEntry`) per knowledge base, the knowledge base's import lease,
    its tag names and its last import result."""

    def put_entries(self, entries: Sequence[FaqEntry]) -> None: ...

    def get_entry(self, kb_id: str, entry_id: str) -> FaqEntry | None: ...

    def get_entries(self, kb_id: str, entry_ids: Sequence[str]) -> dict[str, FaqEntry]:
        """Entries by id in batched reads; missing ids are absent."""
        ...

    def delete_entries(self, kb_id: str, entry_ids: Sequence[str]) -> None: ...

    def page_entries(self, kb_id: str, after: str, limit: int) -> tuple[list[FaqEntry], str]:
        """Up to `limit` entries in id order after the id `after` ('' = from the start), and the id to go
        on after ('' when there are no more)."""
        ...

    def acquire_lease(self, kb_id: str, owner: str, now: float, ttl_seconds: float) -> FaqLease | None:
        """One conditional write: taken (or renewed) when free, expired or already `owner`'s; None then.
        Otherwise the holder's lease, unchanged."""
        ...

    def release_lease(self, kb_id: str, owner: str) -> bool:
        """Deletes the lease only if `owner` holds it."""
        ...

    def get_lease(self, kb_id: str) -> FaqLease | None: ...

    def tags(self, kb_id: str) -> list[str]: ...

    def add_tags(self, kb_id: str, names: Sequence[str]) -> None: ...

    def remove_tags(self, kb_id: str, names: Sequence[str]) -> None: ...

    def put_last_import(self, kb_id: str, result: Mapping[str, Any]) -> None: ...

    def get_last_import(self, kb_id: str) -> dict[str, Any] | None: ...
