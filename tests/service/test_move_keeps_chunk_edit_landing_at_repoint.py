"""A chunk edit that lands while a reuse_vectors move writes its chunk rows into the target stays. The move
used to read the rows and write them back whole with the target's id: an edit (which follows the moved
document) written between that read and that write was overwritten with the old text, while the target's
index kept the new one, and the edit had been answered 200. The move now changes only each row's kb_id."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.types import Chunk, KnowledgeBase, Tenant

from .test_chunk_edit_during_move import EDITED, _assert_the_edit_followed, _edit, _text_chunk
from .test_move_clone import TIDES, completed, model, move, new_kb, run_lifecycle  # noqa: F401


def test_an_edit_landing_as_the_move_writes_the_chunk_rows_keeps_its_text_in_the_row(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = new_kb(deps, tenant, "archive")
    doc = completed(deps, kb, "tides.md", TIDES)
    chunk = _text_chunk(deps, doc)
    answered: list[dict[str, Any]] = []
    edited = False

    def edit_once() -> None:  # after the move read the rows (it moved the row and the entries already)
        nonlocal edited
        if not edited:
            edited = True
            answered.append(_edit(deps, doc, chunk))

    # the move's write of its rows: whole rows as read (put_many), or only their kb_id (repoint)
    real_put, real_repoint = deps.chunks.put_many, getattr(deps.chunks, "repoint", None)

    def put_many(rows: Sequence[Chunk]) -> None:
        if any(r.knowledge_id == doc.id and r.kb_id == target.id for r in rows):
            edit_once()
        real_put(rows)

    def repoint(knowledge_id: str, kb_id: str) -> int:
        assert real_repoint is not None
        if knowledge_id == doc.id:
            edit_once()
        return real_repoint(knowledge_id, kb_id)

    monkeypatch.setattr(deps.chunks, "put_many", put_many)
    monkeypatch.setattr(deps.chunks, "repoint", repoint, raising=False)
    move(deps, kb, target, [doc.id], "reuse_vectors")
    run_lifecycle(deps)
    monkeypatch.undo()
    [edit] = answered
    assert edit["content"] == EDITED and edit["kb_id"] == target.id
    _assert_the_edit_followed(deps, doc, chunk, kb, target)
