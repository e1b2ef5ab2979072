"""The DynamoDB knowledge adapter keeps the nonce of the write that set a summary's status (helper alo3,
item 1; the announcements it makes possible are tests/service/test_summary_announced_again.py): read back
as written, removed by a write that gives none, never in the tenant-visible shape."""

from __future__ import annotations

from service.repo_contract import row

from chalicelib.bootstrap import Services
from chalicelib.domain.types import ParseStatus, SummaryStatus


def test_the_summary_occurrence_is_kept_with_the_status_that_wrote_it(module_services: Services) -> None:
    rows = module_services.knowledge
    k = row(parse_status=ParseStatus.FINALIZING)
    rows.insert(k)
    processing, completed = SummaryStatus.PROCESSING.value, SummaryStatus.COMPLETED.value
    assert rows.set_summary_status(k.id, processing)
    assert rows.set_summary_status(k.id, completed, only_if=processing, attempt=1, occurrence="n1")
    stored = rows.get(k.id)
    assert stored is not None and stored.summary_occurrence == "n1"
    assert "summary_occurrence" not in stored.to_dict()
    assert not rows.set_summary_status(k.id, completed, only_if=processing, occurrence="n2")  # refused
    stored = rows.get(k.id)
    assert stored is not None and stored.summary_occurrence == "n1"
    assert rows.set_summary_status(k.id, SummaryStatus.PENDING.value)  # a refresh: a new run begins
    stored = rows.get(k.id)
    assert stored is not None and stored.summary_occurrence == ""
