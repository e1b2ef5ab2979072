"""One chunk edit reads its knowledge row three times: once to check the request, and twice after it wrote
(the document's switch right after the row's put, and whether the row is still this attempt's, in the
same knowledge base). The index write takes the switch from the row the request read (it had read the row
again for it: four reads); a switch made meanwhile is still caught by the read after the put."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import EditChunkRequest
from chalicelib.domain.types import KnowledgeBase, ParseStatus
from chalicelib.operations.chunks import edit_chunk

from .conftest import MAIN_STAGES, drain, upload


def _completed(deps: Services, kb: KnowledgeBase) -> Any:
    created = upload(deps, kb)
    drain(deps, MAIN_STAGES)
    row = deps.knowledge.settle_plan(created.id, created.attempt, 0, {"planned": [], "not_planned": {}})
    assert row is not None and row.parse_status == ParseStatus.COMPLETED
    return row


def _counted_reads(deps: Services, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    real = deps.knowledge.get

    def get(knowledge_id: str) -> Any:
        reads.append(knowledge_id)
        return real(knowledge_id)

    monkeypatch.setattr(deps.knowledge, "get", get)
    return reads


def test_an_edit_reads_its_row_once_before_and_twice_after_it_wrote(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    knowledge = _completed(deps, kb)
    chunk = deps.chunks.list(knowledge.id)[0]
    reads = _counted_reads(deps, monkeypatch)
    shown = edit_chunk(
        deps,
        knowledge.tenant_id,
        knowledge.id,
        chunk.id,
        EditChunkRequest(content="The keeper paints the rail."),
    )
    assert shown["content"] == "The keeper paints the rail."
    assert reads == [knowledge.id] * 3


def test_a_document_switched_off_during_the_edit_leaves_the_chunk_out_of_search(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The switch read before the index write is the request's; the read after the put corrects it."""
    from chalicelib.domain.types import EnableStatus
    from chalicelib.ports import IndexSpace

    knowledge = _completed(deps, kb)
    chunk = deps.chunks.list(knowledge.id)[0]
    engine = deps.engine(kb.retrieval_engine)
    real_put = deps.chunks.put_unchanged

    def put_unchanged(before: Any, after: Any) -> Any:  # the document is switched off between the index
        # write and the (conditional) put
        deps.knowledge.update_fields(knowledge.id, {"enable_status": EnableStatus.DISABLED})
        return real_put(before, after)

    monkeypatch.setattr(deps.chunks, "put_unchanged", put_unchanged)
    edit_chunk(deps, knowledge.tenant_id, knowledge.id, chunk.id, EditChunkRequest(content="Fresh words."))
    space = IndexSpace.of(deps.embedding_model(kb.embedding_model_id))
    entry = {e.id: e for e in engine.entries_of(space, kb.id, knowledge.id)}[chunk.id]
    assert entry.is_enabled is False
