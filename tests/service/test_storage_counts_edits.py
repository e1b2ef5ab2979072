"""Edits that store more text count it on the tenant's storage quota (sec2): a manual text's edit counts the
new text's size on its row (`storage_size`) in the row's own conditional write, and a reparse's indexing
counts nothing more; a chunk edit counts its growth (UTF-8 bytes) on the document's row before it writes
(a shrink gives nothing back: only a reparse's count or the delete does, so racing edits never count less
than is stored). A refused
quota is 403 `storage_quota_exceeded` with nothing written; an edit that does not stand gives back what it
counted, once. The row's size and the tenant's usage move in one write (update_fields' `storage_size`): a
store error leaves both as they were, never one without the other."""

from __future__ import annotations

from typing import Any

import pytest

import chalicelib.operations.chunks as chunks_module
from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.bootstrap import Services
from chalicelib.commands import (
    CreateKnowledgeBase,
    EditChunkRequest,
    EditKnowledgeRequest,
    ManualRequest,
    ReparseRequest,
)
from chalicelib.domain.errors import AppError
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus, Tenant
from chalicelib.ports import IndexSpace, IndexWriteError

from .conftest import MAIN_STAGES, drain, upload

SMILE = "\U0001f600"  # 4 bytes of UTF-8


def used(deps: Services, tenant_id: str) -> int:
    tenant = deps.tenants.get(tenant_id)
    assert tenant is not None
    return tenant.storage_used


def row(deps: Services, knowledge_id: str) -> Knowledge:
    found = deps.knowledge.get(knowledge_id)
    assert found is not None
    return found


def refused(call: Any) -> AppError:
    with pytest.raises(AppError) as error:
        call()
    return error.value


def delete(deps: Services, knowledge: Knowledge) -> None:
    from chalicelib.operations.knowledge_changes import delete_knowledge

    delete_knowledge(deps, knowledge.tenant_id, knowledge.id)
    drain(deps, ("lifecycle",))
    assert deps.knowledge.get(knowledge.id) is None


# ---------------------------------------------------------------- a manual text's edit


def draft(deps: Services, kb: KnowledgeBase, content: str = "x", status: str = "draft") -> Knowledge:
    from chalicelib.operations.create import create_manual

    return create_manual(deps, kb.tenant_id, kb.id, ManualRequest(title="d", content=content, status=status))


def edit_text(deps: Services, knowledge: Knowledge, content: str) -> Knowledge:
    from chalicelib.operations.knowledge_changes import edit

    return edit(deps, knowledge.tenant_id, knowledge.id, EditKnowledgeRequest(content=content))


def test_a_drafts_edit_counts_its_new_text_and_a_shorter_one_gives_bytes_back(
    deps: Services, kb: KnowledgeBase
) -> None:
    created = draft(deps, kb)
    assert used(deps, kb.tenant_id) == 1
    edit_text(deps, created, SMILE * 1000)
    assert (row(deps, created.id).storage_size, used(deps, kb.tenant_id)) == (4000, 4000)
    edit_text(deps, created, "short")
    assert (row(deps, created.id).storage_size, used(deps, kb.tenant_id)) == (5, 5)
    delete(deps, created)
    assert used(deps, kb.tenant_id) == 0


def test_the_sec2_drafts_cannot_grow_past_the_quota(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore
) -> None:
    deps.tenants.set_quotas(kb.tenant_id, 1_000, 0)
    drafts = [draft(deps, kb) for _ in range(5)]
    big = SMILE * deps.settings.manual_max_runes
    codes = [refused(lambda d=d: edit_text(deps, d, big)).code for d in drafts]  # type: ignore[misc]
    assert codes == ["storage_quota_exceeded"] * 5
    for d in drafts:  # nothing written: the row names its old text, and no new object is left over
        assert files.read(row(deps, d.id).file_path) == b"x"
        assert row(deps, d.id).storage_size == 1
        assert files.keys(f"{kb.tenant_id}/{d.id}/") == [files.key_of(d.file_path)]
    assert used(deps, kb.tenant_id) == 5


@pytest.mark.parametrize("outcome", ["lost", "raised"])
def test_an_edit_whose_row_write_does_not_land_gives_its_bytes_back_once(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, outcome: str
) -> None:
    created = draft(deps, kb)
    real = deps.knowledge.update_fields

    def not_landing(knowledge_id: str, fields: Any, *, expect: Any = None, **counted: Any) -> Any:
        if "file_path" not in fields:
            return real(knowledge_id, fields, expect=expect, **counted)
        if outcome == "raised":
            raise TimeoutError("the table did not answer")
        return None  # another request changed the row meanwhile

    monkeypatch.setattr(deps.knowledge, "update_fields", not_landing)
    with pytest.raises((AppError, TimeoutError)):
        edit_text(deps, created, "a much longer text than the draft had")
    monkeypatch.undo()
    assert (row(deps, created.id).storage_size, used(deps, kb.tenant_id)) == (1, 1)


def test_a_published_edit_is_counted_once_and_stays_counted_when_its_reparse_is_cancelled(
    deps: Services, kb: KnowledgeBase
) -> None:
    from chalicelib.operations.knowledge_changes import cancel

    published = draft(deps, kb, "# Plan\n\nold text", status="publish")
    drain(deps, MAIN_STAGES)
    indexed = row(deps, published.id)
    parse = indexed.storage_size - indexed.file_size  # what indexing counts beyond the text (if anything)
    assert used(deps, kb.tenant_id) == indexed.storage_size
    edit_text(deps, published, "# Plan\n\n" + SMILE * 300)
    edited = row(deps, published.id)
    assert edited.file_size > 1000  # the new text's size, counted at once (the old parse's outputs too)
    assert (edited.storage_size, used(deps, kb.tenant_id)) == (edited.file_size + parse,) * 2
    drain(deps, MAIN_STAGES)  # the reparse indexes the new text: the row counted again, once
    reindexed = row(deps, published.id)
    assert reindexed.enable_status.value == "enabled" and reindexed.attempt == 2
    assert reindexed.storage_size >= edited.file_size
    assert used(deps, kb.tenant_id) == reindexed.storage_size
    edit_text(deps, published, "# Plan\n\n" + SMILE * 400)
    cancel(deps, kb.tenant_id, published.id)  # the new text stays stored, and counted
    cancelled = row(deps, published.id)
    assert cancelled.storage_size >= cancelled.file_size > edited.file_size
    assert used(deps, kb.tenant_id) == cancelled.storage_size
    delete(deps, published)
    assert used(deps, kb.tenant_id) == 0


class Throttled(Exception):
    """A store error (DynamoDB's ProvisionedThroughputExceeded, a timeout) out of one write."""


def test_a_shorter_text_whose_usage_write_errors_counts_nothing_and_its_retry_gives_back(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = draft(deps, kb, "y" * 5000)
    real = deps.tenants.add_usage_within

    def throttled(tenant_id: str, delta: int, grows_by: int, quota: int) -> bool:
        if delta < 0:
            raise Throttled("ProvisionedThroughputExceeded")
        return real(tenant_id, delta, grows_by, quota)

    monkeypatch.setattr(deps.tenants, "add_usage_within", throttled)
    with pytest.raises((Throttled, AppError)):
        edit_text(deps, created, "short")
    stored = row(deps, created.id)
    assert used(deps, kb.tenant_id) == stored.storage_size  # the row and the usage: both or neither
    monkeypatch.undo()
    edit_text(deps, stored, "short")  # the retry gives the 4995 bytes back, once
    assert (row(deps, created.id).storage_size, used(deps, kb.tenant_id)) == (5, 5)


def test_a_drafts_edit_another_write_took_the_room_from_is_403_and_writes_nothing(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = draft(deps, kb, "x")
    deps.tenants.set_quotas(kb.tenant_id, 1_000, 0)
    real = deps.knowledge.update_fields

    def upload_first(*args: Any, **kwargs: Any) -> Any:  # after the edit's checks, before its row's write
        assert deps.tenants.add_usage_within(kb.tenant_id, 900, 900, 1_000)
        return real(*args, **kwargs)

    monkeypatch.setattr(deps.knowledge, "update_fields", upload_first)
    error = refused(lambda: edit_text(deps, created, "z" * 500))
    assert (error.status, error.code) == (403, "storage_quota_exceeded")
    stored = row(deps, created.id)
    assert (stored.storage_size, files.read(stored.file_path)) == (1, b"x")
    assert files.keys(f"{kb.tenant_id}/{created.id}/") == [files.key_of(created.file_path)]
    assert used(deps, kb.tenant_id) == 901


# ---------------------------------------------------------------- a chunk's edit


@pytest.fixture
def small(deps: Services, tenant: Tenant) -> KnowledgeBase:
    from chalicelib.operations.knowledge_bases import create_kb

    config = {"chunk_size": 110, "chunk_overlap": 0}
    return create_kb(deps, tenant.id, CreateKnowledgeBase(name="log", chunking_config=config))


def completed(deps: Services, kb: KnowledgeBase) -> Knowledge:
    created = upload(deps, kb)
    drain(deps, MAIN_STAGES)
    done = deps.knowledge.settle_plan(created.id, created.attempt, 0, {"planned": [], "not_planned": {}})
    assert done is not None and done.parse_status == ParseStatus.COMPLETED
    return done


def edit_chunk(deps: Services, knowledge: Knowledge, chunk_id: str, content: str) -> dict[str, Any]:
    return chunks_module.edit_chunk(
        deps, knowledge.tenant_id, knowledge.id, chunk_id, EditChunkRequest(content=content)
    )


def stored_text(deps: Services, knowledge: Knowledge, chunk_id: str) -> str:
    return deps.chunks.get_many([(knowledge.id, chunk_id)])[(knowledge.id, chunk_id)].content


def test_a_chunk_edit_counts_its_growth_once_and_the_delete_gives_it_back(
    deps: Services, small: KnowledgeBase
) -> None:
    knowledge = completed(deps, small)
    base = knowledge.storage_size  # what indexing counted for the document
    assert base >= knowledge.file_size and used(deps, small.tenant_id) == base
    first = deps.chunks.list(knowledge.id)[0]
    longer = first.content + " " + SMILE * 250
    grows = len(longer.encode()) - len(first.content.encode())
    edit_chunk(deps, knowledge, first.id, longer)
    assert (row(deps, knowledge.id).storage_size, used(deps, small.tenant_id)) == (base + grows,) * 2
    edit_chunk(deps, knowledge, first.id, longer)  # the same edit again changes nothing
    assert used(deps, small.tenant_id) == base + grows
    edit_chunk(deps, knowledge, first.id, "tiny")  # a shrink gives nothing back (counted on the safe side)
    edit_chunk(deps, knowledge, first.id, longer)  # and growing from it counts again
    shrunk_then_grown = len(longer.encode()) - len(b"tiny")
    assert used(deps, small.tenant_id) == base + grows + shrunk_then_grown
    delete(deps, knowledge)
    assert used(deps, small.tenant_id) == 0


def test_a_chunk_edit_past_the_quota_is_403_and_writes_nothing(deps: Services, small: KnowledgeBase) -> None:
    knowledge = completed(deps, small)
    base = knowledge.storage_size
    deps.tenants.set_quotas(small.tenant_id, base + 50, 0)
    first = deps.chunks.list(knowledge.id)[0]
    space = IndexSpace.of(deps.embedding_model(small.embedding_model_id))
    engine = deps.engine(small.retrieval_engine)
    before = {e.id: e.content for e in engine.entries_of(space, small.id, knowledge.id)}
    error = refused(lambda: edit_chunk(deps, knowledge, first.id, first.content + "!" * 100))
    assert (error.status, error.code) == (403, "storage_quota_exceeded")
    assert stored_text(deps, knowledge, first.id) == first.content
    assert {e.id: e.content for e in engine.entries_of(space, small.id, knowledge.id)} == before
    assert (row(deps, knowledge.id).storage_size, used(deps, small.tenant_id)) == (base, base)
    edit_chunk(deps, knowledge, first.id, first.content + "!" * 40)  # what fits is taken
    assert used(deps, small.tenant_id) == base + 40


def test_the_sec2_chunk_edits_cannot_grow_past_the_quota(deps: Services, tenant: Tenant) -> None:
    from chalicelib.operations.knowledge_bases import create_kb

    tiny = create_kb(
        deps,
        tenant.id,
        CreateKnowledgeBase(name="tiny", chunking_config={"chunk_size": 20, "chunk_overlap": 0}),
    )
    doc = "\n\n".join(f"w{i}" for i in range(200)).encode()
    deps.tenants.set_quotas(tenant.id, 4 * len(doc), 0)
    created = upload(deps, tiny, "words.md", doc)
    drain(deps, MAIN_STAGES)
    knowledge = deps.knowledge.settle_plan(created.id, created.attempt, 0, {"planned": [], "not_planned": {}})
    assert knowledge is not None
    codes = set()
    for c in deps.chunks.list(knowledge.id)[:5]:
        codes.add(refused(lambda c=c: edit_chunk(deps, knowledge, c.id, "x" * 99_990 + c.id[-6:])).code)  # type: ignore[misc]
    assert codes == {"storage_quota_exceeded"}
    assert sum(len(c.content.encode()) for c in deps.chunks.list(knowledge.id)) < 4 * len(doc)
    assert used(deps, tenant.id) == knowledge.storage_size


def test_a_reparse_folds_the_chunk_edits_bytes_back(deps: Services, small: KnowledgeBase) -> None:
    from chalicelib.operations.knowledge_changes import reparse

    knowledge = completed(deps, small)
    first = deps.chunks.list(knowledge.id)[0]
    base = knowledge.storage_size
    edit_chunk(deps, knowledge, first.id, first.content + " " + "more words " * 50)
    assert used(deps, small.tenant_id) > base
    reparse(deps, knowledge.tenant_id, knowledge.id, ReparseRequest())
    drain(deps, MAIN_STAGES)  # the new attempt's chunks are the file's again, and counted as it
    assert (row(deps, knowledge.id).storage_size, used(deps, small.tenant_id)) == (base, base)


def test_a_chunk_edit_the_index_refuses_gives_its_bytes_back(
    deps: Services, small: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    knowledge = completed(deps, small)
    first = deps.chunks.list(knowledge.id)[0]
    engine = deps.engine(small.retrieval_engine)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise IndexWriteError("mapper_parsing_exception: field [embedding] of index secret-prod")

    monkeypatch.setattr(engine, "batch_index", refuse)
    error = refused(lambda: edit_chunk(deps, knowledge, first.id, first.content + " longer text"))
    assert (error.status, error.code) == (503, "index_refused")
    assert stored_text(deps, knowledge, first.id) == first.content
    base = knowledge.storage_size
    assert (row(deps, knowledge.id).storage_size, used(deps, small.tenant_id)) == (base, base)


def test_a_chunk_edit_a_delete_overtook_leaves_nothing_counted(
    deps: Services, small: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    knowledge = completed(deps, small)
    first = deps.chunks.list(knowledge.id)[0]
    real = chunks_module.embed_for_api

    def racing(*args: Any, **kwargs: Any) -> Any:  # after the count, before the writes
        delete(deps, knowledge)
        return real(*args, **kwargs)

    monkeypatch.setattr(chunks_module, "embed_for_api", racing)
    error = refused(lambda: edit_chunk(deps, knowledge, first.id, first.content + " longer text"))
    assert (error.status, error.code) == (404, "knowledge_not_found")
    assert used(deps, small.tenant_id) == 0  # the delete gave back the row's count, the edit's in it


def test_a_chunk_edit_a_reparse_overtook_is_counted_as_the_new_attempt(
    deps: Services, small: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.operations.knowledge_changes import reparse

    knowledge = completed(deps, small)
    first = deps.chunks.list(knowledge.id)[0]
    real = chunks_module.embed_for_api

    def racing(*args: Any, **kwargs: Any) -> Any:
        reparse(deps, knowledge.tenant_id, knowledge.id, ReparseRequest())
        return real(*args, **kwargs)

    monkeypatch.setattr(chunks_module, "embed_for_api", racing)
    error = refused(lambda: edit_chunk(deps, knowledge, first.id, first.content + " longer text"))
    assert (error.status, error.code) == (409, "knowledge_changed")
    assert row(deps, knowledge.id).storage_size == used(deps, small.tenant_id)  # counted until recounted
    monkeypatch.undo()
    drain(deps, MAIN_STAGES)  # the new attempt's indexing counts the document again
    base = knowledge.storage_size
    assert (row(deps, knowledge.id).storage_size, used(deps, small.tenant_id)) == (base, base)


def test_a_chunk_edit_whose_row_write_errors_counts_nothing(
    deps: Services, small: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    knowledge = completed(deps, small)
    first = deps.chunks.list(knowledge.id)[0]

    def throttled(*args: Any, **kwargs: Any) -> Any:
        raise Throttled("ProvisionedThroughputExceeded")

    monkeypatch.setattr(deps.knowledge, "update_fields", throttled)
    with pytest.raises((Throttled, AppError)):
        edit_chunk(deps, knowledge, first.id, first.content + " " + SMILE * 250)
    monkeypatch.undo()
    base = knowledge.storage_size
    assert (row(deps, knowledge.id).storage_size, used(deps, small.tenant_id)) == (base, base)
    assert stored_text(deps, knowledge, first.id) == first.content
