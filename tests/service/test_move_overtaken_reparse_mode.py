"""A reparsing move A->B dies after moving the row (before it removed A's entries and reparsed); a
reuse_vectors move B->C takes the row on (B holds no entries). A->B's redelivery finds the row in C: A's
entries go and the document is parsed again in C (A had kept the entries, C had none, nothing reparsed it)."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.ports import IndexSpace

from .test_move_clone import TIDES, completed, model, move, new_kb  # noqa: F401


class Crash(RuntimeError):
    pass


def test_an_overtaken_reembed_move_leaves_the_document_findable(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chalicelib.tasks.move_clone import ItemFailed, move_one

    b, c = new_kb(deps, tenant, "b"), new_kb(deps, tenant, "c")
    doc = completed(deps, kb, "tides.md", TIDES)
    t1 = deps.tasks.get(move(deps, kb, b, [doc.id], "reparse").id)
    real = deps.tags.remove_knowledge
    crashed: list[int] = []

    def crash_once(knowledge_id: str) -> int:
        if not crashed:
            crashed.append(1)
            raise Crash("A->B's worker dies after moving the row")
        return real(knowledge_id)

    monkeypatch.setattr(deps.tags, "remove_knowledge", crash_once)
    with pytest.raises(Crash):
        move_one(deps, t1, doc.id)
    t2 = deps.tasks.get(move(deps, b, c, [doc.id], "reuse_vectors").id)
    move_one(deps, t2, doc.id)
    with pytest.raises(ItemFailed):
        move_one(deps, t1, doc.id)
    space = IndexSpace.of(deps.embedding_model(""))
    row = deps.knowledge.get(doc.id)
    in_a, in_c = deps.engine().count(space, kb.id, doc.id), deps.engine().count(space, c.id, doc.id)
    assert in_a == 0
    assert in_c > 0 or row.attempt > doc.attempt
