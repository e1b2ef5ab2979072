"""A chunking of an attempt a reparse superseded after its live read: its late write replaces only its own
attempt's chunks (never the newer attempt's) and is taken back, so the newer attempt is indexed whole."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import ReparseRequest
from chalicelib.domain.ids import attempt_chunk_prefix, chunk_id
from chalicelib.domain.types import Chunk, ChunkType, EnableStatus, KnowledgeBase
from chalicelib.ports import ChunkRepo
from chalicelib.stages import chunking
from chalicelib.tasks.reparse import reparse

from .conftest import deliver, drain, index_count, upload


def _attempts(deps: Services, knowledge_id: str) -> list[int]:
    return sorted({c.metadata["attempt"] for c in deps.chunks.list(knowledge_id)})


def _reparsed_while_chunking(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, *, chunk_the_new_attempt: bool
) -> str:
    """Attempt 1's chunking builds its chunks; meanwhile the document is reparsed (and, when asked, attempt
    2 is parsed and chunked); then attempt 1 writes. The knowledge's id."""
    doc = upload(deps, kb)
    deliver(deps, "docreader")  # attempt 1's chunking message waits
    build = chunking.build_chunks

    def reparsed_meanwhile(*args: Any) -> Any:
        monkeypatch.setattr(chunking, "build_chunks", build)
        built = build(*args)
        reparse(deps, kb.tenant_id, doc.id, ReparseRequest())
        if chunk_the_new_attempt:
            deliver(deps, "docreader")
            deliver(deps, "chunking")
        return built

    monkeypatch.setattr(chunking, "build_chunks", reparsed_meanwhile)
    deliver(deps, "chunking")  # attempt 1's write lands now
    return doc.id


def _indexed_whole(deps: Services, kb: KnowledgeBase, knowledge_id: str) -> None:
    drain(deps)
    row = deps.knowledge.get(knowledge_id)
    assert row is not None and row.attempt == 2
    assert row.enable_status == EnableStatus.ENABLED and row.processed_at is not None, row.error_message
    stored = deps.chunks.list(knowledge_id)
    assert _attempts(deps, knowledge_id) == [2]
    assert row.chunk_count == len(stored) > 0
    assert index_count(deps, kb, knowledge_id) == sum(1 for c in stored if c.chunk_type == ChunkType.TEXT)


def test_a_late_write_of_a_superseded_attempt_leaves_the_newer_attempts_chunks(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    knowledge_id = _reparsed_while_chunking(deps, kb, monkeypatch, chunk_the_new_attempt=True)
    assert _attempts(deps, knowledge_id) == [2]  # attempt 2's chunks stay; attempt 1's were taken back
    _indexed_whole(deps, kb, knowledge_id)


def test_a_late_write_after_the_reparse_cleaned_up_is_taken_back(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    knowledge_id = _reparsed_while_chunking(deps, kb, monkeypatch, chunk_the_new_attempt=False)
    assert deps.chunks.list(knowledge_id) == []  # nothing of attempt 1 outlives the reparse's clean-up
    _indexed_whole(deps, kb, knowledge_id)


def _chunks(knowledge_id: str, attempt: int, n: int) -> list[Chunk]:
    return [
        Chunk(
            id=chunk_id(knowledge_id, attempt, seq),
            tenant_id="t1",
            kb_id="kb",
            knowledge_id=knowledge_id,
            seq=seq,
            content=f"chunk {seq} of attempt {attempt}",
            metadata={"attempt": attempt},
        )
        for seq in range(n)
    ]


def check_replace_within_an_attempt(chunks: ChunkRepo, knowledge_id: str) -> None:
    """`replace_all` with an attempt's prefix replaces that attempt's chunks and no other's (attempt 10's
    ids share attempt 1's `-a1` but not its `-a1-`); without one it replaces them all (tests/e2e runs this
    on DynamoDB)."""
    first, tenth = _chunks(knowledge_id, 1, 4), _chunks(knowledge_id, 10, 2)
    chunks.put_many([*first, *_chunks(knowledge_id, 2, 3), *tenth])
    chunks.replace_all(knowledge_id, first[:2], prefix=attempt_chunk_prefix(knowledge_id, 1))
    second = _chunks(knowledge_id, 2, 3)
    listed = sorted(c.id for c in chunks.list(knowledge_id))
    assert listed == sorted(c.id for c in [*first[:2], *second, *tenth])
    chunks.replace_all(knowledge_id, second[:1], prefix=attempt_chunk_prefix(knowledge_id, 2))
    assert sorted(c.id for c in chunks.list(knowledge_id)) == sorted(
        c.id for c in [*first[:2], second[0], *tenth]
    )
    chunks.replace_all(knowledge_id, tenth[:1])
    assert [c.id for c in chunks.list(knowledge_id)] == [tenth[0].id]


def test_a_replace_within_an_attempt_leaves_other_attempts_chunks(deps: Services) -> None:
    check_replace_within_an_attempt(deps.chunks, "k-replace")
