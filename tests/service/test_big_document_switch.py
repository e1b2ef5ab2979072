"""A big document's enable or disable (`PUT /knowledge/{id}` with `enable_status`): its row is written in the
request and its index entries follow in a lifecycle task, a slice of chunk pages a delivery.

It was all done in the request: every chunk row listed into memory (twice to switch one on) and every entry
flipped before the answer, so a document of 150,000 chunks (~300 MB of rows) passed API Gateway's 29 s and the
API function's 512 MB. Search reads each hit's document row, so the row alone already decides what it shows.
"""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import EditChunkRequest, EditKnowledgeRequest
from chalicelib.domain.types import EnableStatus, Knowledge, KnowledgeBase, ParseStatus, TaskKind, TaskStatus
from chalicelib.ports import IndexSpace

from .conftest import MAIN_STAGES, drain, stage_handler, upload

PARAGRAPH = "The keeper logs the weather at dawn and dusk, trims the wick and writes the tide. " * 6


@pytest.fixture
def small_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A "big" document of a few dozen chunks: the inline limit, the page and the slice made small."""
    from chalicelib.operations import knowledge_changes
    from chalicelib.services import document_switch
    from chalicelib.tasks import switch

    monkeypatch.setattr(knowledge_changes, "INLINE_CHUNKS", 5)
    monkeypatch.setattr(document_switch, "PAGE", 4)
    monkeypatch.setattr(switch, "SLICE_SECONDS", 0.0)  # one page a delivery


def _big(deps: Services, kb: KnowledgeBase) -> Knowledge:
    text = "".join(f"## Part {n}\n\n{PARAGRAPH}\n\n" for n in range(30)).encode()
    created = upload(deps, kb, "big.md", text)
    drain(deps, MAIN_STAGES)
    row = deps.knowledge.settle_plan(created.id, created.attempt, 0, {"planned": [], "not_planned": {}})
    assert row is not None and row.parse_status == ParseStatus.COMPLETED
    assert row.chunk_count > 5 * 4  # more pages than one delivery flips
    return row


def _entries(deps: Services, kb: KnowledgeBase, knowledge_id: str) -> dict[str, bool]:
    engine: Any = deps.engine()
    entries = engine.entries_of(IndexSpace.of(deps.embedding_model()), kb.id, knowledge_id)
    return {entry.chunk_id: entry.is_enabled for entry in entries}


def _switch(deps: Services, knowledge: Knowledge, status: EnableStatus) -> Knowledge:
    from chalicelib.operations.knowledge_changes import edit

    return edit(deps, knowledge.tenant_id, knowledge.id, EditKnowledgeRequest(enable_status=status.value))


def _deliver_one(deps: Services, task_id: str) -> None:
    """One delivery of the task's message, as SQS hands it to the lifecycle function."""
    from chalicelib.stages.lifecycle import run

    run(deps, task_id)


def _switch_tasks(deps: Services) -> list[str]:
    return [body["task_id"] for body in deps.queue.bodies("lifecycle")]  # type: ignore[attr-defined]


class _CountingChunks:
    """The chunk repo, counting what the request reads."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.pages, self.lists = inner, 0, 0

    def list_page(self, *args: Any, **kwargs: Any) -> Any:
        self.pages += 1
        return self.inner.list_page(*args, **kwargs)

    def list(self, *args: Any, **kwargs: Any) -> Any:
        self.lists += 1
        return self.inner.list(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.usefixtures("small_limits")
def test_the_request_writes_the_row_and_a_task_flips_the_entries(deps: Services, kb: KnowledgeBase) -> None:
    knowledge = _big(deps, kb)
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]
    counting = _CountingChunks(deps.chunks)
    deps.chunks = counting  # type: ignore[misc]
    try:
        answer = _switch(deps, knowledge, EnableStatus.DISABLED)
    finally:
        deps.chunks = counting.inner  # type: ignore[misc]
    assert answer.enable_status == EnableStatus.DISABLED
    assert deps.knowledge.get(knowledge.id).enable_status == EnableStatus.DISABLED  # type: ignore[union-attr]
    assert (counting.lists, counting.pages) == (0, 0)  # was: every chunk row listed in the request
    [task_id] = _switch_tasks(deps)
    task = deps.tasks.get(task_id)
    assert task is not None and task.kind == TaskKind.SWITCH_KNOWLEDGE and task.items == [knowledge.id]
    assert set(_entries(deps, kb, knowledge.id).values()) == {True}  # not flipped yet
    deliveries = 0
    while _switch_tasks(deps):
        deps.queue.purge("lifecycle")  # type: ignore[attr-defined]
        _deliver_one(deps, task_id)
        _deliver_one(deps, task_id)  # an SQS duplicate of every delivery: it only repeats a page
        deliveries += 1
    assert deliveries > 2  # a slice at a time, each delivery queueing the next
    assert set(_entries(deps, kb, knowledge.id).values()) == {False}
    done = deps.tasks.get(task_id)
    assert done is not None and done.status == TaskStatus.COMPLETED and done.failed == 0


@pytest.mark.usefixtures("small_limits")
def test_a_switch_back_between_deliveries_starts_the_walk_over(deps: Services, kb: KnowledgeBase) -> None:
    from chalicelib.operations.chunks import edit_chunk

    knowledge = _big(deps, kb)
    kept_off = sorted(_entries(deps, kb, knowledge.id))[7]
    edit_chunk(deps, knowledge.tenant_id, knowledge.id, kept_off, EditChunkRequest(is_enabled=False))
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]
    _switch(deps, knowledge, EnableStatus.DISABLED)
    [off_task] = _switch_tasks(deps)
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]
    _deliver_one(deps, off_task)  # the off walk's first page, then the document comes back on
    _switch(deps, knowledge, EnableStatus.ENABLED)
    [on_task] = [t for t in _switch_tasks(deps) if t != off_task]
    _run_to_the_end(deps, on_task)  # the on walk ends first; the off walk's next delivery comes after it
    _run_to_the_end(deps, off_task)
    entries = _entries(deps, kb, knowledge.id)
    assert {chunk_id for chunk_id, on in entries.items() if not on} == {kept_off}
    assert len(entries) == knowledge.chunk_count


@pytest.mark.usefixtures("small_limits")
def test_a_switch_back_during_the_last_slice_is_seen_at_the_walks_end(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.tasks import switch

    knowledge = _big(deps, kb)
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]
    _switch(deps, knowledge, EnableStatus.DISABLED)
    [off_task] = _switch_tasks(deps)
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]
    monkeypatch.setattr(switch, "SLICE_SECONDS", 3600.0)  # the whole walk in one delivery
    inner = deps.chunks
    pages = 0

    def list_page(*args: Any, **kwargs: Any) -> Any:
        nonlocal pages
        pages += 1
        if pages == 2:  # the row switches back on while the off walk is under way, and the on walk,
            # on another worker, ends before it
            deps.chunks = inner  # type: ignore[misc]
            _switch(deps, knowledge, EnableStatus.ENABLED)
            [on_task] = [t for t in _switch_tasks(deps) if t != off_task]
            _run_to_the_end(deps, on_task)
        return inner.list_page(*args, **kwargs)

    counting = _CountingChunks(inner)
    counting.list_page = list_page  # type: ignore[method-assign]
    deps.chunks = counting  # type: ignore[misc]
    try:
        _deliver_one(deps, off_task)
    finally:
        deps.chunks = inner  # type: ignore[misc]
    # the off walk wrote its last pages off after the on walk ended; at its end it found the row on, and
    # its next delivery walks again
    assert deps.tasks.get(off_task).status != TaskStatus.COMPLETED  # type: ignore[union-attr]
    _run_to_the_end(deps, off_task)
    assert set(_entries(deps, kb, knowledge.id).values()) == {True}


def _run_to_the_end(deps: Services, task_id: str) -> None:
    for _ in range(100):
        task = deps.tasks.get(task_id)
        assert task is not None
        if task.status == TaskStatus.COMPLETED:
            return
        _deliver_one(deps, task_id)
    raise AssertionError(f"task {task_id} still open")


def test_a_small_document_is_still_switched_within_the_request(deps: Services, kb: KnowledgeBase) -> None:
    knowledge = _big(deps, kb)  # under the real limit (5,000 chunks)
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]
    _switch(deps, knowledge, EnableStatus.DISABLED)
    assert _switch_tasks(deps) == []
    assert set(_entries(deps, kb, knowledge.id).values()) == {False}


@pytest.mark.usefixtures("small_limits")
def test_a_walk_ends_quietly_once_the_document_is_deleted(deps: Services, kb: KnowledgeBase) -> None:
    from chalicelib.operations.knowledge_changes import delete_knowledge

    knowledge = _big(deps, kb)
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]
    _switch(deps, knowledge, EnableStatus.DISABLED)
    [task_id] = _switch_tasks(deps)
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]
    _deliver_one(deps, task_id)
    delete_knowledge(deps, knowledge.tenant_id, knowledge.id)
    deps.queue.deliver("lifecycle", stage_handler("lifecycle"), deps)  # type: ignore[attr-defined]
    _deliver_one(deps, task_id)
    task = deps.tasks.get(task_id)
    assert task is not None and task.status == TaskStatus.COMPLETED
    assert deps.knowledge.get(knowledge.id) is None and _entries(deps, kb, knowledge.id) == {}


@pytest.mark.usefixtures("small_limits")
def test_the_tasks_message_goes_after_the_rows_write_and_a_lost_one_is_not_lost(
    deps: Services, kb: KnowledgeBase
) -> None:
    knowledge = _big(deps, kb)
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]
    inner = deps.knowledge.update_fields
    waiting_at_the_write: list[list[str]] = []

    def update_fields(*args: Any, **kwargs: Any) -> Any:
        waiting_at_the_write.append(_switch_tasks(deps))
        return inner(*args, **kwargs)

    deps.knowledge.update_fields = update_fields  # type: ignore[method-assign]
    deps.queue.make_unavailable("lifecycle")  # type: ignore[attr-defined]
    try:
        answer = _switch(deps, knowledge, EnableStatus.DISABLED)  # the queue down: the change still stands
    finally:
        deps.queue.make_unavailable("lifecycle", False)  # type: ignore[attr-defined]
        deps.knowledge.update_fields = inner  # type: ignore[method-assign]
    # a walk that began before the row's write would end at once with nothing to flip
    assert waiting_at_the_write == [[]]
    assert answer.enable_status == EnableStatus.DISABLED and _switch_tasks(deps) == []
    [task] = [t for t in deps.tasks._rows.values() if t.kind == TaskKind.SWITCH_KNOWLEDGE]  # type: ignore[attr-defined]
    assert task.status == TaskStatus.QUEUED  # recorded: housekeeping sends an open task that saved nothing
    from chalicelib.tasks import send_again

    send_again(deps, task)
    _run_to_the_end(deps, task.id)
    assert set(_entries(deps, kb, knowledge.id).values()) == {False}
