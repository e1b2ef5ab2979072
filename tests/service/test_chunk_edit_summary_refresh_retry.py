"""An edit whose summary refresh the enrichment queue does not take follows the graph refresh's rule: a few
short tries, then 503 `queue_unavailable` with the edit saved, and the same request sent again queues the
refresh (it had found nothing to change and queued nothing: the summary stayed made from the old text, or
pending until housekeeping failed it). A text the parser made, sent unchanged, still queues nothing."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from chalicelib.adapters.memory import InstantSleep, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import ServiceUnavailable
from chalicelib.domain.ids import content_hash
from chalicelib.domain.types import Chunk, ChunkType, Knowledge, KnowledgeBase, SummaryStatus

from .test_chunks import _completed, _refreshes, _update, kb  # noqa: F401


def _queue(deps: Services) -> MemoryTaskQueue:
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    return queue


def _first_text(deps: Services, knowledge: Knowledge) -> Chunk:
    return sorted(
        (c for c in deps.chunks.list(knowledge.id) if c.chunk_type == ChunkType.TEXT), key=lambda c: c.seq
    )[0]


def _stored(deps: Services, knowledge: Knowledge, chunk: Chunk) -> Chunk:
    return deps.chunks.get_many([(knowledge.id, chunk.id)])[(knowledge.id, chunk.id)]


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"content": "The ferry calls at the harbour every day."}, id="text"),
        pytest.param({"is_enabled": False}, id="switch"),
    ],
)
def test_the_same_edit_sent_again_queues_the_summary_refresh_the_queue_did_not_take(
    deps: Services,
    kb: KnowledgeBase,  # noqa: F811
    body: dict[str, Any],
) -> None:
    knowledge = _completed(deps, kb)
    chunk = _first_text(deps, knowledge)
    _queue(deps).make_unavailable("enrichment")

    with pytest.raises(ServiceUnavailable) as refused:
        _update(deps, knowledge, chunk.id, **body)
    assert refused.value.status == 503 and refused.value.code == "queue_unavailable"
    stored = _stored(deps, knowledge, chunk)
    assert all(getattr(stored, field) == value for field, value in body.items())  # the edit is saved
    assert _refreshes(deps, knowledge) == 0

    _queue(deps).make_unavailable("enrichment", False)
    _update(deps, knowledge, chunk.id, **body)  # the client's retry
    assert _refreshes(deps, knowledge) == 1
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.summary_status == SummaryStatus.PENDING


def test_a_summary_refresh_the_queue_refuses_once_is_tried_again(
    deps: Services,
    kb: KnowledgeBase,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    knowledge = _completed(deps, kb)
    chunk = _first_text(deps, knowledge)
    _queue(deps).make_unavailable("enrichment")
    waits = InstantSleep()

    def back_after_a_wait(seconds: float) -> None:
        waits(seconds)
        _queue(deps).make_unavailable("enrichment", False)

    monkeypatch.setattr(deps, "sleeper", back_after_a_wait)
    _update(deps, knowledge, chunk.id, is_enabled=False)
    assert len(waits.waits) == 1 and _refreshes(deps, knowledge) == 1


def test_a_parsers_text_or_switch_sent_unchanged_queues_no_summary_refresh(
    deps: Services,
    kb: KnowledgeBase,  # noqa: F811
) -> None:
    knowledge = _completed(deps, kb)
    parsed = _first_text(deps, knowledge)
    text = "The keeper tends the lamp."  # as the parser wrote it (no edge whitespace an edit would strip)
    chunk = replace(parsed, content=text, content_hash=content_hash(text))
    deps.chunks.put_many([chunk])
    _update(deps, knowledge, chunk.id, content=chunk.content, is_enabled=chunk.is_enabled)
    assert _refreshes(deps, knowledge) == 0
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.summary_status == SummaryStatus.COMPLETED


def test_a_summary_refresh_request_and_a_title_edit_the_queue_refuses_answer_503_and_are_sent_again(
    deps: Services,
    kb: KnowledgeBase,  # noqa: F811
) -> None:
    """The other requests that queue a summary refresh follow the same rule (they had answered 500)."""
    from chalicelib.commands import EditKnowledgeRequest
    from chalicelib.operations.enrichment_outputs import refresh_summary
    from chalicelib.operations.knowledge_changes import edit

    knowledge = _completed(deps, kb)
    _queue(deps).make_unavailable("enrichment")
    with pytest.raises(ServiceUnavailable) as refused:
        refresh_summary(deps, knowledge.tenant_id, knowledge.id)
    assert refused.value.status == 503 and refused.value.code == "queue_unavailable"
    with pytest.raises(ServiceUnavailable) as refused:
        edit(deps, knowledge.tenant_id, knowledge.id, EditKnowledgeRequest(title="Harbour timetable"))
    assert refused.value.code == "queue_unavailable"
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.title == "Harbour timetable"  # the edit is saved
    assert _refreshes(deps, knowledge) == 0

    _queue(deps).make_unavailable("enrichment", False)
    edit(deps, knowledge.tenant_id, knowledge.id, EditKnowledgeRequest(title="Harbour timetable"))
    refresh_summary(deps, knowledge.tenant_id, knowledge.id)
    assert _refreshes(deps, knowledge) == 2


def test_unchanged_edits_while_a_refresh_is_queued_queue_no_more(
    deps: Services,
    kb: KnowledgeBase,  # noqa: F811
) -> None:
    """A console's "save all" over a document whose summary refresh is queued (pending) sends nothing more:
    each message would make the summary again (the worker takes a pending or processing summary)."""
    knowledge = _completed(deps, kb, summary="pending")
    for chunk in [c for c in deps.chunks.list(knowledge.id) if c.chunk_type == ChunkType.TEXT]:
        _update(deps, knowledge, chunk.id, is_enabled=chunk.is_enabled)
    assert _refreshes(deps, knowledge) == 0


def test_a_refused_refresh_leaves_the_summary_pending_for_a_refresh_queued_meanwhile(
    deps: Services,
    kb: KnowledgeBase,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """POST summary/refresh refused while a chunk edit's refresh is queued: the summary stays pending (putting
    it back had made the edit's queued refresh find nothing to make), and the 503 says it is pending."""
    from chalicelib.operations.enrichment_outputs import refresh_summary

    knowledge = _completed(deps, kb)
    queue = _queue(deps)
    queue.make_unavailable("enrichment")
    chunk = _first_text(deps, knowledge)
    landed: list[bool] = []

    def edit_lands_meanwhile(seconds: float) -> None:  # during the refused request's short waits
        if not landed:
            landed.append(True)
            queue.make_unavailable("enrichment", False)
            _update(deps, knowledge, chunk.id, content="The tide turns at noon.")
            queue.make_unavailable("enrichment")

    monkeypatch.setattr(deps, "sleeper", edit_lands_meanwhile)
    with pytest.raises(ServiceUnavailable) as refused:
        refresh_summary(deps, knowledge.tenant_id, knowledge.id)
    assert landed and "pending" in refused.value.message
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.summary_status == SummaryStatus.PENDING
    assert _refreshes(deps, knowledge) == 1  # the edit's, which will find the summary to make
