"""A move A->B carrying tag 'alpha'; a second move B->C lands while the first still carries: the first
no longer tags the row, now in C, with a tag of B."""

from __future__ import annotations

from typing import Any

import pytest

import chalicelib.stages.lifecycle as lifecycle
from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.services.tag_names import tag_by_names

from .test_move_clone import TIDES, completed, model, move, new_kb, run_lifecycle  # noqa: F401


def test_a_late_first_move_does_not_tag_the_document_with_its_target_s_tags(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    b, c = new_kb(deps, tenant, "b"), new_kb(deps, tenant, "c")
    doc = completed(deps, kb, "tides.md", TIDES)
    tag_by_names(deps, deps.knowledge.get(doc.id), ["alpha"])
    real_remove = deps.tags.remove_knowledge
    second: list[Any] = []

    def second_move_lands(knowledge_id: str) -> int:
        if not second:
            second.append(move(deps, b, c, [doc.id], "reuse_vectors"))
            lifecycle.run(deps, second[0].id)
        return real_remove(knowledge_id)

    monkeypatch.setattr(deps.tags, "remove_knowledge", second_move_lands)
    move(deps, kb, b, [doc.id], "reuse_vectors")
    run_lifecycle(deps)
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.kb_id == c.id
    kb_of_tags = {deps.tags.get(b.id, t) is not None for t in row.tag_ids}
    assert True not in kb_of_tags, "the document in C carries a tag of B"
