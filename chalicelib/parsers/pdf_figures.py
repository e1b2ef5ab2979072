"""A PDF figure (an image object pdfium found on a text page) as an image file for the Markdown.

Kept as stored where the stored stream already is an image file or the body of one: a grey or RGB JPEG
(DCTDecode) is a JPEG file, and a PNG-predicted Flate stream (how pdfTeX embeds PNGs) is a PNG's IDAT.
(An image dictionary's /Decode array, which pdfium does not expose, is applied only on the bitmap path; it
is rare outside 1-bit masks and CMYK, which take the bitmap path.)
Other 8-bit grey/RGB Flate images are written as PNG with the "Up" row filter, deflated by ISA-L (`isal`,
level 2: 4-14x zlib level 1's speed at its size or smaller), from samples inflated here where the file
shows the stream has no predictor, else from pdfium's decoded samples (issue 27); anything else (other
colour spaces, filters, bit depths) goes through pdfium's bitmap and Pillow. Soft masks are left out on
every path, as pdfium's own image bitmap leaves them. Issue 27: on a slide deck with photos, decoding each
JPEG and encoding it as PNG cost ~50-150 ms a figure (and gave PNGs 3-5x the JPEG's size), 99% of the
parse."""

from __future__ import annotations

import io
import re
import struct
from collections.abc import Iterable, Iterator
from typing import Any

from chalicelib.parsers.deflate import InflateError, inflated_size, isal_zlib

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_FILTER_UP = 2


def figure_image(
    obj: Any, pdfium_c: Any, stream: Any = None, document: bytes | None = None
) -> tuple[bytes, str] | None:
    """(image file, MIME type) of an image object, or None when pdfium cannot decode it. `stream`: the
    object's stored stream (`get_data(decode_simple=False)`) when the caller has read it already;
    `document`: the PDF file, where a Flate stream's dictionary is looked up (`_without_predictor`)."""
    import pypdfium2 as pdfium

    try:
        stored = _stored_file(obj, pdfium_c, stream, document)
    except pdfium.PdfiumError:  # no metadata or data: pdfium's bitmap decides
        stored = None
    if stored is not None:
        return stored
    png = _bitmap_png(obj)
    return (png, "image/png") if png is not None else None


def _stored_file(obj: Any, pdfium_c: Any, stream: Any, document: bytes | None) -> tuple[bytes, str] | None:
    filters = obj.get_filters()
    if filters not in (["DCTDecode"], ["FlateDecode"]):
        return None
    meta = obj.get_metadata()
    channels = {8: 1, 24: 3}.get(meta.bits_per_pixel, 0)
    if not channels or meta.colorspace not in _plain_colour_spaces(pdfium_c, channels):
        return None
    width, height = obj.get_px_size()
    stored = bytes(obj.get_data(decode_simple=False) if stream is None else stream)
    if filters == ["DCTDecode"]:
        return (stored, "image/jpeg") if _plain_jpeg(stored, width, height, channels) else None
    png = _flate_png(obj, width, height, channels, stored, document)
    return (png, "image/png") if png is not None else None


def _plain_colour_spaces(pdfium_c: Any, channels: int) -> tuple[int, ...]:
    """Colour spaces whose samples an image file shows as they are (grey or RGB, calibrated or ICC)."""
    if channels == 1:
        return (
            pdfium_c.FPDF_COLORSPACE_DEVICEGRAY,
            pdfium_c.FPDF_COLORSPACE_CALGRAY,
            pdfium_c.FPDF_COLORSPACE_ICCBASED,
        )
    return (
        pdfium_c.FPDF_COLORSPACE_DEVICERGB,
        pdfium_c.FPDF_COLORSPACE_CALRGB,
        pdfium_c.FPDF_COLORSPACE_ICCBASED,
    )


def _plain_jpeg(data: bytes, width: int, height: int, channels: int) -> bool:
    """A JPEG of the object's size whose channels match its colour space (not CMYK/YCCK, which viewers and
    PDF readers disagree on): read from its frame header, as Pillow reads size and mode (1 component: L,
    3: RGB; 8 bits a sample, as Pillow opens), without Pillow's parsing every table before it (~35 us a figure, issue 27)."""
    return jpeg_frame(data) == (8, width, height, channels)


# Start-of-frame markers (baseline, extended, progressive, lossless; Huffman or arithmetic): not DHT (C4),
# JPG (C8) or DAC (CC), which share the range.
_SOF_MARKERS = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF))


def jpeg_frame(data: bytes) -> tuple[int, int, int, int] | None:
    """(bits a sample, width, height, components) from a JPEG's first frame header; None when `data` is no
    JPEG or reaches no frame header before its first scan or its end."""
    if data[:3] != b"\xff\xd8\xff":
        return None
    pos, end = 2, len(data)
    while pos + 4 <= end:
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # a fill byte before the marker
            pos += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # markers without a length
            pos += 2
            continue
        if marker in (0xD9, 0xDA):  # the end, or a scan before any frame header
            return None
        if marker in _SOF_MARKERS:
            if pos + 10 > end:
                return None
            height = int.from_bytes(data[pos + 5 : pos + 7], "big")
            width = int.from_bytes(data[pos + 7 : pos + 9], "big")
            return data[pos + 4], width, height, data[pos + 9]
        pos += 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
    return None


def _flate_png(
    obj: Any, width: int, height: int, channels: int, stored: bytes, document: bytes | None
) -> bytes | None:
    """A PNG of a Flate image's samples; None when they are not `height` rows of `width * channels` bytes
    (then the bitmap path decides). Inflated here when the file shows the stream has no predictor
    (`_without_predictor`: ISA-L takes 0.5 ms for a LibreOffice diagram's 2 MB of samples, pdfium 1.7),
    else decoded by pdfium."""
    stride = width * channels
    if _without_predictor(stored, height * stride, document):
        try:
            return _png(width, height, channels, _up_filtered_idat(_inflated(stored, height, stride), stride))
        except _NotTheImagesSize:
            pass  # pdfium decides, as for any stream
    if _inflates_past(stored, height * (stride + 1)):
        return None  # more than any predictor's rows: pdfium would inflate all of it (a bomb), not decide
    samples = obj.get_data(decode_simple=True)  # inflated, any predictor undone
    if len(samples) != height * stride:
        return None
    if _png_predicted(stored, height, stride):
        return _png(width, height, channels, stored)
    return _png(width, height, channels, _up_filtered_idat(_blocks(memoryview(samples), stride), stride))


# Rows are filtered and deflated a block at a time: two whole-image buffers (the samples, the filtered rows)
# cost a page fault every 4 KB of them, half a diagram's time, and their size in memory.
_BLOCK_BYTES = 256 * 1024


class _NotTheImagesSize(Exception):
    """The inflated stream is not `height` rows of samples (short, long or corrupt)."""


def _inflated(stored: bytes, height: int, stride: int) -> Iterator[bytes]:
    """The stored stream's rows inflated, a block of rows at a time; `_NotTheImagesSize` when it does not
    hold exactly `height` rows (never inflating more than a block past them: a bomb stops there)."""
    inflate = isal_zlib.decompressobj()
    block_rows = max(1, _BLOCK_BYTES // stride)
    pending = stored
    try:
        for first in range(0, height, block_rows):
            want = min(block_rows, height - first) * stride
            block = inflate.decompress(pending, want)
            pending = inflate.unconsumed_tail
            if len(block) != want:
                raise _NotTheImagesSize
            yield block
        if inflate.decompress(pending, 1) or not inflate.eof:
            raise _NotTheImagesSize
    except InflateError as exc:
        raise _NotTheImagesSize from exc


def _blocks(samples: memoryview, stride: int) -> Iterator[memoryview]:
    block = max(1, _BLOCK_BYTES // stride) * stride
    return (samples[i : i + block] for i in range(0, len(samples), block))


def _up_filtered_idat(blocks: Iterable[Any], stride: int) -> bytes:
    """A PNG's IDAT of rows of `stride` bytes, given in blocks of whole rows, each row "Up"-filtered (each
    byte minus the one above it, modulo 256; the first row as it is). Pillow picks a filter per row: 2x
    the time, same size. ISA-L level 2 deflates a LibreOffice diagram's 2 MB of rows in 0.2 ms (zlib
    level 1: 2.8 ms), four of them to 55 KB where zlib level 1 gave 61."""
    import numpy as np

    deflate = isal_zlib.compressobj(2)
    filtered = np.empty((max(1, _BLOCK_BYTES // stride), stride + 1), dtype=np.uint8)
    filtered[:, 0] = PNG_FILTER_UP
    above = np.zeros((1, stride), dtype=np.uint8)
    parts = []
    for block in blocks:
        rows = np.frombuffer(block, dtype=np.uint8).reshape(-1, stride)
        out = filtered[: len(rows)]
        np.subtract(rows[:1], above, out=out[:1, 1:])
        np.subtract(rows[1:], rows[:-1], out=out[1:, 1:])
        above = rows[-1:].copy()
        parts.append(deflate.compress(out))
    parts.append(deflate.flush())
    return b"".join(parts)


# An indirect object's header ("12 0 obj"), ending where the search stops (`endpos`).
_OBJECT_HEADER = re.compile(rb"\d+\s+\d+\s+obj\Z")
_DICTIONARY_REACH = 8192  # bytes before a stream's data searched for its object's header
_STREAM_KEYWORDS = (b"stream\r\n", b"stream\n")  # what may stand right before a stream's data
# The file is searched only when it is at most this many times the samples' size: the search reads
# ~10 MB/ms, pdfium's inflate writes ~1.2 MB/ms, so the search never costs more than the inflate it saves.
_SEARCH_REACH = 4


def _without_predictor(stored: bytes, size: int, document: bytes | None) -> bool:
    """Whether the file shows this Flate stream has no predictor. pdfium exposes no stream dictionary, and
    a TIFF predictor (/DecodeParms << /Predictor 2 >>) leaves the samples' size as it is, so the dictionary
    is read from the file: every place the stored bytes stand right after a `stream` keyword, back to
    their object's header (a stream is always a direct object, never in an object stream), must name no
    /DecodeParms (or /DP). Anything else (bytes not found as they are stored, in an encrypted file; a
    header out of reach; a `#` escape in a name; a file too big to search for a small image) is False."""
    if not document or len(stored) < 16 or len(document) > _SEARCH_REACH * size:
        return False
    # One search a figure, not an index of the file's `stream` keywords a parse: bytes.find reads ~10 MB/ms
    # for a 64-byte needle but ~1.7 MB/ms for b"stream", so the index cost more than a deck's 4 searches.
    head, found = stored[:64], False
    pos = document.find(head)
    while pos != -1:
        if document.startswith(stored, pos):
            dictionary = _stream_dictionary(document, pos)
            if dictionary is not None:
                if b"/DecodeParms" in dictionary or b"/DP" in dictionary or b"#" in dictionary:
                    return False
                found = True
        pos = document.find(head, pos + 1)
    return found


def _stream_dictionary(document: bytes, data_start: int) -> bytes | None:
    """The text between a stream's object header and its data (its dictionary and `stream` keyword);
    None when no `stream` keyword stands right before `data_start`, or the nearest `obj` before it is
    no object header (a name such as /Myobj in the dictionary, or out of reach)."""
    keyword = next((k for k in _STREAM_KEYWORDS if document.endswith(k, 0, data_start)), None)
    if keyword is None:
        return None
    keyword_start = data_start - len(keyword)
    header_end = document.rfind(b"obj", max(0, data_start - _DICTIONARY_REACH), keyword_start) + 3
    if header_end < 3 or not _OBJECT_HEADER.search(document, max(0, header_end - 32), header_end):
        return None
    if document.find(b"stream", header_end, keyword_start) != -1:  # another stream's end in between
        return None
    return document[header_end:data_start]


def _inflates_past(stored: bytes, limit: int) -> bool:
    """Whether the zlib stream inflates to more than `limit` bytes, found a block at a time, none kept and
    never more than a block past the limit; a damaged stream is left to pdfium (False)."""
    return inflated_size(stored, limit, _BLOCK_BYTES) > limit


def _png_predicted(stored: bytes, height: int, stride: int) -> bool:
    """Whether the stored zlib stream holds PNG-filtered rows (PDF Predictor 10-15, 8-bit samples,
    `Columns` = width), i.e. is a PNG's IDAT as it stands. pdfium does not expose the stream's DecodeParms:
    the inflated stream has one filter byte (0-4) more per row than the samples pdfium decodes from it."""
    try:
        # the first rows' filter bytes first: rows without one (white margins: 255) fail here, uninflated
        head = isal_zlib.decompressobj().decompress(stored, 8 * (stride + 1))
        if max(head[:: stride + 1], default=5) > 4:
            return False
        # one byte past the rows is enough to tell a longer stream: never inflate more (a bomb stops there)
        rows = isal_zlib.decompressobj().decompress(stored, height * (stride + 1) + 1)
    except InflateError:
        return False
    return len(rows) == height * (stride + 1) and max(rows[:: stride + 1], default=5) <= 4


def _png(width: int, height: int, channels: int, idat: bytes) -> bytes:
    """A PNG file around a zlib stream of filtered rows (Pillow cannot write given IDAT data)."""
    header = struct.pack(">IIBBBBB", width, height, 8, 0 if channels == 1 else 2, 0, 0, 0)
    return PNG_SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", isal_zlib.crc32(kind + body))


def _bitmap_png(obj: Any) -> bytes | None:
    """The image as stored (not rendered), as a PNG; None when pdfium cannot decode its stream (PdfiumError),
    decodes it to a pixel format pypdfium2 names no mode for (KeyError) or to fewer bytes than its size
    needs (Pillow's ValueError): a figure that cannot be shown is left out, not its document."""
    import pypdfium2 as pdfium

    try:
        image = obj.get_bitmap().to_pil()
    except (pdfium.PdfiumError, KeyError, ValueError):
        return None
    if image.mode not in ("RGB", "RGBA", "L"):
        image = image.convert("RGB")
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()
