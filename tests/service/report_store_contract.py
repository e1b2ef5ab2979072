"""The stored reports' contract (`UsageRepo.report` / `save_report`), on the in-memory fake
(tests/service/test_kb_reports_bounded.py) and the DynamoDB adapter (tests/e2e/test_kb_reports_dynamo.py)."""

from __future__ import annotations

import uuid

from chalicelib.domain import metering
from chalicelib.ports import StoredReport, UsageEntry, UsageRepo


def check_report_store(usage: UsageRepo) -> None:
    kb_id = f"kb-{uuid.uuid4().hex}"
    assert usage.report(kb_id, "cost") is None
    first = StoredReport(
        kb_id, "cost", "2026-12-07T10:00:00.000Z", 0, {"aws_dollars": 1.5, "lines": [{"a": 1}]}
    )
    assert usage.save_report(first)
    assert usage.report(kb_id, "cost") == first
    assert usage.report(kb_id, "stats") is None  # one report per kind
    # only a newer report replaces it: an older or equally old one (a late redelivery) does not
    assert not usage.save_report(
        StoredReport(kb_id, "cost", "2026-12-07T09:59:59.999Z", 1, {"aws_dollars": 9})
    )
    assert not usage.save_report(StoredReport(kb_id, "cost", first.as_of, 1, {"aws_dollars": 9}))
    assert usage.report(kb_id, "cost") == first
    newer = StoredReport(
        kb_id, "cost", "2026-12-07T10:05:00.000Z", 1, {"aws_dollars": 2.0}, "2026-12-07T10:09:00.000Z"
    )
    assert usage.save_report(newer)
    assert usage.report(kb_id, "cost") == newer
    # a report is no usage entry: the knowledge base's entries do not include it
    assert list(usage.for_kb(kb_id)) == []
    # the last generation that ended without a report: only ever raised, per kind
    assert usage.ended_generation(kb_id, "cost") == -1
    assert usage.save_ended_generation(kb_id, "cost", 3)
    assert not usage.save_ended_generation(kb_id, "cost", 2)
    assert not usage.save_ended_generation(kb_id, "cost", 3)
    assert usage.save_ended_generation(kb_id, "cost", 4)
    assert (usage.ended_generation(kb_id, "cost"), usage.ended_generation(kb_id, "stats")) == (4, -1)
    assert usage.report(kb_id, "cost") == newer  # kept apart from the report
    assert list(usage.for_kb(kb_id)) == []


def check_kb_pages(usage: UsageRepo) -> None:
    """`kb_page` from a cursor: every entry of the knowledge base once, whatever the page size."""
    kb_id = f"kb-{uuid.uuid4().hex}"
    keys = set()
    for document in range(7):
        for n in range(3):
            entry = UsageEntry(
                f"doc-{uuid.uuid4().hex}-{document}",
                f"{n + 1:06d}#embedding#m-{n}",
                kb_id,
                "t",
                {metering.LAMBDA_REQUESTS: 1.0},
                "2026-12-07T10:00:00.000Z",
            )
            usage.put(entry)
            keys.add((entry.knowledge_id, entry.entry))
    usage.put(UsageEntry("elsewhere", "000001#x#y", f"{kb_id}-other", "t", {}, "2026-12-07T10:00:00.000Z"))
    for limit in (1, 4, 21, 50):
        seen, cursor, pages = [], None, 0
        while True:
            page = usage.kb_page(kb_id, cursor, limit)
            assert len(page.entries) <= limit
            seen += [(e.knowledge_id, e.entry) for e in page.entries]
            pages += 1
            cursor = page.cursor
            if cursor is None:
                break
            assert pages < 100
        assert sorted(seen) == sorted(keys), limit
