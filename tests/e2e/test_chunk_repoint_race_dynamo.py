"""A move's repoint of a document's chunk rows racing an edit of one of them on DynamoDB (moto): a row
written between the repoint's read and its write keeps what the edit wrote, only its kb_id changed (the
memory fake repoints under one lock, so only the real table can show the race)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.types import Chunk


def _chunk(knowledge_id: str, seq: int) -> Chunk:
    return Chunk(
        id=f"{knowledge_id}-c{seq}",
        tenant_id="t1",
        kb_id="source",
        knowledge_id=knowledge_id,
        seq=seq,
        content=f"chunk {seq}",
        metadata={"attempt": 1},
    )


def test_a_row_edited_while_the_chunks_are_repointed_keeps_the_edit(
    module_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = module_services.chunks
    k = str(uuid.uuid4())
    rows = [_chunk(k, seq) for seq in range(4)]
    repo.put_many(rows)
    # one edit still in the source, one that already followed the document into the target
    in_source = replace(rows[1], content="edited in the source", content_hash="h1")
    followed = replace(rows[2], kb_id="target", content="edited in the target", content_hash="h2")
    read_items = repo._items  # type: ignore[attr-defined]

    def read_then_edited(knowledge_id: str) -> list[Any]:
        items = read_items(knowledge_id)
        monkeypatch.setattr(repo, "_items", read_items)
        repo.put_many([in_source, followed])  # between the repoint's read and its writes
        return items

    monkeypatch.setattr(repo, "_items", read_then_edited)
    repo.repoint(k, "target")
    stored = {c.id: c for c in repo.list(k)}
    assert {c.kb_id for c in stored.values()} == {"target"}
    assert stored[in_source.id].content == "edited in the source"
    assert (stored[followed.id].content, stored[followed.id].content_hash) == ("edited in the target", "h2")
    assert [stored[r.id].content for r in (rows[0], rows[3])] == ["chunk 0", "chunk 3"]
