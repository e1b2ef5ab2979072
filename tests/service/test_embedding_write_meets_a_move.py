"""A move that lands between an embedding window's index write and the row's re-read after it: the entries the
window wrote under the knowledge base the document left were kept there (the re-read gave no `undo_moved`), so
the source's index kept entries of a document it no longer holds, for good."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.ports import IndexSpace

from .conftest import deliver, upload


def test_entries_written_as_the_document_moved_out_leave_the_old_knowledge_base(
    deps: Services, tenant: Tenant, kb: KnowledgeBase
) -> None:
    target = create_kb(deps, tenant.id, CreateKnowledgeBase(name="elsewhere"))
    created = upload(deps, kb)
    deliver(deps, "docreader")
    deliver(deps, "chunking")
    engine: Any = deps.engine()
    space = IndexSpace.of(deps.embedding_model())
    write = engine.batch_index
    moved: list[bool] = []

    def batch_index(*args: Any, **kwargs: Any) -> Any:
        result = write(*args, **kwargs)
        if not moved:  # the move's row write lands right after this one
            moved.append(True)
            rows: Any = deps.knowledge
            rows._rows[created.id] = replace(rows._rows[created.id], kb_id=target.id)
        return result

    engine.batch_index = batch_index
    try:
        deliver(deps, "embedding")
    finally:
        engine.batch_index = write
    assert moved
    assert engine.entries_of(space, kb.id, created.id) == []  # were left in the source's index
