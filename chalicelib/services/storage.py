"""Which store a document's objects are written to: its storage backend's (Knowledge.storage_backend, set
from its knowledge base at creation). Reads by URL need no such choice: `deps.files` routes each URL to
the backend it names."""

from __future__ import annotations

import json
from typing import Any

from chalicelib.domain.storage_keys import images_manifest_key
from chalicelib.domain.types import Knowledge
from chalicelib.ports import Dependencies, FileStore


def files_of(deps: Dependencies, knowledge: Knowledge) -> FileStore:
    """The document's backend's store: where its source, Markdown, manifest, ranges and images go, and
    where a key of its (`parsed_markdown_key`, …) is looked up."""
    return deps.files.backend(knowledge.storage_backend)


def signed_get(deps: Dependencies, url: str, copy_key: str, seconds: int, file_name: str = "") -> str:
    """A short-lived GET link to a stored object. A store that cannot sign links (`local://`) gets a copy
    in the files bucket under `copy_key` (one key per file, so the copy is made once) and that is signed.
    Raises FileNotFoundError when the object is gone."""
    try:
        return deps.files.presign_get(url, seconds, file_name=file_name)
    except NotImplementedError:
        copy = deps.inbox.url_for(copy_key)
        if not deps.inbox.exists(copy):
            copy = deps.inbox.save(copy_key, deps.files.read(url))
        return deps.inbox.presign_get(copy, seconds, file_name=file_name)


def image_manifest(deps: Dependencies, knowledge: Knowledge) -> list[dict[str, Any]]:
    """The attempt's image manifest (what the docreader extracted); FileNotFoundError when it is gone."""
    url = files_of(deps, knowledge).url_for(
        images_manifest_key(knowledge.tenant_id, knowledge.id, knowledge.attempt)
    )
    images: list[dict[str, Any]] = json.loads(deps.files.read(url))
    return images
