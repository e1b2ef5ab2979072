"""POST /chunker/preview: the chunks (at most 500) of a posted text or of an already-parsed knowledge,
with the tier diagnostics, so a user can tune settings without indexing anything."""

from __future__ import annotations

from typing import Any

from .bootstrap import Services
from .create import require_kb
from .domain.errors import BadRequest, NotFound
from .domain.process_config import chunking_config_from, resolve
from .domain.storage_keys import parsed_markdown_key
from .domain.types import ChunkingConfig
from .reparse import owned_knowledge

MAX_PREVIEW_CHUNKS = 500
MAX_PREVIEW_TEXT = 2_000_000


def preview_chunks(svc: Services, tenant_id: str, body: dict[str, Any]) -> dict[str, Any]:
    from .chunker import normalise_markdown, preview

    limit = body.get("limit", MAX_PREVIEW_CHUNKS)
    if not isinstance(limit, int) or not 1 <= limit <= MAX_PREVIEW_CHUNKS:
        raise BadRequest(f"limit must be from 1 to {MAX_PREVIEW_CHUNKS}", code="invalid_limit")
    knowledge_id = body.get("knowledge_id")
    if knowledge_id:
        knowledge = owned_knowledge(svc, tenant_id, str(knowledge_id))
        kb = require_kb(svc, tenant_id, knowledge.kb_id)
        base = resolve(kb, knowledge.process_overrides).chunking
        url = svc.files.url_for(parsed_markdown_key(knowledge.tenant_id, knowledge.id, knowledge.attempt))
        if not svc.files.exists(url):
            raise NotFound("this knowledge has not been parsed yet", code="not_parsed")
        text = svc.files.read(url).decode("utf-8")
    else:
        text = str(body.get("text") or "")
        if not text.strip():
            raise BadRequest("give `text` or `knowledge_id`", code="missing_text")
        if len(text) > MAX_PREVIEW_TEXT:
            raise BadRequest(f"text is over {MAX_PREVIEW_TEXT} characters", code="text_too_long")
        base = (
            require_kb(svc, tenant_id, str(body["kb_id"])).chunking_config
            if body.get("kb_id")
            else ChunkingConfig()
        )
    config = chunking_config_from(body.get("chunking_config"), base)
    return preview(normalise_markdown(text), config, limit)
