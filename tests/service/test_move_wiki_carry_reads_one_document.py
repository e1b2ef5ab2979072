"""Carrying a moved (or cloned) document's wiki page records reads that document's records, not every record
of the knowledge base's wiki: a move of many documents out of a big wiki read the whole wiki for each one."""

from __future__ import annotations

import uuid

from chalicelib.adapters.memory.wiki import MemoryWikiRepo
from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.enrich.wiki import MAX_PAGES
from chalicelib.ports import WikiPageRecord
from chalicelib.tasks.move_clone import carry_wiki_pages

from .test_move_clone import TIDES, completed, model, move, new_kb, run_lifecycle  # noqa: F401

OTHER_DOCUMENTS = 60


def _pages(knowledge_id: str, n: int) -> list[WikiPageRecord]:
    return [
        WikiPageRecord(knowledge_id, "doc.md", f"Page {i}", f"{knowledge_id}-wiki{i:02d}") for i in range(n)
    ]


def _big_wiki(deps: Services, kb: KnowledgeBase) -> None:
    for _ in range(OTHER_DOCUMENTS):
        other = str(uuid.uuid4())
        deps.wiki.put_pages(kb.id, other, _pages(other, MAX_PAGES))


def test_a_moved_documents_wiki_pages_are_carried_reading_about_its_own_records(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: object,  # noqa: F811
) -> None:
    wiki = deps.wiki
    assert isinstance(wiki, MemoryWikiRepo)
    target = new_kb(deps, tenant, "archive")
    doc = completed(deps, kb, "tides.md", TIDES)
    _big_wiki(deps, kb)
    mine = _pages(doc.id, 3)
    deps.wiki.put_pages(kb.id, doc.id, mine)
    before = wiki.records_read
    move(deps, kb, target, [doc.id], "reuse_vectors")
    run_lifecycle(deps)
    # its own records, and at most the next document's and one more past the page it asked for
    assert wiki.records_read - before <= len(mine) + 2 * MAX_PAGES + 1
    carried = [r for r in wiki.pages(target.id) if r.knowledge_id == doc.id]
    assert sorted(carried, key=lambda r: r.chunk_id) == mine
    assert all(r.knowledge_id != doc.id for r in wiki.pages(kb.id))


def test_carrying_reads_every_record_of_a_document_with_more_than_a_page_of_them(deps: Services) -> None:
    """Records past one `pages_after` page (written before the cap, or by another writer) all come along,
    and none of the neighbours' (the documents keyed just before and after it)."""
    source = KnowledgeBase(id="kb-source", tenant_id="t", name="source")
    target = KnowledgeBase(id="kb-target", tenant_id="t", name="target")
    doc = "5" + str(uuid.uuid4())[1:]
    before_doc, after_doc = "0" + doc[1:], "9" + doc[1:]
    for other in (before_doc, after_doc):
        deps.wiki.put_pages(source.id, other, _pages(other, 2))
    mine = _pages(doc, 2 * MAX_PAGES + 3)
    deps.wiki.put_pages(source.id, doc, mine)
    carry_wiki_pages(deps, source.id, doc, target, {})
    assert sorted(deps.wiki.pages(target.id), key=lambda r: r.chunk_id) == mine
