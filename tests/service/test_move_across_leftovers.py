"""A move across storage backends leaves no object behind, whatever order a crash, its redelivery and a
delete of the document come in: before its first copy it records what it copies (tasks/move_across.py), and
a delete finds the copies no row names there (before the commit), or the old objects (after it)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chalicelib.adapters.memory import memory_settings
from chalicelib.bootstrap import Services, memory_deps
from chalicelib.domain.types import Knowledge, KnowledgeBase, Task, Tenant
from chalicelib.operations.tenants import create_tenant_with_key
from chalicelib.settings import load_settings
from chalicelib.tasks.delete import delete_one
from chalicelib.tasks.move_clone import ItemFailed, move_one

from .test_move_clone import completed, move, new_kb, png_markdown
from .test_storage_backends import BACKENDS, objects_of, store


class Crash(Exception):
    """A delivery that dies (a throttled write, a Lambda timeout)."""


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


def on_tc(deps: Services, tenant: Tenant) -> tuple[KnowledgeBase, Knowledge, list[str]]:
    source = new_kb(deps, tenant, "handbook", storage_backend="tc")
    doc = completed(deps, source, "bread.md", png_markdown("Sourdough", "A starter is flour and wild yeast."))
    return source, doc, store(deps, "tc").keys(f"{tenant.id}/exports/")


def crash_at_commit(deps: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    real = deps.knowledge.update_fields

    def crashing(knowledge_id: str, fields: dict[str, Any]) -> Any:
        if "storage_backend" in fields:
            raise Crash
        return real(knowledge_id, fields)

    monkeypatch.setattr(deps.knowledge, "update_fields", crashing)


def crash_in_cleanup(deps: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first old object is deleted, the delivery dies at the second."""
    tc = store(deps, "tc")
    deleted: list[str] = []
    real = tc.delete

    def crashing(url: str) -> None:
        if deleted:
            raise Crash
        deleted.append(url)
        real(url)

    monkeypatch.setattr(tc, "delete", crashing)


def records(deps: Services) -> list[str]:
    """What moves recorded of their copies and have not yet forgotten (none once they are all done)."""
    from chalicelib.tasks.move_across import CARRIED_PREFIX

    return deps.inbox.list_keys(CARRIED_PREFIX, 1000)


def assert_nothing_left(deps: Services, tenant: Tenant, doc_id: str, images: list[str]) -> None:
    for backend in ("tc", "", "ali"):
        left = objects_of(deps, backend, tenant, doc_id, images)
        assert left == [], f"objects of deleted document {doc_id} left on backend {backend!r}: {left}"
    assert records(deps) == []


@pytest.mark.parametrize("crash", [crash_at_commit, crash_in_cleanup])
def test_a_document_deleted_between_a_crashed_move_and_its_redelivery_leaves_nothing(
    deps: Services,
    tenant: Tenant,
    monkeypatch: pytest.MonkeyPatch,
    crash: Callable[[Services, pytest.MonkeyPatch], None],
) -> None:
    """Before the commit the row names the old backend (the copies are named by nothing); after it, the new
    one (the old objects are named by nothing). The delete removes both, and the redelivered move, which
    finds no row, has nothing left to remove."""
    source, doc, images = on_tc(deps, tenant)
    target = new_kb(deps, tenant, "plain")  # the default store
    task = move(deps, source, target, [doc.id], "reuse_vectors")
    crash(deps, monkeypatch)
    with pytest.raises(Crash):
        move_one(deps, task, doc.id)
    monkeypatch.undo()
    assert objects_of(deps, "", tenant, doc.id, images)  # copied
    assert objects_of(deps, "tc", tenant, doc.id, images)  # and not all deleted there

    delete_one(deps, doc.id)
    assert deps.knowledge.get(doc.id) is None
    with pytest.raises(ItemFailed):
        move_one(deps, task, doc.id)
    assert_nothing_left(deps, tenant, doc.id, images)


def test_a_document_deleted_while_its_objects_are_being_copied_leaves_nothing(
    deps: Services, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delete lands as the move writes its first copy: what the delete missed, the move's commit (which
    finds the row deleted) removes."""
    source, doc, images = on_tc(deps, tenant)
    target = new_kb(deps, tenant, "plain")
    task = move(deps, source, target, [doc.id], "reuse_vectors")
    default = store(deps, "")
    real = default.save
    deleted: list[bool] = []

    def deleted_meanwhile(key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        if key.startswith(f"{tenant.id}/") and not deleted:
            deleted.append(True)
            delete_one(deps, doc.id)
        return real(key, data, content_type)

    monkeypatch.setattr(default, "save", deleted_meanwhile)
    with pytest.raises(ItemFailed):
        move_one(deps, task, doc.id)
    monkeypatch.undo()
    assert deleted and deps.knowledge.get(doc.id) is None
    with pytest.raises(ItemFailed):
        move_one(deps, task, doc.id)
    assert_nothing_left(deps, tenant, doc.id, images)


def test_copies_of_a_move_that_never_finished_go_with_the_next_move(
    deps: Services, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A move's delivery dies before its commit and the document is moved on before it comes back (which then
    finds it elsewhere and stops): the copies on the first target's backend go with the next move."""
    source, doc, images = on_tc(deps, tenant)
    before = objects_of(deps, "tc", tenant, doc.id, images)
    plain = new_kb(deps, tenant, "plain")
    first: Task = move(deps, source, plain, [doc.id], "reuse_vectors")
    crash_at_commit(deps, monkeypatch)
    with pytest.raises(Crash):
        move_one(deps, first, doc.id)
    monkeypatch.undo()
    assert objects_of(deps, "", tenant, doc.id, images)

    ali = new_kb(deps, tenant, "handbook (ali)", storage_backend="ali")
    move_one(deps, move(deps, plain, ali, [doc.id], "reuse_vectors"), doc.id)
    with pytest.raises(ItemFailed):
        move_one(deps, first, doc.id)  # the first move's redelivery finds the row elsewhere
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.kb_id == ali.id and row.storage_backend == "ali"
    assert sorted(objects_of(deps, "ali", tenant, doc.id, images)) == sorted(before)
    assert objects_of(deps, "", tenant, doc.id, images) == []
    assert objects_of(deps, "tc", tenant, doc.id, images) == []

    delete_one(deps, doc.id)
    assert_nothing_left(deps, tenant, doc.id, images)
