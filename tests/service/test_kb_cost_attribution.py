"""A knowledge base's cost is that of the documents it holds now: a moved document's spend counts in its new
knowledge base (the move carries its usage entries there), a deleted one's stays where it was, reported
apart (`deleted_documents`), and the knowledge base's own work (lifecycle tasks, FAQ imports, wiki finalizes)
apart too (`knowledge_base_work`). Before, the report went by the knowledge base each entry was written in:
after a move the source still counted the document and the target did not."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import MoveKnowledgeRequest
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.operations.cost import kb_cost, knowledge_cost
from chalicelib.operations.knowledge_changes import delete_knowledge
from chalicelib.operations.move_and_clone import move
from chalicelib.operations.stats import kb_stats

from .test_move_clone import CRANES, TIDES, completed, new_kb, run_lifecycle

THIRD = b"# Third\n\nLighthouse keepers trim wicks at noon.\n"


def moved_and_deleted(deps: Services, tenant: Tenant) -> tuple[KnowledgeBase, KnowledgeBase, list[str]]:
    """A holds one, two (moved to B) and three (deleted)."""
    a, b = new_kb(deps, tenant, "a"), new_kb(deps, tenant, "b")
    ids = [
        completed(deps, a, name, data).id
        for name, data in (("t.md", TIDES), ("c.md", CRANES), ("3.md", THIRD))
    ]
    move(deps, tenant.id, MoveKnowledgeRequest(source_kb_id=a.id, target_kb_id=b.id, ids=[ids[1]]))
    delete_knowledge(deps, tenant.id, ids[2])
    run_lifecycle(deps)
    moved = deps.knowledge.get(ids[1])
    assert moved is not None and moved.kb_id == b.id and deps.knowledge.get(ids[2]) is None
    return a, b, ids


def test_a_knowledge_base_costs_the_documents_it_holds_now(deps: Services, tenant: Tenant) -> None:
    a, b, (one, two, three) = moved_and_deleted(deps, tenant)
    spent = {i: knowledge_cost(deps, tenant.id, i)["aws_dollars"] for i in (one, two)}
    source, target = kb_cost(deps, tenant.id, a.id), kb_cost(deps, tenant.id, b.id)
    assert (
        (source["documents"], target["documents"])
        == (
            kb_stats(deps, tenant.id, a.id)["documents"],
            kb_stats(deps, tenant.id, b.id)["documents"],
        )
        == (1, 1)
    )
    assert source["deleted_documents"]["documents"] == 1 and source["deleted_documents"]["aws_dollars"] > 0
    assert target["deleted_documents"] == {"documents": 0, "aws_dollars": 0.0, "model_dollars": 0.0}
    # the sum of its documents, its deleted documents and its own work
    for report, documents in ((source, [spent[one]]), (target, [spent[two]])):
        parts = sum(documents) + report["deleted_documents"]["aws_dollars"]
        parts += report["knowledge_base_work"]["aws_dollars"]
        assert report["aws_dollars"] == pytest.approx(parts, rel=1e-6)
    assert {e.kb_id for e in deps.usage.for_knowledge(two)} == {b.id}  # carried by the move
    assert {e.kb_id for e in deps.usage.for_knowledge(three)} == {a.id}  # paid for in A, stays there


def test_entries_a_move_left_behind_are_carried_by_the_source_report(deps: Services, tenant: Tenant) -> None:
    """A move whose carry was lost (or one from before moves carried usage): the source's report leaves the
    document's entries out and rewrites them under its knowledge base now, where the target finds them."""
    a, b, (_, two, _) = moved_and_deleted(deps, tenant)
    for entry in deps.usage.for_knowledge(two):
        deps.usage.put(replace(entry, kb_id=a.id))
    behind = kb_cost(deps, tenant.id, b.id)
    assert behind["documents"] == 0
    assert kb_cost(deps, tenant.id, a.id)["documents"] == 1  # the one still there; two is not counted
    assert {e.kb_id for e in deps.usage.for_knowledge(two)} == {b.id}
    assert kb_cost(deps, tenant.id, b.id)["documents"] == 1
