"""What a document counts on its tenant's storage quota (`Knowledge.storage_size`): the one rule."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from chalicelib.domain.storage_keys import parsed_markdown_key
from chalicelib.domain.types import Knowledge
from chalicelib.ports import Dependencies
from chalicelib.services.storage import files_of


def counted_size(deps: Dependencies, knowledge: Knowledge, images: Iterable[Mapping[str, Any]]) -> int:
    """The bytes the document stores: its original (`file_size`: the upload, or the URL's fetched document)
    and what its attempt's parse stored, the parsed Markdown and each image it extracted or fetched (`images`:
    the attempt's manifest, each entry with its stored `size`; a URL once, as page ranges list a shared image
    once each). Indexing sets it in the write that checks the quota: a reparse counts its own parse in place
    of the earlier one's (which it removes), a redelivery the same size again (nothing more), and the row's
    delete gives all of it back. Raises FileNotFoundError when the attempt's Markdown is gone."""
    markdown = files_of(deps, knowledge).url_for(
        parsed_markdown_key(knowledge.tenant_id, knowledge.id, knowledge.attempt)
    )
    image_sizes = {str(image["url"]): int(image.get("size") or 0) for image in images}
    return knowledge.file_size + deps.files.size(markdown) + sum(image_sizes.values())
