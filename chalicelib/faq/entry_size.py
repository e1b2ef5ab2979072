"""An FAQ entry's size: whether it fits in one stored row, and what writing it does to its tenant's storage
quota (the import's plan and the entries API both decide by these)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from chalicelib.domain.faq import FaqEntry

#: an entry's stored form at most: a DynamoDB item holds 400 KB, its keys, ids and times the rest
MAX_ENTRY_BYTES = 350 * 1024


def too_large(
    question: str,
    answers: Sequence[str],
    similar: Sequence[str],
    negatives: Sequence[str],
    tags: Sequence[str],
) -> str:
    """Why an entry of this content is too large to store (its texts as JSON with non-ASCII escaped, the
    largest of the forms a store keeps: 6 bytes a CJK character), or "". The API's lengths and counts
    allow entries of over 1 MB; an entry must fit in one row."""
    size = len(json.dumps([question, list(answers), list(similar), list(negatives), list(tags)]))
    if size <= MAX_ENTRY_BYTES:
        return ""
    return (
        f"the entry is too large to store ({size // 1024} KB stored, at most {MAX_ENTRY_BYTES // 1024} KB): "
        "shorten its answers or questions"
    )


@dataclass(frozen=True)
class StorageChange:
    """What writing an entry does to its tenant's storage quota. `grows_by`: how much its texts grow (a new
    entry: its size), what must fit in the bytes left when positive; `counts`: what `storage_used` moves
    by, the new size less what the row counted (`counted_bytes`). The two differ for an entry saved before
    entries counted (0 counted): an edit is not charged its whole size as growth (disabling or shortening
    it near the quota is allowed), yet it counts from that write on."""

    grows_by: int
    counts: int

    def fits(self, left: int | None) -> bool:
        """Whether the change may be made with `left` bytes left (None: no quota)."""
        return left is None or self.grows_by <= 0 or self.grows_by <= left


def storage_change(before: FaqEntry | None, after_bytes: int) -> StorageChange:
    """The change of writing an entry of `after_bytes` (`content_bytes`) over `before` (None: a new one)."""
    if before is None:
        return StorageChange(after_bytes, after_bytes)
    return StorageChange(after_bytes - before.content_bytes(), after_bytes - before.counted_bytes)
