"""POST /chunker/preview: the chunks (at most 500) of a posted text or of an already-parsed knowledge,
with the tier diagnostics, so a user can tune settings without indexing anything.

The answer stays under Lambda's 6 MB response (JSON, non-ASCII escaped, as Lambda sends it): 500 chunks of
7,500 CJK characters (and their parents of up to 32,000) pass it many times. Past PREVIEW_MAX_BYTES the
last chunks are left out, with the parents only they name; `truncated` says so, and `total_chunks` and
`total_parents` still count them all.

The chunking stage's limit holds here too (`chunk_limit` of the text's size): a text or setting that would
become more chunks than indexing accepts is answered 400 `too_many_chunks`, with the stage's message, and the
chunker stops soon past its cap (a 1-rune chunk_size on a parsed document is not cut whole first)."""

from __future__ import annotations

from typing import Any

from chalicelib.commands import ChunkPreviewRequest
from chalicelib.domain.answer_size import ANSWER_MAX_BYTES, json_size
from chalicelib.domain.chunk_limits import TooManyChunks, chunk_limit, chunker_cap, too_many_chunks_message
from chalicelib.domain.errors import BadRequest, NotFound
from chalicelib.domain.process_config import apply_chunking, resolve
from chalicelib.domain.storage_keys import parsed_markdown_key
from chalicelib.domain.types import ChunkingConfig
from chalicelib.ports import Dependencies
from chalicelib.services.ownership import owned_knowledge, require_kb
from chalicelib.services.storage import files_of


def preview_chunks(deps: Dependencies, tenant_id: str, request: ChunkPreviewRequest) -> dict[str, Any]:
    from chalicelib.chunker import normalise_markdown, preview

    if request.knowledge_id:
        knowledge = owned_knowledge(deps, tenant_id, request.knowledge_id)
        kb = require_kb(deps, tenant_id, knowledge.kb_id)
        base = resolve(kb, knowledge.process_overrides).chunking
        url = files_of(deps, knowledge).url_for(
            parsed_markdown_key(knowledge.tenant_id, knowledge.id, knowledge.attempt)
        )
        if not deps.files.exists(url):
            raise NotFound("this knowledge has not been parsed yet", code="not_parsed")
        text = deps.files.read(url).decode("utf-8")
    else:
        text = request.text
        if not text.strip():
            raise BadRequest("give `text` or `knowledge_id`", code="missing_text")
        base = (
            require_kb(deps, tenant_id, request.kb_id).chunking_config if request.kb_id else ChunkingConfig()
        )
    changes = request.chunking_config.changes() if request.chunking_config else {}
    config = apply_chunking(base, changes)
    markdown = normalise_markdown(text)
    limit = chunk_limit(len(markdown.encode()))
    try:
        answer = preview(markdown, config, request.limit, max_chunks=chunker_cap(limit), max_stored=limit)
    except TooManyChunks:
        message = too_many_chunks_message(limit, config.enable_parent_child)
        raise BadRequest(message, code="too_many_chunks") from None
    return within_answer_size(answer)


#: the answer stays under Lambda's 6 MB response (see above)
PREVIEW_MAX_BYTES = ANSWER_MAX_BYTES


def within_answer_size(answer: dict[str, Any]) -> dict[str, Any]:
    """The preview, or its first chunks (one at least) that fit PREVIEW_MAX_BYTES with the parents they name
    (a child's `parent_index`; parents come in order), `truncated` set."""
    chunks, parents = answer["chunks"], answer.get("parents") or []
    size = _size({k: v for k, v in answer.items() if k not in ("chunks", "parents")})
    kept = named = 0  # the chunks kept, and the parents they name
    for chunk in chunks:
        wanted = max(named, chunk.get("parent_index", -1) + 1)
        more = _size(chunk) + sum(_size(p) for p in parents[named:wanted])
        if kept and size + more > PREVIEW_MAX_BYTES:
            break
        size, kept, named = size + more, kept + 1, wanted
    if kept == len(chunks) and size + sum(_size(p) for p in parents[named:]) <= PREVIEW_MAX_BYTES:
        return {**answer, "truncated": False}
    cut = {**answer, "chunks": chunks[:kept], "truncated": True}
    if "parents" in answer:
        cut["parents"] = parents[:named]
    return cut


def _size(value: Any) -> int:
    """The bytes `value` takes in the answer's JSON (non-ASCII escaped), with its separating comma."""
    return json_size(value) + 1
