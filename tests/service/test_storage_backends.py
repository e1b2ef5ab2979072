"""Named storage backends on the in-memory adapters (each backend an in-memory store of its own behind the
routing store, as on AWS): where a document's objects are written, read, copied and deleted, what a move
or a clone across backends does, and the dummy backend's failure."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from chalicelib.adapters.memory import MemoryFileStore, memory_settings
from chalicelib.adapters.storage import BackendFileStore, RoutingFileStore
from chalicelib.bootstrap import Services, memory_deps
from chalicelib.commands import CreateKnowledgeBase, MoveKnowledgeRequest, UpdateKnowledgeBase
from chalicelib.domain.errors import BadRequest, Gone
from chalicelib.domain.types import KnowledgeBase, ParseStatus, Tenant
from chalicelib.operations.knowledge_bases import create_kb, update_kb
from chalicelib.operations.tenants import create_tenant_with_key
from chalicelib.settings import load_settings

from .conftest import drain, upload
from .test_move_clone import clone, completed, png_markdown, run_lifecycle, search

BACKENDS = {
    "tc": {
        "provider": "cos",
        "bucket": "docs",
        "region": "ap-guangzhou",
        "credentials": "ssm:/mem/storage/tc",
    },
    "ali": {
        "provider": "oss",
        "bucket": "docs",
        "region": "cn-hangzhou",
        "credentials": "ssm:/mem/storage/ali",
    },
    "void": {"provider": "dummy"},
}


@pytest.fixture
def deps(tmp_path: Path) -> Iterator[Services]:
    configured = load_settings({"WEKNORA_STORAGE_BACKENDS": json.dumps(BACKENDS)}).storage_backends
    services = memory_deps(memory_settings(storage_backends=configured), index_dir=tmp_path / "index")
    yield services
    for engine in services._engines.values():
        engine.close()  # type: ignore[attr-defined]


@pytest.fixture
def tenant(deps: Services) -> Tenant:
    created, _ = create_tenant_with_key(deps, "acme")
    return created


def store(deps: Services, backend_id: str = "") -> MemoryFileStore:
    """The in-memory bucket behind a backend ("" = the default store)."""
    routing = deps.files
    assert isinstance(routing, RoutingFileStore)
    backend = routing.backend(backend_id)
    inner = backend.inner if isinstance(backend, BackendFileStore) else backend
    assert isinstance(inner, MemoryFileStore)
    return inner


def new_kb(deps: Services, tenant: Tenant, name: str, backend: str = "") -> KnowledgeBase:
    return create_kb(deps, tenant.id, CreateKnowledgeBase(name=name, storage_backend=backend))


def test_every_object_of_a_document_is_written_to_its_kbs_backend(deps: Services, tenant: Tenant) -> None:
    kb = new_kb(deps, tenant, "handbook", "tc")
    assert kb.storage_backend == "tc" and kb.to_dict()["storage_backend"] == "tc"
    doc = completed(
        deps, kb, "bread.md", png_markdown("Sourdough", "A starter is flour, water and wild yeast.")
    )
    assert doc.storage_backend == "tc" and doc.file_path.startswith("storage://tc/")
    keys = store(deps, "tc").keys(f"{tenant.id}/")
    assert any(key.startswith(f"{tenant.id}/{doc.id}/") for key in keys)  # the source
    assert f"{tenant.id}/{doc.id}/parsed/attempt-1.md" in keys
    assert f"{tenant.id}/{doc.id}/parsed/attempt-1.images.json" in keys
    assert any(key.startswith(f"{tenant.id}/exports/") for key in keys)  # the extracted figure
    assert store(deps).keys() == [] and store(deps, "ali").keys(f"{tenant.id}/") == []  # nowhere else
    hits = search(deps, kb, "sourdough starter wild yeast")
    assert hits and "Sourdough" in hits[0]["content"]
    assert "storage://" not in hits[0]["content"]  # a named backend's URL is internal too: signed or dropped

    # delete: the objects go from the backend they are on
    from chalicelib.operations.knowledge_changes import delete_knowledge

    delete_knowledge(deps, tenant.id, doc.id)
    run_lifecycle(deps)
    assert [key for key in store(deps, "tc").keys(f"{tenant.id}/") if f"/{doc.id}/" in key] == []


def test_a_kbs_new_backend_applies_to_new_documents_only(deps: Services, tenant: Tenant) -> None:
    kb = new_kb(deps, tenant, "handbook", "tc")
    first = completed(deps, kb, "tides.md", b"# Tides\n\nSpring tides come at full and new moon.\n")
    changed, _task = update_kb(deps, tenant.id, kb.id, UpdateKnowledgeBase(storage_backend="ali"))
    assert changed.storage_backend == "ali"
    second = upload(deps, changed, "cranes.md", b"# Cranes\n\nA crane's load limit is painted on its jib.\n")
    drain(deps)
    assert second.file_path.startswith("storage://ali/")
    assert f"{tenant.id}/{second.id}/parsed/attempt-1.md" in store(deps, "ali").keys(f"{tenant.id}/")
    # a reparse of the first document writes its new attempt where its objects are
    from chalicelib.commands import ReparseRequest
    from chalicelib.tasks.reparse import reparse

    reparse(deps, tenant.id, first.id, ReparseRequest())
    drain(deps)
    assert f"{tenant.id}/{first.id}/parsed/attempt-2.md" in store(deps, "tc").keys(f"{tenant.id}/")
    assert [key for key in store(deps, "ali").keys(f"{tenant.id}/") if f"/{first.id}/" in key] == []
    with pytest.raises(BadRequest) as raised:
        update_kb(deps, tenant.id, kb.id, UpdateKnowledgeBase(storage_backend="gone"))
    assert raised.value.code == "unknown_storage_backend"
    with pytest.raises(BadRequest) as raised:
        new_kb(deps, tenant, "nowhere", "gone")
    assert raised.value.code == "unknown_storage_backend"


def test_the_dummy_backend_fails_a_document_permanently_with_its_own_code(
    deps: Services, tenant: Tenant
) -> None:
    kb = new_kb(deps, tenant, "scratch", "void")
    created = upload(deps, kb, "gone.md", b"# Gone\n\nNothing of this is kept.\n")
    assert created.file_path == f"storage://void/{created.file_path.removeprefix('storage://void/')}"
    drain(deps)
    row = deps.knowledge.get(created.id)
    assert row is not None and row.parse_status == ParseStatus.FAILED
    assert row.error_code == "storage_not_retained" and "keeps no files" in row.error_message


def test_a_clone_copies_objects_across_backends(deps: Services, tenant: Tenant) -> None:
    source = new_kb(deps, tenant, "handbook", "tc")
    doc = completed(deps, source, "bread.md", png_markdown("Sourdough", "A starter is flour and wild yeast."))
    on_default = new_kb(deps, tenant, "plain")
    started = clone(deps, source, target_kb_id=on_default.id)
    run_lifecycle(deps)
    task = deps.tasks.get(started["task_id"])
    assert task is not None and task.succeeded == 1, task
    (copy,) = deps.knowledge.page_by_kb(on_default.id, limit=10)
    assert copy.storage_backend == "" and not copy.file_path.startswith("storage://")
    assert deps.files.read(copy.file_path) == deps.files.read(doc.file_path)
    copied = store(deps).keys(f"{tenant.id}/{copy.id}/")
    assert f"{tenant.id}/{copy.id}/parsed/attempt-1.md" in copied
    assert any("/images/" in key for key in copied)  # the figure came across too
    assert (
        "storage://tc/"
        not in deps.files.read(deps.files.url_for(f"{tenant.id}/{copy.id}/parsed/attempt-1.md")).decode()
    )

    # a clone into a new knowledge base keeps the source's backend (copies within it)
    again = clone(deps, source, name="handbook (2)")
    run_lifecycle(deps)
    twin_kb = deps.kbs.get(again["target_kb_id"])
    assert twin_kb is not None and twin_kb.storage_backend == "tc"
    (twin,) = deps.knowledge.page_by_kb(twin_kb.id, limit=10)
    assert twin.storage_backend == "tc" and twin.file_path.startswith("storage://tc/")


def objects_of(deps: Services, backend_id: str, tenant: Tenant, doc_id: str, images: list[str]) -> list[str]:
    """A document's keys on one backend: under its own prefix, and its extracted images."""
    return [k for k in store(deps, backend_id).keys(f"{tenant.id}/") if f"/{doc_id}/" in k or k in images]


def move_across(deps: Services, source: KnowledgeBase, target: KnowledgeBase, doc_id: str) -> None:
    from chalicelib.operations.move_and_clone import move

    request = MoveKnowledgeRequest(source_kb_id=source.id, target_kb_id=target.id, ids=[doc_id])
    started = move(deps, source.tenant_id, request)
    run_lifecycle(deps)
    task = deps.tasks.get(started.id)
    assert task is not None and task.succeeded == 1, task


def test_a_move_across_backends_takes_the_objects_along(deps: Services, tenant: Tenant) -> None:
    """The objects are copied to the target's backend under the same keys, every link follows them, the
    old ones are deleted, and so are the links (resources) over them."""
    source = new_kb(deps, tenant, "handbook", "tc")
    doc = completed(deps, source, "bread.md", png_markdown("Sourdough", "A starter is flour and wild yeast."))
    original = deps.files.read(doc.file_path)
    images = [k for k in store(deps, "tc").keys(f"{tenant.id}/exports/")]
    before = objects_of(deps, "tc", tenant, doc.id, images)
    assert len(images) == 1 and f"{tenant.id}/{doc.id}/parsed/attempt-1.md" in before
    from chalicelib.commands import FileUrlQuery
    from chalicelib.operations.file_links import file_url
    from chalicelib.services.resources import redeem

    link = file_url(deps, tenant.id, doc.id, FileUrlQuery.model_validate({"kind": "original"}), "http://x")
    token = link["url"].rsplit("/", 1)[-1]
    assert redeem(deps, token).location

    on_default = new_kb(deps, tenant, "plain")
    move_across(deps, source, on_default, doc.id)
    moved = deps.knowledge.get(doc.id)
    assert moved is not None and moved.kb_id == on_default.id and moved.storage_backend == ""
    assert not moved.file_path.startswith("storage://") and deps.files.read(moved.file_path) == original
    assert sorted(objects_of(deps, "", tenant, doc.id, images)) == sorted(before)  # the same keys, here
    assert objects_of(deps, "tc", tenant, doc.id, images) == []  # and gone from there
    markdown = deps.files.read(deps.files.url_for(f"{tenant.id}/{doc.id}/parsed/attempt-1.md")).decode()
    manifest = deps.files.read(deps.files.url_for(f"{tenant.id}/{doc.id}/parsed/attempt-1.images.json"))
    assert "storage://tc/" not in markdown + manifest.decode() + moved.description
    figure = deps.files.url_for(images[0])  # the chunks link to the figure where it is now
    assert deps.files.exists(figure) and any(figure in c.content for c in deps.chunks.list(doc.id))
    assert not any("storage://tc/" in c.content for c in deps.chunks.list(doc.id))
    hits = search(deps, on_default, "sourdough starter wild yeast")
    assert hits and hits[0]["knowledge_id"] == doc.id and "storage://tc/" not in hits[0]["content"]
    with pytest.raises(Gone) as gone:  # the old object's link stops working; a new one works
        redeem(deps, token)
    assert gone.value.code == "resource_deleted"
    fresh = file_url(deps, tenant.id, doc.id, FileUrlQuery.model_validate({"kind": "original"}), "http://x")
    assert redeem(deps, fresh["url"].rsplit("/", 1)[-1]).location

    # and on to a third backend, then back to the first: each hop leaves nothing behind
    ali = new_kb(deps, tenant, "handbook (ali)", "ali")
    move_across(deps, on_default, ali, doc.id)
    assert sorted(objects_of(deps, "ali", tenant, doc.id, images)) == sorted(before)
    assert objects_of(deps, "", tenant, doc.id, images) == []
    move_across(deps, ali, source, doc.id)
    back = deps.knowledge.get(doc.id)
    assert back is not None and back.storage_backend == "tc" and deps.files.read(back.file_path) == original
    assert objects_of(deps, "ali", tenant, doc.id, images) == []
    # its files are registered where they are now, those it left are deleted, the ones it came back to live
    live = {r.url for r in deps.resources.owned_by(doc.id) if not r.deleted}
    assert back.file_path in live and all(url.startswith("storage://tc/") for url in live)
    assert {r.role for r in deps.resources.owned_by(doc.id) if not r.deleted} == {
        "original",
        "parsed",
        "image",
    }
    again = file_url(deps, tenant.id, doc.id, FileUrlQuery.model_validate({"kind": "original"}), "http://x")
    assert again["resource"] == link["resource"] and redeem(deps, again["url"].rsplit("/", 1)[-1]).location

    # within one backend a move is as before: the row moves, its objects stay
    also_tc = new_kb(deps, tenant, "handbook (tc)", "tc")
    move_across(deps, source, also_tc, doc.id)
    still = deps.knowledge.get(doc.id)
    assert still is not None and still.kb_id == also_tc.id and still.file_path == back.file_path


@pytest.mark.parametrize("crash_at", ["commit", "cleanup"])
def test_a_move_across_backends_redelivered_after_a_crash_finishes_once(
    deps: Services, tenant: Tenant, monkeypatch: pytest.MonkeyPatch, crash_at: str
) -> None:
    """The worker dies before the row's commit (the objects copied, the chunks relinked) or after it (the
    old objects half deleted); the task's next delivery finishes the move, and one more changes nothing."""
    source = new_kb(deps, tenant, "handbook", "tc")
    doc = completed(deps, source, "bread.md", png_markdown("Sourdough", "A starter is flour and wild yeast."))
    original = deps.files.read(doc.file_path)
    images = [k for k in store(deps, "tc").keys(f"{tenant.id}/exports/")]
    before = objects_of(deps, "tc", tenant, doc.id, images)
    target = new_kb(deps, tenant, "plain")
    from chalicelib.operations.move_and_clone import move
    from chalicelib.tasks.move_clone import move_one

    task = move(
        deps, tenant.id, MoveKnowledgeRequest(source_kb_id=source.id, target_kb_id=target.id, ids=[doc.id])
    )

    class Crash(Exception):
        pass

    if crash_at == "commit":
        real = deps.knowledge.update_fields

        def crashing(knowledge_id: str, fields: dict[str, object]) -> object:
            if "storage_backend" in fields:
                raise Crash
            return real(knowledge_id, fields)

        monkeypatch.setattr(deps.knowledge, "update_fields", crashing)
    else:
        tc = store(deps, "tc")
        deleted: list[str] = []
        real_delete = tc.delete

        def crashing_delete(url: str) -> None:
            if deleted:
                raise Crash
            deleted.append(url)
            real_delete(url)

        monkeypatch.setattr(tc, "delete", crashing_delete)
    with pytest.raises(Crash):
        move_one(deps, task, doc.id)
    half = deps.knowledge.get(doc.id)
    assert half is not None and half.kb_id == target.id
    assert half.storage_backend == ("tc" if crash_at == "commit" else "")
    assert deps.files.read(half.file_path) == original  # readable wherever it points meanwhile
    monkeypatch.undo()
    for _ in range(2):  # the redelivery, and one more
        move_one(deps, task, doc.id)
        done = deps.knowledge.get(doc.id)
        assert done is not None and done.storage_backend == "" and deps.files.read(done.file_path) == original
        assert sorted(objects_of(deps, "", tenant, doc.id, images)) == sorted(before)
        assert objects_of(deps, "tc", tenant, doc.id, images) == []
    figure = deps.files.url_for(images[0])
    assert any(figure in c.content for c in deps.chunks.list(doc.id))
    assert not any("storage://tc/" in c.content for c in deps.chunks.list(doc.id))


def test_a_document_whose_backend_was_removed_is_still_deleted(
    deps: Services, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator took a backend out of the configuration: deleting its documents still removes the
    rows (their objects are left where they are, for the operator), never a delete stuck retrying."""
    kb = new_kb(deps, tenant, "handbook", "tc")
    doc = completed(deps, kb, "tides.md", b"# Tides\n\nSpring tides come at full and new moon.\n")
    routing = deps.files
    assert isinstance(routing, RoutingFileStore)
    monkeypatch.setattr(deps, "files", RoutingFileStore(routing.default))  # no "tc" any more
    from chalicelib.operations.knowledge_changes import delete_knowledge

    delete_knowledge(deps, tenant.id, doc.id)
    run_lifecycle(deps)
    assert deps.knowledge.get(doc.id) is None
    assert store(deps, "").keys() == []
    assert any(f"/{doc.id}/" in key for key in routing.backend("tc").inner.keys(f"{tenant.id}/"))  # type: ignore[attr-defined]
