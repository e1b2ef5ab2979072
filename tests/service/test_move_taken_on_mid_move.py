"""A second move of a document (B→C) that lands while the first (A→B) still writes into B: the second may
be asked for as soon as the row is in B, and carries what it finds in B then. The first's later carry
(the index entries, the chunks repointed to B) follows the document into C, so it stays searchable where
it is; and a delete of B meanwhile does not take the document, which is C's now."""

from __future__ import annotations

from typing import Any

import pytest

import chalicelib.stages.lifecycle as lifecycle
from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase, ParseStatus, TaskStatus, Tenant
from chalicelib.operations.knowledge_changes import delete_kb
from chalicelib.ports import IndexSpace

from .test_move_clone import TIDES, completed, model, move, new_kb, run_lifecycle, search  # noqa: F401


@pytest.mark.parametrize("b_deleted", [False, True], ids=["b_kept", "b_deleted"])
def test_a_document_moved_on_while_its_first_move_carries_stays_searchable_where_it_went(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    b_deleted: bool,
) -> None:
    b, c = new_kb(deps, tenant, "b"), new_kb(deps, tenant, "c")
    doc = completed(deps, kb, "tides.md", TIDES)
    real_remove = deps.tags.remove_knowledge
    second: list[Any] = []

    def second_move_lands(knowledge_id: str) -> int:
        if not second:  # the first move's first step after its row moved into B
            second.append(move(deps, b, c, [doc.id], "reuse_vectors"))
            lifecycle.run(deps, second[0].id)
            if b_deleted:
                lifecycle.run(deps, delete_kb(deps, tenant.id, b.id).id)
        return real_remove(knowledge_id)

    monkeypatch.setattr(deps.tags, "remove_knowledge", second_move_lands)
    first = move(deps, kb, b, [doc.id], "reuse_vectors")
    run_lifecycle(deps)

    assert second
    then = deps.tasks.get(second[0].id)
    assert then is not None and then.status == TaskStatus.COMPLETED and then.succeeded == 1
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.kb_id == c.id and row.parse_status == ParseStatus.COMPLETED
    chunks = deps.chunks.list(doc.id)
    assert chunks and {ch.kb_id for ch in chunks} == {c.id}
    space = IndexSpace.of(deps.embedding_model(""))
    assert deps.engine().count(space, c.id, doc.id) == len(chunks)
    assert deps.engine().count(space, b.id, doc.id) == deps.engine().count(space, kb.id, doc.id) == 0
    assert any(hit["knowledge_id"] == doc.id for hit in search(deps, c, "spring tides full moon"))
    done = deps.tasks.get(first.id)
    assert done is not None and done.status == TaskStatus.COMPLETED, done
