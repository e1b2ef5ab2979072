"""A move A->B asked at attempt 1 reaches the document only after it was reparsed (attempt 2) and a move
A->C moved the row but had not yet carried A's entries (its delivery died). A->B's item finds the row in C
and leaves A's entries alone (it had deleted them: they were A->C's to carry), so A->C's redelivery carries
them and C finds the document."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.ports import IndexSpace

from .conftest import drain
from .test_move_clone import TIDES, completed, model, move, new_kb  # noqa: F401


class Crash(RuntimeError):
    pass


def test_a_move_that_never_moved_the_row_leaves_another_moves_entries_alone(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chalicelib.adapters.memory import MemoryKnowledgeRepo
    from chalicelib.commands import ReparseRequest
    from chalicelib.domain.types import ParseStatus
    from chalicelib.tasks.move_clone import ItemFailed, move_one
    from chalicelib.tasks.reparse import reparse

    b, c = new_kb(deps, tenant, "b"), new_kb(deps, tenant, "c")
    doc = completed(deps, kb, "tides.md", TIDES)
    t1 = deps.tasks.get(move(deps, kb, b, [doc.id], "reuse_vectors").id)  # asked at attempt 1, not run yet
    reparse(deps, tenant.id, doc.id, ReparseRequest())
    drain(deps)
    rows = deps.knowledge
    assert isinstance(rows, MemoryKnowledgeRepo)
    rows.write_fields(doc.id, parse_status=ParseStatus.COMPLETED)
    row = rows.get(doc.id)
    assert row is not None and row.attempt == 2
    space = IndexSpace.of(deps.embedding_model(""))
    assert deps.engine().count(space, kb.id, doc.id) > 0

    t2 = deps.tasks.get(move(deps, kb, c, [doc.id], "reuse_vectors").id)
    real = deps.tags.remove_knowledge
    crashed: list[int] = []

    def crash_once(knowledge_id: str) -> int:
        if not crashed:
            crashed.append(1)
            raise Crash("A->C's worker dies after moving the row")
        return real(knowledge_id)

    monkeypatch.setattr(deps.tags, "remove_knowledge", crash_once)
    with pytest.raises(Crash):
        move_one(deps, t2, doc.id)
    with pytest.raises(ItemFailed):
        move_one(deps, t1, doc.id)  # A->B reaches the document: it is in C
    move_one(deps, t2, doc.id)  # A->C's redelivery finishes its carry
    in_c = deps.engine().count(space, c.id, doc.id)
    assert in_c > 0
