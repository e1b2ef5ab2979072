"""A move reads the document's row once after its last write and goes on from that row: the check for a
delete that landed meanwhile and the follow of a later move that took the document on read it once (they
had read it twice in a row), and a move overtaken by a later one follows it from the row it just read."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.tasks.move_clone import ItemFailed, move_one

from .test_move_clone import model, move  # noqa: F401
from .test_move_overtaken import Crash, Moves, _crash, moves  # noqa: F401


def _counted_reads(setup: Moves) -> list[str]:
    reads: list[str] = []
    real = setup.deps.knowledge.get

    def get(knowledge_id: str) -> Any:
        reads.append(knowledge_id)
        return real(knowledge_id)

    setup.monkeypatch.setattr(setup.deps.knowledge, "get", get)
    return reads


def test_a_move_reads_the_row_before_after_the_row_moved_and_after_its_last_write(
    moves: Moves,  # noqa: F811
) -> None:
    deps, doc = moves.deps, moves.doc
    task = deps.tasks.get(move(deps, moves.a, moves.b, [doc.id], "reuse_vectors").id)
    assert task is not None
    reads = _counted_reads(moves)
    move_one(deps, task, doc.id)
    assert reads == [doc.id] * 3
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.kb_id == moves.b.id
    assert moves.entries(moves.a) == 0 and moves.entries(moves.b) > 0


def test_an_overtaken_move_follows_the_document_from_the_row_it_read(moves: Moves) -> None:  # noqa: F811
    """A->C moves the row and dies before carrying A's entries; A->B then finds the document in C: it carries
    A's entries there from the row it read (once), and reads the row again only after that carry."""
    deps, doc = moves.deps, moves.doc
    t1 = deps.tasks.get(move(deps, moves.a, moves.b, [doc.id], "reuse_vectors").id)
    t2 = deps.tasks.get(move(deps, moves.a, moves.c, [doc.id], "reuse_vectors").id)
    assert t1 is not None and t2 is not None
    moves.on_first_tag_removal(_crash)
    with pytest.raises(Crash):
        move_one(deps, t2, doc.id)
    assert moves.entries(moves.a) > 0 and moves.entries(moves.c) == 0
    reads = _counted_reads(moves)
    with pytest.raises(ItemFailed):
        move_one(deps, t1, doc.id)
    assert reads == [doc.id] * 2
    assert moves.entries(moves.a) == 0 and moves.entries(moves.c) > 0
