"""A cancel interrupted after the row turned `cancelled` is finished: an execution stop left unanswered does
not fail it (the execution's tasks drop themselves on a cancelled row), and a cancel repeated redoes what
follows the write (spans closed, the tenant's pipeline place back, the event under the same id)."""

from __future__ import annotations

import pytest

from chalicelib.adapters.memory import MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus, SpanStatus
from chalicelib.ports import ServiceUnreachable

from .conftest import deliver, upload

CANCELLED = "Knowledge Cancelled"


def _settled(deps: Services, doc: Knowledge) -> None:
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.parse_status == ParseStatus.CANCELLED
    spans = {span.span_id: span.status for span in deps.spans.list(doc.id, row.attempt)}
    assert spans["root"] == SpanStatus.CANCELLED
    assert not {SpanStatus.PENDING, SpanStatus.RUNNING} & set(spans.values())
    assert deps.tenants.pipeline_door(doc.tenant_id).place_of(doc.id) is None
    assert CANCELLED in deps.events.types_of(doc.id)


def test_a_stop_left_unanswered_does_not_fail_the_cancel(
    deps: Services, kb: KnowledgeBase, workflow: MemoryWorkflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.operations.knowledge_changes import cancel

    doc = upload(deps, kb)
    deliver(deps, "docreader")  # processing: it holds a pipeline place, chunking waits

    def unanswered(name: str, cause: str) -> bool:
        raise ServiceUnreachable("Step Functions throttled")

    monkeypatch.setattr(workflow, "stop", unanswered)
    assert cancel(deps, kb.tenant_id, doc.id).parse_status == ParseStatus.CANCELLED
    _settled(deps, doc)


@pytest.mark.parametrize("dies_in", ["leave_pipeline", "recount_quietly"])
def test_a_cancel_repeated_finishes_one_interrupted_after_its_write(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, dies_in: str
) -> None:
    from chalicelib.operations import knowledge_changes

    doc = upload(deps, kb)
    deliver(deps, "docreader")
    assert deps.tenants.pipeline_door(kb.tenant_id).place_of(doc.id) is not None

    class Died(Exception):
        """The Lambda ended (a timeout) after the row's write."""

    def dies(*args: object, **kwargs: object) -> None:
        raise Died

    monkeypatch.setattr(knowledge_changes, dies_in, dies)
    with pytest.raises(Died):
        knowledge_changes.cancel(deps, kb.tenant_id, doc.id)
    monkeypatch.undo()
    assert knowledge_changes.cancel(deps, kb.tenant_id, doc.id).parse_status == ParseStatus.CANCELLED
    _settled(deps, doc)
    # announced again when the first one may have been: under the same id, so consumers and webhook
    # deliveries drop the repeat; a cancel repeated once the root span closed announces nothing more
    announced = [e for e in deps.events.published if e.type.value == CANCELLED]
    assert len({e.detail["event_id"] for e in announced}) == 1
    knowledge_changes.cancel(deps, kb.tenant_id, doc.id)
    assert [e for e in deps.events.published if e.type.value == CANCELLED] == announced
