"""The wiki's pages and index stay true to the documents they came from, whatever lands while the wiki works:

- pages written while their document moved to another knowledge base leave nothing in the old one's index;
- a finalize sets only its links, on the page chunks as they are when it writes: a delete, a move, a
  reparse or an edit landing after it read them is never undone, and unchanged links are not rewritten;
- a reparse takes the document's old page records with it, and the index lists only the pages of a
  document's current attempt;
- a deleted knowledge base's wiki goes with it, and a late finalize writes none again;
- a long finalize hands over to a fresh one instead of running out of time.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryKnowledgeRepo, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.types import Chunk, ChunkType, Knowledge, KnowledgeBase, ParseStatus, Tenant
from chalicelib.ports import IndexSpace
from chalicelib.stages import wiki as wiki_stage

from .test_enrichment_replies import ReplyingLLM
from .test_move_clone import move, new_kb, run_lifecycle, search
from .test_wiki_stage import deliver_wiki, llm, one_ingest, waiting_for_its_pages, wiki_kb

__all__ = ["llm"]  # the fixture, used by name

NOTES = "# Notes\n\nThe keeper logs the weather at dawn.\n"
#: two pages that mention each other: a first finalize links them
LINKED_PAGES = json.dumps(
    [
        {"title": "Lamp room", "content": "The Lamp room holds the wick store."},
        {"title": "Wick store", "content": "The Wick store is below the lamp room."},
    ]
)


def wiki_entries(deps: Services, kb: KnowledgeBase, knowledge_id: str) -> list[str]:
    space = IndexSpace.of(deps.embedding_model(kb.embedding_model_id))
    entries = deps.engine(kb.retrieval_engine).entries_of(space, kb.id, knowledge_id)
    return [e.chunk_id for e in entries if e.chunk_type == ChunkType.WIKI_PAGE.value]


def page_chunks(deps: Services, knowledge_id: str) -> list[Chunk]:
    return [c for c in deps.chunks.list(knowledge_id) if c.chunk_type == ChunkType.WIKI_PAGE]


def rows_of(deps: Services) -> MemoryKnowledgeRepo:
    rows = deps.knowledge
    assert isinstance(rows, MemoryKnowledgeRepo)
    return rows


def pages_in(deps: Services, kb: KnowledgeBase) -> Knowledge:
    """A document of `kb` whose pages are written (its ingest ran), completed; the finalize not yet run."""
    doc = waiting_for_its_pages(deps, kb, "notes.md", NOTES)
    one_ingest(deps, kb).deliver("wiki", wiki_stage.handle, deps)
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.parse_status == ParseStatus.COMPLETED and page_chunks(deps, doc.id)
    return row


def when_finalize_has_read_the_chunks(deps: Services, monkeypatch: pytest.MonkeyPatch, then: Any) -> None:
    """`then()` runs right after the finalize read the page chunks (the first read of chunks by key)."""
    real_get_many = deps.chunks.get_many
    fired: list[bool] = []

    def get_many(keys: Any) -> Any:
        found = real_get_many(keys)
        if not fired:
            fired.append(True)
            then()
        return found

    monkeypatch.setattr(deps.chunks, "get_many", get_many)


# ---------------------------------------------------------------- pages written while the document moved


def test_pages_written_while_the_document_moved_leave_nothing_in_the_old_knowledge_base(
    deps: Services, tenant: Tenant, llm: ReplyingLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.enrich import wiki as wiki_module

    llm.replies["wiki"] = json.dumps([{"title": "Zeppelin hangar", "content": "Zeppelin hangar doors open."}])
    kb = wiki_kb(deps, tenant)
    target = new_kb(deps, tenant, "archive", summary_model_id=kb.summary_model_id)
    doc = waiting_for_its_pages(deps, kb, "notes.md", NOTES)
    real = wiki_module.pages_for

    def slow_model(chat: Any, title: str, text: str) -> Any:
        # while the model writes: the state machine's timeout promotes the row, the user moves it
        rows_of(deps).write_fields(doc.id, parse_status=ParseStatus.COMPLETED, pending_subtasks_count=0)
        move(deps, kb, target, [doc.id], "reuse_vectors")
        run_lifecycle(deps)
        return real(chat, title, text)

    monkeypatch.setattr(wiki_module, "pages_for", slow_model)
    one_ingest(deps, kb).deliver("wiki", wiki_stage.handle, deps)
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.kb_id == target.id
    assert wiki_entries(deps, kb, doc.id) == []
    hits = search(deps, kb, "zeppelin hangar doors")
    assert [h for h in hits if h["knowledge_id"] == doc.id] == []
    assert page_chunks(deps, doc.id) == [] and deps.wiki.pages(kb.id) == []


def test_pages_a_move_carried_to_the_new_knowledge_base_before_the_check_go_there_too(
    deps: Services, tenant: Tenant, llm: ReplyingLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The move lands between the pages' index write and its check: its repoint carried the entries and the
    chunks to the target, where no page record would ever list them."""
    from chalicelib.services import indexing

    llm.replies["wiki"] = json.dumps([{"title": "Zeppelin hangar", "content": "Zeppelin hangar doors open."}])
    kb = wiki_kb(deps, tenant)
    target = new_kb(deps, tenant, "archive", summary_model_id=kb.summary_model_id)
    doc = waiting_for_its_pages(deps, kb, "notes.md", NOTES)
    real = indexing.kept_after_write

    def moved_first(deps_: Any, knowledge: Knowledge, *args: Any, **kwargs: Any) -> bool:
        rows_of(deps).write_fields(doc.id, parse_status=ParseStatus.COMPLETED, pending_subtasks_count=0)
        move(deps, kb, target, [doc.id], "reuse_vectors")
        run_lifecycle(deps)
        return real(deps_, knowledge, *args, **kwargs)

    monkeypatch.setattr(indexing, "kept_after_write", moved_first)
    one_ingest(deps, kb).deliver("wiki", wiki_stage.handle, deps)
    monkeypatch.setattr(indexing, "kept_after_write", real)
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.kb_id == target.id
    assert wiki_entries(deps, kb, doc.id) == [] and wiki_entries(deps, target, doc.id) == []
    assert page_chunks(deps, doc.id) == []


# ---------------------------------------------------------------- finalize writes only its links, to live chunks


def test_a_finalize_racing_a_delete_writes_no_chunk_of_the_deleted_document_back(
    deps: Services, tenant: Tenant, llm: ReplyingLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.tasks.delete import delete_one

    llm.replies["wiki"] = LINKED_PAGES
    kb = wiki_kb(deps, tenant)
    doc = pages_in(deps, kb)
    when_finalize_has_read_the_chunks(deps, monkeypatch, lambda: delete_one(deps, doc.id))
    wiki_stage.finalize(deps, kb.id)
    assert deps.knowledge.get(doc.id) is None
    assert deps.chunks.list(doc.id) == []


def test_a_finalize_racing_a_move_leaves_the_moved_page_chunks_in_their_new_knowledge_base(
    deps: Services, tenant: Tenant, llm: ReplyingLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm.replies["wiki"] = LINKED_PAGES
    kb = wiki_kb(deps, tenant)
    target = new_kb(deps, tenant, "archive", summary_model_id=kb.summary_model_id)
    doc = pages_in(deps, kb)

    def moved() -> None:
        move(deps, kb, target, [doc.id], "reuse_vectors")
        run_lifecycle(deps)

    when_finalize_has_read_the_chunks(deps, monkeypatch, moved)
    wiki_stage.finalize(deps, kb.id)
    assert {c.kb_id for c in deps.chunks.list(doc.id)} == {target.id}


def test_a_finalize_racing_a_reparse_brings_no_chunk_of_the_old_attempt_back(
    deps: Services, tenant: Tenant, llm: ReplyingLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.commands import ReparseRequest
    from chalicelib.tasks.reparse import reparse

    llm.replies["wiki"] = LINKED_PAGES
    kb = wiki_kb(deps, tenant)
    doc = pages_in(deps, kb)
    when_finalize_has_read_the_chunks(
        deps, monkeypatch, lambda: reparse(deps, tenant.id, doc.id, ReparseRequest())
    )
    wiki_stage.finalize(deps, kb.id)
    assert [c.id for c in deps.chunks.list(doc.id) if c.metadata.get("attempt") == doc.attempt] == []


def test_a_finalize_keeps_an_edit_made_to_a_page_chunk_after_it_read_it_and_adds_its_links(
    deps: Services, tenant: Tenant, llm: ReplyingLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm.replies["wiki"] = LINKED_PAGES
    kb = wiki_kb(deps, tenant)
    doc = pages_in(deps, kb)
    lamp = next(c for c in page_chunks(deps, doc.id) if c.metadata["wiki_title"] == "Lamp room")
    edited = "# Lamp room\n\nEdited: the Lamp room holds the wick store."
    when_finalize_has_read_the_chunks(
        deps, monkeypatch, lambda: deps.chunks.put_many([replace(lamp, content=edited)])
    )
    wiki_stage.finalize(deps, kb.id)
    after = {c.metadata["wiki_title"]: c for c in page_chunks(deps, doc.id)}
    assert after["Lamp room"].content == edited
    assert after["Lamp room"].metadata["see_also"] == ["Wick store"]
    assert after["Wick store"].metadata["see_also"] == ["Lamp room"]


def test_a_finalize_rewrites_no_page_chunk_whose_links_did_not_change(
    deps: Services, tenant: Tenant, llm: ReplyingLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm.replies["wiki"] = json.dumps([{"title": "Lamp", "content": "The lamp is trimmed at noon."}])
    kb = wiki_kb(deps, tenant)
    doc = pages_in(deps, kb)
    before = page_chunks(deps, doc.id)
    writes: list[int] = []
    real_put_many = deps.chunks.put_many

    def counted(chunks: Any) -> None:
        writes.append(len(chunks))
        real_put_many(chunks)

    monkeypatch.setattr(deps.chunks, "put_many", counted)
    wiki_stage.finalize(deps, kb.id)  # its first: no page mentions another
    assert [n for n in writes if n] == []
    assert page_chunks(deps, doc.id) == before
    assert "Lamp" in (deps.wiki.get_index(kb.id) or "")


def test_a_finalize_out_of_time_hands_the_links_left_over_to_a_fresh_one(
    deps: Services, tenant: Tenant, llm: ReplyingLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm.replies["wiki"] = LINKED_PAGES
    kb = wiki_kb(deps, tenant)
    doc = pages_in(deps, kb)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.purge("wiki")
    monkeypatch.setattr(wiki_stage, "out_of_time", lambda: True)
    wiki_stage.finalize(deps, kb.id)
    assert all("see_also" not in c.metadata for c in page_chunks(deps, doc.id))
    assert [m.json() for m in queue.waiting("wiki")] == [{"kb_id": kb.id, "action": "finalize"}]
    monkeypatch.setattr(wiki_stage, "out_of_time", lambda: False)
    deliver_wiki(deps)
    links = {c.metadata["wiki_title"]: c.metadata["see_also"] for c in page_chunks(deps, doc.id)}
    assert links == {"Lamp room": ["Wick store"], "Wick store": ["Lamp room"]}


# ---------------------------------------------------------------- the index lists the current attempts' pages


def title_of(body: dict[str, Any]) -> str:
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return str(user.split("\n", 1)[0].removeprefix("Document: "))


def page_per_document(body: dict[str, Any]) -> str:
    return json.dumps([{"title": f"Page of {title_of(body)}", "content": "Some body."}])


def test_a_reparse_takes_the_documents_old_pages_out_of_the_wiki(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    from chalicelib.commands import ReparseRequest
    from chalicelib.operations.knowledge_changes import cancel
    from chalicelib.tasks.reparse import reparse

    llm.replies["wiki"] = page_per_document
    kb = wiki_kb(deps, tenant)
    one = waiting_for_its_pages(deps, kb, "one.md", NOTES)
    deliver_wiki(deps)
    assert "Page of one.md" in (deps.wiki.get_index(kb.id) or "")
    reparse(deps, tenant.id, one.id, ReparseRequest())
    cancel(deps, tenant.id, one.id)  # the new attempt writes no pages
    deliver_wiki(deps)  # the finalize the reparse asked for
    assert "Page of one.md" not in (deps.wiki.get_index(kb.id) or "")
    assert [r for r in deps.wiki.pages(kb.id) if r.knowledge_id == one.id] == []
    waiting_for_its_pages(deps, kb, "two.md", "# Two\n\nOil, wicks and bread arrive by boat.\n")
    deliver_wiki(deps)
    index = deps.wiki.get_index(kb.id) or ""
    assert "Page of two.md" in index and "Page of one.md" not in index


def test_the_index_lists_no_page_of_a_documents_earlier_attempt_nor_one_whose_chunk_is_gone(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    """A restart moves the row to a new attempt before it removes the old attempt's pages: a finalize in
    between listed them, and a page record whose chunk is gone was listed too."""
    llm.replies["wiki"] = page_per_document
    kb = wiki_kb(deps, tenant)
    one = waiting_for_its_pages(deps, kb, "one.md", NOTES)
    two = waiting_for_its_pages(deps, kb, "two.md", "# Two\n\nOil, wicks and bread arrive by boat.\n")
    waiting_for_its_pages(deps, kb, "three.md", "# Three\n\nCranes lift containers.\n")
    deliver_wiki(deps)
    rows_of(deps).write_fields(one.id, attempt=one.attempt + 1, parse_status=ParseStatus.PROCESSING)
    deps.chunks.delete_many(two.id, [c.id for c in page_chunks(deps, two.id)])
    wiki_stage.finalize(deps, kb.id)
    index = deps.wiki.get_index(kb.id) or ""
    assert "Page of three.md" in index
    assert "Page of one.md" not in index and "Page of two.md" not in index


# ---------------------------------------------------------------- a deleted knowledge base's wiki


def test_a_deleted_knowledge_bases_wiki_is_purged_and_not_written_again(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    from chalicelib.operations.knowledge_changes import delete_kb

    llm.replies["wiki"] = json.dumps([{"title": "Lamp", "content": "The lamp is trimmed at noon."}])
    kb = wiki_kb(deps, tenant)
    waiting_for_its_pages(deps, kb, "notes.md", NOTES)
    deliver_wiki(deps)
    assert deps.wiki.get_index(kb.id) is not None and deps.wiki.pages(kb.id)
    delete_kb(deps, tenant.id, kb.id)
    run_lifecycle(deps)
    assert deps.kbs.get(kb.id) is None
    deliver_wiki(deps)  # the finalizes each document's retraction asked for
    assert deps.wiki.get_index(kb.id) is None and deps.wiki.pages(kb.id) == []


def test_a_finalize_of_a_knowledge_base_being_deleted_writes_nothing(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    from chalicelib.operations.knowledge_changes import delete_kb

    llm.replies["wiki"] = LINKED_PAGES
    kb = wiki_kb(deps, tenant)
    doc = pages_in(deps, kb)
    deps.wiki.put_index(kb.id, "as it was")
    delete_kb(deps, tenant.id, kb.id)  # deleting: its task has not run yet
    kb_now = deps.kbs.get(kb.id)
    assert kb_now is not None and kb_now.status == "deleting"
    wiki_stage.finalize(deps, kb.id)
    assert deps.wiki.get_index(kb.id) == "as it was"
    assert all("see_also" not in c.metadata for c in page_chunks(deps, doc.id))
