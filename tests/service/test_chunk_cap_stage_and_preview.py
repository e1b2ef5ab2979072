"""A chunk_size of 1 on a big text: the chunking stage and the chunk preview refuse it having cut at most
about twice the limit (the chunker stops there: `chunker_cap`), not after building every chunk. A reviewer's proof: a
12 M-character parse previewed at chunk_size 1 took 35 s of CPU and 2.7 GB inside the API function, and the
stage on 4 M characters 36 s and 3.8 GB before it refused them (on a 1 GB function: killed before it could)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from chalice.test import Client

import chalicelib.chunker as chunker
from chalicelib.bootstrap import Services
from chalicelib.commands import ChunkingSettings, ChunkPreviewRequest, CreateKnowledgeBase
from chalicelib.domain.chunk_limits import chunker_cap
from chalicelib.domain.errors import BadRequest, SpanErrorCode
from chalicelib.domain.storage_keys import parsed_markdown_key
from chalicelib.domain.types import Chunk, KnowledgeBase, ParseStatus, Tenant
from chalicelib.operations.tenants import create_tenant_with_key
from chalicelib.services.storage import files_of
from chalicelib.stages import chunking

from .conftest import deliver, upload

LINES = "a\n" * 6_000  # 12 KB: 1,000 chunks allowed, 12,000 made at chunk_size 1
LIMIT = 1_000
CAP = chunker_cap(LIMIT)  # the pieces cut before the stored ones are counted
REFUSAL = f"the document would become more than {LIMIT} chunks"


class _CountingPiece(chunker.ChunkPiece):
    __slots__ = ()
    made = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        type(self).made += 1
        super().__init__(*args, **kwargs)


class _CountingChunk(Chunk):
    made = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        type(self).made += 1
        super().__init__(*args, **kwargs)


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, type]]:
    """The chunker's pieces and the stage's chunks, counted as they are made."""
    _CountingPiece.made = _CountingChunk.made = 0
    monkeypatch.setattr(chunker, "ChunkPiece", _CountingPiece)
    monkeypatch.setattr(chunking, "Chunk", _CountingChunk)
    yield {"pieces": _CountingPiece, "chunks": _CountingChunk}


def _tiny_chunks_kb(deps: Services, tenant: Tenant, **settings: Any) -> KnowledgeBase:
    from chalicelib.operations.knowledge_bases import create_kb

    config = ChunkingSettings(chunk_size=1, chunk_overlap=0, **settings)
    return create_kb(deps, tenant.id, CreateKnowledgeBase(name="tiny", chunking_config=config))


@pytest.mark.parametrize("parent_child", [False, True])
def test_the_stage_refuses_a_document_past_the_limit_before_building_its_chunks(
    deps: Services, tenant: Tenant, made: dict[str, Any], parent_child: bool
) -> None:
    settings = (
        {"enable_parent_child": True, "parent_chunk_size": 64, "child_chunk_size": 16} if parent_child else {}
    )
    kb = _tiny_chunks_kb(deps, tenant, **settings)
    row = upload(deps, kb, "lines.md", LINES.encode())
    deliver(deps, "docreader")
    deliver(deps, "chunking")
    row = deps.knowledge.get(row.id)
    assert made["pieces"].made <= CAP + 1 and made["chunks"].made <= CAP + 1
    assert row is not None and row.parse_status == ParseStatus.FAILED
    assert row.error_code == SpanErrorCode.CHUNKING_FAILED
    assert row.error_message.startswith(REFUSAL)
    assert deps.chunks.list(row.id) == []


def _preview(deps: Services, tenant: Tenant, **body: Any) -> dict[str, Any]:
    from chalicelib.operations.chunk_preview import preview_chunks

    settings = ChunkingSettings(chunk_size=1, chunk_overlap=0)
    return preview_chunks(deps, tenant.id, ChunkPreviewRequest(chunking_config=settings, **body))


def test_the_preview_of_a_text_past_the_limit_is_refused_having_made_no_chunk(
    deps: Services, tenant: Tenant, made: dict[str, Any]
) -> None:
    with pytest.raises(BadRequest) as refused:
        _preview(deps, tenant, text=LINES)
    assert refused.value.code == "too_many_chunks" and refused.value.message.startswith(REFUSAL)
    assert made["pieces"].made <= LIMIT + 1
    # under the limit the answer is as before: every chunk counted, the first `limit` shown
    answer = _preview(deps, tenant, text="a\n" * 400, limit=5)
    assert answer["total_chunks"] == 800 and len(answer["chunks"]) == 5


def test_the_preview_of_a_parsed_document_past_the_limit_is_refused_having_made_no_chunk(
    deps: Services, tenant: Tenant, kb: KnowledgeBase, made: dict[str, Any]
) -> None:
    row = upload(deps, kb, "big.md", b"# big\n\nsmall body\n")
    deliver(deps, "docreader")
    row = deps.knowledge.get(row.id)
    assert row is not None
    # the parse of a big document: 1.2 M characters, 9,156 chunks allowed, 800,000 at chunk_size 1
    files_of(deps, row).save(parsed_markdown_key(row.tenant_id, row.id, row.attempt), b"a\n\n" * 400_000)
    with pytest.raises(BadRequest) as refused:
        _preview(deps, tenant, knowledge_id=row.id)
    assert refused.value.code == "too_many_chunks"
    assert refused.value.message.startswith("the document would become more than 9156 chunks")
    assert made["pieces"].made == 0


def test_the_api_answers_400_too_many_chunks(deps: Services, client: Client) -> None:
    _, key = create_tenant_with_key(deps, "t")
    body = {"text": LINES, "chunking_config": {"chunk_size": 1, "chunk_overlap": 0}}
    headers = {"X-API-Key": key, "Content-Type": "application/json"}
    answer = client.http.post("/api/v1/chunker/preview", headers=headers, body=json.dumps(body))
    assert answer.status_code == 400
    assert answer.json_body["error"]["code"] == "too_many_chunks"
    assert answer.json_body["error"]["message"].endswith("use a larger chunk_size")


# a paragraph and a code block: at 64 runes, half the pieces the chunker cuts are the bare separator before the
# fence, which is not stored (a reviewer's finding: counted, it refused documents that stored well under the limit)
BLANKS = (
    "Start a new Python interpreter, and don't just continue from the session described above:\n\n"
    "```\nimport logging\nlogging.basicConfig(filename='example.log', level=logging.DEBUG)\n```\n\n"
) * 300


def test_blank_pieces_do_not_count_against_the_limit(deps: Services, tenant: Tenant) -> None:
    from chalicelib.domain.types import ChunkingConfig, Knowledge, KnowledgeType

    markdown = chunker.normalise_markdown(BLANKS)
    config = ChunkingConfig(chunk_size=64, chunk_overlap=10)
    pieces = chunker.split(markdown, config)
    assert len(pieces) > LIMIT >= sum(1 for p in pieces if p.content.strip())  # (1,200 cut, 600 stored)
    row = Knowledge(id="k", tenant_id=tenant.id, kb_id="kb", type=KnowledgeType.FILE)
    chunks, _ = chunking.build_chunks(row, markdown, config)
    assert len(chunks) == 600
    settings = ChunkingSettings(chunk_size=64, chunk_overlap=10)
    answer = _preview_with(deps, tenant, settings, text=BLANKS)
    assert answer["total_chunks"] == len(pieces)


def _preview_with(deps: Services, tenant: Tenant, settings: ChunkingSettings, **body: Any) -> dict[str, Any]:
    from chalicelib.operations.chunk_preview import preview_chunks

    return preview_chunks(deps, tenant.id, ChunkPreviewRequest(chunking_config=settings, **body))
