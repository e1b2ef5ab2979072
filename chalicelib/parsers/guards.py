"""Limits the reader applies before any engine is chosen, so they bind every engine (builtin, simple,
markitdown, whatever a `parser_engine_rules` override picks).

Nothing here trusts what a file says about itself: zip members are inflated from their raw bytes with a
hard cap on the bytes actually produced (a member whose header under-states its size is refused, as is one
that expands past the caps; a docx/pptx's members where the builtin reader reads them, PackageParts, and
all of them before another engine reads the file), spreadsheet cells and their extent are counted in the
worksheet XML as it streams, PDF pages are counted by pdfium, image pixels are read from the header
before any decoding, and HTML nesting is measured (html_depth.HtmlDepth: the HTML5 builder's stack of
open elements, modelled) before a tree builder sees it.

Over 600 lines on purpose: every limit the reader applies before an engine runs lives here, so that one
module answers "what does a hostile file meet"; the zip, sheet, PDF, image and HTML checks share its errors.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import struct
import warnings
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from operator import itemgetter
from typing import Any

from chalicelib.domain.filetypes import IMAGE_EXTENSIONS
from chalicelib.parsers.base import (
    XML_SUFFIXES,
    Limits,
    MarkdownBudget,
    MeasuredOnce,
    check_declared_sizes,
    image_kind,
    open_zip_checked,
    parse_failed,
    unsupported,
    wide_text_codec,
)
from chalicelib.parsers.deflate import InflateError, inflated_size, isal_zlib

# HtmlDepth: re-exported, the URL importer measures fetched pages with it
from chalicelib.parsers.html_depth import HtmlDepth as HtmlDepth
from chalicelib.parsers.html_depth import measure_html

ZIP_KINDS = {"docx": "Word", "xlsx": "Excel", "pptx": "PowerPoint", "epub": "EPUB"}
HTML_TYPES = frozenset({"html", "htm", "mhtml"})
PLAIN_TEXT_TYPES = frozenset({"txt", "md", "markdown", "csv", "json", "html", "htm"})
STEP = 64 * 1024  # bytes of raw input per inflate step, and the most one step may produce

_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")
_LOCAL_SIGNATURE = 0x04034B50
_ENTITY = b"<!ENTITY"
_BANG_ENTITY = re.compile(rb"![Ee][Nn][Tt][Ii][Tt][Yy]")  # _ENTITY after its "<", in any case
_WORKSHEET = re.compile(r"^xl/worksheets/[^/]+\.xml$", re.IGNORECASE)
_MARKUP_MEMBER = (".html", ".htm", ".xhtml")
_IMAGE_HEAD = 16  # leading bytes that tell an image (base.image_kind)


#: the package types whose readers take their parts from the preflight (ParseContext.package_parts)
KEEP_PARTS_TYPES = frozenset({"docx", "pptx"})


def preflight(
    data: bytes,
    file_type: str,
    limits: Limits,
    parts: dict[str, bytes | None] | None = None,
    listing: list[zipfile.ZipInfo] | None = None,
    streams_checked: bool = False,
    sheets_by_extent: bool = True,
    sheet_measures: dict[str, tuple[int, int, int]] | None = None,
    check_time: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Refuses (PermanentStageError) a file over any limit; returns what it measured. For a docx/pptx,
    `parts` (when given) receives the package's XML parts and images as the preflight inflated them, so
    that the reader does not inflate them again (check_zip); for an xlsx, `sheet_measures` (when given)
    receives each worksheet's measure (check_zip), for the reader (ParseContext.sheet_measures).
    `listing`: a zip's central directory as base.resolve_file_type read it from these bytes (else it is
    read here). `streams_checked`: a PDF's streams were measured already (a page range: the plan measured
    the same stored bytes).
    `sheets_by_extent`: an xlsx's sheets are refused by the grid their cells span (engines that build it:
    MarkItDown's pandas); False for the builtin reader, which reads a sparse sheet by its stored cells
    (sparse_sheets.py), so only the cells written are limited. `check_time`: the parse budget's check
    (ParseContext.check_time), called as a zip's members inflate and as HTML nesting is measured: the
    preflight is part of the parse's time."""
    if file_type in ZIP_KINDS:
        keep = parts if file_type in KEEP_PARTS_TYPES else None
        kind = ZIP_KINDS[file_type]
        return check_zip(
            data,
            limits,
            kind,
            sheets=file_type == "xlsx",
            parts=keep,
            listing=listing,
            sheets_by_extent=sheets_by_extent,
            sheet_measures=sheet_measures,
            check_time=check_time,
        )
    if file_type == "pdf":
        if not streams_checked:
            check_pdf_streams(data, limits)  # before pdfium opens it
        return {"pages": check_pdf_pages(data, limits)}
    if file_type in IMAGE_EXTENSIONS:
        width, height = check_image_pixels(data, limits)
        return {"width": width, "height": height}
    if file_type in PLAIN_TEXT_TYPES and b"\x00" in data and wide_text_codec(data) is None:
        raise unsupported(
            f"The .{file_type} file contains binary data (NUL bytes); it does not look like text."
        )
    if file_type in HTML_TYPES:
        return {"html_depth": measure_html(data, limits.max_html_depth, check_time)}
    return {}


# ---------------------------------------------------------------- zip


def check_zip(
    data: bytes,
    limits: Limits,
    what: str,
    *,
    sheets: bool = False,
    parts: dict[str, bytes | None] | None = None,
    listing: list[zipfile.ZipInfo] | None = None,
    sheets_by_extent: bool = True,
    sheet_measures: dict[str, tuple[int, int, int]] | None = None,
    check_time: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Declared sizes first (cheap), then every member inflated from its raw bytes with hard caps. `parts`
    receives each member's name → its bytes as checked here for XML parts and images (told by their leading
    bytes), None for the others (fonts, media, embedded files: dropped as they stream, as the readers do not
    look at them; one that does reads it from the zip). `listing`: the central directory already read from
    `data` (base.resolve_file_type), so that it is read once. `sheets_by_extent`: see preflight.
    `sheet_measures` (with `sheets`) receives each worksheet part's name → (cells written, rows, columns
    spanned), measured either way, for the reader (sparse_sheets.read_sparse_sheets). `check_time`: see
    preflight."""
    # one listing (a damaged zip is refused there); entity declarations are looked for below, in the same
    # inflating pass as the sizes
    infos = _checked_listing(data, limits, what, listing)
    view = memoryview(data)
    total = 0
    workbook = Workbook(by_extent=sheets_by_extent) if sheets else None
    for info in infos:
        if info.is_dir():
            continue
        kept, produced = _inflate_checked(
            view,
            info,
            limits,
            what,
            total,
            keep_parts=parts is not None,
            workbook=workbook,
            check_time=check_time,
        )
        total += produced
        if parts is not None:
            parts[info.filename] = kept
    out: dict[str, Any] = {"uncompressed_bytes": total}
    if workbook is not None:
        workbook.check_shared_text(view, limits, what)
        out["cells"] = workbook.cells.total_cells
        if sheet_measures is not None:
            sheet_measures.update(workbook.measures())
    return out


def sheet_measures(
    data: bytes, limits: Limits, measured: Mapping[str, tuple[int, int, int]] | None
) -> Mapping[str, tuple[int, int, int]]:
    """Each worksheet part's name → (cells written, rows, columns its cells span): `measured`, the
    preflight's figures for these bytes (ParseContext.sheet_measures), or measured now (and the package
    checked) when the reader's preflight did not run on them."""
    if measured is not None:
        return measured
    measures: dict[str, tuple[int, int, int]] = {}
    check_zip(data, limits, ZIP_KINDS["xlsx"], sheets=True, sheets_by_extent=False, sheet_measures=measures)
    return measures


class PackageParts(Mapping[str, "bytes | None"]):
    """A docx/pptx's members for the builtin reader, each checked where it is read: what the central
    directory declares is checked up front (member count, each size and the total under the caps, the
    ratio, no encryption), and a member is inflated only when the reader asks for it, with check_zip's
    checks on the bytes it really produces (a header that under-states the size is refused at the first
    piece past it, never inflated further; CRC, entity declarations). The members no reader looks at (theme,
    fonts, settings, docProps, slide layouts and masters, thumbnails: most of a small deck) are never
    inflated; nothing parses them. Before another engine reads the file, `check_rest` inflates and checks
    every member not read yet, as check_zip does."""

    def __init__(self, data: bytes, infos: list[zipfile.ZipInfo], limits: Limits, what: str) -> None:
        self.view = memoryview(data)
        self.limits = limits
        self.what = what
        self.infos = {info.filename: info for info in infos if not info.is_dir()}
        self.read: dict[str, bytes] = {}
        self.inflated = 0  # bytes the members read so far produced

    def __getitem__(self, name: str) -> bytes:
        if (kept := self.read.get(name)) is not None:
            return kept
        whole = _read_checked(self.view, self.infos[name], self.limits, self.what, self.inflated)
        self.inflated += len(whole)
        self.read[name] = whole
        return whole

    def __iter__(self) -> Iterator[str]:
        return iter(self.infos)

    def __len__(self) -> int:
        return len(self.infos)

    def check_rest(self, check_time: Callable[[], None] | None = None) -> None:
        """Every member not read yet, inflated and checked (and dropped), for an engine that reads the zip
        itself; `check_time`: see preflight."""
        for name, info in self.infos.items():
            if name not in self.read:
                _, produced = _inflate_checked(
                    self.view, info, self.limits, self.what, self.inflated, check_time=check_time
                )
                self.inflated += produced


def _checked_listing(
    data: bytes, limits: Limits, what: str, listing: list[zipfile.ZipInfo] | None
) -> list[zipfile.ZipInfo]:
    """The central directory (read here, or `listing` as already read) with its declared sizes checked and
    no encrypted member."""
    if listing:
        infos = listing
        check_declared_sizes(infos, limits, what)
    else:
        zf = open_zip_checked(data, limits, what, scan_entities=False)
        try:
            infos = zf.infolist()
        finally:
            zf.close()
    if any(info.flag_bits & 0x1 for info in infos):
        raise parse_failed(f"The {what} file is encrypted; remove the password and upload it again.")
    return infos


def open_package(
    data: bytes, file_type: str, limits: Limits, listing: list[zipfile.ZipInfo] | None = None
) -> PackageParts | None:
    """For a docx/pptx, its PackageParts once the central directory's claims are checked (the rest of
    preflight's zip checks then happen member by member as the reader reads); None for other types."""
    if file_type not in KEEP_PARTS_TYPES:
        return None
    what = ZIP_KINDS[file_type]
    infos = _checked_listing(data, limits, what, listing)
    return PackageParts(data, infos, limits, what)


def _member_cap(limits: Limits, total_before: int) -> int:
    """The most one member may inflate to: its own cap, or what the package's total cap has left."""
    return min(limits.zip_max_member_uncompressed, limits.zip_max_total_uncompressed - total_before)


def _check_produced(info: zipfile.ZipInfo, produced: int, cap: int, limits: Limits, what: str) -> None:
    """While a member inflates: refuses it the moment it passes the size its header declares or `cap`."""
    if produced > info.file_size:
        raise parse_failed(
            f"The {what} file is damaged or forged: its part {info.filename!r} expands beyond the "
            "size its header declares."
        )
    if produced > cap:
        raise parse_failed(
            f"The {what} file expands to more than "
            f"{limits.zip_max_total_uncompressed // (1024 * 1024)} MB; it looks like a zip bomb."
        )


def _check_whole(info: zipfile.ZipInfo, produced: int, crc: int, limits: Limits, what: str) -> None:
    """Once a member has inflated: its declared size and CRC, and a plausible compression ratio."""
    if produced != info.file_size or crc != info.CRC:
        raise parse_failed(f"The {what} file is damaged or truncated ({info.filename}).")
    if produced > 1024 * 1024 and produced > limits.zip_max_ratio * max(info.compress_size, 1):
        raise parse_failed(
            f"The {what} file is compressed at an implausible ratio; it looks like a zip bomb."
        )


def _inflate_checked(
    view: memoryview,
    info: zipfile.ZipInfo,
    limits: Limits,
    what: str,
    total_before: int,
    *,
    keep_parts: bool = False,
    workbook: Workbook | None = None,
    check_time: Callable[[], None] | None = None,
) -> tuple[bytes | None, int]:
    """One member inflated from its raw bytes under the caps: (its bytes, or None when not kept; the bytes
    produced). It stops at the first piece past the size its header declares or past the member's or the
    package's cap (`total_before`: what the package's members inflated so far), so a lying header cannot
    make it produce more; then the CRC, the ratio, entity declarations in an XML part, HTML nesting and a
    worksheet's cells are checked. `keep_parts`: XML parts and images are kept (check_zip's `parts`), told
    by their name and leading bytes. `workbook`: an xlsx's XML parts go through it (worksheets, shared
    strings). `check_time`: see preflight; called at each piece."""
    produced = 0
    crc = 0
    name = info.filename.lower()
    # XML parts only, as the engines parse them (an embedded SVG may declare entities; nothing parses it)
    entities = EntityScan() if name.endswith(XML_SUFFIXES) else None
    # an HTML member is measured whole, once inflated (HtmlDepth reads a construct cut at a piece's end
    # again with the next piece: a long attribute value would be read again at every step); the reader
    # then finds it measured (measure_html)
    markup: list[bytes] | None = [] if name.endswith(_MARKUP_MEMBER) else None
    kept: list[bytes] | None = [] if keep_parts else None
    part = workbook.part(info, limits, what) if workbook is not None and entities is not None else None
    judged = False  # whether a non-XML member's leading bytes were looked at
    for piece in _inflate(view, info, what):
        if check_time is not None:
            check_time()
        produced += len(piece)
        _check_produced(info, produced, _member_cap(limits, total_before), limits, what)
        crc = isal_zlib.crc32(piece, crc)
        if entities is not None:
            entities.feed(piece, what)
        if markup is not None:
            markup.append(piece)
        if part is not None:
            part.feed(piece)
        if kept is not None:
            kept.append(piece)
            if not judged and entities is None and produced >= _IMAGE_HEAD:
                judged = True
                if image_kind(b"".join(kept)[:_IMAGE_HEAD]) is None:
                    kept = None  # not XML, not an image: nothing reads it
    _check_whole(info, produced, crc, limits, what)
    if part is not None:
        part.close()
    if markup is not None:
        measure_html(b"".join(markup), limits.max_html_depth, check_time)
    whole = b"".join(kept) if kept is not None else None
    keep = whole is not None and (judged or entities is not None or image_kind(whole) is not None)
    return (whole if keep else None), produced


def _raw_member(view: memoryview, info: zipfile.ZipInfo, what: str) -> memoryview:
    """The member's raw (compressed) bytes, found through its local header; refuses encryption, a missing
    header, truncation and a compression method other than stored or deflated."""
    if info.flag_bits & 0x1:
        raise parse_failed(f"The {what} file is encrypted; remove the password and upload it again.")
    start = info.header_offset
    header = bytes(view[start : start + _LOCAL_HEADER.size])
    if len(header) < _LOCAL_HEADER.size:
        raise parse_failed(f"The {what} file is damaged or truncated ({info.filename}).")
    fields = _LOCAL_HEADER.unpack(header)
    if fields[0] != _LOCAL_SIGNATURE:
        raise parse_failed(f"The {what} file is damaged ({info.filename} has no local header).")
    begin = start + _LOCAL_HEADER.size + fields[9] + fields[10]
    raw = view[begin : begin + info.compress_size]
    if len(raw) < info.compress_size:
        raise parse_failed(f"The {what} file is damaged or truncated ({info.filename}).")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise parse_failed(
            f"The {what} file uses a compression method (#{info.compress_type}) that is not accepted; "
            "save it again from its application."
        )
    return raw


def _read_checked(
    view: memoryview, info: zipfile.ZipInfo, limits: Limits, what: str, total_before: int
) -> bytes:
    """One member whole, for a reader, with _inflate_checked's checks in one bounded inflate call: at most one
    byte past the size its header declares (and never past the member's or the package's cap) is produced,
    so a lying header is refused without inflating further. One call, not 64 KB steps: the steps' Python
    cost was a third of the inflating of a deck's small parts."""
    raw = _raw_member(view, info, what)
    cap = _member_cap(limits, total_before)
    if info.compress_type == zipfile.ZIP_STORED:
        data = bytes(raw[: min(info.file_size, cap) + 1])
    else:
        inflater = isal_zlib.decompressobj(-isal_zlib.MAX_WBITS)
        try:
            data = inflater.decompress(raw, min(info.file_size, cap) + 1)
        except InflateError as exc:
            raise parse_failed(f"The {what} file is damaged ({info.filename} does not inflate).") from exc
    _check_produced(info, len(data), cap, limits, what)
    _check_whole(info, len(data), isal_zlib.crc32(data), limits, what)
    name = info.filename.lower()
    if name.endswith(XML_SUFFIXES):
        EntityScan().feed(data, what)
    if name.endswith(_MARKUP_MEMBER):
        measure_html(data, limits.max_html_depth)
    return data


def _inflate(view: memoryview, info: zipfile.ZipInfo, what: str) -> Iterator[bytes]:
    """The member's bytes as its raw data really inflates, STEP bytes at most per piece."""
    raw = _raw_member(view, info, what)
    if info.compress_type == zipfile.ZIP_STORED:
        for offset in range(0, len(raw), STEP):
            yield bytes(raw[offset : offset + STEP])
        return
    # ISA-L inflates a docx/pptx's parts in ~70% of zlib's time (corpus sums), the same bytes and errors
    inflater = isal_zlib.decompressobj(-isal_zlib.MAX_WBITS)
    try:
        for offset in range(0, len(raw), STEP):
            piece = inflater.decompress(raw[offset : offset + STEP], STEP)
            yield piece
            while inflater.unconsumed_tail:
                yield inflater.decompress(inflater.unconsumed_tail, STEP)
            if inflater.eof:
                return
        rest = inflater.flush()
        if rest:
            yield rest
    except InflateError as exc:
        raise parse_failed(f"The {what} file is damaged ({info.filename} does not inflate).") from exc


class EntityScan:
    """Finds an XML entity declaration anywhere in a streamed part (billion laughs, XXE), in any case."""

    def __init__(self) -> None:
        self.tail = b""

    def feed(self, piece: bytes, what: str) -> None:
        window = self.tail + piece
        # "!ENTITY" in any case found by a regex and then its "<" looked at, not the whole part upper-cased:
        # 0.70 → 0.29 ms on a 1 MB document.xml holding a comment (a "<!" search stops at every "<")
        if b"!" in window:  # memchr first: "!" is rare in XML
            for match in _BANG_ENTITY.finditer(window, 1):
                if window[match.start() - 1] == 0x3C:  # "<"
                    raise parse_failed(
                        f"The {what} file contains XML entity declarations, which are not allowed."
                    )
        self.tail = window[-(len(_ENTITY) - 1) :]


_FIRST_REF = rb"""(?=[\s/>])(?:[^>]*?\br\s*=\s*["']([A-Za-z]{1,3})([0-9]{1,7})["'])?[^>]*>"""
_PLAIN_CELL_REF = re.compile(rb"<c" + _FIRST_REF)
# a cell whose first attribute is its reference in capitals and double quotes, else ("", "") for any other
# cell start tag (then _PLAIN_CELL_REF reads the piece again)
_CANONICAL_CELL_REF = re.compile(rb'<c(?: r="([A-Z]{1,3})([0-9]{1,7})"|(?=[\s/>]))')
_PREFIXED_CELL_REF = re.compile(rb"<[A-Za-z_][\w.-]*:c" + _FIRST_REF)
_PREFIXED_ELEMENT = re.compile(rb":(?:c|row)[\s/>]")  # also in text now and then: then the slow pass runs
_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_FIRST_GROUP = itemgetter(1)  # a match's first group
_PLAIN_ROW = re.compile(rb"<row(?=[\s/>])")
_PREFIXED_ROW = re.compile(rb"<[A-Za-z_][\w.-]*:row(?=[\s/>])")
# the extent a sheet says it has (`<dimension ref="A1:J20191"/>`, before its cells): only a claim to check
_DIMENSION = re.compile(rb'<dimension ref="(?:[A-Z]{1,3}[0-9]{1,7}:)?([A-Z]{1,3})([0-9]{1,7})"')
_CLAIMED_CELL = b'<c r="'
# rows and cells in order with their references (a row's is digits only), for sheets with unreferenced cells
_ROW_OR_CELL = re.compile(
    rb"<(?:[A-Za-z_][\w.-]*:)?(row|c)(?=[\s/>])"
    rb"""(?:[^>]*?\br\s*=\s*["']([A-Za-z]{0,3})([0-9]{1,7})["'])?[^>]*>"""
)


def _not_above(top: str, first: str, low: str, high: str) -> str:
    """A pattern for the numerals over [low-high] (first digit from [first-high]) that are at most `top`:
    one as long that is not above it character by character, or any shorter one. Column letters (A..Z,
    AA..) and row numbers (1..) both order so. The shorter ones come last and match possessively: most
    cells are as long as the sheet's last, and a greedy shorter match would backtrack on every one."""
    n = len(top)
    alternatives = [re.escape(top)]
    for i, ch in enumerate(top):
        start = first if i == 0 else low
        if ch > start:
            below = f"[{start}-{chr(ord(ch) - 1)}]"
            alternatives.append(f"{re.escape(top[:i])}{below}[{low}-{high}]{{{n - i - 1}}}")
    if n > 1:
        alternatives.append(f"[{first}-{high}][{low}-{high}]{{0,{n - 2}}}+")
    return "(?:" + "|".join(alternatives) + ")"


@lru_cache(maxsize=64)
def _outside_claim(col_letters: str, row_digits: str) -> re.Pattern[bytes]:
    """Finds a cell start tag that is not `<c r="REF"` with REF inside the claimed extent: the claim holds
    for a piece where this finds nothing."""
    inside = _not_above(col_letters, "A", "A", "Z") + _not_above(row_digits, "1", "0", "9")
    return re.compile(rb'<c(?! r="' + inside.encode() + rb'")(?=[\s/>])')


def column_number(letters: bytes | str) -> int:
    col = 0
    for ch in letters.upper() if isinstance(letters, str) else letters.upper().decode():
        col = col * 26 + (ord(ch) - 64)
    return col


class SheetCells:
    """Cells counted in the worksheet XML as it streams: the number written and the extent they span
    (engines build dense grids, so one cell at XFD1048576 costs as much as the whole grid; the builtin reader
    reads such a sheet by its cells, sparse_sheets.py, and routes sheets by these figures)."""

    def __init__(self) -> None:
        self.sheets: list[_Sheet] = []

    def sheet(self) -> _Sheet:
        self.sheets.append(_Sheet())
        return self.sheets[-1]

    @property
    def total_cells(self) -> int:
        return sum(s.cells for s in self.sheets)

    def check(self, limit: int, by_extent: bool = True) -> None:
        written = self.total_cells
        spanned = sum(s.rows * s.cols for s in self.sheets) if by_extent else 0
        if written > limit or spanned > limit:
            sheet = self.sheets[-1]
            raise parse_failed(
                f"The spreadsheet has more than {limit:,} cells (a sheet spans {sheet.rows:,} rows × "
                f"{sheet.cols:,} columns, {written:,} cells written); split it into smaller files."
            )


class _Sheet:
    def __init__(self) -> None:
        self.cells = 0
        self.rows = 0
        self.cols = 0
        self.row_tags = 0
        self.tail = b""
        self.looked_for_claim = False
        # the sheet's own <dimension>: (columns, rows, the pattern that finds a cell outside it)
        self.claim: tuple[int, int, re.Pattern[bytes]] | None = None
        # set once a cell without a reference is met: (row, column) of the last row and cell placed
        self.placed: tuple[int, int] | None = None

    def feed(self, piece: bytes) -> None:
        window = self.tail + piece
        cut = window.rfind(b">") + 1
        body, self.tail = window[:cut], window[cut:][-4096:]
        if not self.looked_for_claim:  # in the sheet's first piece, before its cells, when written
            self.looked_for_claim = True
            if found := _DIMENSION.search(body):
                letters, digits = found.group(1).decode(), found.group(2).decode()
                if digits[0] != "0":
                    self.claim = (column_number(letters), int(digits), _outside_claim(letters, digits))
        # C-level passes per piece (a Python step per cell cost more than reading the workbook), a literal
        # start where possible (the regex engine skips ahead fast); prefixed elements (x:c) are rare.
        prefixed = b":" in body and _PREFIXED_ELEMENT.search(body) is not None  # memchr first
        self.row_tags += len(_PLAIN_ROW.findall(body))
        if prefixed:
            self.row_tags += len(_PREFIXED_ROW.findall(body))
        self.rows = max(self.rows, self.row_tags)
        # the sheet's claimed extent, checked: when every cell here is `<c r="REF"` inside it, the cells are
        # counted by their start tags and the extent is the claim's (one search and one count, where reading
        # each cell's reference was most of a big sheet's preflight); else each cell is read
        if self.claim is not None and not prefixed and self.claim[2].search(body) is None:
            written = body.count(_CLAIMED_CELL)
            if written:
                self.cells += written
                self.cols = max(self.cols, self.claim[0])
                self.rows = max(self.rows, self.claim[1])
            return
        if self.placed is not None:
            self._place(body)
            return
        # each cell's first reference, ("", "") for a cell without one: first the way writers put it
        # (`<c r="B7"`, a third cheaper), the general pattern only when a cell here is written otherwise
        refs = _CANONICAL_CELL_REF.findall(body)
        letters = set(map(_FIRST, refs))  # map + itemgetter: no Python step per cell
        if b"" in letters:
            refs = _PLAIN_CELL_REF.findall(body)
            letters = set(map(_FIRST, refs))
        if prefixed:
            refs += _PREFIXED_CELL_REF.findall(body)
            letters = set(map(_FIRST, refs))
        if not refs:
            return
        if b"" in set(map(_FIRST, refs)):
            # engines place a cell without a reference after the cell before it, in its row's row (which
            # may say r="900000"): each is placed as they do, from here on. This piece may start inside a
            # row, so the row and column so far are taken at their largest.
            self.placed = (self.rows, self.cols)
            self._place(body)
            return
        self.cells += len(refs)
        for col_letters in letters:
            self.cols = max(self.cols, column_number(col_letters) or 1)
        rows = set(map(_SECOND, refs))
        rows.discard(b"")
        self.rows = max(self.rows, max(map(int, rows), default=0))

    def _place(self, body: bytes) -> None:
        """Rows and cells placed one by one as calamine does: a row without a reference follows the row
        before, a cell without one the cell before it in its row (a Python step per cell: rare sheets)."""
        assert self.placed is not None
        row, col = self.placed
        for kind, letters, digits in _ROW_OR_CELL.findall(body):
            if kind == b"row":
                row, col = (int(digits) if digits else row + 1), 0
                self.rows = max(self.rows, row)
                continue
            col = column_number(letters) if letters else col + 1
            self.cells += 1
            self.cols = max(self.cols, col)
            self.rows = max(self.rows, int(digits) if digits else row)
        self.placed = (row, col)


# ---------------------------------------------------------------- workbook text

# how a part begins: its root element's local name after the prolog (declaration, comments, doctype)
_ROOT = re.compile(
    rb"(?:\s|<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^>\[]*(?:\[.*?\])?\s*>)*<(?:[\w.-]+:)?([\w.-]+)[\s/>]", re.S
)
_SHARED_STRINGS_PATH = "xl/sharedstrings.xml"  # where calamine reads them (openpyxl follows the rels)
# a shared string's end, however written (prefixed, spaced, an empty <si/>); bytes.split on b"</si>" when
# every string starts <si and ends </si> (memchr counts, where this pattern costs a third of the preflight)
_STRING_END = re.compile(rb"</(?:[\w.-]+:)?si\s*>|<(?:[\w.-]+:)?si(?:\s[^>]*)?/>")
_MARKUP = re.compile(rb"<[^>]*>")
# a cell of type s (its value: a shared string's index); what precedes the value stays inside the cell
_SHARED_CELL = re.compile(
    rb"<(?:[\w.-]+:)?c\s(?:[^>]*?\s)?t\s*=\s*[\"']s[\"'][^>]*(?<!/)>"
    rb"(?:(?!</(?:[\w.-]+:)?c>)[\s\S])*?<(?:[\w.-]+:)?v>\s*([0-9]+)"
)


class Workbook:
    """An xlsx's XML parts as the preflight streams them: worksheets (at their usual path, or anywhere a
    part's root is a worksheet) have their cells counted, and the shared strings table (at calamine's
    path, or a part whose root is sst) is kept, to measure the text the cells repeat (check_shared_text)."""

    def __init__(self, by_extent: bool = True) -> None:
        self.cells = SheetCells()
        self.by_extent = by_extent
        self.sheets: list[zipfile.ZipInfo] = []
        self.shared: list[bytes] = []

    def measures(self) -> dict[str, tuple[int, int, int]]:
        return {
            info.filename: (sheet.cells, sheet.rows, sheet.cols)
            for info, sheet in zip(self.sheets, self.cells.sheets, strict=True)
        }

    def part(self, info: zipfile.ZipInfo, limits: Limits, what: str) -> _WorkbookPart:
        return _WorkbookPart(self, info, limits, what)

    def check_shared_text(self, view: memoryview, limits: Limits, what: str) -> None:
        """Refuses a workbook whose cells repeat more shared text than one file's text may hold: calamine
        copies a shared string into every cell that names it, so a 1 MB string in 3,000 cells (a 750 KB
        file) is 3 GB, and the allocation failure aborts the worker before any text is counted. Measured
        from the cells' indices and each string's length (its XML's bytes, an upper bound); a file whose
        cells could not reach the limit even if each named the longest string costs nothing more, a
        larger one a second inflate of its sheets."""
        if not self.shared or not self.cells.total_cells:
            return
        budget = MarkdownBudget(limits)
        table = self.shared[0] if len(self.shared) == 1 else b""  # more than one: each as long as all
        opaque = not table or b"<!" in table  # CDATA or comments could hide a string's end
        lengths = [] if opaque else _string_lengths(table, precise=False)
        longest = max(lengths, default=sum(map(len, self.shared)) if opaque else 0)
        if self.cells.total_cells * longest <= budget.limit:
            return
        named = _named_strings(view, self.sheets, what)
        repeated = _repeated_text(named, lengths, longest)
        if repeated > budget.limit and not opaque and b"\0" not in table:
            lengths = _string_lengths(table, precise=True)  # the markup taken out: closer, and slower
            repeated = _repeated_text(named, lengths, max(lengths, default=0))
        budget.count(repeated)


class _WorkbookPart:
    """One XML part of a workbook, told by its path or, once its head has come, by its root element."""

    def __init__(self, workbook: Workbook, info: zipfile.ZipInfo, limits: Limits, what: str) -> None:
        self.workbook, self.info, self.limits, self.what = workbook, info, limits, what
        self.head = b""
        self.kind = ""  # "sheet", "strings", "other"; "" until told
        self.sheet: _Sheet | None = None
        self.strings: list[bytes] = []

    def feed(self, piece: bytes) -> None:
        if not self.kind:
            self.head += piece
            if not self._tell(final=False):
                return
            piece, self.head = self.head, b""
        self._take(piece)

    def close(self) -> None:
        if not self.kind:
            self._tell(final=True)
            self._take(self.head)
        if self.kind == "strings":
            self.workbook.shared.append(b"".join(self.strings))

    def _take(self, piece: bytes) -> None:
        if self.sheet is not None:
            self.sheet.feed(piece)
            self.workbook.cells.check(self.limits.max_sheet_cells, self.workbook.by_extent)
        elif self.kind == "strings":
            self.strings.append(piece)

    def _tell(self, final: bool) -> bool:
        name = self.info.filename.lower()
        found = _ROOT.match(self.head)
        if found is None and not final and len(self.head) < STEP:
            return False  # its root has not come yet
        if found is None and not final:
            raise parse_failed(f"The {self.what} file is damaged ({self.info.filename} has no root element).")
        root = found.group(1) if found is not None else b""
        if _WORKSHEET.match(name) or root == b"worksheet":
            self.kind, self.sheet = "sheet", self.workbook.cells.sheet()
            self.workbook.sheets.append(self.info)
        else:
            self.kind = "strings" if name == _SHARED_STRINGS_PATH or root == b"sst" else "other"
        return True


def _string_lengths(table: bytes, precise: bool) -> list[int]:
    """Each shared string's length, at least its text's characters (entities, phonetic runs and, unless
    `precise`, its markup count in full): the bytes from the end of the one before to its own end."""
    if precise:
        parts = _MARKUP.sub(b"", _STRING_END.sub(b"\0", table)).split(b"\0")
    elif b":si" not in table and table.count(b"<si") == table.count(b"</si>"):
        parts = table.split(b"</si>")
    else:
        parts = _STRING_END.split(table)
    return list(map(len, parts[:-1]))


def _named_strings(view: memoryview, sheets: list[zipfile.ZipInfo], what: str) -> Counter[int]:
    """How many cells name each shared string (index → cells), over every worksheet, inflated again (the
    preflight already checked them): counted in C (map, Counter), one sheet in memory at a time."""
    named: Counter[int] = Counter()
    for info in sheets:
        sheet = b"".join(_inflate(view, info, what))
        named.update(map(int, map(_FIRST_GROUP, _SHARED_CELL.finditer(sheet))))
    return named


def _repeated_text(named: Counter[int], lengths: list[int], longest: int) -> int:
    """The text the cells repeat: each string's length times the cells naming it (an index past the table
    counts as its longest string)."""
    return sum(
        cells * (lengths[index] if index < len(lengths) else longest) for index, cells in named.items()
    )


# ---------------------------------------------------------------- pdf

_PDF_STEP = 1024 * 1024  # bytes a PDF stream is inflated by at a time (none kept)
_STREAM_KEYWORD = b"stream"
_NAME_ESCAPE = re.compile(rb"#([0-9A-Fa-f]{2})")
# filters that wrap a Flate stream in text (ASCII85, hex): the wrapped stream is measured too
_ASCII85 = re.compile(rb"/(?:ASCII85Decode|A85)\b")
_ASCII_HEX = re.compile(rb"/(?:ASCIIHexDecode|AHx)\b")


_PDF_STREAMS: MeasuredOnce[int] = MeasuredOnce()


def check_pdf_streams(data: bytes, limits: Limits) -> int:
    """_measure_pdf_streams once for the same bytes (the page count, then the preflight)."""
    setting = (limits.pdf_max_stream_inflated, limits.pdf_max_total_inflated)
    return _PDF_STREAMS.get(data, setting, lambda: _measure_pdf_streams(data, limits))


def _measure_pdf_streams(data: bytes, limits: Limits) -> int:
    """Refuses a PDF whose compressed streams inflate past the limits, measured before pdfium opens it:
    pdfium inflates a page's content streams whole (a 2 MB stream of zeros is 2 GB) and aborts the process
    when the allocation fails, with no chance to fail the document. Every stream is measured, wherever a
    `stream` keyword starts one (an object the cross-reference table places inside another stream's data
    is read too), whatever its dictionary says (an image's label on a page's content changes nothing for
    pdfium), from its data to where its zlib stream ends (a stray `endstream` inside the data does not
    cut it short); one that is not Flate costs one failed header. Returns the bytes they inflate to.
    Not measured: streams in an encrypted file, LZW and run-length streams, a hex/ASCII85 wrapper named
    through an indirect /Filter."""
    view = memoryview(data)
    one, everything = limits.pdf_max_stream_inflated, limits.pdf_max_total_inflated
    total = 0
    position = data.find(_STREAM_KEYWORD)
    while position >= 0:
        start = _stream_data_start(data, position)
        if start >= 0:
            produced = inflated_size(view[start:], min(one, everything - total), _PDF_STEP)
            if produced == 0:
                produced = _wrapped_inflated_size(data, start, min(one, everything - total))
            if produced > one:
                raise parse_failed(
                    f"The PDF has a compressed stream that expands to more than {one // (1024 * 1024):,} MB; "
                    "it looks like a decompression bomb."
                )
            total += produced
            if total > everything:
                raise parse_failed(
                    f"The PDF's compressed streams expand to more than {everything // (1024 * 1024):,} MB; "
                    "it looks like a decompression bomb."
                )
        position = data.find(_STREAM_KEYWORD, position + len(_STREAM_KEYWORD))
    return total


def _stream_data_start(data: bytes, keyword: int) -> int:
    """Where a stream's data starts after the `stream` keyword at `keyword` (past spaces and one end of
    line, as pdfium reads it); -1 for an `endstream` keyword."""
    if data.endswith(b"end", 0, keyword):
        return -1
    start = keyword + len(_STREAM_KEYWORD)
    while data[start : start + 1] in (b" ", b"\t"):
        start += 1
    if data.startswith(b"\r\n", start):
        return start + 2
    return start + 1 if data[start : start + 1] in (b"\n", b"\r") else start


def _wrapped_inflated_size(data: bytes, start: int, limit: int) -> int:
    """What a Flate stream wrapped in ASCII85 or hex (its dictionary says so) inflates to; 0 otherwise."""
    dictionary = data[max(0, start - 4096) : start]
    dictionary = dictionary[dictionary.rfind(b"obj") + 1 :]
    if b"#" in dictionary:  # a name may spell its letters as #xx escapes
        dictionary = _NAME_ESCAPE.sub(lambda escape: bytes([int(escape.group(1), 16)]), dictionary)
    ascii85, hexadecimal = _ASCII85.search(dictionary), _ASCII_HEX.search(dictionary)
    if not ascii85 and not hexadecimal:
        return 0
    end = data.find(b"endstream", start)
    text = data[start : end if end >= 0 else len(data)]
    try:
        if ascii85:
            framed = b"~>" in text
            text = base64.a85decode(text[: text.find(b"~>") + 2] if framed else text, adobe=framed)
        else:
            digits = re.sub(rb"[^0-9A-Fa-f]", b"", text.split(b">", 1)[0])
            text = binascii.unhexlify(digits + b"0" * (len(digits) % 2))  # an odd last digit is followed by 0
    except (ValueError, binascii.Error):
        return 0
    return inflated_size(text, limit, _PDF_STEP)


def check_pdf_pages(data: bytes, limits: Limits) -> int:
    """pdfium's page count; a PDF it cannot open is left to the engine (which says why)."""
    import pypdfium2 as pdfium

    from chalicelib.parsers.pdf import PDFIUM_LOCK

    with PDFIUM_LOCK:
        try:
            pdf = pdfium.PdfDocument(data)
        except pdfium.PdfiumError:
            return 0  # damaged or password-protected: the engine's own message is the clearer one
        try:
            pages = len(pdf)
        finally:
            pdf.close()
    if pages > limits.max_pages:
        raise parse_failed(f"The PDF has {pages:,} pages; the limit is {limits.max_pages:,}.")
    return pages


# ---------------------------------------------------------------- images


def check_image_pixels(data: bytes, limits: Limits) -> tuple[int, int]:
    """Width and height from the header, before any pixel is decoded."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as img:
                width, height = int(img.width), int(img.height)
    except Image.DecompressionBombError as exc:
        raise parse_failed(
            f"The image has more pixels than allowed ({limits.max_image_pixels:,}); it looks like a "
            "decompression bomb."
        ) from exc
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise parse_failed("The image is damaged or truncated and cannot be read.") from exc
    if width * height > limits.max_image_pixels:
        raise parse_failed(
            f"The image is {width:,} × {height:,} pixels; the limit is {limits.max_image_pixels:,} pixels."
        )
    return width, height
