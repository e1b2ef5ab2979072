"""A reparse clears the earlier attempts' data only once its reset went through: one refused (the
document was indexed between the reparse's read and its reset) leaves the document whole, and a clean-up
that fails after the reset leaves a failed row a second reparse starts again."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import ReparseRequest
from chalicelib.domain.errors import BadRequest, SpanErrorCode
from chalicelib.domain.types import ChunkType, EnableStatus, KnowledgeBase, ParseStatus
from chalicelib.ports import IndexUnavailable
from chalicelib.tasks import reparse as reparse_module

from .conftest import deliver, drain, index_count, upload


def _text_chunks(deps: Services, knowledge_id: str) -> int:
    return sum(1 for c in deps.chunks.list(knowledge_id) if c.chunk_type == ChunkType.TEXT)


def test_a_refused_reparse_leaves_the_document_whole(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = upload(deps, kb)
    deliver(deps, "docreader")
    deliver(deps, "chunking")  # embedding waits: the row reads processing, never indexed
    reset = deps.knowledge.reset_for_reparse

    def indexed_meanwhile(*args: Any, **kwargs: Any) -> Any:
        deliver(deps, "embedding")  # the hand-over lands between the reparse's read and its reset
        return reset(*args, **kwargs)

    monkeypatch.setattr(deps.knowledge, "reset_for_reparse", indexed_meanwhile)
    with pytest.raises(BadRequest) as refused:
        reparse_module.reparse(deps, kb.tenant_id, doc.id, ReparseRequest())
    assert refused.value.code == "invalid_state"
    drain(deps)
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.attempt == 1
    assert row.enable_status == EnableStatus.ENABLED and row.processed_at is not None  # indexed
    assert row.chunk_count == len(deps.chunks.list(doc.id)) > 0
    assert index_count(deps, kb, doc.id) == _text_chunks(deps, doc.id) > 0


def test_a_clean_up_that_fails_after_the_reset_fails_the_row_and_a_reparse_recovers(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = upload(deps, kb)
    drain(deps)
    remove = reparse_module.remove_derived_data

    def index_down(*_args: Any) -> None:
        raise IndexUnavailable("the index is not answering")

    monkeypatch.setattr(reparse_module, "remove_derived_data", index_down)
    with pytest.raises(IndexUnavailable):
        reparse_module.reparse(deps, kb.tenant_id, doc.id, ReparseRequest())
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.attempt == 2 and row.parse_status == ParseStatus.FAILED
    assert row.error_code == SpanErrorCode.ENQUEUE_FAILED and "reparse to retry" in row.error_message
    assert drain(deps) == 0  # nothing was queued for attempt 2
    monkeypatch.setattr(reparse_module, "remove_derived_data", remove)
    reparse_module.reparse(deps, kb.tenant_id, doc.id, ReparseRequest())
    drain(deps)
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.attempt == 3 and row.enable_status == EnableStatus.ENABLED
    assert {c.metadata["attempt"] for c in deps.chunks.list(doc.id)} == {3}
    assert row.chunk_count == len(deps.chunks.list(doc.id))
    assert index_count(deps, kb, doc.id) == _text_chunks(deps, doc.id) > 0
