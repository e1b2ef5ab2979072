"""Editing a document (PUT /knowledge/{id}) on the fakes: a refused edit changes nothing, and of two edits
of the same manual text only one wins; the other leaves nothing behind that a delete would miss."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryFileStore, MemoryKnowledgeRepo
from chalicelib.bootstrap import Services
from chalicelib.commands import EditKnowledgeRequest, ManualRequest
from chalicelib.domain.errors import BadRequest, Conflict, NotFound
from chalicelib.domain.ids import file_md5
from chalicelib.domain.types import EnableStatus, Knowledge, KnowledgeBase, ParseStatus

from .conftest import MAIN_STAGES, drain


def manual(deps: Services, kb: KnowledgeBase, content: str) -> Knowledge:
    from chalicelib.operations.create import create_manual

    return create_manual(deps, kb.tenant_id, kb.id, ManualRequest(title="plan", content=content))


def sources(files: MemoryFileStore, knowledge: Knowledge) -> list[str]:
    """The texts stored for the document (its parsed outputs live one folder further down)."""
    prefix = f"{knowledge.tenant_id}/{knowledge.id}/"
    return [k for k in files.keys(prefix) if "/" not in k[len(prefix) :]]


def edit(deps: Services, knowledge: Knowledge, **fields: Any) -> Knowledge:
    from chalicelib.operations.knowledge_changes import edit as edit_knowledge

    return edit_knowledge(deps, knowledge.tenant_id, knowledge.id, EditKnowledgeRequest(**fields))


def test_an_edit_refused_after_its_text_was_checked_keeps_the_text(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, rows: MemoryKnowledgeRepo
) -> None:
    created = manual(deps, kb, "# Plan\n\nold text")
    assert created.parse_status == ParseStatus.PENDING  # not indexed: it cannot be enabled yet
    with pytest.raises(BadRequest) as refused:
        edit(deps, created, content="# Plan\n\nNEW text", enable_status="enabled", title="renamed")
    assert refused.value.code == "not_indexed"
    row = rows.get(created.id)
    assert row is not None and (row.file_path, row.file_hash, row.file_size, row.title) == (
        created.file_path,
        created.file_hash,
        created.file_size,
        created.title,
    )
    assert files.read(row.file_path) == b"# Plan\n\nold text"  # the next parse still finds its source
    assert sources(files, created) == [files.key_of(created.file_path)]  # and no new text is left over
    drain(deps, MAIN_STAGES)
    indexed = rows.get(created.id)
    assert indexed is not None and indexed.enable_status == EnableStatus.ENABLED


def test_an_edit_that_a_delete_overtakes_leaves_its_new_text_to_no_one(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, rows: MemoryKnowledgeRepo
) -> None:
    from chalicelib.operations.knowledge_changes import delete_knowledge

    created = manual(deps, kb, "# Plan\n\nv1")
    backend = deps.files.backend(kb.storage_backend)
    real_save = backend.save

    def save(key: str, data: bytes, *args: Any, **kwargs: Any) -> str:
        delete_knowledge(deps, kb.tenant_id, created.id)  # the delete starts while the new text is written
        return real_save(key, data, *args, **kwargs)

    backend.save = save  # type: ignore[method-assign]
    with pytest.raises(NotFound) as gone:
        edit(deps, created, content="# Plan\n\nv2")
    backend.save = real_save  # type: ignore[method-assign]
    assert gone.value.code == "knowledge_not_found"
    assert sources(files, created) == [files.key_of(created.file_path)]  # the delete's to remove
    drain(deps, ("lifecycle",))
    assert rows.get(created.id) is None and files.keys(f"{kb.tenant_id}/{created.id}/") == []


def test_of_two_racing_edits_the_loser_answers_409_and_a_delete_leaves_nothing(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, rows: MemoryKnowledgeRepo
) -> None:
    from chalicelib.operations.knowledge_changes import delete_knowledge

    created = manual(deps, kb, "# Plan\n\nv1")
    drain(deps, MAIN_STAGES)
    backend = deps.files.backend(kb.storage_backend)
    real_save = backend.save
    raced: list[Knowledge] = []

    def save(key: str, data: bytes, *args: Any, **kwargs: Any) -> str:
        if b"v2" in data and not raced:  # edit B, which read the same row, runs while edit A writes
            raced.append(edit(deps, created, content="# Plan\n\nv3"))
        return real_save(key, data, *args, **kwargs)

    backend.save = save  # type: ignore[method-assign]
    with pytest.raises(Conflict) as lost:
        edit(deps, created, content="# Plan\n\nv2", title="from A")
    backend.save = real_save  # type: ignore[method-assign]
    assert lost.value.code == "knowledge_changed" and lost.value.status == 409

    row = rows.get(created.id)
    assert row is not None and row.title == "plan"  # nothing of the losing edit was written
    v3 = b"# Plan\n\nv3"
    assert files.read(row.file_path) == v3
    assert (row.file_size, row.file_hash) == (len(v3), file_md5(v3))  # the three fields name one text
    assert sources(files, created) == [files.key_of(row.file_path)]  # v1 went with the switch, v2 undone
    assert not files.exists(created.file_path)

    drain(deps, MAIN_STAGES)  # the winner's text is ingested again
    indexed = rows.get(created.id)
    assert indexed is not None and indexed.enable_status == EnableStatus.ENABLED
    delete_knowledge(deps, kb.tenant_id, created.id)
    drain(deps, ("lifecycle",))
    assert rows.get(created.id) is None and files.keys(f"{kb.tenant_id}/{created.id}/") == []


def test_an_edit_replaces_the_text_and_removes_the_old_one(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, rows: MemoryKnowledgeRepo
) -> None:
    created = manual(deps, kb, "# Plan\n\nv1")
    drain(deps, MAIN_STAGES)
    edited = edit(deps, created, content="# Plan\n\nv2", description="by hand")
    assert edited.description == "by hand" and edited.attempt == 2  # a published text is ingested again
    assert files.read(edited.file_path) == b"# Plan\n\nv2" and not files.exists(created.file_path)
    assert sources(files, created) == [files.key_of(edited.file_path)]
    again = edit(deps, edited, title="plan, v2")  # no text: no condition on it, no object touched
    assert again.title == "plan, v2" and again.file_path == edited.file_path
    drain(deps, MAIN_STAGES)
    row = rows.get(created.id)
    assert row is not None and row.enable_status == EnableStatus.ENABLED
