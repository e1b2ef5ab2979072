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


@dataclass(frozen=True)
class QuestionHolder:
    """Who holds a question of a knowledge base: the entry's id, the reservation's write token (a takeover
    names it, so a reservation rewritten meanwhile is not taken) and, while the claim is pending (its entry
    not saved yet), until when (epoch seconds; None once the entry is saved with it)."""

    entry_id: str
    token: str
    expires_at: float | None


class EntryWriteRefused(Exception):
    """A conditional entry write found the row gone (`gone`) or changed since it was read."""

    def __init__(self, entry_id: str, *, gone: bool) -> None:
        super().__init__(f"FAQ entry {entry_id} was {'deleted' if gone else 'changed'} meanwhile")
        self.entry_id = entry_id
        self.gone = gone


class EntryWriteFailed(Exception):
    """The store did not take an entry write for another reason than its condition (throttled, not
    answering, the item refused): nothing was written."""


class FaqRepo(Protocol):
    """FAQ entries (`chalicelib.domain.faq.FaqEntry`) per knowledge base, the knowledge base's import lease,
    its tag names and its last import result."""

    def put_entries(self, entries: Sequence[FaqEntry]) -> None: ...

    def get_entry(self, kb_id: str, entry_id: str) -> FaqEntry | None: ...

    def get_entries(self, kb_id: str, entry_ids: Sequence[str]) -> dict[str, FaqEntry]:
        """Entries by id in batched reads; missing ids are absent."""
        ...

    def put_entry(self, entry: FaqEntry, expected: FaqEntry | None) -> None:
        """One conditional write: with `expected` None only if no row has the entry's id; else only if the
        row exists and its `updated_at` is still `expected.updated_at` (every entry write stores it).
        Raises EntryWriteRefused (gone: no row) otherwise, EntryWriteFailed when the store failed the write."""
        ...

    def delete_entries(self, kb_id: str, entry_ids: Sequence[str]) -> list[FaqEntry]:
        """Deletes the rows; returns those this call removed, as they were (of two racing deletes of a row
        only one gets it back: what the row counted is given back once)."""
        ...

    def page_entries(self, kb_id: str, after: str, limit: int) -> tuple[list[FaqEntry], str]:
        """Up to `limit` entries in id order after the id `after` ('' = from the start), and the id to go
        on after ('' when there are no more)."""
        ...

    # -- question reservations: a normalised question's key held by one entry (see chalicelib/faq/entries.py)
    def claim_questions(
        self,
        kb_id: str,
        entry_id: str,
        keys: Sequence[str],
        now: float,
        ttl_seconds: float,
        takeover: Mapping[str, QuestionHolder] | None = None,
    ) -> dict[str, QuestionHolder]:
        """One conditional write per key: claimed for `entry_id`, pending until now + ttl, when the key is
        free, its pending claim expired, it is already `entry_id`'s, or it is still exactly the holder
        `takeover[key]` names. Returns the holders of the keys it could not claim (the keys it claimed
        stay claimed: confirm or release them)."""
        ...

    def confirm_questions(self, kb_id: str, entry_id: str, keys: Sequence[str]) -> None:
        """`entry_id`'s claims on `keys` are held for good (its entry is saved); others' are left alone."""
        ...

    def release_questions(self, kb_id: str, entry_id: str, keys: Sequence[str]) -> None:
        """Deletes the reservations of `keys` that `entry_id` holds; others' are left alone."""
        ...

    def question_holders(self, kb_id: str, keys: Sequence[str]) -> dict[str, QuestionHolder]:
        """The holders of those of `keys` that are reserved."""
        ...

    def clear_questions(self, kb_id: str) -> None:
        """Deletes every reservation, tag link and keyed mark (of every key rule) of the knowledge base (it
        is being deleted)."""
        ...

    def entries_keyed(self, kb_id: str, rule: int) -> bool:
        """True once every entry of the knowledge base was found holding its question reservations under
        the key rule `rule` (chalicelib/faq/reservations.py) and its tag links (chalicelib/faq/keyed.py): a
        write then reads those, not every entry. A mark of another rule does not count."""
        ...

    def mark_entries_keyed(self, kb_id: str, rule: int) -> None: ...

    # -- tag links: an entry uses a tag (what tells a tag still in use without reading every entry)
    def link_tags(self, kb_id: str, links: Sequence[tuple[str, str]]) -> None:
        """Records each (entry id, tag name) (idempotent)."""
        ...

    def unlink_tags(self, kb_id: str, links: Sequence[tuple[str, str]]) -> None: ...

    def tag_users(self, kb_id: str, name: str, limit: int) -> list[str]:
        """Up to `limit` ids of entries linked to the tag (a link may outlive its entry's use of the tag:
        callers read the entries)."""
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
