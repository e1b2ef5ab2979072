"""A move A->B dies right after its row moved into B (before it carried A's index entries); meanwhile a move
B->C takes the document on. A->B's redelivery finds the row in neither A nor B: it fails its item, and A's
entries follow the document into C (they had stayed in A, and C could not find the document)."""

from __future__ import annotations

from typing import Any

import pytest

import chalicelib.stages.lifecycle as lifecycle
from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.ports import IndexSpace

from .test_move_clone import TIDES, completed, model, move, new_kb, run_lifecycle, search  # noqa: F401


class Crash(RuntimeError):
    pass


def test_a_redelivery_after_a_later_move_took_the_document_on_carries_the_entries_to_it(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    b, c = new_kb(deps, tenant, "b"), new_kb(deps, tenant, "c")
    doc = completed(deps, kb, "tides.md", TIDES)
    real_remove = deps.tags.remove_knowledge
    second: list[Any] = []

    def second_move_lands_then_crash(knowledge_id: str) -> int:
        if not second:
            second.append(move(deps, b, c, [doc.id], "reuse_vectors"))
            lifecycle.run(deps, second[0].id)
            raise Crash("the first move's worker dies here")
        return real_remove(knowledge_id)

    monkeypatch.setattr(deps.tags, "remove_knowledge", second_move_lands_then_crash)
    first = move(deps, kb, b, [doc.id], "reuse_vectors")
    try:
        run_lifecycle(deps)
    except Crash:
        run_lifecycle(deps)
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.kb_id == c.id
    space = IndexSpace.of(deps.embedding_model(""))
    in_a = deps.engine().count(space, kb.id, doc.id)
    in_c = deps.engine().count(space, c.id, doc.id)
    task = deps.tasks.get(first.id)
    assert task is not None and task.failed == 1  # its item: the document was no longer in A
    assert in_a == 0 and in_c > 0
