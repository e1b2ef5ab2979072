"""A move overtaken by a later move of the same document: the first move's worker dies (or is slow) after it
moved the row into its target, and a second move takes the row on from there before the first finished with
the source. Whatever the first move left in the source follows the document, or goes, and nothing of the
first move's target is put on a document that has left it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

import chalicelib.stages.lifecycle as lifecycle
from chalicelib.bootstrap import Services
from chalicelib.domain.types import Knowledge, KnowledgeBase, Tenant
from chalicelib.ports import IndexSpace
from chalicelib.services.tag_names import tag_by_names
from chalicelib.tasks.move_clone import ItemFailed, move_one

from .conftest import drain
from .test_move_clone import TIDES, completed, model, move, new_kb, run_lifecycle  # noqa: F401


class Crash(RuntimeError):
    pass


@dataclass
class Moves:
    deps: Services
    a: KnowledgeBase
    b: KnowledgeBase
    c: KnowledgeBase
    doc: Knowledge
    monkeypatch: pytest.MonkeyPatch

    def entries(self, kb: KnowledgeBase) -> int:
        return self.deps.engine().count(IndexSpace.of(self.deps.embedding_model("")), kb.id, self.doc.id)

    def on_first_tag_removal(self, then: Callable[[], None]) -> None:
        """`then` runs the first time a move removes the document's tag relations (right after it moved the
        row, before it carries anything): the window a second move or a crash falls into."""
        real = self.deps.tags.remove_knowledge
        fired: list[bool] = []

        def hook(knowledge_id: str) -> int:
            if not fired:
                fired.append(True)
                then()
            return real(knowledge_id)

        self.monkeypatch.setattr(self.deps.tags, "remove_knowledge", hook)


@pytest.fixture
def moves(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> Moves:
    b, c = new_kb(deps, tenant, "b"), new_kb(deps, tenant, "c")
    return Moves(deps, kb, b, c, completed(deps, kb, "tides.md", TIDES), monkeypatch)


def _crash() -> None:
    raise Crash("the move's worker dies after moving the row")


def test_a_redelivery_after_a_later_move_took_the_document_on_carries_the_entries_to_it(moves: Moves) -> None:
    """A->B dies after moving the row; B->C takes it on (B holds no entries). A->B's redelivery fails its item
    and A's entries follow the document into C (they had stayed in A: C could not find the document)."""
    deps, doc = moves.deps, moves.doc

    def second_move_lands_then_crash() -> None:
        lifecycle.run(deps, move(deps, moves.b, moves.c, [doc.id], "reuse_vectors").id)
        _crash()

    moves.on_first_tag_removal(second_move_lands_then_crash)
    first = move(deps, moves.a, moves.b, [doc.id], "reuse_vectors")
    try:  # the runner may park the crashed item for a redelivery itself
        run_lifecycle(deps)
    except Crash:
        run_lifecycle(deps)
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.kb_id == moves.c.id
    task = deps.tasks.get(first.id)
    assert task is not None and task.failed == 1  # its item: the document was no longer in A
    assert moves.entries(moves.a) == 0 and moves.entries(moves.c) > 0


def test_a_late_first_move_does_not_tag_the_document_with_its_target_s_tags(moves: Moves) -> None:
    deps, doc = moves.deps, moves.doc
    tag_by_names(deps, doc, ["alpha"])
    moves.on_first_tag_removal(
        lambda: lifecycle.run(deps, move(deps, moves.b, moves.c, [doc.id], "reuse_vectors").id)
    )
    move(deps, moves.a, moves.b, [doc.id], "reuse_vectors")
    run_lifecycle(deps)
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.kb_id == moves.c.id
    assert all(deps.tags.get(moves.b.id, t) is None for t in row.tag_ids), "the document in C has a tag of B"


def test_a_move_that_never_moved_the_row_leaves_another_moves_entries_alone(moves: Moves) -> None:
    """A->B asked at attempt 1 reaches the document after a reparse (attempt 2) and after A->C moved the row
    and died before carrying: A->B leaves A's entries alone (it had deleted them), so A->C's redelivery
    carries them and C finds the document."""
    from chalicelib.adapters.memory import MemoryKnowledgeRepo
    from chalicelib.commands import ReparseRequest
    from chalicelib.domain.types import ParseStatus
    from chalicelib.tasks.reparse import reparse

    deps, doc = moves.deps, moves.doc
    t1 = deps.tasks.get(move(deps, moves.a, moves.b, [doc.id], "reuse_vectors").id)  # asked at attempt 1
    reparse(deps, doc.tenant_id, doc.id, ReparseRequest())
    drain(deps)
    rows = deps.knowledge
    assert isinstance(rows, MemoryKnowledgeRepo)
    rows.write_fields(doc.id, parse_status=ParseStatus.COMPLETED)
    assert moves.entries(moves.a) > 0
    t2 = deps.tasks.get(move(deps, moves.a, moves.c, [doc.id], "reuse_vectors").id)
    assert t1 is not None and t2 is not None
    moves.on_first_tag_removal(_crash)
    with pytest.raises(Crash):
        move_one(deps, t2, doc.id)
    with pytest.raises(ItemFailed):
        move_one(deps, t1, doc.id)  # A->B reaches the document: it is in C
    move_one(deps, t2, doc.id)  # A->C's redelivery finishes its carry
    assert moves.entries(moves.c) > 0


def test_an_overtaken_reparsing_move_leaves_the_document_findable(moves: Moves) -> None:
    """A reparsing A->B dies after moving the row; B->C (reuse_vectors) takes it on. A->B's redelivery: A's
    entries go and the document is parsed again in C (A had kept them, C had none, nothing reparsed it)."""
    deps, doc = moves.deps, moves.doc
    t1 = deps.tasks.get(move(deps, moves.a, moves.b, [doc.id], "reparse").id)
    assert t1 is not None
    moves.on_first_tag_removal(_crash)
    with pytest.raises(Crash):
        move_one(deps, t1, doc.id)
    t2 = deps.tasks.get(move(deps, moves.b, moves.c, [doc.id], "reuse_vectors").id)
    assert t2 is not None
    move_one(deps, t2, doc.id)
    with pytest.raises(ItemFailed):
        move_one(deps, t1, doc.id)
    row = deps.knowledge.get(doc.id)
    assert row is not None
    assert moves.entries(moves.a) == 0
    assert moves.entries(moves.c) > 0 or row.attempt > doc.attempt
