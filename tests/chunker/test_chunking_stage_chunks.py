"""The chunks the chunking stage stores (stages/chunking.build_chunks): no blank chunk in either mode, and
parent-child links, prev/next links and sequence numbers that agree with each other."""

from __future__ import annotations

import itertools

import pytest

from chalicelib.domain.ids import chunk_id
from chalicelib.domain.types import Chunk, ChunkingConfig, ChunkType, Knowledge, KnowledgeType
from chalicelib.stages.chunking import build_chunks

KNOWLEDGE = Knowledge(id="k1", tenant_id="t1", kb_id="kb1", type=KnowledgeType.FILE)
# A page of layout whitespace between two paragraphs, as PDF and HTML conversions produce.
LAYOUT_GAP = "First paragraph with text.\n\n" + (" " * 200 + "\n") * 6 + "\nSecond paragraph with text.\n"


def _check_links(chunks: list[Chunk]) -> None:
    for before, after in itertools.pairwise(chunks):
        assert before.next_chunk_id == after.id and after.pre_chunk_id == before.id
    assert not chunks[0].pre_chunk_id and not chunks[-1].next_chunk_id
    seqs = [c.seq for c in chunks]
    assert seqs == sorted(set(seqs))


@pytest.mark.parametrize("parent_child", [False, True])
def test_blank_chunks_are_neither_stored_nor_embedded(parent_child: bool) -> None:
    config = ChunkingConfig(
        enable_parent_child=parent_child, chunk_size=512, parent_chunk_size=512, child_chunk_size=384
    )
    chunks, extra = build_chunks(KNOWLEDGE, LAYOUT_GAP, config)
    assert chunks and all(c.content.strip() for c in chunks)
    texts = [c for c in chunks if c.chunk_type == ChunkType.TEXT]
    assert "".join(c.content for c in texts).count("paragraph with text") == 2
    _check_links(texts)
    for c in texts:
        assert c.id == chunk_id(KNOWLEDGE.id, KNOWLEDGE.attempt, c.seq, False)
    if parent_child:
        parents = [c for c in chunks if c.chunk_type == ChunkType.PARENT_TEXT]
        assert extra == {"parents": len(parents), "children": len(texts)}
        _check_links(parents)
        assert {c.parent_chunk_id for c in texts} - {None, ""} == {p.id for p in parents}
        for p in parents:
            assert p.id == chunk_id(KNOWLEDGE.id, KNOWLEDGE.attempt, p.seq, True)
            kids = [c for c in texts if c.parent_chunk_id == p.id]
            assert all(p.start_at <= c.start_at and c.end_at <= p.end_at for c in kids)


def test_parent_child_chunks_are_the_same_on_every_run() -> None:
    config = ChunkingConfig(enable_parent_child=True, parent_chunk_size=512, child_chunk_size=384)
    runs = [build_chunks(KNOWLEDGE, LAYOUT_GAP * 3, config)[0] for _ in range(2)]
    first, again = (
        [(c.id, c.seq, c.content, c.parent_chunk_id, c.pre_chunk_id, c.next_chunk_id) for c in run]
        for run in runs
    )
    assert first == again
