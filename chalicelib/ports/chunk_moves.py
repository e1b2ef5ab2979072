"""The chunk repository's move of a document's rows to another knowledge base (part of `ChunkRepo` in
chalicelib/ports/state.py, kept here as that module is at its size cap)."""

from __future__ import annotations

from typing import Protocol


class ChunkRepoint(Protocol):
    def repoint(self, knowledge_id: str, kb_id: str) -> int:
        """Sets `kb_id` on each of the knowledge's chunks in another knowledge base, every other field as it
        is stored at the write (an edit written since the chunks were read stays); how many it changed.
        Idempotent: chunks already in `kb_id` are left as they are."""
        ...
