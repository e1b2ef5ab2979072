"""POST /chunker/preview: the chunks (at most 500) of a posted text or of an already-parsed knowledge,
with the tier diagnostics, so a user can tune settings without indexing anything."""

from __future__ import annotations

from typing import Any

from chalicelib.commands import ChunkPreviewRequest
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
    return preview(normalise_markdown(text), apply_chunking(base, changes), request.limit)
