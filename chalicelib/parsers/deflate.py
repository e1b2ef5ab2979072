"""ISA-L's zlib-compatible codec (`isal`) for the parsers: it inflates a zip's members and a PDF figure's Flate
samples and deflates PNG rows at several times zlib's speed, with zlib's API and byte-identical inflated output
(issue 27)."""

from __future__ import annotations

from typing import cast

from isal import isal_zlib

#: what ISA-L raises on a damaged stream (igzip_lib.IsalError); isal's stubs declare it an instance, not a class
InflateError = cast(type[Exception], isal_zlib.error)

#: input fed to the inflater at a time: a stream measured in a whole file (a PDF's, from its start to the
#: file's end, where its end is not trusted) never has the rest of the file copied as its unconsumed tail
_INPUT_STEP = 64 * 1024


def inflated_size(stored: bytes | memoryview, limit: int, block: int) -> int:
    """How many bytes the zlib stream at the start of `stored` inflates to, produced `block` bytes at a time
    and none kept, never more than a block past `limit` (a bomb stops there). Input after the stream's end
    is not read; a damaged stream counts what it inflated before the damage (as much as any reader gets)."""
    inflate = isal_zlib.decompressobj()
    view = memoryview(stored)
    produced = 0
    try:
        for offset in range(0, len(view), _INPUT_STEP):
            pending: bytes | memoryview = view[offset : offset + _INPUT_STEP]
            while pending:
                piece = inflate.decompress(pending, block)
                produced += len(piece)
                if produced > limit or inflate.eof:
                    return produced
                if not piece and len(inflate.unconsumed_tail) == len(pending):
                    return produced  # no progress: nothing more comes out of it
                pending = inflate.unconsumed_tail
    except InflateError:
        pass
    return produced


__all__ = ["InflateError", "inflated_size", "isal_zlib"]
