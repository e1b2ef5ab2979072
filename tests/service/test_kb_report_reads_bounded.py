"""GET /knowledge-bases/{id}/cost reads a bounded number of usage entries whatever the knowledge base's size
(it read every entry the knowledge base ever had, so a long-lived one outran API Gateway's 28 s: a 504).
No patched bound here: the shipped one, 10,000 entries."""

from __future__ import annotations

from collections.abc import Iterator

from chalicelib.bootstrap import Services
from chalicelib.domain import metering
from chalicelib.domain.clock import now_iso
from chalicelib.domain.types import KnowledgeBase
from chalicelib.operations.cost import kb_cost
from chalicelib.ports import UsageEntry
from chalicelib.ports.reports import UsagePage

SHIPPED_BOUND = 10_000


def test_a_big_knowledge_bases_cost_reads_at_most_the_bound_and_answers_without_the_rest(
    deps: Services, kb: KnowledgeBase
) -> None:
    for document in range(800):  # 12,000 entries: 15 an attempt
        for n in range(15):
            deps.usage.put(
                UsageEntry(
                    f"doc-{document:04d}",
                    f"000001#embedding#m-{n}",
                    kb.id,
                    kb.tenant_id,
                    {metering.LAMBDA_REQUESTS: 1.0},
                    now_iso(),
                )
            )
    read = 0
    every = deps.usage.for_kb

    def counted(kb_id: str) -> Iterator[UsageEntry]:
        nonlocal read
        for entry in every(kb_id):
            read += 1
            yield entry

    deps.usage.for_kb = counted  # type: ignore[method-assign]
    paged = deps.usage.kb_page

    def counted_page(kb_id: str, cursor: str | None, limit: int) -> UsagePage:
        nonlocal read
        page = paged(kb_id, cursor, limit)
        read += len(page.entries)
        return page

    deps.usage.kb_page = counted_page  # type: ignore[method-assign]
    report = kb_cost(deps, kb.tenant_id, kb.id)
    assert SHIPPED_BOUND < read <= SHIPPED_BOUND + 1  # read up to the bound, then one past it
    assert report.get("fresh") is False and report.get("task_id")  # the refresh reads the rest
