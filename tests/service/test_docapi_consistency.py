"""API consistency an audit found wanting, on the in-memory adapters: the legacy `page` walk of a filtered
listing reads one budget of rows, not one per page walked over; a DELETE of a document already being deleted
answers its task and starts none; every write to a document being deleted is 400 `invalid_state`; search
refuses a tag id the knowledge base does not have as the listing does; a metadata filter key with an empty
path segment is refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.commands import (
    BatchDeleteRequest,
    CreateKnowledgeBase,
    CreateTagRequest,
    EditChunkRequest,
    EditKnowledgeRequest,
    ListKnowledgeQuery,
    SearchRequest,
    validate,
)
from chalicelib.domain.errors import AppError, BadRequest
from chalicelib.domain.types import (
    Knowledge,
    KnowledgeBase,
    KnowledgeType,
    ParseStatus,
    Task,
    TaskKind,
    TaskStatus,
)

from .conftest import MAIN_STAGES, drain, upload

START = datetime(2026, 2, 1, tzinfo=UTC)


class _CountingRows:
    """Counts the rows a listing reads from the knowledge base's index."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.read = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def page_by_kb(self, *args: Any, **kwargs: Any) -> list[Knowledge]:
        rows: list[Knowledge] = self.inner.page_by_kb(*args, **kwargs)
        self.read += len(rows)
        return rows


def _seed(deps: Services, kb: KnowledgeBase, n: int) -> list[Knowledge]:
    """`n` drafts, newest last; every tenth is titled "Harbour"."""
    rows = []
    for i in range(n):
        row = Knowledge(
            id=f"k{i:05d}",
            tenant_id=kb.tenant_id,
            kb_id=kb.id,
            type=KnowledgeType.MANUAL,
            title=f"{'Harbour' if i % 10 == 0 else 'Field'} note {i}",
            file_type="md",
            parse_status=ParseStatus.DRAFT,
            created_at=START + timedelta(seconds=i),
        )
        deps.knowledge.insert(row)
        rows.append(row)
    return rows


def _listing(deps: Services, kb: KnowledgeBase, **query: Any) -> dict[str, Any]:
    from chalicelib.operations.listing import list_knowledge

    return list_knowledge(deps, kb.tenant_id, kb.id, ListKnowledgeQuery.model_validate(query))


def test_a_deep_legacy_page_of_a_filtered_listing_reads_one_budget(deps: Services, kb: KnowledgeBase) -> None:
    from chalicelib.operations.listing import MAX_READ

    rows = _seed(deps, kb, 1200)
    counting = _CountingRows(deps.knowledge)
    deps.knowledge = counting  # type: ignore[assignment]
    with pytest.raises(BadRequest) as refused:
        _listing(deps, kb, keyword="zzznomatch", page=100, page_size=100)
    assert refused.value.code == "page_too_deep"
    assert counting.read <= MAX_READ  # it read every row of the knowledge base (1,200; up to 50,000)
    # the cursor still reaches everything, a budget a request
    counting.read, cursor, seen = 0, None, 0
    while True:
        page = _listing(deps, kb, keyword="zzznomatch", page_size=100, cursor=cursor)
        assert counting.read <= MAX_READ
        counting.read, seen, cursor = 0, seen + len(page["items"]), page["next_cursor"]
        if cursor is None:
            break
    assert seen == 0
    # a legacy page the budget reaches is the page the cursor gives, and an unfiltered walk is as it was
    newest_first = [k.id for k in reversed(rows)]
    harbour = [k.id for k in reversed(rows) if k.title.startswith("Harbour")]
    second = _listing(deps, kb, keyword="harbour", page=2, page_size=10)
    assert [k["id"] for k in second["items"]] == harbour[10:20]
    deep = _listing(deps, kb, page=12, page_size=100)
    assert [k["id"] for k in deep["items"]] == newest_first[1100:1200] and deep["next_cursor"] is None


def _completed(deps: Services, kb: KnowledgeBase) -> Knowledge:
    created = upload(deps, kb)
    drain(deps, MAIN_STAGES)
    row = deps.knowledge.settle_plan(created.id, created.attempt, 0, {"planned": [], "not_planned": {}})
    assert row is not None and row.parse_status == ParseStatus.COMPLETED
    return row


def test_a_second_delete_answers_the_first_ones_task(deps: Services, kb: KnowledgeBase) -> None:
    from chalicelib.operations.knowledge_changes import batch_delete, delete_knowledge
    from chalicelib.stages.lifecycle import run

    knowledge, other = _completed(deps, kb), upload(deps, kb, "other.md", b"# Other\n\nboats.\n")
    deps.queue.purge("lifecycle")
    first = delete_knowledge(deps, knowledge.tenant_id, knowledge.id)
    second = delete_knowledge(deps, knowledge.tenant_id, knowledge.id)  # the task has not run yet
    assert second.id == first.id and second.kind == TaskKind.DELETE_KNOWLEDGE  # was a second, new task
    # one task, not two (sent again: a delivery of a task that ran already is a no-op)
    assert {body["task_id"] for body in deps.queue.bodies("lifecycle")} == {first.id}
    # a document a batch is deleting gets its own task once, then that one is answered
    batch_delete(deps, kb.tenant_id, BatchDeleteRequest(kb_id=kb.id, ids=[other.id]))
    own = delete_knowledge(deps, kb.tenant_id, other.id)
    assert delete_knowledge(deps, kb.tenant_id, other.id).id == own.id
    assert len({body["task_id"] for body in deps.queue.bodies("lifecycle")}) == 3
    run(deps, first.id)
    assert deps.knowledge.get(knowledge.id) is None
    with pytest.raises(AppError) as gone:
        delete_knowledge(deps, knowledge.tenant_id, knowledge.id)
    assert gone.value.code == "knowledge_not_found"


def test_a_chunk_edit_of_a_document_being_deleted_is_refused_as_other_writes(
    deps: Services, kb: KnowledgeBase
) -> None:
    from chalicelib.operations.chunks import edit_chunk
    from chalicelib.operations.knowledge_changes import edit

    knowledge = _completed(deps, kb)
    chunk = deps.chunks.list(knowledge.id)[0]
    deps.knowledge.mark_deleting(knowledge.id)  # its delete task has not run yet
    with pytest.raises(AppError) as edited:
        edit(deps, knowledge.tenant_id, knowledge.id, EditKnowledgeRequest(title="x"))
    assert (edited.value.status, edited.value.code) == (400, "invalid_state")
    with pytest.raises(AppError) as refused:
        edit_chunk(deps, knowledge.tenant_id, knowledge.id, chunk.id, EditChunkRequest(is_enabled=False))
    assert (refused.value.status, refused.value.code) == (400, "invalid_state")  # was 409 not_completed


def test_search_refuses_a_tag_id_the_knowledge_base_does_not_have(deps: Services, kb: KnowledgeBase) -> None:
    from chalicelib.operations.knowledge_bases import create_kb
    from chalicelib.operations.search import hybrid_search
    from chalicelib.operations.tags import create_tag

    other = create_kb(deps, kb.tenant_id, CreateKnowledgeBase(name="other"))
    foreign = create_tag(deps, kb.tenant_id, other.id, CreateTagRequest(name="elsewhere"))
    own = create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="here"))
    for tag_ids in (["nope"], [foreign.id], [own.id, "nope"]):
        request = SearchRequest(query_text="harbour", tag_ids=tag_ids)
        with pytest.raises(BadRequest) as refused:
            hybrid_search(deps, kb.tenant_id, kb.id, request)
        assert refused.value.code == "unknown_tag_id", tag_ids  # was 200 []
        with pytest.raises(BadRequest) as listed:
            _listing(deps, kb, tag_id=tag_ids[-1])
        assert listed.value.code == "unknown_tag_id"


@pytest.mark.parametrize("key", ["a..b", "a.", "a. b", "a.b.", ".a"])
def test_a_metadata_key_with_an_empty_path_segment_is_refused(key: str) -> None:
    with pytest.raises(BadRequest) as refused:
        validate(SearchRequest, {"query_text": "x", "metadata": {key: "x"}})
    assert refused.value.code == "invalid_metadata_filter"


@pytest.mark.parametrize("key", ["dept", "author.name", "a.b.c", "n-1.x_y"])
def test_a_dotted_metadata_key_still_passes(key: str) -> None:
    assert validate(SearchRequest, {"query_text": "x", "metadata": {key: "x"}}).metadata == {key: "x"}


def test_of_two_deletes_at_once_the_second_answers_the_first_ones_task(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.operations.knowledge_changes import delete_knowledge

    knowledge = upload(deps, kb)
    deps.queue.purge("lifecycle")
    first = delete_knowledge(deps, knowledge.tenant_id, knowledge.id)
    real_get = deps.tasks.get
    calls: list[str] = []

    # the second read the tasks before the first wrote its own: its write is refused (TaskExists)
    def blind_then_real(task_id: str) -> Task | None:
        calls.append(task_id)
        return None if len(calls) == 1 else real_get(task_id)

    monkeypatch.setattr(deps.tasks, "get", blind_then_real)
    second = delete_knowledge(deps, knowledge.tenant_id, knowledge.id)

    assert second.id == first.id
    assert {body["task_id"] for body in deps.queue.bodies("lifecycle")} == {first.id}


def test_a_delete_after_its_task_ended_with_the_row_left_starts_a_fresh_one(
    deps: Services, kb: KnowledgeBase
) -> None:
    from chalicelib.operations.knowledge_changes import delete_knowledge

    knowledge = upload(deps, kb)
    deps.queue.purge("lifecycle")
    first = delete_knowledge(deps, knowledge.tenant_id, knowledge.id)
    ended = deps.tasks.get(first.id)
    assert ended is not None
    ended.status, ended.done = TaskStatus.PARTIAL, 1  # an object could not be deleted: the row is left
    assert deps.tasks.save_progress(ended)

    again = delete_knowledge(deps, knowledge.tenant_id, knowledge.id)

    assert again.id != first.id and again.kind == TaskKind.DELETE_KNOWLEDGE
    assert deps.queue.bodies("lifecycle") == [{"task_id": first.id}, {"task_id": again.id}]


def test_a_delete_repeated_after_one_that_failed_between_its_writes_finishes_them(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.operations.knowledge_changes import delete_knowledge

    knowledge = upload(deps, kb)
    queue.purge("lifecycle")
    real_mark = deps.knowledge.mark_deleting

    def throttled(knowledge_id: str) -> None:
        raise ConnectionError("throttled")

    monkeypatch.setattr(deps.knowledge, "mark_deleting", throttled)
    with pytest.raises(ConnectionError):  # the task is written, the row not marked, nothing sent
        delete_knowledge(deps, knowledge.tenant_id, knowledge.id)
    monkeypatch.setattr(deps.knowledge, "mark_deleting", real_mark)
    queue.make_unavailable("lifecycle")
    with pytest.raises(Exception, match="lifecycle"):  # marked this time, but not sent
        delete_knowledge(deps, knowledge.tenant_id, knowledge.id)
    queue.make_unavailable("lifecycle", False)

    task = delete_knowledge(deps, knowledge.tenant_id, knowledge.id)

    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.parse_status == ParseStatus.DELETING
    assert queue.bodies("lifecycle") == [{"task_id": task.id}]  # was none: the row was never deleted
