"""How a knowledge row is found by the listing filters: its source (file, url, manual), fixed at creation."""

from __future__ import annotations

from chalicelib.domain.types import KnowledgeType

SOURCES = ("file", "url", "manual")


def listing_source(kind: KnowledgeType) -> str:
    """An uploaded file is `file`; a web page or a file downloaded from a URL is `url`; hand-written text is
    `manual`."""
    if kind in (KnowledgeType.URL, KnowledgeType.FILE_URL):
        return "url"
    if kind == KnowledgeType.MANUAL:
        return "manual"
    return "file"
