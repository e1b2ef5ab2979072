"""What a document keeps in storage: every object its row leads to, and the signed copies a `local://` default
store keeps of its links (the delete and a move across storage backends both take them away)."""

from __future__ import annotations

import json

from chalicelib.domain.storage_keys import (
    download_copy_key,
    image_copy_key,
    images_manifest_key,
    parsed_markdown_key,
)
from chalicelib.domain.types import Knowledge
from chalicelib.ports import Dependencies
from chalicelib.services import page_range_store
from chalicelib.services.storage import files_of


def drop_signed_copies(deps: Dependencies, knowledge: Knowledge, objects: list[str]) -> None:
    """A `local://` default store's signed copies of the knowledge's download links and of the images
    search hits linked to (`objects`: its stored objects), kept in the files bucket; a named backend signs
    its own links and has none."""
    if knowledge.storage_backend or deps.files.backend("") is deps.inbox:
        return
    for attempt in range(knowledge.attempt + 1):  # a link asked for before the first parse: 0
        for kind in ("original", "parsed"):
            deps.inbox.delete(
                deps.inbox.url_for(download_copy_key(knowledge.tenant_id, knowledge.id, kind, attempt))
            )
    for url in objects:  # operations/search.py
        deps.inbox.delete(deps.inbox.url_for(image_copy_key(knowledge.tenant_id, knowledge.id, url)))


def stored_objects(deps: Dependencies, knowledge: Knowledge) -> list[str]:
    """The source, the parsed Markdown and image manifest of every attempt, and every stored image."""
    urls = [knowledge.file_path] if knowledge.file_path else []
    for attempt in range(1, knowledge.attempt + 1):
        for key in (
            parsed_markdown_key(knowledge.tenant_id, knowledge.id, attempt),
            images_manifest_key(knowledge.tenant_id, knowledge.id, attempt),
        ):
            url = files_of(deps, knowledge).url_for(key)
            if key.endswith(".json") and deps.files.exists(url):
                urls += [str(image["url"]) for image in json.loads(deps.files.read(url))]
            urls.append(url)
        urls += page_range_store.range_objects(deps, knowledge, attempt)  # a large PDF deleted mid-parse
    for chunk in deps.chunks.list(knowledge.id):
        urls += [str(info["url"]) for info in chunk.image_info if info.get("url")]
    return list(dict.fromkeys(urls))
