"""A report's walk carries a moved document's usage entries to where the document is when the walk gets to
its carry, not to where it was when the walk first met it: a refresh runs in slices, and the document may
have moved again meanwhile, back into the knowledge base the walk reads among others (found by a review:
its entries went to the knowledge base it had left)."""

from __future__ import annotations

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain import metering
from chalicelib.domain.clock import now_iso
from chalicelib.domain.types import ParseStatus, Tenant
from chalicelib.operations import cost
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.ports import UsageEntry
from chalicelib.services.usage import carry_usage
from chalicelib.tasks.move_clone import rekey

from .repo_contract import row


def _document(deps: Services, kb_id: str, tenant_id: str, n: int, row_kb: str) -> str:
    """A completed document whose row is in `row_kb` and whose entries (3 stages + workflow) say `kb_id`."""
    knowledge_id = f"{n:08d}-0000-4000-8000-000000000000"
    deps.knowledge.insert(
        row(id=knowledge_id, tenant_id=tenant_id, kb_id=row_kb, parse_status=ParseStatus.COMPLETED, attempt=1)
    )
    for stage in ("chunking", "docreader", "embedding", "workflow"):
        counts = {metering.LAMBDA_REQUESTS: 1.0}
        deps.usage.put(UsageEntry(knowledge_id, f"000001#{stage}#m-{n}", kb_id, tenant_id, counts, now_iso()))
    return knowledge_id


@pytest.mark.parametrize("moved_back", [True, False])
def test_a_moved_documents_entries_go_where_it_is_at_the_carry(
    deps: Services, tenant: Tenant, monkeypatch: pytest.MonkeyPatch, moved_back: bool
) -> None:
    a = create_kb(deps, tenant.id, CreateKnowledgeBase(name="a"))
    b = create_kb(deps, tenant.id, CreateKnowledgeBase(name="b"))
    c = create_kb(deps, tenant.id, CreateKnowledgeBase(name="c"))
    monkeypatch.setattr(cost, "USAGE_PAGE", 4)
    moved = _document(deps, a.id, tenant.id, 0, row_kb=b.id)  # moved to B, its entries not carried yet
    for n in range(1, 4):
        _document(deps, a.id, tenant.id, n, row_kb=a.id)
    walk = cost.CostWalk(a.id)
    pages = iter([True])  # stop after the first page: a slice's end
    assert not cost.advance_cost(deps, walk, fills=25, carries=25, stop=lambda: next(pages, False))
    current = deps.knowledge.get(moved)
    assert current is not None
    target = a.id if moved_back else c.id  # meanwhile moved again: back into A, or on to C
    assert deps.knowledge.move_to_kb(moved, b.id, target, rekey(current.dedupe_key, target))
    if moved_back:
        carry_usage(deps, deps.usage.for_knowledge(moved), a.id)  # its move carries its entries home
    assert cost.advance_cost(deps, walk, fills=25, carries=25)
    assert {e.kb_id for e in deps.usage.for_knowledge(moved)} == {target}
