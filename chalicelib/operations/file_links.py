"""Short-lived links to a document's stored original and parsed Markdown (the specification's GetFileURL): the
file is registered in the resource catalog once, and each link is a single-purpose, expiring grant on it."""

from __future__ import annotations

from typing import Any

from chalicelib.commands import FileUrlQuery
from chalicelib.domain.clock import to_iso
from chalicelib.domain.errors import NotFound
from chalicelib.domain.resources import header_safe
from chalicelib.domain.storage_keys import parsed_markdown_key
from chalicelib.domain.types import KnowledgeType
from chalicelib.operations.chunks import usable_knowledge
from chalicelib.ports import Dependencies
from chalicelib.services import resources
from chalicelib.services.storage import files_of


def file_url(
    deps: Dependencies, tenant_id: str, knowledge_id: str, query: FileUrlQuery, base_url: str
) -> dict[str, Any]:
    """A download link to the stored original or parsed Markdown: the file is registered in the resource
    catalog (once) and the link is a single-purpose, expiring grant on it, `<base_url>/r/{token}`."""
    knowledge = usable_knowledge(deps, tenant_id, knowledge_id)
    if query.kind == "original":
        if knowledge.type in (KnowledgeType.URL, KnowledgeType.MANUAL) or not knowledge.file_path:
            raise NotFound("this knowledge has no stored original file", code="file_not_found")
        url, attempt = knowledge.file_path, 0
    else:
        url = files_of(deps, knowledge).url_for(
            parsed_markdown_key(knowledge.tenant_id, knowledge.id, knowledge.attempt)
        )
        attempt = knowledge.attempt
    if not deps.files.exists(url):
        raise NotFound(f"the {query.kind} file of this knowledge is not stored (yet)", code="file_not_found")
    expires = deps.settings.download_url_seconds
    name = resources.download_name(knowledge, query.kind)
    resource = resources.register_file(deps, knowledge, query.kind, url, attempt, header_safe(name))
    token, expires_at = resources.create_grant(deps, resource, expires)
    return {
        "url": f"{base_url}/r/{token}",
        "kind": query.kind,
        "file_name": name,
        "expires_in": expires,
        "expires_at": to_iso(expires_at),
        "resource": resource.id,
    }
