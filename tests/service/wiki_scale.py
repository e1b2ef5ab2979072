"""A knowledge base's wiki as a big one is, written straight into the in-memory repositories: `documents`
completed documents of `pages` current pages each (row, page chunk, page record) and the index listing them."""

from __future__ import annotations

import uuid

from chalicelib.bootstrap import Services
from chalicelib.domain.types import Chunk, ChunkType, Knowledge, KnowledgeBase, KnowledgeType, ParseStatus
from chalicelib.enrich.wiki import index_page
from chalicelib.ports import WikiPageRecord


def big_wiki(deps: Services, kb: KnowledgeBase, documents: int, pages: int, title_chars: int = 60) -> None:
    entries: list[tuple[str, str]] = []
    for d in range(documents):
        row = Knowledge(
            id=str(uuid.uuid4()),
            tenant_id=kb.tenant_id,
            kb_id=kb.id,
            type=KnowledgeType.FILE,
            title=f"report-{d:05d}.pdf",
            file_name=f"report-{d:05d}.pdf",
            parse_status=ParseStatus.COMPLETED,
        )
        deps.knowledge.insert(row)
        records, chunks = [], []
        for n in range(pages):
            title = f"Topic {n} of report {d:05d} ".ljust(title_chars, "x")
            chunk_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{row.id}/{n}"))
            chunks.append(
                Chunk(
                    id=chunk_id,
                    tenant_id=kb.tenant_id,
                    kb_id=kb.id,
                    knowledge_id=row.id,
                    seq=1_000_000 + n,
                    content=f"# {title}\n\nbody",
                    chunk_type=ChunkType.WIKI_PAGE,
                    metadata={"attempt": row.attempt, "wiki_title": title},
                )
            )
            records.append(WikiPageRecord(row.id, row.file_name, title, chunk_id))
            entries.append((row.file_name, title))
        deps.chunks.put_many(chunks)
        deps.wiki.put_pages(kb.id, row.id, records)
    deps.wiki.put_index(kb.id, index_page(entries))
