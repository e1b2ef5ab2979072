"""How many chunks a document may become: one rule for the chunking stage and the chunk preview. The limit
counts the chunks stored (a blank piece, a bare separator cut off before a table, is not); the chunker itself
stops soon after `chunker_cap` pieces, so a refused setting costs no more than an accepted one."""

from __future__ import annotations

import math
import sys

#: an ordinary document never reaches this: the docreader's cap of 50 million characters of Markdown is about
#: 116,000 chunks at the default 512/80 runes (50,000 refused a 200,000-row, ten-column spreadsheet, issue 12)
MAX_CHUNKS_PER_DOCUMENT = 150_000
#: ordinary text at the default 512 runes makes ~2,000 chunks per MB; 8,000 means chunks under ~130 bytes,
#: which only a pathological setting or input produces (a small document may always make 1,000)
MAX_CHUNKS_PER_MB = 8_000
MIN_CHUNK_ALLOWANCE = 1_000
#: no limit (the chunker's default, for callers that bound the text themselves)
NO_LIMIT = sys.maxsize


def chunk_limit(markdown_bytes: int) -> int:
    """The most chunks a document of `markdown_bytes` (UTF-8, normalised) may become."""
    per_size = math.ceil(MAX_CHUNKS_PER_MB * markdown_bytes / (1024 * 1024))
    return min(MAX_CHUNKS_PER_DOCUMENT, max(MIN_CHUNK_ALLOWANCE, per_size))


def chunker_cap(limit: int) -> int:
    """The pieces the chunker may cut for a document whose stored chunks are limited to `limit`: blank pieces
    are a few per cent of a document's, so twice the limit cuts every document the limit accepts whole; and
    never past MAX_CHUNKS_PER_DOCUMENT, below which text chunks' sequence numbers stay (image chunks are
    numbered from there)."""
    return min(2 * limit + 1, MAX_CHUNKS_PER_DOCUMENT)


class TooManyChunks(ValueError):
    """The text would become more chunks than it was allowed: the chunker stopped past its cap (every piece
    it cuts counts there; with parent-child, the parents it keeps and the children), or more were stored."""


def too_many_chunks_message(limit: int, parent_child: bool) -> str:
    return (
        f"the document would become more than {limit} chunks, the limit for its size "
        f"({MAX_CHUNKS_PER_MB} per MB of text, at most {MAX_CHUNKS_PER_DOCUMENT}): use a larger "
        # parent-child chunking cuts by its own sizes and ignores chunk_size
        + ("child_chunk_size or parent_chunk_size" if parent_child else "chunk_size")
    )
