"""A reviewer's proofs against the storage recount: a recount (or a cancel) landing between an indexing and
its removal of the earlier attempt's outputs kept both counted for good; images a cancelled attempt stored
before its Markdown counted for no one; kept page-range plans piled up one per reparse of a cancelled attempt
until the recount's listing was full and every later cancel kept its outputs uncounted."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase

from .conftest import drain, upload
from .test_attempt_outputs_removed import reparse
from .test_storage_counts_derived import (
    GALLERY,
    _Photos,
    images_stored,
    row_of,
    used,
)
from .test_storage_counts_derived import photos as photos
from .test_storage_recount import cancel, recount, stores
from .test_storage_recount import server as server


def test_a_recount_between_indexing_and_the_earlier_attempts_removal_counts_the_indexed_attempt(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    server: _Photos,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chalicelib.stages import embedding

    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps)
    reparse(deps, kb, created.id)
    real = embedding.remove_earlier_attempts

    def recount_first(d: Any, knowledge: Any, images: Any) -> None:
        recount(deps, knowledge.id)  # the operator's recount, landing between mark_indexed and the removal
        real(d, knowledge, images)

    monkeypatch.setattr(embedding, "remove_earlier_attempts", recount_first)
    drain(deps)
    recount(deps, created.id)  # the operator's next recount
    assert row_of(deps, created.id).storage_size == stores(deps, files, kb, created.id)


def test_a_cancel_between_indexing_and_the_earlier_attempts_removal_counts_the_indexed_attempt(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    server: _Photos,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chalicelib.stages import embedding

    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps)
    reparse(deps, kb, created.id)
    real = embedding.remove_earlier_attempts

    def cancel_first(d: Any, knowledge: Any, images: Any) -> None:
        cancel(deps, kb, knowledge.id)  # the tenant's cancel, just after mark_indexed
        real(d, knowledge, images)

    monkeypatch.setattr(embedding, "remove_earlier_attempts", cancel_first)
    drain(deps)
    assert row_of(deps, created.id).storage_size == stores(deps, files, kb, created.id)


def test_images_a_cancelled_attempt_stored_without_its_markdown_count(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    server: _Photos,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chalicelib.stages import docreader

    created = upload(deps, kb, "gallery.md", GALLERY)
    fired: list[int] = []
    real = docreader._finish

    def die(*args: Any) -> Any:
        if not fired:
            fired.append(1)
            cancel(deps, kb, created.id)
            raise TimeoutError("the lambda ran out of time after the images were stored")
        return real(*args)

    monkeypatch.setattr(docreader, "_finish", die)
    for _ in range(5):
        drain(deps)  # the lambda's time-out is a failed try: the message comes back
    recount(deps, created.id)
    assert used(deps, kb.tenant_id) >= len(GALLERY) + images_stored(files, kb.tenant_id)


def test_reparse_and_cancel_cycles_keep_no_pile_of_plans_so_a_cancel_counts(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.commands import ReparseRequest
    from chalicelib.operations import admin
    from chalicelib.operations.knowledge_changes import cancel as cancel_knowledge
    from chalicelib.services import stored_size
    from chalicelib.tasks.reparse import reparse as reparse_task

    from .conftest import deliver
    from .test_late_range_writes import Reader, fanned_out

    monkeypatch.setattr(stored_size, "MAX_LISTED_KEYS", 12)  # 1000 in production: scaled down
    reader = Reader()
    kid = fanned_out(deps, kb, reader)
    for _ in range(12):  # cancel each fanned-out attempt before its ranges run; its plan stays
        cancel_knowledge(deps, kb.tenant_id, kid)
        drain(deps, ("docreader",))
        reparse_task(deps, kb.tenant_id, kid, ReparseRequest())
        deliver(deps, "docreader")  # the fan-out: a new plan
    assert len([k for k in files.keys(f"{kb.tenant_id}/{kid}/parsed/") if k.endswith("plan.json")]) <= 2
    reader.while_reading = lambda: cancel_knowledge(deps, kb.tenant_id, kid)  # cancel mid-range: outputs kept
    drain(deps, ("docreader",))
    imgs = sum(len(files._objects[k][0]) for k in files.keys(f"{kb.tenant_id}/") if "/exports/" in k)
    row = row_of(deps, kid)
    admin.storage_recount(deps, kb.tenant_id, admin.StorageRecountQuery())
    assert used(deps, kb.tenant_id) >= row.file_size + imgs
