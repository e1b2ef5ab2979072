"""The create path against what can happen around it: a presigned PUT replayed after its document was
deleted, a knowledge base deleted while a document was being created, and a create that fails after it took
its place in the tenant's document quota."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from chalicelib.adapters.memory import MemoryFileStore, MemoryKnowledgeRepo, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateTagRequest, ManualRequest, UploadUrlRequest, UrlImportRequest
from chalicelib.domain.errors import AppError
from chalicelib.domain.storage_keys import upload_intent_key
from chalicelib.domain.types import KnowledgeBase
from chalicelib.operations.create import (
    FileUpload,
    accept_uploaded_object,
    create_from_file,
    create_from_url,
    create_manual,
    create_upload_url,
)
from chalicelib.operations.knowledge_changes import delete_kb, delete_knowledge
from chalicelib.services.ownership import missing_knowledge_error

from .conftest import TEXT, drain, upload


def run_lifecycle(deps: Services) -> None:
    drain(deps, ("lifecycle",))


def document_count(deps: Services, kb: KnowledgeBase) -> int:
    tenant = deps.tenants.get(kb.tenant_id)
    assert tenant is not None
    return tenant.document_count


def grant(deps: Services, kb: KnowledgeBase) -> dict[str, object]:
    return create_upload_url(deps, kb.tenant_id, kb.id, UploadUrlRequest(file_name="big notes.md"))


# ---------------------------------------------------------------- a presigned PUT replayed


def test_a_presigned_put_replayed_after_its_document_was_deleted_creates_nothing(
    deps: Services,
    kb: KnowledgeBase,
    inbox: MemoryFileStore,
    rows: MemoryKnowledgeRepo,
    queue: MemoryTaskQueue,
) -> None:
    granted = grant(deps, kb)
    knowledge_id, key, url = str(granted["knowledge_id"]), str(granted["key"]), str(granted["upload_url"])
    intent_url = inbox.url_for(upload_intent_key(knowledge_id))
    inbox.put_presigned(url, TEXT)
    assert accept_uploaded_object(deps, key) is not None
    assert not inbox.exists(intent_url)  # accepted: the intent is consumed

    # while the document lives, the same PUT again (or a redelivered event) adds nothing and fails nothing
    inbox.put_presigned(url, TEXT)
    assert accept_uploaded_object(deps, key) is None
    assert not inbox.exists(inbox.url_for(key))
    assert len(queue.bodies("docreader")) == 1 and document_count(deps, kb) == 1

    delete_knowledge(deps, kb.tenant_id, knowledge_id)
    run_lifecycle(deps)
    assert rows.get(knowledge_id) is None
    inbox.put_presigned(url, TEXT)  # the URL is good for an hour: the client's PUT retried, or replayed
    assert accept_uploaded_object(deps, key) is None
    assert rows.get(knowledge_id) is None and document_count(deps, kb) == 0
    assert missing_knowledge_error(deps, kb.tenant_id, knowledge_id).code == "knowledge_not_found"


def test_an_intent_a_crash_left_behind_is_finished_by_the_redelivery_or_removed_by_the_delete(
    deps: Services,
    kb: KnowledgeBase,
    inbox: MemoryFileStore,
    rows: MemoryKnowledgeRepo,
    queue: MemoryTaskQueue,
) -> None:
    granted = grant(deps, kb)
    knowledge_id, key, url = str(granted["knowledge_id"]), str(granted["key"]), str(granted["upload_url"])
    intent_key = upload_intent_key(knowledge_id)
    intent = inbox.read(inbox.url_for(intent_key))
    inbox.put_presigned(url, TEXT)
    assert accept_uploaded_object(deps, key) is not None

    # a crash after the insert, before the staged object and the intent went: the redelivery finishes it
    # (its first stage queued again, as the crash may have come before: the docreader drops the repeat)
    inbox.put_presigned(url, TEXT)
    inbox.save(intent_key, intent, "application/json")
    assert accept_uploaded_object(deps, key) is None
    assert not inbox.exists(inbox.url_for(key)) and not inbox.exists(inbox.url_for(intent_key))
    first, again = queue.bodies("docreader")
    assert first == again

    # ...and if no redelivery came, the document's delete removes the intent before the row
    inbox.save(intent_key, intent, "application/json")
    delete_knowledge(deps, kb.tenant_id, knowledge_id)
    run_lifecycle(deps)
    assert not inbox.exists(inbox.url_for(intent_key))
    inbox.put_presigned(url, TEXT)
    assert accept_uploaded_object(deps, key) is None
    assert rows.get(knowledge_id) is None and document_count(deps, kb) == 0


# ---------------------------------------------------------------- a knowledge base deleted during a create


def _create(
    deps: Services, kb: KnowledgeBase, inbox: MemoryFileStore, entry: str
) -> tuple[Callable[[], object], str]:
    """The create of `entry`, ready to run, and a presigned upload's knowledge id (granted and PUT first)."""
    if entry == "file":
        return lambda: upload(deps, kb), ""
    if entry == "manual":
        request = ManualRequest(title="plan", content="# Plan")
        return lambda: create_manual(deps, kb.tenant_id, kb.id, request), ""
    if entry == "url":
        imported = UrlImportRequest(url="https://example.org/tides.md")
        return lambda: create_from_url(deps, kb.tenant_id, kb.id, imported), ""
    granted = grant(deps, kb)
    inbox.put_presigned(str(granted["upload_url"]), TEXT)
    return lambda: accept_uploaded_object(deps, str(granted["key"])), str(granted["knowledge_id"])


@pytest.mark.parametrize("entry", ["file", "manual", "url", "presigned"])
@pytest.mark.parametrize("task_ran", [True, False], ids=["kb_deleted", "kb_deleting"])
def test_a_create_racing_a_kb_delete_takes_its_row_back(
    deps: Services,
    kb: KnowledgeBase,
    inbox: MemoryFileStore,
    files: MemoryFileStore,
    rows: MemoryKnowledgeRepo,
    queue: MemoryTaskQueue,
    entry: str,
    task_ran: bool,
) -> None:
    create, knowledge_id = _create(deps, kb, inbox, entry)
    real_reserve = deps.tenants.reserve_document
    fired: list[bool] = []

    def reserve(tenant_id: str, quota: int) -> bool:  # the create checked the knowledge base long ago
        if not fired:
            fired.append(True)
            delete_kb(deps, kb.tenant_id, kb.id)
            if task_ran:
                run_lifecycle(deps)  # it found no row to sweep and deleted the knowledge base
        return real_reserve(tenant_id, quota)

    deps.tenants.reserve_document = reserve  # type: ignore[method-assign]
    code = "kb_not_found" if task_ran else "kb_deleting"
    if entry == "presigned":
        assert create() is None  # the client was told "accepted": GET /knowledge/{id} says why not
        assert missing_knowledge_error(deps, kb.tenant_id, knowledge_id).code == code
    else:
        with pytest.raises(AppError) as refused:
            create()
        assert refused.value.code == code
    run_lifecycle(deps)
    assert fired and deps.kbs.get(kb.id) is None
    assert rows.page_by_kb(kb.id, limit=100) == []
    assert document_count(deps, kb) == 0
    assert files.keys(f"{kb.tenant_id}/") == []
    assert queue.bodies("docreader") == []


def test_a_row_inserted_after_the_kb_delete_swept_is_swept_before_the_kb_goes(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, rows: MemoryKnowledgeRepo
) -> None:
    """A create whose read of the knowledge base was older than its `deleting` (an eventually consistent
    read), inserting after the task's sweep looked: the task looks again before the knowledge base goes."""
    active = deps.kbs.get(kb.id)
    real_drop = deps.shares.drop
    late: list[str] = []

    def drop(kb_id: str) -> None:
        real_drop(kb_id)
        if not late:
            real_get = deps.kbs.get
            deps.kbs.get = lambda _kb_id, **_: active  # type: ignore[method-assign]
            try:
                late.append(upload(deps, kb).id)
            finally:
                deps.kbs.get = real_get  # type: ignore[method-assign]

    deps.shares.drop = drop  # type: ignore[method-assign]
    delete_kb(deps, kb.tenant_id, kb.id)
    run_lifecycle(deps)
    assert late and deps.kbs.get(kb.id) is None
    assert rows.get(late[0]) is None and rows.page_by_kb(kb.id, limit=100) == []
    assert document_count(deps, kb) == 0
    assert files.keys(f"{kb.tenant_id}/") == []


# ---------------------------------------------------------------- a create failing after its reservation


def _transient(*_args: object, **_kwargs: object) -> None:
    raise RuntimeError("ProvisionedThroughputExceeded (transient)")


@pytest.mark.parametrize("failing", ["relate", "insert", "insert_and_unrelate"])
def test_a_create_failing_after_its_reservation_gives_its_place_and_object_back(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    rows: MemoryKnowledgeRepo,
    failing: str,
) -> None:
    from chalicelib.operations.tags import create_tag

    tag = create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="ops"))
    if failing == "relate":
        deps.tags.relate = _transient  # type: ignore[method-assign]
    else:
        rows.insert = _transient  # type: ignore[method-assign]
    if failing == "insert_and_unrelate":  # the clean-up's first step fails too: the others still run
        deps.tags.unrelate = _transient  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):  # a 500: the client retries
        create_from_file(deps, kb.tenant_id, kb.id, FileUpload(data=TEXT, file_name="a.md", tag_ids=[tag.id]))
    assert document_count(deps, kb) == 0
    assert files.keys(f"{kb.tenant_id}/") == []
    assert rows.page_by_kb(kb.id, limit=100) == []
    if failing != "insert_and_unrelate":
        assert deps.tags.tagged(kb.id, tag.id, limit=10) == []


def test_an_update_that_read_the_knowledge_base_before_its_delete_cannot_write_it_back_active(
    deps: Services, kb: KnowledgeBase
) -> None:
    from dataclasses import replace

    read_before = deps.kbs.get(kb.id)  # an update's read, just before the delete
    assert read_before is not None and read_before.status == "active"
    delete_kb(deps, kb.tenant_id, kb.id)
    assert deps.kbs.update(replace(read_before, name="renamed")) is None  # its version is gone
    after = deps.kbs.get(kb.id)
    assert after is not None and after.status == "deleting" and after.name == kb.name


def test_a_batch_reparse_naming_a_draft_or_a_row_being_deleted_is_refused_up_front(
    deps: Services, kb: KnowledgeBase
) -> None:
    """As a single reparse of either is (400 invalid_state), not a task that ends `partial`."""
    from chalicelib.commands import BatchReparseRequest
    from chalicelib.domain.errors import BadRequest
    from chalicelib.operations.create import create_manual
    from chalicelib.operations.knowledge_changes import batch_reparse

    done = upload(deps, kb)
    drain(deps)
    draft = create_manual(
        deps, kb.tenant_id, kb.id, ManualRequest(title="n", content="# N\n\ntext", status="draft")
    )
    request = BatchReparseRequest(kb_id=kb.id, ids=[done.id, draft.id])
    with pytest.raises(BadRequest) as refused:
        batch_reparse(deps, kb.tenant_id, request)
    assert refused.value.code == "invalid_state" and refused.value.data == {"ids": [draft.id]}
    drain(deps)
    row = deps.knowledge.get(done.id)
    assert row is not None and row.attempt == 1  # nothing was started
