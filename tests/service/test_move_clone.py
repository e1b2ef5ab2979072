"""Move and clone (issue 10, spec §1.25) on the in-memory adapters, through the request functions and the
lifecycle queue's real handler: what moves, what is copied, what a failure leaves, and redelivery."""

from __future__ import annotations

import base64
import io
from dataclasses import replace
from typing import Any

import pytest
from PIL import Image

from chalicelib.adapters.memory import MemoryFileStore, MemoryKnowledgeRepo, MemoryTaskQueue
from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.commands import CloneKnowledgeBaseRequest, CreateKnowledgeBase, MoveKnowledgeRequest
from chalicelib.domain.errors import BadRequest, Conflict, NotFound
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus, TaskStatus, Tenant
from chalicelib.ports import IndexSpace

from .conftest import TEXT, drain, stage_handler, upload

TIDES = b"# Tides\n\nSpring tides happen at full and new moon, when the sun and moon pull together.\n"
CRANES = b"# Cranes\n\nHarbour cranes lift containers; their load limit is painted on the jib.\n"


def png_markdown(title: str, text: str) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (96, 96), (200, 120, 40)).save(buffer, "PNG")
    data = base64.b64encode(buffer.getvalue()).decode()
    return f"# {title}\n\n{text}\n\n![figure](data:image/png;base64,{data})\n".encode()


def new_kb(deps: Services, tenant: Tenant, name: str, **settings: Any) -> KnowledgeBase:
    from chalicelib.operations.knowledge_bases import create_kb

    return create_kb(deps, tenant.id, CreateKnowledgeBase(name=name, **settings))


def completed(deps: Services, kb: KnowledgeBase, name: str, data: bytes) -> Knowledge:
    """A document through the main stages, then completed as the state machine would leave it."""
    created = upload(deps, kb, name, data)
    drain(deps)
    rows = deps.knowledge
    assert isinstance(rows, MemoryKnowledgeRepo)
    return rows.write_fields(created.id, parse_status=ParseStatus.COMPLETED)


def run_lifecycle(deps: Services, max_batches: int = 200) -> None:
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    for _ in range(max_batches):
        if not queue.waiting("lifecycle"):
            return
        queue.deliver("lifecycle", stage_handler("lifecycle"), deps)
    raise AssertionError("the lifecycle queue is still busy")


def search(deps: Services, kb: KnowledgeBase, text: str) -> list[dict[str, Any]]:
    from chalicelib.commands import SearchRequest
    from chalicelib.operations.search import hybrid_search

    return hybrid_search(deps, kb.tenant_id, kb.id, SearchRequest(query_text=text, match_count=20))


def move(deps: Services, source: KnowledgeBase, target: KnowledgeBase, ids: list[str], mode: str) -> Any:
    from chalicelib.operations.move_and_clone import move as start

    request = MoveKnowledgeRequest(source_kb_id=source.id, target_kb_id=target.id, ids=ids, mode=mode)  # type: ignore[arg-type]
    return start(deps, source.tenant_id, request)


def clone(deps: Services, source: KnowledgeBase, **fields: Any) -> dict[str, Any]:
    from chalicelib.operations.move_and_clone import clone_kb

    return clone_kb(deps, source.tenant_id, source.id, CloneKnowledgeBaseRequest(**fields))


@pytest.fixture
def model(deps: Services) -> HashingEmbedding:
    embedding = HashingEmbedding(64)
    deps.replace_embedding_model(embedding)
    return embedding


def space(deps: Services) -> IndexSpace:
    return IndexSpace.of(deps.embedding_model(""))


# ---------------------------------------------------------------- move


def test_move_with_reuse_vectors_embeds_nothing_and_takes_the_claim_along(
    deps: Services, tenant: Tenant, kb: KnowledgeBase, model: HashingEmbedding
) -> None:
    target = new_kb(deps, tenant, "archive")
    doc = completed(deps, kb, "tides.md", TIDES)
    entries = deps.engine().count(space(deps), kb.id, doc.id)
    assert entries > 0
    calls = len(model.calls)
    task = move(deps, kb, target, [doc.id], "reuse_vectors")
    run_lifecycle(deps)
    assert len(model.calls) == calls  # not one embedding call
    done = deps.tasks.get(task.id)
    assert done is not None and done.status == TaskStatus.COMPLETED and done.succeeded == 1
    moved = deps.knowledge.get(doc.id)
    assert moved is not None and moved.kb_id == target.id and moved.parse_status == ParseStatus.COMPLETED
    assert all(chunk.kb_id == target.id for chunk in deps.chunks.list(doc.id))
    assert deps.engine().count(space(deps), target.id, doc.id) == entries
    assert deps.engine().count(space(deps), kb.id, doc.id) == 0
    assert [h["knowledge_id"] for h in search(deps, target, "spring tides full moon")][:1] == [doc.id]
    assert search(deps, kb, "spring tides full moon") == []
    # The claim moved: the source takes the same file again, the target refuses it.
    assert upload(deps, kb, "tides.md", TIDES).kb_id == kb.id
    with pytest.raises(Conflict):
        upload(deps, target, "tides.md", TIDES)


def test_move_fails_items_that_are_not_completed_or_have_a_live_duplicate_in_the_target(
    deps: Services, tenant: Tenant, kb: KnowledgeBase, model: HashingEmbedding
) -> None:
    target = new_kb(deps, tenant, "archive")
    doc = completed(deps, kb, "tides.md", TIDES)
    pending = upload(deps, kb, "cranes.md", CRANES)  # never processed
    twin = completed(deps, target, "tides.md", TIDES)  # the same content already lives in the target
    task = move(deps, kb, target, [doc.id, pending.id], "reuse_vectors")
    run_lifecycle(deps)
    done = deps.tasks.get(task.id)
    assert done is not None and done.status == TaskStatus.FAILED  # every item failed
    assert twin.id in done.errors[doc.id] and "completed" in done.errors[pending.id]
    kept = deps.knowledge.get(doc.id)
    assert kept is not None and kept.kb_id == kb.id
    assert [h["knowledge_id"] for h in search(deps, kb, "spring tides full moon")][:1] == [doc.id]
    other = completed(deps, kb, "other.md", CRANES.replace(b"Cranes", b"Gantries"))
    partial = move(deps, kb, target, [doc.id, other.id], "reuse_vectors")
    run_lifecycle(deps)
    result = deps.tasks.get(partial.id)
    assert result is not None and result.status == TaskStatus.PARTIAL and result.succeeded == 1


def test_move_with_reparse_ingests_again_under_the_target(
    deps: Services, tenant: Tenant, kb: KnowledgeBase, model: HashingEmbedding
) -> None:
    target = new_kb(deps, tenant, "archive", chunking_config={"chunk_size": 100, "chunk_overlap": 10})
    doc = completed(deps, kb, "notes.md", TEXT)
    before = len(deps.chunks.list(doc.id))
    move(deps, kb, target, [doc.id], "reparse")
    run_lifecycle(deps)
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.kb_id == target.id and row.attempt == 2
    assert deps.engine().count(space(deps), kb.id, doc.id) == 0
    drain(deps)
    chunks = deps.chunks.list(doc.id)
    assert chunks and all(c.kb_id == target.id for c in chunks) and len(chunks) > before  # smaller chunks
    assert deps.engine().count(space(deps), target.id, doc.id) > 0


def test_move_is_refused_up_front_across_models_types_or_tenants(
    deps: Services, tenant: Tenant, kb: KnowledgeBase, model: HashingEmbedding
) -> None:
    doc = completed(deps, kb, "tides.md", TIDES)
    other_model = new_kb(deps, tenant, "other-model")
    deps.kbs.put(replace(other_model, embedding_model_id="hashing/32"))
    faq = new_kb(deps, tenant, "faq", type="faq")
    with pytest.raises(BadRequest) as raised:
        move(deps, kb, other_model, [doc.id], "reuse_vectors")
    assert raised.value.code == "embedding_model_mismatch"
    with pytest.raises(BadRequest) as raised:
        move(deps, kb, faq, [doc.id], "reparse")
    assert raised.value.code == "kb_type_mismatch"
    with pytest.raises(BadRequest) as raised:
        move(deps, kb, kb, [doc.id], "reuse_vectors")
    assert raised.value.code == "same_knowledge_base"
    with pytest.raises(NotFound):
        move(deps, kb, new_kb(deps, tenant, "t"), [doc.id, "nope"], "reuse_vectors")
    from chalicelib.commands import validate

    with pytest.raises(BadRequest) as raised:
        validate(
            MoveKnowledgeRequest,
            {"source_kb_id": kb.id, "target_kb_id": faq.id, "ids": [f"k{i}" for i in range(201)]},
        )
    assert raised.value.code == "invalid_ids"
    assert not deps.queue.waiting("lifecycle")  # type: ignore[attr-defined]


# ---------------------------------------------------------------- clone


def test_clone_copies_files_images_chunks_and_vectors_and_survives_the_source(
    deps: Services, tenant: Tenant, kb: KnowledgeBase, model: HashingEmbedding
) -> None:
    files = deps.files.default  # type: ignore[attr-defined]
    assert isinstance(files, MemoryFileStore)
    doc = completed(
        deps, kb, "bread.md", png_markdown("Sourdough", "A starter is flour and water and wild yeast.")
    )
    completed(deps, kb, "tides.md", TIDES)
    upload(deps, kb, "pending.md", CRANES)  # not completed: not cloned
    calls = len(model.calls)
    started = clone(deps, kb)
    run_lifecycle(deps)
    assert len(model.calls) == calls
    task = deps.tasks.get(started["task_id"])
    assert task is not None and task.status == TaskStatus.COMPLETED and task.succeeded == 2
    target = deps.kbs.get(started["target_kb_id"])
    assert target is not None and target.name == "handbook (copy)"
    copies = deps.knowledge.page_by_kb(target.id, limit=100)
    assert sorted(c.file_name for c in copies) == ["bread.md", "tides.md"]
    assert all(c.parse_status == ParseStatus.COMPLETED for c in copies)
    bread = next(c for c in copies if c.file_name == "bread.md")
    assert bread.id != doc.id and bread.file_path != doc.file_path and files.read(bread.file_path)
    chunks = deps.chunks.list(bread.id)
    assert chunks and all(c.id.startswith(bread.id) and c.kb_id == target.id for c in chunks)
    links = [part.split(")")[0] for c in chunks for part in c.content.split("](")[1:]]
    assert links and all(f"/{bread.id}/images/" in link for link in links)
    spans = {s["span_id"]: s for s in deps.tracker.view(bread)["trace"]}
    assert spans["embedding"]["outputs"]["texts_embedded"] == 0
    # Delete the whole source knowledge base: the clone keeps working.
    from chalicelib.operations.knowledge_changes import delete_kb

    delete_kb(deps, tenant.id, kb.id)
    run_lifecycle(deps)
    assert deps.kbs.get(kb.id) is None
    assert all(files.read(link) for link in links)  # the clone's own images
    assert files.read(bread.file_path)
    hits = search(deps, target, "sourdough starter wild yeast")
    assert hits and hits[0]["knowledge_id"] == bread.id and "/images/" in hits[0]["content"]


def test_clone_into_an_existing_kb_deletes_extras_and_copies_only_what_is_missing(
    deps: Services, tenant: Tenant, kb: KnowledgeBase, model: HashingEmbedding
) -> None:
    completed(deps, kb, "tides.md", TIDES)
    completed(deps, kb, "cranes.md", CRANES)
    target = new_kb(deps, tenant, "mirror")
    same = completed(deps, target, "tides.md", TIDES)  # already there: kept, not copied
    extra = completed(deps, target, "extra.md", b"# Extra\n\nnot in the source")
    broken = upload(deps, target, "cranes.md", CRANES)  # the same content, but failed: it does not count
    assert deps.knowledge.mark_failed(broken.id, None, "broken", "unknown")
    started = clone(deps, kb, target_kb_id=target.id)
    assert started["target_kb_id"] == target.id
    run_lifecycle(deps)
    task = deps.tasks.get(started["task_id"])
    assert task is not None and task.status == TaskStatus.COMPLETED, task.errors
    assert sorted(task.items) == sorted(
        [
            f"delete:{extra.id}",
            f"delete:{broken.id}",
            *(f"copy:{r}" for r in _source_ids(deps, kb, "cranes.md")),
        ]
    )
    rows = deps.knowledge.page_by_kb(target.id, limit=100)
    assert sorted(r.file_name for r in rows) == ["cranes.md", "tides.md"]
    assert all(r.parse_status == ParseStatus.COMPLETED for r in rows)
    assert same.id in {r.id for r in rows} and deps.knowledge.get(extra.id) is None
    with pytest.raises(Conflict):  # the copy holds the target's claim
        upload(deps, target, "cranes.md", CRANES)
    assert search(deps, target, "not in the source") == [] or all(
        h["knowledge_id"] != extra.id for h in search(deps, target, "not in the source")
    )
    # A second clone into it finds nothing to do.
    again = clone(deps, kb, target_kb_id=target.id)
    run_lifecycle(deps)
    second = deps.tasks.get(again["task_id"])
    assert second is not None and second.items == [] and second.status == TaskStatus.COMPLETED


def _source_ids(deps: Services, kb: KnowledgeBase, name: str) -> list[str]:
    return [r.id for r in deps.knowledge.page_by_kb(kb.id, limit=100) if r.file_name == name]


def test_a_failed_copy_removes_what_it_wrote(
    deps: Services, tenant: Tenant, kb: KnowledgeBase, model: HashingEmbedding
) -> None:
    files = deps.files.default  # type: ignore[attr-defined]
    assert isinstance(files, MemoryFileStore)
    good = completed(deps, kb, "tides.md", TIDES)
    broken = completed(deps, kb, "bread.md", png_markdown("Bread", "crumb and crust"))
    files.delete(broken.file_path)  # its stored file is gone: the copy cannot be made
    started = clone(deps, kb)
    run_lifecycle(deps)
    task = deps.tasks.get(started["task_id"])
    assert task is not None and task.status == TaskStatus.PARTIAL
    assert "missing" in task.errors[f"copy:{broken.id}"]
    from chalicelib.tasks.clone import copy_id

    failed_copy = copy_id(task.id, broken.id)
    assert deps.knowledge.get(failed_copy) is None
    assert deps.chunks.list(failed_copy) == [] and deps.spans.list(failed_copy, 1) == []
    assert files.keys(f"{tenant.id}/{failed_copy}") == []
    assert deps.engine().count(space(deps), started["target_kb_id"], failed_copy) == 0
    assert deps.knowledge.get(copy_id(task.id, good.id)) is not None


def test_a_redelivered_clone_message_neither_duplicates_nor_miscounts(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: HashingEmbedding,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for i in range(12):
        completed(deps, kb, f"note-{i}.md", f"# Note {i}\n\nlighthouse keeper log entry {i}".encode())
    from chalicelib.stages import lifecycle

    monkeypatch.setattr(lifecycle, "SLICE_SECONDS", 0.0)  # every item ends a slice: many deliveries
    started = clone(deps, kb)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.send_raw("lifecycle", {"task_id": started["task_id"]})  # the same message, delivered twice
    run_lifecycle(deps, max_batches=400)
    task = deps.tasks.get(started["task_id"])
    assert task is not None and task.status == TaskStatus.COMPLETED
    rows = deps.knowledge.page_by_kb(started["target_kb_id"], limit=100)
    assert len(rows) == 12 and len({r.file_hash for r in rows}) == 12
    assert task.succeeded == 12 and task.failed == 0 and len(set(task.items)) == 12
    # A worker that died after copying but before saving its progress: the next delivery only counts.
    tasks = deps.tasks
    saved = tasks.get(task.id)
    assert saved is not None
    tasks._rows[task.id] = replace(saved, status=TaskStatus.RUNNING, items=[], done=0, succeeded=0)  # type: ignore[attr-defined]
    queue.send_raw("lifecycle", {"task_id": task.id})
    run_lifecycle(deps, max_batches=400)
    again = tasks.get(task.id)
    assert again is not None and again.status == TaskStatus.COMPLETED and again.succeeded == 12
    assert len(deps.knowledge.page_by_kb(started["target_kb_id"], limit=100)) == 12
    for row in rows:
        assert len(deps.chunks.list(row.id)) == row.chunk_count or row.chunk_count == 0


def test_a_copy_whose_insert_fails_gives_its_place_back_and_counts_bytes_once(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: HashingEmbedding,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    completed(deps, kb, "tides.md", TIDES)
    before = deps.tenants.get(tenant.id)
    assert before is not None
    real_insert, failures = MemoryKnowledgeRepo.insert, []

    def throttled_once(repo: MemoryKnowledgeRepo, row: Knowledge) -> None:
        if row.kb_id != kb.id and not failures:  # the copy's first insert: DynamoDB throttled it
            failures.append(row.id)
            raise ConnectionError("throttled")
        real_insert(repo, row)

    monkeypatch.setattr(MemoryKnowledgeRepo, "insert", throttled_once)
    started = clone(deps, kb)
    run_lifecycle(deps)
    task = deps.tasks.get(started["task_id"])
    assert task is not None and task.status == TaskStatus.COMPLETED and failures
    after = deps.tenants.get(tenant.id)
    assert after is not None
    assert after.document_count == before.document_count + 1  # the failed try's place came back
    assert after.storage_used == 2 * before.storage_used  # the copy's bytes, once


def test_clone_requests_are_checked_up_front(
    deps: Services, tenant: Tenant, kb: KnowledgeBase, model: HashingEmbedding
) -> None:
    clone(deps, kb)
    with pytest.raises(Conflict):
        clone(deps, kb)  # "handbook (copy)" exists now
    other_model = new_kb(deps, tenant, "other-model")
    deps.kbs.put(replace(other_model, embedding_model_id="hashing/32"))
    with pytest.raises(BadRequest) as raised:
        clone(deps, kb, target_kb_id=other_model.id)
    assert raised.value.code == "embedding_model_mismatch"
    with pytest.raises(BadRequest):
        clone(deps, kb, target_kb_id=other_model.id, name="x")
    with pytest.raises(NotFound):
        clone(deps, kb, target_kb_id="missing")


def test_wiki_page_records_follow_a_moved_document_and_are_copied_with_a_clone(
    deps: Services, tenant: Tenant, kb: KnowledgeBase, model: HashingEmbedding
) -> None:
    from chalicelib.ports import WikiPageRecord

    doc = completed(deps, kb, "tides.md", TIDES)
    chunk = deps.chunks.list(doc.id)[0]
    deps.wiki.put_pages(kb.id, doc.id, [WikiPageRecord(doc.id, "Tides", "Spring tides", chunk.id)])
    started = clone(deps, kb)
    run_lifecycle(deps)
    copy = deps.knowledge.page_by_kb(started["target_kb_id"], limit=10)[0]
    [copied] = deps.wiki.pages(started["target_kb_id"])
    assert (copied.knowledge_id, copied.title) == (copy.id, "Spring tides")
    assert copied.chunk_id in {c.id for c in deps.chunks.list(copy.id)}
    archive = new_kb(deps, tenant, "archive")
    move(deps, kb, archive, [doc.id], "reuse_vectors")
    run_lifecycle(deps)
    assert deps.wiki.pages(kb.id) == []
    assert [(r.knowledge_id, r.chunk_id) for r in deps.wiki.pages(archive.id)] == [(doc.id, chunk.id)]


# ---------------------------------------------------------------- races with a delete or a reparse


def test_a_delete_landing_mid_move_leaves_nothing_of_the_document_in_either_kb(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: HashingEmbedding,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Audit #5: the user deleted a document right after a reuse_vectors move put its row in the target. The
    delete cleaned the target (where the row was), then the move carried the source's index entries there:
    the deleted document stayed searchable in the target for good, and the task reported it moved."""
    from chalicelib.tasks.delete import delete_one

    target = new_kb(deps, tenant, "archive")
    doc = completed(deps, kb, "tides.md", TIDES)
    assert deps.engine().count(space(deps), kb.id, doc.id) > 0
    real_remove, fired = deps.tags.remove_knowledge, list[str]()

    def delete_lands(knowledge_id: str) -> int:
        if knowledge_id == doc.id and not fired:  # the move's first step after the row moved
            fired.append(knowledge_id)
            delete_one(deps, doc.id)
        return real_remove(knowledge_id)

    monkeypatch.setattr(deps.tags, "remove_knowledge", delete_lands)
    task = move(deps, kb, target, [doc.id], "reuse_vectors")
    run_lifecycle(deps)
    assert fired and deps.knowledge.get(doc.id) is None
    assert deps.engine().count(space(deps), target.id, doc.id) == 0
    assert deps.engine().count(space(deps), kb.id, doc.id) == 0
    assert deps.chunks.list(doc.id) == []
    assert search(deps, target, "spring tides full moon") == []
    done = deps.tasks.get(task.id)
    assert done is not None and done.status == TaskStatus.FAILED and done.succeeded == 0
    assert "deleted" in done.errors[doc.id]


def test_a_move_redelivered_after_the_document_was_deleted_removes_what_it_moved(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: HashingEmbedding,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Audit #5, at-least-once: a delete landed mid-move and the move's worker died after carrying the
    source's index entries into the target, before its check; the redelivery found no row and stopped,
    leaving the entries in the target."""
    from chalicelib.tasks import move_clone
    from chalicelib.tasks.delete import delete_one

    target = new_kb(deps, tenant, "archive")
    doc = completed(deps, kb, "tides.md", TIDES)
    real_remove, fired, crashes = deps.tags.remove_knowledge, list[str](), list[str]()

    def delete_lands(knowledge_id: str) -> int:
        if knowledge_id == doc.id and not fired:  # the move's first step after the row moved
            fired.append(knowledge_id)
            delete_one(deps, doc.id)
        return real_remove(knowledge_id)

    def worker_dies(*args: Any) -> None:
        if not crashes:
            crashes.append("after _repoint")
            raise ConnectionError("the worker died")

    monkeypatch.setattr(deps.tags, "remove_knowledge", delete_lands)
    monkeypatch.setattr(move_clone, "carry_wiki_pages", worker_dies)
    task = move(deps, kb, target, [doc.id], "reuse_vectors")
    run_lifecycle(deps)
    assert fired and crashes and deps.knowledge.get(doc.id) is None
    assert deps.engine().count(space(deps), target.id, doc.id) == 0
    assert deps.engine().count(space(deps), kb.id, doc.id) == 0
    assert deps.chunks.list(doc.id) == []
    done = deps.tasks.get(task.id)
    assert done is not None and done.status == TaskStatus.FAILED


def test_a_delete_landing_mid_move_across_backends_leaves_no_copied_objects(
    tmp_path: Any, model: HashingEmbedding, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Audit #5, across backends: the objects were copied to the target's backend, then the row's commit
    found it deleted; no row ever named the copies, so no delete would find them."""
    import json

    from chalicelib.adapters.memory import memory_settings
    from chalicelib.bootstrap import memory_deps
    from chalicelib.operations.tenants import create_tenant_with_key
    from chalicelib.settings import load_settings
    from chalicelib.tasks.delete import delete_one

    from .test_storage_backends import BACKENDS, objects_of, store

    configured = load_settings({"WEKNORA_STORAGE_BACKENDS": json.dumps(BACKENDS)}).storage_backends
    deps = memory_deps(memory_settings(storage_backends=configured), index_dir=tmp_path / "backends")
    try:
        deps.replace_embedding_model(model)
        tenant, _ = create_tenant_with_key(deps, "acme")
        source = new_kb(deps, tenant, "handbook", storage_backend="tc")
        target = new_kb(deps, tenant, "plain")
        doc = completed(deps, source, "bread.md", png_markdown("Sourdough", "flour and wild yeast"))
        images = store(deps, "tc").keys(f"{tenant.id}/exports/")
        real_update = deps.knowledge.update_fields

        def delete_before_commit(knowledge_id: str, fields: dict[str, Any]) -> Any:
            if "storage_backend" in fields:  # the objects are copied, the chunks relinked: the delete lands
                delete_one(deps, knowledge_id)
            return real_update(knowledge_id, fields)

        monkeypatch.setattr(deps.knowledge, "update_fields", delete_before_commit)
        task = move(deps, source, target, [doc.id], "reuse_vectors")
        run_lifecycle(deps)
        done = deps.tasks.get(task.id)
        assert done is not None and done.status == TaskStatus.FAILED
        assert objects_of(deps, "", tenant, doc.id, images) == []
        assert objects_of(deps, "tc", tenant, doc.id, images) == []
        assert deps.chunks.list(doc.id) == []
    finally:
        for engine in deps._engines.values():
            engine.close()  # type: ignore[attr-defined]


def test_a_reparse_landing_mid_clone_is_copied_again_not_left_empty(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: HashingEmbedding,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Audit #4: the user reparsed a document while a clone copied it. The copy read no chunks (the reparse
    had removed them) and was still marked completed with the source's chunk count; by the planner's next
    pass the source had finished again, matched the empty copy by file hash, and the clone was kept empty
    for good. The copy is removed and the source copied again as its new attempt stands."""
    from chalicelib.commands import ReparseRequest
    from chalicelib.tasks import clone as clone_task
    from chalicelib.tasks.reparse import reparse

    doc = completed(deps, kb, "tides.md", TIDES)
    real_images, real_plan = clone_task._source_images, clone_task.plan_clone
    reparsed: list[int] = []
    plans: list[int] = []

    def reparse_lands(deps_: Services, src: Knowledge) -> Any:
        if not reparsed:
            reparsed.append(src.attempt)
            reparse(deps, src.tenant_id, src.id, ReparseRequest())
        return real_images(deps_, src)

    def next_pass(*args: Any) -> Any:
        plans.append(1)
        if len(plans) == 2:  # by the planner's next pass the reparse has finished
            drain(deps)
            rows = deps.knowledge
            assert isinstance(rows, MemoryKnowledgeRepo)
            rows.write_fields(doc.id, parse_status=ParseStatus.COMPLETED)
        return real_plan(*args)

    monkeypatch.setattr(clone_task, "_source_images", reparse_lands)
    monkeypatch.setattr(clone_task, "plan_clone", next_pass)
    started = clone(deps, kb)
    run_lifecycle(deps)
    assert reparsed == [1]
    task = deps.tasks.get(started["task_id"])
    assert task is not None
    assert task.status == TaskStatus.COMPLETED and task.succeeded == 1, task.errors
    target = deps.kbs.get(started["target_kb_id"])
    assert target is not None
    [copy] = deps.knowledge.page_by_kb(target.id, limit=10)
    source = deps.knowledge.get(doc.id)
    assert source is not None and source.attempt == 2
    assert copy.parse_status == ParseStatus.COMPLETED and copy.chunk_count == source.chunk_count
    assert len(deps.chunks.list(copy.id)) == len(deps.chunks.list(doc.id)) > 0
    assert deps.engine().count(space(deps), target.id, copy.id) > 0
    assert [h["knowledge_id"] for h in search(deps, target, "spring tides full moon")][:1] == [copy.id]


def test_a_source_still_reparsing_is_left_out_and_a_later_clone_copies_it(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: HashingEmbedding,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Audit #4, the other timing: a source reparsed mid-copy and still on its way when the clone ends is not
    in the clone (as any document on its way), and a later clone copies it once it is completed."""
    from chalicelib.commands import ReparseRequest
    from chalicelib.tasks import clone as clone_task
    from chalicelib.tasks.reparse import reparse

    doc = completed(deps, kb, "tides.md", TIDES)
    real_images, reparsed = clone_task._source_images, list[str]()

    def reparse_lands(deps_: Services, src: Knowledge) -> Any:
        if not reparsed:
            reparsed.append(src.id)
            reparse(deps, src.tenant_id, src.id, ReparseRequest())
        return real_images(deps_, src)

    monkeypatch.setattr(clone_task, "_source_images", reparse_lands)
    started = clone(deps, kb)
    run_lifecycle(deps)
    assert reparsed
    target_id = started["target_kb_id"]
    assert deps.knowledge.page_by_kb(target_id, limit=10) == []
    monkeypatch.undo()
    drain(deps)
    rows = deps.knowledge
    assert isinstance(rows, MemoryKnowledgeRepo)
    rows.write_fields(doc.id, parse_status=ParseStatus.COMPLETED)
    clone(deps, kb, target_kb_id=target_id)
    run_lifecycle(deps)
    [copy] = deps.knowledge.page_by_kb(target_id, limit=10)
    assert copy.parse_status == ParseStatus.COMPLETED and len(deps.chunks.list(copy.id)) > 0
    assert deps.engine().count(space(deps), target_id, copy.id) > 0


def test_a_clone_of_a_reparsed_document_is_its_own_first_attempt(
    deps: Services, tenant: Tenant, kb: KnowledgeBase, model: HashingEmbedding
) -> None:
    """Audit #7: the copy of a document on its second attempt was attempt 1, but its chunks said attempt 2
    (in their metadata and their ids): whatever reads "this attempt's chunks" (a summary refresh, the chunk
    list) found none, and a refresh wiped the copied description."""
    from chalicelib.commands import ChunkListQuery, ReparseRequest
    from chalicelib.domain.ids import attempt_chunk_prefix
    from chalicelib.operations.chunks import get_chunk, list_chunks
    from chalicelib.tasks.reparse import reparse

    doc = completed(deps, kb, "notes.md", TEXT)
    reparse(deps, tenant.id, doc.id, ReparseRequest())
    drain(deps)
    rows = deps.knowledge
    assert isinstance(rows, MemoryKnowledgeRepo)
    rows.write_fields(doc.id, parse_status=ParseStatus.COMPLETED)
    started = clone(deps, kb)
    run_lifecycle(deps)
    [copy] = deps.knowledge.page_by_kb(started["target_kb_id"], limit=10)
    assert copy.attempt == 1
    chunks = deps.chunks.list(copy.id)
    assert chunks and len(chunks) == len(deps.chunks.list(doc.id))
    assert {c.metadata["attempt"] for c in chunks} == {copy.attempt}
    prefix = attempt_chunk_prefix(copy.id, copy.attempt)
    assert all(c.id.startswith(prefix) for c in chunks)
    ids = {c.id for c in chunks}
    assert all(link in ids for c in chunks for link in (c.pre_chunk_id, c.next_chunk_id) if link)
    entries = deps.engine().entries_of(space(deps), started["target_kb_id"], copy.id)
    assert entries and {e.chunk_id for e in entries} <= ids
    listed = list_chunks(deps, tenant.id, copy.id, ChunkListQuery())
    assert sorted(item["id"] for item in listed["items"]) == sorted(ids)
    assert get_chunk(deps, tenant.id, copy.id, chunks[0].id)["id"] == chunks[0].id


def test_a_target_deleted_mid_clone_keeps_no_copy(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: HashingEmbedding,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The target knowledge base was deleted while a copy was being made: the delete listed (and deleted)
    the half-made copy and removed the knowledge base, then the copy wrote its chunks, index entries, files
    and spans into a knowledge base that no longer existed."""
    files = deps.files.default  # type: ignore[attr-defined]
    assert isinstance(files, MemoryFileStore)
    from chalicelib.operations.knowledge_changes import delete_kb
    from chalicelib.stages import lifecycle
    from chalicelib.tasks import clone as clone_task

    doc = completed(deps, kb, "tides.md", TIDES)
    target = new_kb(deps, tenant, "mirror")
    real_images, deleted = clone_task._source_images, list[str]()

    def target_deleted(deps_: Services, src: Knowledge) -> Any:
        if not deleted:
            deleted.append(target.id)
            lifecycle.run(deps, delete_kb(deps, tenant.id, target.id).id)  # the whole delete, to its end
        return real_images(deps_, src)

    monkeypatch.setattr(clone_task, "_source_images", target_deleted)
    started = clone(deps, kb, target_kb_id=target.id)
    run_lifecycle(deps)
    assert deleted and deps.kbs.get(target.id) is None
    copy_id = clone_task.copy_id(started["task_id"], doc.id)
    assert deps.knowledge.get(copy_id) is None
    assert deps.chunks.list(copy_id) == []
    assert deps.engine().count(space(deps), target.id, copy_id) == 0
    assert files.keys(f"{tenant.id}/{copy_id}") == []
    assert deps.spans.list(copy_id, 1) == []
    task = deps.tasks.get(started["task_id"])
    assert task is not None and task.status == TaskStatus.FAILED
    assert "target" in task.errors[f"copy:{doc.id}"]
