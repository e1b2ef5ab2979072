"""The stored reports' contract (`UsageRepo.report` / `save_report`), on the in-memory fake
(tests/service/test_kb_reports_bounded.py) and the DynamoDB adapter (tests/e2e/test_kb_reports_dynamo.py)."""

from __future__ import annotations

import uuid

from chalicelib.ports import StoredReport, UsageRepo


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
    newer = StoredReport(kb_id, "cost", "2026-12-07T10:05:00.000Z", 1, {"aws_dollars": 2.0})
    assert usage.save_report(newer)
    assert usage.report(kb_id, "cost") == newer
    # a report is no usage entry: the knowledge base's entries do not include it
    assert list(usage.for_kb(kb_id)) == []
