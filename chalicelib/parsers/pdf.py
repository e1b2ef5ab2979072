"""PDF with pypdfium2 (WeKnora `DR/parser/pdf`): per-page scanned detection, scanned pages rendered to
JPEG (and OCR'd when an engine is given), native pages as text with repeating headers/footers removed,
and large figures kept as images. WeKnora's rule for a page with an image over 10% of it and under 10
characters (a scan) holds in a PDF without a text layer; in one whose pages are mostly text, such a page is
a figure page whose figures are kept instead of a render of it (`_Page.sparse`).

Over 600 lines, kept whole: the text lines, their running headers and headings, the figures and the page
renders all read one pdfium document under one lock, in one pass per page; split, each part would take the
handles, the lock and the page loop's state as arguments (the pdfium calls themselves are in pdf_pdfium)."""

from __future__ import annotations

import ctypes
import gc
import hashlib
import io
import itertools
import re
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from chalicelib.parsers.base import ParseContext, parse_failed
from chalicelib.parsers.pdf_columns import in_column_order
from chalicelib.parsers.pdf_figures import figure_image
from chalicelib.parsers.pdf_forms import form_fields_markdown
from chalicelib.parsers.pdf_pdfium import (
    Handle,
    RawImage,
    address,
    image_handles,
    natives,
    page_size,
    page_text,
    walk_objects,
)
from chalicelib.parsers.progress import report
from chalicelib.ports import ParsedImage, ReadRequest, ReadResult

PDFIUM_LOCK = threading.Lock()  # pdfium is not thread-safe
SCAN_DPI = 200
SCAN_MAX_PX = 2000
SCAN_JPEG_QUALITY = 85
FIGURE_MIN_PX = 80
FIGURE_MIN_AREA = 0.01
FIGURE_REPEAT_SHARE = 0.5
# Figures made into image files while their page is loaded anyway (the rest wait for the second pass):
# the most a parse keeps, plus room for the repeated ones (logos) that are dropped later.
FIGURE_EARLY_EXTRA = 10
_DIGITS = re.compile(r"\d+")
# Runs of spaces, tabs and no-break spaces that are not already one plain space (those stay as they are).
_SPACES = re.compile(r" [ \t\u00a0]+|[\t\u00a0][ \t\u00a0]*")


@dataclass
class _Page:
    index: int
    text: str = ""
    scanned: bool = False
    # WeKnora's other scan rule: an image over 10-50% of the page and under 10 characters. A scan in a
    # document without a text layer; in one with a text layer a figure page (a screenshot under the running
    # header), whose figures carry its content: rendered only when none of them is kept.
    sparse: bool = False
    height: float = 0.0  # page height (PDF units), for where its running headers and footers are
    figures: list[tuple[int, str]] = field(default_factory=list)  # (object index, content key)


def _open(data: bytes, password: str | None) -> object:
    import pypdfium2 as pdfium

    try:
        return pdfium.PdfDocument(data, password=password)
    except pdfium.PdfiumError as exc:
        text = str(exc).lower()
        if "password" in text:
            raise parse_failed(
                "The PDF is password-protected; remove the password (or give it in the options) and upload "
                "it again."
            ) from exc
        raise parse_failed("The PDF is damaged or truncated and cannot be opened.") from exc


def _image_coverage(size: tuple[float, float], objs: list[Any]) -> float:
    if not objs:
        return 0.0
    width, height = size
    area = max(width * height, 1.0)
    covered = 0.0
    for obj in objs:
        left, bottom, right, top = obj.get_bounds()
        left, right = max(0.0, left), min(width, right)
        bottom, top = max(0.0, bottom), min(height, top)
        if right > left and top > bottom:
            covered += (right - left) * (top - bottom)
    return min(covered / area, 1.0)


@dataclass(slots=True)
class _Line:
    text: str
    size: float = 0.0  # font size of the line's first character (0 when unknown)
    base: float = 0.0  # baseline y of that character (PDF units, grows upwards)
    hidden: bool = False  # drawn with the invisible text render mode


_LINE = re.compile(r"[^\r\n]+")
# From the first non-blank character of a line to its end: one match per non-blank `_LINE` line, starting
# where that line starts once `str.lstrip` has taken its leading whitespace (`\S` never matches a break).
_LINE_START = re.compile(r"\S[^\r\n]*")
_TOC_LINE = re.compile(r"(\.\s?){3,}\s*[\divxlc]+$|\s\d{1,4}$")


_MATCH_START = re.Match.start


class _Rounded(dict[float, float]):
    """`round(size, 1)` of pdfium's font sizes, remembered: a page has many lines and few sizes."""

    def __missing__(self, size: float) -> float:
        self[size] = rounded = round(size, 1)
        return rounded


_ROUNDED = _Rounded()


def _toc_line(text: str) -> bool:
    """`_TOC_LINE.search(text)`, skipped for lines that cannot match (they must end in a digit or ivxlc)."""
    end = text[-1:]
    return (end.isdigit() or end in "ivxlc") and end != "" and _TOC_LINE.search(text) is not None


_BULLET_FIRST = "•◦▪‣∙·●○■□–"
_BULLET = re.compile(rf"^[{_BULLET_FIRST}]\s*")


def _read_lines(page: int, pdfium_c: Any, invisible_objects: bool | None, width: float) -> list[_Line]:
    """`_page_lines` of a page (address; `width`: its width, page_size), its text page loaded and closed
    here."""
    import pypdfium2 as pdfium

    fn = natives(pdfium_c)
    textpage = fn.load_textpage(page)
    if not textpage:
        raise pdfium.PdfiumError("Failed to load text page.")
    try:
        return _page_lines(textpage, pdfium_c, invisible_objects, width)
    finally:
        fn.close_textpage(textpage)


def _page_lines(
    textpage: int, pdfium_c: Any, invisible_objects: bool | None = None, width: float = 0.0
) -> list[_Line]:
    """Text lines in pdfium's reading order, each with the font size and baseline of its first glyph
    (one pdfium call each per line, none per character) and whether it is drawn invisibly. `textpage`:
    the text page's address; `invisible_objects`: whether any of the page's text objects is drawn
    invisibly, when known (`walk_objects`, which asks every object's render mode anyway): when none is,
    the two calls a line that find each line's object and its render mode are left out. `width`: the
    page's width, for reading a two-column page column by column (`in_column_order`; 0: pdfium's order)."""
    fn = natives(pdfium_c)
    raw = page_text(textpage, fn)
    tp = Handle(textpage)  # the per-line calls are unchecked: a handle, not an int (`Natives`)
    # One normalising pass over the page: spaces never become line breaks, so the page's non-blank lines
    # and the normalised page's pair up one to one (offsets into `raw` come from the first).
    clean = raw
    if "  " in clean or "\t" in clean or "\xa0" in clean:  # most pages have nothing to collapse
        clean = _SPACES.sub(" ", clean)
    clean = clean.replace("\x02", "-").replace("\ufffe", "-")
    texts = [text for text in map(str.strip, _LINE.findall(clean)) if text]
    if len(raw) != fn.count_chars(tp):  # char indexes do not line up with string offsets
        return [_Line(text) for text in texts]
    starts = list(map(_MATCH_START, _LINE_START.finditer(raw)))
    if len(_ROUNDED) > 4096:  # sizes are few in a document; many documents would grow it without end
        _ROUNDED.clear()
    sizes = list(map(_ROUNDED.__getitem__, map(fn.font_size, itertools.repeat(tp), starts)))
    x, y = ctypes.c_double(), ctypes.c_double()
    px, py, origin = ctypes.byref(x), ctypes.byref(y), fn.char_origin
    bases = [y.value if origin(tp, idx, px, py) else 0.0 for idx in starts]
    lines = list(itertools.starmap(_Line, zip(texts, sizes, bases, strict=True)))
    if invisible_objects is False:
        return in_column_order(lines, raw, starts, tp, fn, width)
    invisible = pdfium_c.FPDF_TEXTRENDERMODE_INVISIBLE
    modes = list(map(fn.render_mode, map(fn.text_object, itertools.repeat(tp), starts)))  # NULL: UNKNOWN
    if invisible in modes:
        for line, mode in zip(lines, modes, strict=True):
            line.hidden = mode == invisible
    return in_column_order(lines, raw, starts, tp, fn, width)


def _body_size(pages: list[list[_Line]]) -> float:
    weight: Counter[float] = Counter()
    for lines in pages:
        for ln in lines:
            if ln.size > 0:
                weight[ln.size] += len(ln.text)
    return weight.most_common(1)[0][0] if weight else 0.0


#: running headers and footers sit in the page's top or bottom fifth (LaTeX's page numbers: 11-17% up)
EDGE_BAND = 0.2
#: ... set apart from the body: at least this many times their font size from the next line in
#: (headers and footers sit 3x away and more; body lines 1.2-1.5x)
EDGE_SEPARATION = 1.8
#: ... and at the same distance from the page edge on the pages they repeat on, to this many points
EDGE_TOLERANCE = 3.0


def _edge_lines(lines: list[_Line], height: float) -> list[tuple[int, str, float]]:
    """The page's lines that may be a running header or footer: among its first two and last two, those in
    the top or bottom band of the page, set apart from the body (the line after a top block, before a
    bottom one, is `EDGE_SEPARATION` sizes away), as (index, key, place): the key is the text with its
    digits blanked, by edge; the place its distance from that edge. Lines without a known position
    (size 0) are never taken: body text at the top of a short page repeats as much as a header does."""
    n = len(lines)
    out: list[tuple[int, str, float]] = []
    if height <= 0 or n < 2:
        return out
    band = height * EDGE_BAND
    for edge, order in (("top", (0, 1)), ("bottom", (n - 1, n - 2))):
        block: list[tuple[int, float]] = []
        for i in order:
            line = lines[i]
            place = height - line.base if edge == "top" else line.base
            if line.size <= 0 or not 0 <= place <= band:
                break
            block.append((i, place))
        # the block ends at the first line that is not in the band, or that is set apart from the next
        while block:
            last = block[-1][0]
            inner = last + 1 if edge == "top" else last - 1
            if not 0 <= inner < n:
                block.pop()
                continue
            if abs(lines[last].base - lines[inner].base) >= EDGE_SEPARATION * lines[last].size:
                break
            block.pop()
        taken = {i for i, _, _ in out}  # a page of three lines: its middle one is in both blocks
        out.extend(
            (i, f"{edge}:{_DIGITS.sub('#', lines[i].text)}", place) for i, place in block if i not in taken
        )
    return out


def _repeating_lines(pages: list[list[_Line]], heights: list[float]) -> dict[str, float]:
    """Edge lines (`_edge_lines`) that repeat, digits aside, at the same place on at least half the pages
    (running headers, footers): their key and place. Lines set larger than the body text are headings,
    never running headers."""
    if len(pages) < 3:
        return {}
    body = _body_size(pages)
    places: dict[str, list[float]] = {}
    for lines, height in zip(pages, heights, strict=True):
        for i, key, place in _edge_lines(lines, height):
            if not (body and lines[i].size > body * 1.15) and len(lines[i].text) < 120:
                places.setdefault(key, []).append(place)
    threshold = max(2, len(pages) // 2)
    repeating: dict[str, float] = {}
    for key, found in places.items():
        if len(found) < threshold:
            continue
        common = sorted(found)[len(found) // 2]
        if sum(abs(place - common) <= EDGE_TOLERANCE for place in found) >= threshold:
            repeating[key] = common
    return repeating


def _strip_repeating(lines: list[_Line], height: float, repeating: dict[str, float]) -> list[_Line]:
    """The page without its edge lines (`_edge_lines`) that repeat at their place (unless set larger than
    the page's body text), the body size looked at only when one does; a page that would lose every line
    keeps them all (a short page of a template: an invoice)."""
    if not repeating or not lines:
        return lines
    drop = {
        i
        for i, key, place in _edge_lines(lines, height)
        if key in repeating and abs(place - repeating[key]) <= EDGE_TOLERANCE
    }
    if drop:
        # the body size is at least the page's smallest: a line not over 1.15x that is never too large
        smallest = min((ln.size for ln in lines if ln.size > 0), default=0.0)
        if any(lines[i].size > smallest * 1.15 for i in drop):
            body = _body_size([lines])
            drop = {i for i in drop if not (body and lines[i].size > body * 1.15)}
    if not drop or len(drop) == len(lines):
        return lines
    return [ln for i, ln in enumerate(lines) if i not in drop]


def _heading_levels(pages: list[list[_Line]]) -> dict[float, int]:
    """Font sizes clearly above the body size → heading levels 1-3 (largest first)."""
    weight: Counter[float] = Counter()
    for lines in pages:
        for ln in lines:
            if ln.size > 0:
                weight[ln.size] += len(ln.text)
    if not weight:
        return {}
    body = weight.most_common(1)[0][0]
    total = sum(weight.values())
    sizes = sorted((s for s in weight if s >= body * 1.15 and weight[s] < total * 0.3), reverse=True)
    return {size: min(i + 1, 3) for i, size in enumerate(sizes)}


def _join(prev: str, nxt: str) -> str:
    if prev.endswith("-") and nxt[:1].islower() and len(prev) > 1 and prev[-2].isalpha():
        return prev[:-1] + nxt  # a word broken at the line end
    return f"{prev} {nxt}"


def _page_markdown(lines: list[_Line], levels: dict[float, int]) -> str:
    """Lines → paragraphs (split on size changes and wide line gaps), headings promoted by font size."""
    pitches = sorted(
        a.base - b.base
        for a, b in itertools.pairwise(lines)
        if a.size and abs(a.size - b.size) < 0.3 and 0 < a.base - b.base < 3 * a.size
    )
    pitch = pitches[(len(pitches) - 1) // 2] if pitches else 0.0  # lower median: few lines, gaps skew up
    # the paragraphs' heading levels (0: body text) and texts, in two lists (no tuple rebuilt per join)
    block_levels: list[int] = []
    blocks: list[str] = []
    prev: _Line | None = None
    gap = pitch * 1.35
    get_level = levels.get
    for line in lines:
        text = line.text
        level = get_level(line.size, 0)
        bullet = _BULLET.match(text) if text[0] in _BULLET_FIRST else None
        # cheapest tests first; the table-of-contents regex only when the line would join its predecessor
        if (
            prev is not None
            and pitch > 0
            and 0 < prev.base - line.base <= gap
            and abs(prev.size - line.size) < 0.3
            and not bullet
            and (level == 0 or len(blocks[-1]) < 150)
            and not _toc_line(prev.text)
        ):
            blocks[-1] = _join(blocks[-1], text)
        else:
            block_levels.append(level)
            blocks.append("- " + text[bullet.end() :] if bullet else text)
        prev = line
    out: list[str] = []
    for level, text in zip(block_levels, blocks, strict=True):
        if level and len(text) <= 150 and any(ch.isalpha() for ch in text):
            out.append(f"{'#' * level} {text}")
        else:
            out.append(text)
    return "\n\n".join(out)


def _render_page(page: object) -> bytes:
    width, height = page.get_size()  # type: ignore[attr-defined]
    scale = SCAN_DPI / 72.0
    longest = max(width, height) * scale
    if longest > SCAN_MAX_PX:
        scale *= SCAN_MAX_PX / longest
    # RGB byte order straight from pdfium (the default BGR costs PIL a channel swap and a copy)
    bitmap = page.render(scale=scale, rev_byteorder=True)  # type: ignore[attr-defined]
    image = bitmap.to_pil()
    if image.mode != "RGB":
        image = image.convert("RGB")
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=SCAN_JPEG_QUALITY)
    return buf.getvalue()


def _has_text_layer(pages: list[_Page]) -> bool:
    """Whether most pages of the parse are text pages (neither scans nor sparse figure pages)."""
    text_pages = sum(1 for info in pages if not (info.scanned or info.sparse))
    return text_pages * 2 > len(pages)


def _page_figures(
    pdf: Any,
    index: int,
    keep: list[tuple[int, str]],
    figure_files: dict[str, tuple[bytes, str] | None],
    room: int,
    pdfium_c: Any,
    document: bytes,
) -> list[tuple[bytes, str]]:
    """Up to `room` image files of a page's figures (object index, content key), in order, from the
    first pass's files, or made now (the page loaded again) for those the first pass left over its budget.
    Figures pdfium cannot decode are left out."""
    import pypdfium2 as pdfium

    fn = natives(pdfium_c)
    out: list[tuple[bytes, str]] = []
    page = None  # the page's address, loaded for the first figure not made yet
    objs: list[RawImage] = []
    try:
        for k, key in keep:
            if len(out) >= room:
                break
            if key in figure_files:
                figure = figure_files[key]
            else:
                if page is None:
                    page = fn.load_page(address(pdf.raw), index)
                    if not page:
                        raise pdfium.PdfiumError("Failed to load page.")
                    objs = [
                        RawImage(h, page, level, fn, pdfium_c) for h, level in image_handles(page, pdfium_c)
                    ]
                if k >= len(objs):
                    break
                figure = figure_image(objs[k], pdfium_c, document=document)
            if figure is not None:
                out.append(figure)
    finally:
        if page:
            fn.close_page(page)
    return out


def _pages_done(number: int, first: int, last: int, ocr_pages: int) -> dict[str, int]:
    """Pages of this parse done up to page `number` (1-based), for the live progress."""
    return {"pages_parsed": number - first, "pages_total": last - first, "pages_ocr": ocr_pages}


def page_range(options: Mapping[str, Any], n_pages: int) -> tuple[int, int]:
    """`options["page_range"]` (0-based start, end excluded) clipped to the document; all pages without it.
    Running headers, heading sizes and repeated figures are then learnt from the range's own pages."""
    wanted = options.get("page_range")
    if not wanted:
        return 0, n_pages
    start, end = (int(x) for x in wanted)
    start, end = max(0, start), min(n_pages, end)
    if start >= end:
        raise parse_failed(f"The page range {start + 1}-{end} is outside the PDF's {n_pages} pages.")
    return start, end


def count_pages(data: bytes, password: str | None = None) -> int:
    with PDFIUM_LOCK:
        pdf = _open(data, password)
        try:
            return len(pdf)  # type: ignore[arg-type]
        finally:
            pdf.close()  # type: ignore[attr-defined]


def parse_pdf(request: ReadRequest, ctx: ParseContext) -> ReadResult:
    import pypdfium2.raw as pdfium_c

    force_scanned = bool(ctx.options.get("pdf_force_scanned"))
    password = ctx.options.get("pdf_password") or None
    with PDFIUM_LOCK, _without_cycle_collection():
        pdf = _open(request.data, password)
        try:
            return _parse_open(pdf, request, ctx, force_scanned, pdfium_c)
        finally:
            pdf.close()  # type: ignore[attr-defined]


@contextmanager
def _without_cycle_collection() -> Iterator[None]:
    """The cyclic garbage collector paused for a parse: a PDF's parse makes tens of thousands of lines and
    lists, none in a cycle (freed by reference counting), and the collections they set off find nothing:
    3% of a CJK manual's parse (issue 27). Whatever a cycle holds meanwhile is collected once it resumes."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _parse_open(
    pdf: object, request: ReadRequest, ctx: ParseContext, force_scanned: bool, pdfium_c: Any
) -> ReadResult:
    import pypdfium2 as pdfium

    n_pages = len(pdf)  # type: ignore[arg-type]
    if n_pages == 0:
        raise parse_failed("The PDF has no pages.")
    if n_pages > ctx.limits.max_pages:
        raise parse_failed(f"The PDF has {n_pages} pages; the limit is {ctx.limits.max_pages}.")
    first, last = page_range(ctx.options, n_pages)
    pages: list[_Page] = []
    page_lines: list[list[_Line]] = []
    figure_pages: dict[str, set[int]] = {}
    figure_files: dict[str, tuple[bytes, str] | None] = {}  # content key → image file (None: undecodable)
    early_budget = ctx.limits.max_images + FIGURE_EARLY_EXTRA
    fn = natives(pdfium_c)
    document = address(pdf.raw)  # type: ignore[attr-defined]
    for i in range(first, last):
        ctx.check_time("the PDF")
        info = _Page(i)
        lines: list[_Line] = []
        raw_page = None  # the page's address (no pypdfium2 helpers: `RawImage`)
        try:
            raw_page = fn.load_page(document, i)
            if not raw_page:
                raise pdfium.PdfiumError("Failed to load page.")
            handles, invisible_objects = walk_objects(raw_page, pdfium_c)
            size = page_size(raw_page, fn)
            lines = _read_lines(raw_page, pdfium_c, invisible_objects, size[0])
            objs = [RawImage(handle, raw_page, level, fn, pdfium_c) for handle, level in handles]
            info.height = size[1]
            coverage = _image_coverage(size, objs)
            info.scanned = force_scanned
            if not info.scanned and coverage >= 0.1:  # below that, no amount of text makes it a scan
                chars = sum(len(ln.text) for ln in lines)
                info.scanned = coverage >= 0.5 and chars < 200
                info.sparse = not info.scanned and chars < 10
            if info.scanned:
                lines = []
            elif coverage < 0.5:
                # Invisible text over a page image is its OCR layer (kept); anywhere else it is hidden text.
                lines = [ln for ln in lines if not ln.hidden]
            if not info.scanned and objs:
                width, height = size
                for k, obj in enumerate(objs):
                    w_px, h_px = obj.get_px_size()
                    left, bottom, right, top = obj.get_bounds()
                    share = (right - left) * (top - bottom) / max(width * height, 1.0)
                    if w_px * h_px > ctx.limits.max_image_pixels:
                        continue  # decoding it would need its full size in memory: not kept as a figure
                    if w_px >= FIGURE_MIN_PX and h_px >= FIGURE_MIN_PX and share >= FIGURE_MIN_AREA:
                        raw = memoryview(obj.get_data(decode_simple=False))  # a ctypes array
                        key = f"{hashlib.sha1(raw[:65536]).hexdigest()}:{len(raw)}"
                        info.figures.append((k, key))
                        figure_pages.setdefault(key, set()).add(i)
                        if key not in figure_files and len(figure_files) < early_budget:
                            figure_files[key] = figure_image(obj, pdfium_c, raw, request.data)
        except pdfium.PdfiumError:  # WeKnora: a page pdfium cannot read → treat the page as an image
            info.scanned = True
        finally:
            if raw_page:
                fn.close_page(raw_page)
        pages.append(info)
        page_lines.append(lines)

    if not _has_text_layer(pages):
        for info in pages:
            if info.sparse:  # a scan by WeKnora's rule, as before its figures were looked at
                info.sparse, info.scanned = False, True
                for _, key in info.figures:
                    figure_pages[key].discard(info.index)
                info.figures = []
        page_lines = [[] if info.scanned else lines for info, lines in zip(pages, page_lines, strict=True)]
    text_pages = [(ln, p.height) for p, ln in zip(pages, page_lines, strict=True) if not p.scanned]
    repeating = _repeating_lines([ln for ln, _ in text_pages], [height for _, height in text_pages])
    page_lines = [_strip_repeating(ln, p.height, repeating) for p, ln in zip(pages, page_lines, strict=True)]
    levels = _heading_levels(page_lines)
    repeated_figures = {
        k
        for k, on in figure_pages.items()
        if last - first > 1 and len(on) >= max(2, (last - first) * FIGURE_REPEAT_SHARE)
    }
    parts: list[str] = []
    images: list[ParsedImage] = []
    scanned_pages: list[int] = []
    unreadable_pages: list[int] = []
    ocr = ctx.ocr if ctx.ocr is not None and ctx.ocr.available() else None
    figures_kept = 0  # against max_images; a sparse page's figures stand in for its render, as uncapped
    figure_number = 0
    for info, lines in zip(pages, page_lines, strict=True):
        ctx.check_time("the PDF")
        number = info.index + 1
        kept: list[tuple[bytes, str]] = []
        if not info.scanned:
            keep = [(k, key) for k, key in info.figures if key not in repeated_figures]
            room = len(keep) if info.sparse else ctx.limits.max_images - figures_kept
            kept = (
                _page_figures(pdf, info.index, keep, figure_files, room, pdfium_c, request.data)
                if keep and room > 0
                else []
            )
        if info.scanned or (info.sparse and not kept):
            try:
                page = pdf[info.index]  # type: ignore[index]
                try:
                    jpeg = _render_page(page)
                finally:
                    page.close()
            # neither its text nor its picture reads: this page is lost, not the file
            except pdfium.PdfiumError:
                unreadable_pages.append(number)
                report(_pages_done(number, first, last, len(scanned_pages)))
                continue
            scanned_pages.append(number)
            ref = f"pdf-page-{number}.jpg"
            text = ocr.recognize(jpeg).strip() if ocr is not None else ""
            if text:
                parts.append(text)
            else:
                parts.append(f"![page {number}]({ref})")
                images.append(
                    ParsedImage(ref=ref, data=jpeg, mime_type="image/jpeg", page=number, tag="scanned_pdf")
                )
            report(_pages_done(number, first, last, len(scanned_pages)), force=ocr is not None)
            continue
        text = _page_markdown(lines, levels)
        for data, mime in kept:
            if not info.sparse:
                figures_kept += 1
            figure_number += 1
            ref = f"pdf-image-p{number}-{figure_number}.{'jpg' if mime == 'image/jpeg' else 'png'}"
            images.append(ParsedImage(ref=ref, data=data, mime_type=mime, page=number))
            text = f"{text}\n\n![]({ref})" if text else f"![]({ref})"
        if text:
            parts.append(text)
        report(_pages_done(number, first, last, len(scanned_pages)))
    fields = form_fields_markdown(pdf, first, last, pdfium_c, ctx.check_time)
    if fields:
        parts.append(fields)
    markdown = "\n\n".join(parts).strip()
    metadata = {"pages": n_pages, "scanned_pages": scanned_pages, "ocr_engine": ocr.name if ocr else ""}
    if (first, last) != (0, n_pages):
        metadata["page_range"] = [first, last]
    if unreadable_pages:
        metadata["unreadable_pages"] = unreadable_pages
    return ReadResult(markdown=markdown + "\n" if markdown else "", images=images, metadata=metadata)
