"""The chunk operations (issue 24) on the in-memory adapters: an edit rewrites the row and its index entry,
drops the questions asked about the old text and requests a summary refresh; the switch flips the entries
and survives a document disable and enable; what may not be changed is refused with its code; a failing
embedding model changes nothing."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import ChunkListQuery, CreateKnowledgeBase, EditChunkRequest
from chalicelib.domain.errors import AppError
from chalicelib.domain.types import ChunkType, Knowledge, KnowledgeBase, ParseStatus, Tenant
from chalicelib.ports import IndexEntry, IndexSpace, ModelUnavailable

from .conftest import MAIN_STAGES, drain, upload


@pytest.fixture
def kb(deps: Services, tenant: Tenant) -> KnowledgeBase:
    """Small chunks: the document makes several."""
    from chalicelib.operations.knowledge_bases import create_kb

    config = {"chunk_size": 110, "chunk_overlap": 0}
    return create_kb(deps, tenant.id, CreateKnowledgeBase(name="log", chunking_config=config))


def _completed(
    deps: Services, kb: KnowledgeBase, summary: str = "completed", data: bytes | None = None
) -> Knowledge:
    created = upload(deps, kb) if data is None else upload(deps, kb, data=data)
    drain(deps, MAIN_STAGES)
    row = deps.knowledge.settle_plan(created.id, created.attempt, 0, {"planned": [], "not_planned": {}})
    assert row is not None and row.parse_status == ParseStatus.COMPLETED
    deps.knowledge.set_summary_status(row.id, summary)
    stored = deps.knowledge.get(row.id)
    assert stored is not None
    return stored


def _space(deps: Services, kb: KnowledgeBase) -> IndexSpace:
    return IndexSpace.of(deps.embedding_model(kb.embedding_model_id))


def _entries(deps: Services, kb: KnowledgeBase, knowledge: Knowledge) -> dict[str, IndexEntry]:
    return {
        e.id: e for e in deps.engine(kb.retrieval_engine).entries_of(_space(deps, kb), kb.id, knowledge.id)
    }


def _refreshes(deps: Services, knowledge: Knowledge) -> int:
    sent = deps.queue.sent  # type: ignore[attr-defined]
    return sum(
        1
        for m in sent
        if m.queue == "enrichment"
        and m.json()["knowledge_id"] == knowledge.id
        and m.json()["subtask"]["id"] == "summary_refresh"
    )


def _update(deps: Services, knowledge: Knowledge, chunk_id: str, **body: Any) -> dict[str, Any]:
    from chalicelib.operations.chunks import edit_chunk

    return edit_chunk(deps, knowledge.tenant_id, knowledge.id, chunk_id, EditChunkRequest(**body))


def test_an_edit_rewrites_the_row_and_the_entry_drops_old_questions_and_refreshes_the_summary(
    deps: Services, kb: KnowledgeBase
) -> None:
    from chalicelib.operations.chunks import list_chunks

    knowledge = _completed(deps, kb)
    listed = list_chunks(deps, knowledge.tenant_id, knowledge.id, ChunkListQuery())["items"]
    target = listed[0]
    stored = deps.chunks.get_many([(knowledge.id, target["id"])])[(knowledge.id, target["id"])]
    deps.chunks.put_many([replace(stored, metadata={**stored.metadata, "questions": ["Who keeps it?"]})])
    question = IndexEntry(f"{target['id']}-q0", kb.id, knowledge.id, target["id"], "Who keeps it?")
    deps.engine(kb.retrieval_engine).batch_index(_space(deps, kb), [question])
    assert f"{target['id']}-q0" in _entries(deps, kb, knowledge)

    shown = _update(deps, knowledge, target["id"], content="The keeper <script>x()</script>paints the rail.")
    assert shown["content"] == "The keeper paints the rail."  # active content is cleaned out
    assert "questions" not in shown["metadata"] and shown["metadata"]["edited"] is True
    entries = _entries(deps, kb, knowledge)
    assert entries[target["id"]].content.endswith("The keeper paints the rail.")
    assert f"{target['id']}-q0" not in entries
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.summary_status.value == "pending" and _refreshes(deps, knowledge) == 1
    # the same text again changes nothing; while the summary is pending (its refresh maybe never queued:
    # test_chunk_edit_summary_refresh_retry.py) it is asked for again, once it is made nothing is
    _update(deps, knowledge, target["id"], content="The keeper paints the rail.")
    assert _refreshes(deps, knowledge) == 2
    deps.knowledge.set_summary_status(knowledge.id, "completed")
    _update(deps, knowledge, target["id"], content="The keeper paints the rail.")
    assert _refreshes(deps, knowledge) == 2


def test_no_refresh_without_a_summary(deps: Services, kb: KnowledgeBase) -> None:
    knowledge = _completed(deps, kb, summary="none")
    first = deps.chunks.list(knowledge.id)[0]
    _update(deps, knowledge, first.id, content="Fresh words about fog.")
    assert _refreshes(deps, knowledge) == 0


def test_the_switch_flips_the_entries_and_outlives_a_document_disable_and_enable(
    deps: Services, kb: KnowledgeBase
) -> None:
    from chalicelib.commands import EditKnowledgeRequest
    from chalicelib.operations.knowledge_changes import edit

    knowledge = _completed(deps, kb)
    first, second = deps.chunks.list(knowledge.id)[:2]
    assert _update(deps, knowledge, first.id, is_enabled=False)["is_enabled"] is False
    assert _entries(deps, kb, knowledge)[first.id].is_enabled is False
    assert _refreshes(deps, knowledge) == 1  # the summary leaves a disabled chunk out
    for status in ("disabled", "enabled"):
        edit(deps, knowledge.tenant_id, knowledge.id, EditKnowledgeRequest(enable_status=status))
    entries = _entries(deps, kb, knowledge)
    assert entries[first.id].is_enabled is False and entries[second.id].is_enabled is True
    # while the document is disabled, enabling a chunk keeps its entry out until the document is back
    edit(deps, knowledge.tenant_id, knowledge.id, EditKnowledgeRequest(enable_status="disabled"))
    _update(deps, knowledge, first.id, is_enabled=True)
    assert _entries(deps, kb, knowledge)[first.id].is_enabled is False
    edit(deps, knowledge.tenant_id, knowledge.id, EditKnowledgeRequest(enable_status="enabled"))
    assert _entries(deps, kb, knowledge)[first.id].is_enabled is True


def test_refusals_have_their_codes(deps: Services, kb: KnowledgeBase) -> None:
    from chalicelib.operations.chunks import get_chunk, list_chunks

    knowledge = _completed(deps, kb)
    first = deps.chunks.list(knowledge.id)[0]
    summary = replace(
        first, id=f"{knowledge.id}-a1-summary", chunk_type=ChunkType.SUMMARY, content="# Summary\n\nx"
    )
    deps.chunks.put_many([summary])
    cases = [
        (lambda: get_chunk(deps, "another-tenant", knowledge.id, first.id), 404, "knowledge_not_found"),
        (lambda: get_chunk(deps, knowledge.tenant_id, knowledge.id, "x"), 404, "chunk_not_found"),
        (lambda: _update(deps, knowledge, summary.id, content="mine"), 400, "not_editable"),
        (lambda: _update(deps, knowledge, f"{knowledge.id}-a2-00000", content="x"), 404, "chunk_not_found"),
    ]
    page = list_chunks(deps, knowledge.tenant_id, knowledge.id, ChunkListQuery(limit=1))
    assert page["next_cursor"] and len(page["items"]) == 1
    second = upload(deps, kb, "other.md", b"# Other\n\nA different text about harbours and boats.\n")
    cases.append(
        (
            lambda: list_chunks(
                deps, knowledge.tenant_id, second.id, ChunkListQuery(cursor=page["next_cursor"])
            ),
            400,
            "invalid_cursor",
        )
    )
    cases.append((lambda: _update(deps, second, "any", content="x"), 409, "not_completed"))
    for call, status, code in cases:
        with pytest.raises(AppError) as refused:
            call()
        assert (refused.value.status, refused.value.code) == (status, code)


def test_a_failing_embedding_model_changes_nothing(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    knowledge = _completed(deps, kb)
    first = deps.chunks.list(knowledge.id)[0]
    before = _entries(deps, kb, knowledge)[first.id].content
    model = deps.embedding_model(kb.embedding_model_id)

    def down(texts: Any) -> Any:
        raise ModelUnavailable("503 from the provider: account 1234 over its quota")

    monkeypatch.setattr(model, "embed", down)
    monkeypatch.setattr(deps, "settings", replace(deps.settings, embed_max_attempts=1))
    with pytest.raises(AppError) as refused:
        _update(deps, knowledge, first.id, content="Words that never arrive.")
    assert (refused.value.status, refused.value.code) == (503, "embedding_unavailable")
    assert "1234" not in refused.value.message  # the provider's words stay out of the answer
    assert deps.chunks.get_many([(knowledge.id, first.id)])[(knowledge.id, first.id)].content == first.content
    assert _entries(deps, kb, knowledge)[first.id].content == before
    assert _refreshes(deps, knowledge) == 0


def test_the_summary_leaves_disabled_chunks_out_and_is_dropped_when_a_chunk_changes_meanwhile(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    import chalicelib.enrich.summary as summary_module
    from chalicelib.stages.enrichment import summary

    knowledge = _completed(deps, kb)
    first, second = deps.chunks.list(knowledge.id)[:2]
    _update(deps, knowledge, first.id, is_enabled=False)
    real = summary_module.summarize
    given: list[str] = []

    def watching(chunks: Any, *args: Any, **kwargs: Any) -> str:
        given.extend(chunks)
        return str(real(chunks, *args, **kwargs))

    monkeypatch.setattr(summary_module, "summarize", watching)
    row = deps.knowledge.get(knowledge.id)
    assert row is not None
    done = summary(deps, row, kb)
    assert done["summary_chars"] > 0
    assert first.content not in "\n".join(given) and second.content in "\n".join(given)

    refreshes = _refreshes(deps, knowledge)

    def racing(chunks: Any, *args: Any, **kwargs: Any) -> str:
        _update(deps, knowledge, second.id, content="The lamp was rebuilt in brass last spring.")
        return str(real(chunks, *args, **kwargs))

    monkeypatch.setattr(summary_module, "summarize", racing)
    deps.knowledge.set_summary_status(knowledge.id, "pending")  # as a refresh asks for one
    dropped = summary(deps, row, kb)
    assert dropped["summary_chars"] == 0 and "changed" in dropped["reason"]
    assert _refreshes(deps, knowledge) == refreshes + 2  # the edit's own, and the dropped summary's


def test_a_summary_written_while_the_document_was_disabled_comes_back_with_it(
    deps: Services, kb: KnowledgeBase
) -> None:
    """Its entry carries the document's state; its row keeps the chunk's own switch (on), so enabling the
    document, which leaves out only chunks switched off one by one, brings it back."""
    from chalicelib.commands import EditKnowledgeRequest
    from chalicelib.operations.knowledge_changes import edit
    from chalicelib.stages.enrichment import summary

    # long enough that its summary does not just repeat it (such a summary is stored switched off)
    paragraphs = [
        f"Section {n}: the harbour log records the tide, the wind and {n} ships." for n in range(30)
    ]
    knowledge = _completed(deps, kb, data="\n\n".join(paragraphs).encode())
    edit(deps, knowledge.tenant_id, knowledge.id, EditKnowledgeRequest(enable_status="disabled"))
    row = deps.knowledge.get(knowledge.id)
    assert row is not None
    deps.knowledge.set_summary_status(knowledge.id, "pending")  # as a refresh asks for one
    assert summary(deps, row, kb)["summary_chars"] > 0
    summary_id = f"{knowledge.id}-a{knowledge.attempt}-summary"
    assert _entries(deps, kb, knowledge)[summary_id].is_enabled is False
    edit(deps, knowledge.tenant_id, knowledge.id, EditKnowledgeRequest(enable_status="enabled"))
    assert _entries(deps, kb, knowledge)[summary_id].is_enabled is True
