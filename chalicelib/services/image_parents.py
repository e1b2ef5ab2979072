"""Which text chunk an image's OCR and caption chunks are bound to (spec §1.11): the first text chunk of the
attempt that shows the image's URL, else the attempt's first text chunk. Found for all of a document's
images in one pass over its chunks when its images are handed to the state machine (each image task then
carries its parent's sequence number), instead of one listing of every chunk per image."""

from __future__ import annotations

from collections.abc import Sequence

from chalicelib.domain.image_info import ShownImages
from chalicelib.domain.types import Chunk, ChunkType, Knowledge
from chalicelib.ports import Dependencies
from chalicelib.services.chunk_pages import attempt_chunk_pages


def bound_text_chunks(deps: Dependencies, knowledge: Knowledge, urls: Sequence[str]) -> dict[str, Chunk]:
    """Each URL's bound text chunk (a URL is absent when the attempt has no text chunk). Chunk ids sort as
    their sequence numbers (ids.ordered_seq), so a key-ordered read meets the text chunks in document
    order; it stops once every URL was seen."""
    wanted = set(urls)
    if not wanted:
        return {}
    found: dict[str, Chunk] = {}
    first: Chunk | None = None
    # the rule chunking fills text chunks' image_info by: the bound chunk lists the image
    shown = ShownImages({"url": url} for url in wanted)
    for page in attempt_chunk_pages(deps, knowledge):
        for chunk in page:
            if chunk.chunk_type != ChunkType.TEXT:
                continue
            first = first or chunk
            for url in shown.urls(chunk.content):
                if url in wanted:
                    found[url] = chunk
                    wanted.discard(url)
        if not wanted:
            break
    if first is not None:
        found.update({url: first for url in wanted})
    return found
