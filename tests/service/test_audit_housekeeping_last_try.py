"""Housekeeping audit, a stage's last try: its failure is written on the attempt's spans only when the
attempt ended failed. A document cancelled (or deleted) while its stage's last try ran keeps the trace the
cancel closed (no root `failed` under a `cancelled` row, no span rows left behind a deleted document)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import TransientStageError
from chalicelib.domain.types import KnowledgeBase, ParseStatus, SpanStatus
from chalicelib.ports import ReadRequest, ReadResult
from chalicelib.stages import docreader

from .conftest import failed_ids, message, upload


class StoppedWhileReading:
    """A reader during whose read the document is cancelled or deleted, and that then fails (an outage)."""

    def __init__(self, stop: Any) -> None:
        self.stop = stop

    def read(self, request: ReadRequest) -> ReadResult:
        self.stop()
        raise TransientStageError("reader down")

    def page_count(self, request: ReadRequest) -> int | None:
        return None

    def engines(self) -> list[dict[str, Any]]:
        return []


@pytest.mark.parametrize("stop", ["cancel", "delete"])
def test_a_last_try_that_fails_after_a_cancel_or_delete_leaves_the_trace_alone(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, stop: str
) -> None:
    from chalicelib.operations.knowledge_changes import cancel

    created = upload(deps, kb)
    queue.purge("docreader")

    def stop_it() -> None:
        if stop == "cancel":
            cancel(deps, kb.tenant_id, created.id)
        else:  # what the delete task does, the row last
            deps.spans.delete_all(created.id)
            assert deps.knowledge.delete(created.id)

    deps.replace_docreader(StoppedWhileReading(stop_it))
    last_try = queue.event("docreader", [json.dumps(message(created))], receive_count=queue.max_receives)
    assert len(failed_ids(docreader.handle(deps, last_try, None))) == 1
    spans = {s.span_id: s.status for s in deps.spans.list(created.id, created.attempt)}
    if stop == "delete":
        assert spans == {}
        assert deps.knowledge.get(created.id) is None
        return
    row = deps.knowledge.get(created.id)
    assert row is not None and row.parse_status == ParseStatus.CANCELLED
    assert spans["root"] == SpanStatus.CANCELLED and spans["docreader"] == SpanStatus.CANCELLED
