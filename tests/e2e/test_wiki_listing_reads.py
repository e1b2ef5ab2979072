"""The wiki listing (GET /knowledge-bases/{id}/wiki, `limit` and `cursor`) reads about one page a page, on both
adapters (DynamoDB on moto, the in-memory fake). Each page read every page record of the knowledge base and
sorted them, and the whole index, so listing a wiki page by page read O(N²); a page now reads its records,
the rest of the last document's and one more (a Query from the cursor's document on), and the one or two
parts of the index holding its part. The pages, in the same order as before (knowledge id, chunk id), hold
every record once, and their parts of the index make the index."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chalicelib.adapters.dynamo.wiki import DynamoWikiRepo
from chalicelib.adapters.memory.wiki import MemoryWikiRepo
from chalicelib.bootstrap import Services, memory_deps
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.item_limits import WIKI_INDEX_PART_BYTES
from chalicelib.domain.types import Chunk, ChunkType, Knowledge, KnowledgeBase, KnowledgeType, ParseStatus
from chalicelib.enrich.wiki import index_page
from chalicelib.operations.enrichment_outputs import WIKI_INDEX_CHARS, wiki
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.operations.tenants import create_tenant_with_key
from chalicelib.ports import WikiPageRecord

#: records a page may read past its `limit`: the cursor's document's earlier ones and the rest of the last
#: document (4 each at most: 5 records a document), the one that says there is more, and the index's part
SLACK = 4 + 4 + 1 + 1


@pytest.fixture(params=["dynamo", "memory"])
def deps(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Services]:
    if request.param == "dynamo":
        yield request.getfixturevalue("module_services")
    else:
        yield memory_deps(index_dir=tmp_path / "index")


def reads_of(deps: Services, monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Page records read since the last call: items DynamoDB read for the wiki table's Queries
    (ScannedCount), or those the fake handed out of its store."""
    repo: Any = deps.wiki
    if isinstance(repo, MemoryWikiRepo):
        seen = [repo.records_read]

        def memory() -> int:
            before, seen[0] = seen[0], repo.records_read
            return seen[0] - before

        return memory
    assert isinstance(repo, DynamoWikiRepo)
    iterators: list[Any] = []
    query = repo.model.query

    def spy(*args: Any, **kwargs: Any) -> Any:
        iterators.append(query(*args, **kwargs))
        return iterators[-1]

    monkeypatch.setattr(repo.model, "query", spy)

    def dynamo() -> int:
        read = sum(i.page_iter.total_scanned_count for i in iterators)
        iterators.clear()
        return read

    return dynamo


def seed(deps: Services, kb: KnowledgeBase, documents: int, pages: int) -> list[WikiPageRecord]:
    """Completed documents with their current page chunks and records, each document's records written in
    an order that is not their chunk ids' (the listing sorts a document's records by chunk id)."""
    written: list[WikiPageRecord] = []
    entries = []
    for d in range(documents):
        row = Knowledge(
            id=str(uuid.uuid4()),
            tenant_id=kb.tenant_id,
            kb_id=kb.id,
            type=KnowledgeType.FILE,
            title=f"report-{d:03d}.pdf",
            file_name=f"report-{d:03d}.pdf",
            parse_status=ParseStatus.COMPLETED,
        )
        deps.knowledge.insert(row)
        chunks = [
            Chunk(
                id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{row.id}/{n}")),
                tenant_id=kb.tenant_id,
                kb_id=kb.id,
                knowledge_id=row.id,
                seq=1_000_000 + n,
                content=f"# Topic {n}\n\nbody",
                chunk_type=ChunkType.WIKI_PAGE,
                metadata={"attempt": row.attempt, "wiki_title": f"Topic {n}"},
            )
            for n in range(pages)
        ]
        deps.chunks.put_many(chunks)
        records = [WikiPageRecord(row.id, row.file_name, f"Topic {n}", c.id) for n, c in enumerate(chunks)]
        records.sort(key=lambda r: r.chunk_id, reverse=True)
        deps.wiki.put_pages(kb.id, row.id, records)
        written += records
        entries += [(row.file_name, r.title) for r in records]
    deps.wiki.put_index(kb.id, index_page(entries))
    return written


def test_each_page_of_the_listing_reads_about_one_page_and_the_pages_hold_every_record_once(
    deps: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant, _ = create_tenant_with_key(deps, f"wiki-{uuid.uuid4().hex[:6]}")
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="wiki"))
    written = seed(deps, kb, documents=40, pages=5)
    reads = reads_of(deps, monkeypatch)
    limit, listed, cursor, answers = 7, [], None, 0
    while True:
        params = {"limit": limit} | ({"cursor": cursor} if cursor else {})
        data = wiki(deps, tenant.id, kb.id, params)
        read = reads()
        assert read <= limit + SLACK, (answers, read)  # was every one of the 200 records, on every page
        assert len(data["pages"]) == limit or data["next_cursor"] is None
        listed += [(p["knowledge_id"], p["chunk_id"]) for p in data["pages"]]
        answers += 1
        cursor = data["next_cursor"]
        if cursor is None:
            break
    assert answers == -(-len(written) // limit)
    assert listed == sorted((r.knowledge_id, r.chunk_id) for r in written)  # the order as before, each once
    whole = wiki(deps, tenant.id, kb.id, {})
    assert [(p["knowledge_id"], p["chunk_id"]) for p in whole["pages"]] == listed
    assert whole["next_cursor"] is None and set(whole["pages"][0]) == {
        "knowledge_id",
        "document",
        "title",
        "chunk_id",
    }


def test_pages_after_goes_on_inside_a_document_and_says_when_nothing_is_left(deps: Services) -> None:
    kb_id, other_kb = f"kb-{uuid.uuid4().hex[:8]}", f"kb-{uuid.uuid4().hex[:8]}"
    one, two = sorted(str(uuid.uuid4()) for _ in range(2))
    assert deps.wiki.pages_after(kb_id, None, 5) == ([], False)
    for kb in (kb_id, other_kb):
        deps.wiki.put_pages(kb, two, [WikiPageRecord(two, "two.md", "B", "c-b")])
        deps.wiki.put_pages(kb, one, [WikiPageRecord(one, "one.md", t, f"c-{t}") for t in "zay"])
    keys = [(one, "c-a"), (one, "c-y"), (one, "c-z"), (two, "c-b")]

    def page(after: tuple[str, str] | None, limit: int) -> tuple[list[tuple[str, str]], bool]:
        records, more = deps.wiki.pages_after(kb_id, after, limit)
        return [(r.knowledge_id, r.chunk_id) for r in records], more

    assert page(None, 1) == (keys[:1], True)
    assert page(keys[0], 1) == (keys[1:2], True)  # inside the document
    assert page(keys[1], 1) == (keys[2:3], True)  # the last of the document, and another's is left
    assert page(keys[2], 5) == (keys[3:], False)
    assert page(keys[0], 3) == (keys[1:], False)  # exactly the rest
    assert page(None, 3) == (keys[:3], True)  # exactly one document, another's is left
    assert page(keys[3], 5) == ([], False)
    with pytest.raises(ValueError):
        deps.wiki.pages_after(kb_id, None, 0)


def index_chars_of(deps: Services, monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Characters of the index read since the last call: the index parts' items DynamoDB answered (GetItem
    or Query), or those the fake read."""
    repo: Any = deps.wiki
    if isinstance(repo, MemoryWikiRepo):
        seen = [repo.index_chars_read]

        def memory() -> int:
            before, seen[0] = seen[0], repo.index_chars_read
            return seen[0] - before

        return memory
    assert isinstance(repo, DynamoWikiRepo)
    read = [0]
    get, query = repo.model.get, repo.model.query

    def count(item: Any) -> Any:
        if item.key.startswith("index"):
            read[0] += len(str(item.body.get("markdown", "")))
        return item

    def spy_get(*args: Any, **kwargs: Any) -> Any:
        return count(get(*args, **kwargs))

    def spy_query(*args: Any, **kwargs: Any) -> Any:
        return (count(item) for item in query(*args, **kwargs))

    monkeypatch.setattr(repo.model, "get", spy_get)
    monkeypatch.setattr(repo.model, "query", spy_query)

    def dynamo() -> int:
        done, read[0] = read[0], 0
        return done

    return dynamo


def test_each_page_of_the_listing_reads_the_parts_of_the_index_it_gives_not_the_whole_index(
    deps: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant, _ = create_tenant_with_key(deps, f"wiki-{uuid.uuid4().hex[:6]}")
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="wiki"))
    seed(deps, kb, documents=2, pages=2)
    index = index_page(
        [
            (f"report-{d:05d}.pdf", f"Page {p} of report {d}: " + "operational overview " * 3)
            for d in range(3_000)
            for p in range(5)
        ]
    )
    assert len(index) > 4 * WIKI_INDEX_PART_BYTES  # five parts or more
    deps.wiki.put_index(kb.id, index)
    chars_read = index_chars_of(deps, monkeypatch)
    parts: list[str] = []
    cursor = None
    while True:
        data = wiki(deps, tenant.id, kb.id, {"cursor": cursor} if cursor else {})
        read = chars_read()
        assert read <= 2 * WIKI_INDEX_PART_BYTES, (len(parts), read)  # was the whole index on every page
        parts.append(data["index"])
        cursor = data["next_cursor"]
        if cursor is None:
            break
    assert "".join(parts) == index and len(parts) == -(-len(index) // WIKI_INDEX_CHARS)


def test_an_index_stored_before_its_parts_lengths_were_kept_is_paged_the_same(
    module_services: Services,
) -> None:
    repo, kb_id = module_services.wiki, f"kb-{uuid.uuid4().hex[:8]}"
    assert isinstance(repo, DynamoWikiRepo)
    model = repo.model
    assert repo.index_part(kb_id, 0, 10) is None
    model(kb_id, "index", body={"markdown": "# Wiki index\n\n- Old page\n"}).save()  # one item, as at first
    assert repo.index_part(kb_id, 2, 10) == ("Wiki index", 25)
    index = "".join(f"- Page {n}: operational overview\n" for n in range(25_000))  # three parts
    repo.put_index(kb_id, index)
    head = model.get(kb_id, "index", consistent_read=True)
    model(kb_id, "index", body={"parts": head.body["parts"]}, status=head.status, attempt=head.attempt).save()
    assert repo.index_part(kb_id, 300_000, 200_000) == (index[300_000:500_000], len(index))  # read whole
    repo.put_index(kb_id, index)  # the same index: its head gains the lengths
    assert len(model.get(kb_id, "index", consistent_read=True).body["chars"]) == head.body["parts"] >= 3
    for offset in (0, 299_999, 300_000, len(index) - 1, len(index), len(index) + 5):
        assert repo.index_part(kb_id, offset, 200_000) == (index[offset : offset + 200_000], len(index))


def test_a_part_of_the_index_across_its_stored_parts_is_the_same_characters(deps: Services) -> None:
    kb_id = f"kb-{uuid.uuid4().hex[:8]}"
    # parts of unlike lengths (172,315, 174,002, 175,538 and 27,035 characters)
    index = "".join(f"- Page {n}: 运营概况 overview\n" for n in range(20_000))
    deps.wiki.put_index(kb_id, index)
    for offset in (0, 1, 172_314, 172_315, 200_000, 346_317, len(index) - 1, len(index), len(index) + 5):
        for chars in (1, 200_000):
            assert deps.wiki.index_part(kb_id, offset, chars) == (index[offset : offset + chars], len(index))
    deps.wiki.put_index(kb_id, "")
    assert deps.wiki.index_part(kb_id, 0, 200_000) == ("", 0)
