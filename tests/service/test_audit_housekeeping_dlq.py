"""Housekeeping audit, DLQ redrive: a redrive whose restart is interrupted after the row moved to its new
attempt (the dead attempt's data could not be cleared) keeps its letter as the document's way back, and the
next redrive restarts the document, instead of dropping the letter as `superseded` while the new attempt
waits with nothing queued for it."""

from __future__ import annotations

import pytest

from chalicelib.adapters.memory import MemoryKnowledgeRepo, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import SpanErrorCode
from chalicelib.domain.types import EnableStatus, KnowledgeBase, ParseStatus
from chalicelib.ports import ServiceUnreachable

from .conftest import drain
from .test_dlq import dead_in_docreader


def test_a_redrive_whose_cleanup_fails_keeps_its_letter_for_the_next_one(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    rows: MemoryKnowledgeRepo,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chalicelib.operations import dlq

    row = dead_in_docreader(deps, kb, queue)
    clear = deps.chunks.delete_all

    def unreachable(knowledge_id: str) -> int:
        raise ServiceUnreachable("the chunk store did not answer")

    monkeypatch.setattr(deps.chunks, "delete_all", unreachable)
    assert dlq.redrive(deps, "docreader", 100).as_dict()["counts"] == {"error": 1}
    assert len(queue.dead_letters("docreader")) == 1
    assert queue.bodies("docreader") == []  # nothing was queued for the new attempt
    failed = rows.get(row.id)
    assert failed is not None and failed.parse_status == ParseStatus.FAILED
    assert failed.error_code == SpanErrorCode.ENQUEUE_FAILED

    monkeypatch.setattr(deps.chunks, "delete_all", clear)
    assert dlq.redrive(deps, "docreader", 100).as_dict()["counts"] == {"redriven": 1}
    assert queue.dead_letters("docreader") == []
    drain(deps)
    done = rows.get(row.id)
    assert done is not None and done.parse_status != ParseStatus.FAILED
    assert done.enable_status == EnableStatus.ENABLED
