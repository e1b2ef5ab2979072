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
from chalicelib.domain.types import (
    EnableStatus,
    Knowledge,
    KnowledgeBase,
    ParseStatus,
    TaskKind,
    TaskStatus,
    Tenant,
)
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


@pytest.mark.usefixtures("small_limits")
def test_a_duplicate_delivery_writes_nothing_once_the_row_says_otherwise(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two deliveries of one task (an SQS duplicate): while X walks, the row switches back on, the on task
    ends, and Y finds the row on, walks it on and completes the task. X wrote its remaining pages off, and
    at its end its task (completed) could not be saved nor sent again: the row said enabled, the entries
    off, for good. X now reads the row before each page's write and stops."""
    from chalicelib.tasks import switch

    knowledge = _big(deps, kb)
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]
    _switch(deps, knowledge, EnableStatus.DISABLED)
    [off_task] = _switch_tasks(deps)
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]
    monkeypatch.setattr(switch, "SLICE_SECONDS", 3600.0)  # X's whole walk in one delivery
    inner = deps.chunks
    pages = 0

    def list_page(*args: Any, **kwargs: Any) -> Any:
        nonlocal pages
        pages += 1
        if pages == 2:  # X is under way
            deps.chunks = inner  # type: ignore[misc]
            _switch(deps, knowledge, EnableStatus.ENABLED)
            [on_task] = [t for t in _switch_tasks(deps) if t != off_task]
            _run_to_the_end(deps, on_task)
            _deliver_one(deps, off_task)  # Y
            assert deps.tasks.get(off_task).status == TaskStatus.COMPLETED  # type: ignore[union-attr]
        return inner.list_page(*args, **kwargs)

    counting = _CountingChunks(inner)
    counting.list_page = list_page  # type: ignore[method-assign]
    deps.chunks = counting  # type: ignore[misc]
    try:
        _deliver_one(deps, off_task)  # X
    finally:
        deps.chunks = inner  # type: ignore[misc]
    assert deps.knowledge.get(knowledge.id).enable_status == EnableStatus.ENABLED  # type: ignore[union-attr]
    assert set(_entries(deps, kb, knowledge.id).values()) == {True}


def _entries_in(deps: Services, kb_id: str, knowledge_id: str) -> dict[str, bool]:
    engine: Any = deps.engine()
    entries = engine.entries_of(IndexSpace.of(deps.embedding_model()), kb_id, knowledge_id)
    return {entry.chunk_id: entry.is_enabled for entry in entries}


@pytest.mark.usefixtures("small_limits")
def test_a_walk_follows_a_document_moved_before_it_ran(
    deps: Services, tenant: Tenant, kb: KnowledgeBase
) -> None:
    """A move with reuse_vectors carries the entries with their flags: the walk, which ended at once
    finding the row in another knowledge base, left a disabled document's entries on there for good."""
    from .test_move_clone import move, new_kb, run_lifecycle

    knowledge = _big(deps, kb)
    target = new_kb(deps, tenant, "target")
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]
    _switch(deps, knowledge, EnableStatus.DISABLED)
    [switch_task] = _switch_tasks(deps)
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]  # its message waits behind the move
    moved = move(deps, kb, target, [knowledge.id], "reuse_vectors")
    run_lifecycle(deps)
    assert deps.tasks.get(moved.id).status == TaskStatus.COMPLETED  # type: ignore[union-attr]
    _run_to_the_end(deps, switch_task)
    entries = _entries_in(deps, target.id, knowledge.id)
    assert len(entries) == knowledge.chunk_count and set(entries.values()) == {False}


@pytest.mark.usefixtures("small_limits")
def test_a_walk_waits_for_a_moves_carry_and_starts_over_where_the_document_is(
    deps: Services, tenant: Tenant, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk under way when a move writes the row into its target, before the move carries the entries:
    a walk there would find none to set, and the carry would bring the ones not walked yet as they were."""
    from chalicelib.tasks import move_clone, switch

    from .test_move_clone import move, new_kb, run_lifecycle

    knowledge = _big(deps, kb)
    target = new_kb(deps, tenant, "target")
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]
    _switch(deps, knowledge, EnableStatus.DISABLED)
    [switch_task] = _switch_tasks(deps)
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]
    _deliver_one(deps, switch_task)  # the first page, in the source
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]
    carry = move_clone._repoint
    waited: list[str] = []

    def repoint(*args: Any, **kwargs: Any) -> Any:
        if not waited:  # the row is in the target, the entries are not yet: the walk's next delivery
            monkeypatch.setattr(switch, "SLICE_SECONDS", 3600.0)  # would walk every page there
            _deliver_one(deps, switch_task)
            monkeypatch.setattr(switch, "SLICE_SECONDS", 0.0)
            task = deps.tasks.get(switch_task)
            assert task is not None
            waited.append(task.status.value)
            deps.queue.purge("lifecycle")  # type: ignore[attr-defined]  # delivered again below
        return carry(*args, **kwargs)

    monkeypatch.setattr(move_clone, "_repoint", repoint)
    move(deps, kb, target, [knowledge.id], "reuse_vectors")
    run_lifecycle(deps)
    assert waited == [TaskStatus.RUNNING.value]
    _run_to_the_end(deps, switch_task)
    entries = _entries_in(deps, target.id, knowledge.id)
    assert len(entries) == knowledge.chunk_count and set(entries.values()) == {False}
    assert _entries_in(deps, kb.id, knowledge.id) == {}


@pytest.mark.usefixtures("small_limits")
def test_a_clone_sets_the_copys_entries_as_its_row_and_chunks_say(deps: Services, kb: KnowledgeBase) -> None:
    """A clone copied the entries with the source's flags, which lag its row while its switch walks: a
    disabled copy kept every entry on, and nothing walks the copy."""
    from chalicelib.operations.chunks import edit_chunk

    from .test_move_clone import clone, run_lifecycle

    knowledge = _big(deps, kb)
    kept_off = sorted(_entries(deps, kb, knowledge.id))[5]
    edit_chunk(deps, knowledge.tenant_id, knowledge.id, kept_off, EditChunkRequest(is_enabled=False))
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]
    _switch(deps, knowledge, EnableStatus.DISABLED)
    [switch_task] = _switch_tasks(deps)
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]  # not walked yet
    disabled = clone(deps, kb, name="disabled copy")["target_kb_id"]
    run_lifecycle(deps)
    _switch(deps, deps.knowledge.get(knowledge.id), EnableStatus.ENABLED)  # type: ignore[arg-type]
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]  # the source's entries: off, still
    enabled = clone(deps, kb, name="enabled copy")["target_kb_id"]
    run_lifecycle(deps)
    for target_id, on in ((disabled, False), (enabled, True)):
        [copy] = deps.knowledge.page_by_kb(target_id, limit=10)
        assert copy.enable_status == (EnableStatus.ENABLED if on else EnableStatus.DISABLED)
        entries = _entries_in(deps, target_id, copy.id)
        assert len(entries) == knowledge.chunk_count
        off = {chunk_id for chunk_id, flag in entries.items() if not flag}
        copied_off = {chunk.id for chunk in deps.chunks.list(copy.id) if not chunk.is_enabled}
        assert len(copied_off) == 1 and off == (copied_off if on else set(entries))
    _run_to_the_end(deps, switch_task)
