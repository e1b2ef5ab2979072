"""Move and clone against what changes while their task runs (an audit's findings): the tenant's storage
quota, a re-embed (or its switch) of either knowledge base after the request was checked, a delete of the
target while a row moves into it, and the runtime state a new clone must not take from its source."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryKnowledgeRepo
from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.commands import UpdateKnowledgeBase
from chalicelib.domain.errors import Conflict
from chalicelib.domain.types import Knowledge, KnowledgeBase, Task, TaskStatus, Tenant
from chalicelib.ports import IndexSpace

from .test_move_clone import CRANES, TIDES, clone, completed, move, new_kb, run_lifecycle, search

OTHER_MODEL = "hashing/32"


@pytest.fixture
def model(deps: Services) -> HashingEmbedding:
    embedding = HashingEmbedding(64)
    deps.replace_embedding_model(embedding)
    deps._embedders[OTHER_MODEL] = HashingEmbedding(32)
    return embedding


def space(deps: Services, model_id: str = "") -> IndexSpace:
    return IndexSpace.of(deps.embedding_model(model_id))


def run_task(deps: Services, task_id: str) -> Task:
    """The task's own deliveries only (other tasks' messages are left aside), until it has finished."""
    from chalicelib.stages import lifecycle

    for _ in range(20):
        lifecycle.run(deps, task_id)
        task = deps.tasks.get(task_id)
        assert task is not None
        if task.status not in (TaskStatus.QUEUED, TaskStatus.RUNNING):
            return task
    raise AssertionError(f"task {task_id} did not finish")


def start_reembed(deps: Services, kb: KnowledgeBase) -> Task:
    from chalicelib.operations.knowledge_bases import update_kb

    _, task = update_kb(
        deps, kb.tenant_id, kb.id, UpdateKnowledgeBase(embedding_model_id=OTHER_MODEL, reembed=True)
    )
    assert task is not None
    return task


def delete_whole_kb(deps: Services, kb: KnowledgeBase) -> None:
    from chalicelib.operations.knowledge_changes import delete_kb

    run_task(deps, delete_kb(deps, kb.tenant_id, kb.id).id)
    assert deps.kbs.get(kb.id) is None


def rows_named(deps: Services, kb_id: str, file_name: str) -> list[Knowledge]:
    return [row for row in deps.knowledge.page_by_kb(kb_id, limit=100) if row.file_name == file_name]


# ---------------------------------------------------------------- the storage quota


def test_a_clone_past_the_storage_quota_fails_the_copy_and_leaves_nothing(
    deps: Services, tenant: Tenant, kb: KnowledgeBase, model: HashingEmbedding
) -> None:
    doc = completed(deps, kb, "tides.md", TIDES)
    used = deps.tenants.get(tenant.id).storage_used  # type: ignore[union-attr]
    assert used == doc.storage_size > doc.file_size > 0  # its Markdown counts too
    deps.tenants.set_quotas(tenant.id, storage_quota=used, document_quota=0)  # not one more byte fits
    started = clone(deps, kb)
    run_lifecycle(deps)
    task = deps.tasks.get(started["task_id"])
    assert task is not None and task.status == TaskStatus.FAILED
    assert "storage quota" in task.errors[f"copy:{doc.id}"]
    after = deps.tenants.get(tenant.id)
    assert after is not None and (after.storage_used, after.document_count) == (used, 1)
    assert deps.knowledge.page_by_kb(started["target_kb_id"], limit=10) == []


def test_a_copy_the_quota_refuses_when_it_is_marked_indexed_is_removed(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: HashingEmbedding,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    doc = completed(deps, kb, "tides.md", TIDES)
    used = doc.storage_size
    deps.tenants.set_quotas(tenant.id, storage_quota=2 * used, document_quota=0)  # room for one copy
    real_mark_indexed = MemoryKnowledgeRepo.mark_indexed

    def another_document_indexed_first(repo: MemoryKnowledgeRepo, *args: Any, **kwargs: Any) -> bool:
        # after the copy's own check of the quota: only the write's check can see this
        deps.tenants.add_usage(tenant.id, 1)
        return real_mark_indexed(repo, *args, **kwargs)

    monkeypatch.setattr(MemoryKnowledgeRepo, "mark_indexed", another_document_indexed_first)
    started = clone(deps, kb)
    run_lifecycle(deps)
    task = deps.tasks.get(started["task_id"])
    assert task is not None and task.status == TaskStatus.FAILED
    assert "storage quota" in task.errors[f"copy:{doc.id}"]
    after = deps.tenants.get(tenant.id)
    assert after is not None and (after.storage_used, after.document_count) == (used + 1, 1)
    from chalicelib.tasks.clone import copy_id

    copied = copy_id(task.id, doc.id)  # the copy, its chunks and its index entries went
    assert deps.knowledge.get(copied) is None and deps.chunks.list(copied) == []
    assert deps.engine().count(space(deps), started["target_kb_id"], copied) == 0


# ---------------------------------------------------------------- a re-embed since the request


def test_a_move_or_clone_is_refused_while_either_knowledge_base_is_being_re_embedded(
    deps: Services, tenant: Tenant, kb: KnowledgeBase, model: HashingEmbedding
) -> None:
    target = new_kb(deps, tenant, "archive")
    doc = completed(deps, kb, "tides.md", TIDES)
    start_reembed(deps, target)
    for request in (
        lambda: move(deps, kb, target, [doc.id], "reuse_vectors"),
        lambda: move(deps, target, kb, [doc.id], "reparse"),
        lambda: clone(deps, kb, target_kb_id=target.id),
        lambda: clone(deps, target),  # a new knowledge base from one being re-embedded
    ):
        with pytest.raises(Conflict) as refused:
            request()
        assert refused.value.code == "reembed_running"
    assert deps.kbs.by_name(tenant.id, "archive (copy)") is None


def test_a_move_whose_target_switched_model_after_the_request_changes_nothing(
    deps: Services, tenant: Tenant, kb: KnowledgeBase, model: HashingEmbedding
) -> None:
    target = new_kb(deps, tenant, "archive")
    completed(deps, target, "cranes.md", CRANES)
    doc = completed(deps, kb, "tides.md", TIDES)
    entries = deps.engine().count(space(deps), kb.id, doc.id)
    task = move(deps, kb, target, [doc.id], "reuse_vectors")  # accepted: the same model then
    run_task(deps, start_reembed(deps, target).id)  # another Lambda re-embeds and switches first
    assert deps.kbs.get(target.id).embedding_model_id == OTHER_MODEL  # type: ignore[union-attr]
    done = run_task(deps, task.id)
    assert done.status == TaskStatus.FAILED
    assert done.errors[doc.id] == "the knowledge bases use different embedding models"
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.kb_id == kb.id  # not moved, and still searchable where it is
    assert deps.engine().count(space(deps), kb.id, doc.id) == entries
    assert [hit["knowledge_id"] for hit in search(deps, kb, "spring tides full moon")][:1] == [doc.id]


def test_a_move_whose_target_began_a_re_embed_after_the_request_changes_nothing(
    deps: Services, tenant: Tenant, kb: KnowledgeBase, model: HashingEmbedding
) -> None:
    target = new_kb(deps, tenant, "archive")
    doc = completed(deps, kb, "tides.md", TIDES)
    task = move(deps, kb, target, [doc.id], "reuse_vectors")
    start_reembed(deps, target)  # queued, not run: the target's `reembed_to` is set
    done = run_task(deps, task.id)
    assert done.status == TaskStatus.FAILED
    assert "being re-embedded" in done.errors[doc.id]
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.kb_id == kb.id
    assert deps.engine().count(space(deps), kb.id, doc.id) > 0


def test_a_clone_whose_target_switched_model_after_the_request_copies_nothing(
    deps: Services, tenant: Tenant, kb: KnowledgeBase, model: HashingEmbedding
) -> None:
    target = new_kb(deps, tenant, "mirror")
    completed(deps, target, "cranes.md", CRANES)
    completed(deps, kb, "tides.md", TIDES)
    started = clone(deps, kb, target_kb_id=target.id)  # accepted: the same model then
    run_task(deps, start_reembed(deps, target).id)
    done = run_task(deps, started["task_id"])
    assert done.status == TaskStatus.FAILED
    assert done.errors == {f"kb:{target.id}": "the knowledge bases use different embedding models"}
    assert rows_named(deps, target.id, "tides.md") == []
    assert len(rows_named(deps, target.id, "cranes.md")) == 1  # nor was anything of the target deleted


def test_a_copy_whose_target_switched_model_while_it_was_made_is_removed(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: HashingEmbedding,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chalicelib.tasks import clone as clone_task

    doc = completed(deps, kb, "tides.md", TIDES)
    started = clone(deps, kb)
    target_id = started["target_kb_id"]
    real_copy_tags: Callable[..., None] = clone_task.copy_tags

    def switched_meanwhile(deps_: Services, source: Knowledge, copy: Knowledge) -> None:
        real_copy_tags(deps_, source, copy)
        current = deps.kbs.get(target_id)
        assert current is not None
        assert deps.kbs.update(replace(current, embedding_model_id=OTHER_MODEL)) is not None

    monkeypatch.setattr(clone_task, "copy_tags", switched_meanwhile)
    done = run_task(deps, started["task_id"])
    assert done.status == TaskStatus.FAILED
    assert done.errors[f"copy:{doc.id}"] == "the knowledge bases use different embedding models"
    copy_id = clone_task.copy_id(done.id, doc.id)
    assert deps.knowledge.get(copy_id) is None
    assert deps.engine().count(space(deps), target_id, copy_id) == 0
    assert deps.tenants.get(tenant.id).document_count == 1  # type: ignore[union-attr]


# ---------------------------------------------------------------- a delete of the target


def test_a_move_into_a_target_deleted_before_the_row_arrived_takes_the_row_away(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: HashingEmbedding,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = new_kb(deps, tenant, "archive")
    doc = completed(deps, kb, "tides.md", TIDES)
    before = deps.tenants.get(tenant.id)
    assert before is not None
    task = move(deps, kb, target, [doc.id], "reuse_vectors")
    real_move = MemoryKnowledgeRepo.move_to_kb
    deleted: list[bool] = []

    def target_deleted_first(repo: MemoryKnowledgeRepo, *args: Any, **kwargs: Any) -> Knowledge | None:
        if not deleted:  # the item read the target active; its whole delete ends before the row moves
            deleted.append(True)
            delete_whole_kb(deps, target)
        return real_move(repo, *args, **kwargs)

    monkeypatch.setattr(MemoryKnowledgeRepo, "move_to_kb", target_deleted_first)
    done = run_task(deps, task.id)
    assert_moved_row_gone(deps, before.storage_used - doc.storage_size, kb, target, doc)
    assert done.status == TaskStatus.FAILED
    assert done.errors[doc.id] == "the target knowledge base was deleted during the move"


def test_a_redelivered_move_whose_target_was_deleted_meanwhile_takes_the_row_away(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: HashingEmbedding,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chalicelib.stages import lifecycle

    target = new_kb(deps, tenant, "archive")
    doc = completed(deps, kb, "tides.md", TIDES)
    before = deps.tenants.get(tenant.id)
    assert before is not None
    task = move(deps, kb, target, [doc.id], "reuse_vectors")
    real_move = MemoryKnowledgeRepo.move_to_kb

    def moved_then_died(repo: MemoryKnowledgeRepo, *args: Any, **kwargs: Any) -> Knowledge | None:
        delete_whole_kb(deps, target)
        real_move(repo, *args, **kwargs)
        raise RuntimeError("the Lambda was stopped right after the row moved")

    monkeypatch.setattr(MemoryKnowledgeRepo, "move_to_kb", moved_then_died)
    with pytest.raises(RuntimeError):
        lifecycle.run(deps, task.id)
    monkeypatch.setattr(MemoryKnowledgeRepo, "move_to_kb", real_move)
    moved = deps.knowledge.get(doc.id)
    assert moved is not None and moved.kb_id == target.id  # in a knowledge base that is gone
    done = run_task(deps, task.id)  # the message comes back
    assert_moved_row_gone(deps, before.storage_used - doc.storage_size, kb, target, doc)
    assert done.status == TaskStatus.FAILED
    assert done.errors[doc.id] == "the target knowledge base was deleted during the move"


def assert_moved_row_gone(
    deps: Services, storage_used: int, source: KnowledgeBase, target: KnowledgeBase, doc: Knowledge
) -> None:
    """The row, its chunks and its index entries (on either side) are gone, and counted off the tenant."""
    assert deps.knowledge.get(doc.id) is None
    assert deps.chunks.list(doc.id) == []
    assert deps.engine().count(space(deps), target.id, doc.id) == 0
    assert deps.engine().count(space(deps), source.id, doc.id) == 0
    tenant = deps.tenants.get(doc.tenant_id)
    assert tenant is not None and (tenant.document_count, tenant.storage_used) == (0, storage_used)


# ---------------------------------------------------------------- a new clone's own state


def test_a_new_clone_takes_the_sources_settings_but_not_its_runtime_state(
    deps: Services, tenant: Tenant, kb: KnowledgeBase, model: HashingEmbedding
) -> None:
    from chalicelib.operations.knowledge_bases import update_kb

    completed(deps, kb, "tides.md", TIDES)
    source, _ = update_kb(deps, tenant.id, kb.id, UpdateKnowledgeBase(description="the harbour handbook"))
    assert source.version > 0
    started = clone(deps, kb)
    copy = deps.kbs.get(started["target_kb_id"])
    assert copy is not None
    assert (copy.reembed_to, copy.version, copy.status) == ({}, 0, "active")
    assert (copy.description, copy.embedding_model_id, copy.chunking_config) == (
        source.description,
        source.embedding_model_id,
        source.chunking_config,
    )
    # its own re-embed starts, and the source is left alone
    assert start_reembed(deps, copy).kb_id == copy.id
    assert deps.kbs.get(kb.id).reembed_to == {}  # type: ignore[union-attr]
