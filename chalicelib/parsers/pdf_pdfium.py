"""pdfium's calls for the PDF parser over plain addresses (ints) instead of pypdfium2's helper objects and
typed pointers (issues 12 and 27): the calls made once per page, text line or page object, where the
bindings' conversions and the helpers' finalizer bookkeeping cost as much as pdfium's own work. Used under
`pdf.PDFIUM_LOCK` (pdfium is not thread-safe)."""

from __future__ import annotations

import ctypes
import functools
import itertools
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Natives:
    """pdfium's per-page, per-line and per-object calls as foreign functions over plain addresses (ints).
    The generated bindings (`pypdfium2.raw`) convert every handle to and from a typed pointer object, which
    costs as much as the call itself when it runs once per text line or page object; pypdfium2's page and
    text page helpers add finalizer bookkeeping to every page (~30 us: 10% of a CJK page's reading)."""

    load_page: Any  # FPDF_LoadPage(document, i) -> page address or None
    close_page: Any
    load_textpage: Any  # FPDFText_LoadPage(page) -> text page address or None
    close_textpage: Any
    count_chars: Any  # FPDFText_CountChars(textpage) -> int, -1 on failure
    text_index: Any  # FPDFText_GetTextIndexFromCharIndex(textpage, char) -> int, -1 for excluded chars
    get_text: Any  # FPDFText_GetText(textpage, start, count, buffer) -> UTF-16 units written, NUL included
    count_objects: Any  # FPDFPage_CountObjects(page) -> int
    get_object: Any  # FPDFPage_GetObject(page, i) -> object address or None
    form_count_objects: Any
    form_get_object: Any
    object_type: Any  # FPDFPageObj_GetType(object) -> FPDF_PAGEOBJ_*, UNKNOWN for NULL
    font_size: Any  # FPDFText_GetFontSize(textpage, char) -> float
    char_origin: Any  # FPDFText_GetCharOrigin(textpage, char, &x, &y) -> bool; x, y as plain addresses
    text_object: Any  # FPDFText_GetTextObject(textpage, char) -> object address or None
    render_mode: Any  # FPDFTextObj_GetTextRenderMode(object) -> FPDF_TEXTRENDERMODE_*, UNKNOWN for NULL


@functools.cache
def natives(pdfium_c: Any) -> Natives:
    vp, c_int, c_double = ctypes.c_void_p, ctypes.c_int, ctypes.c_double

    def bind(function: Any, restype: Any, *argtypes: Any) -> Any:
        """For the calls made once per line or object: PYFUNCTYPE keeps the GIL over the call (pdfium
        never calls back into Python and runs under `pdf.PDFIUM_LOCK` anyway), 13% less per call than
        CFUNCTYPE's releasing and taking it again."""
        return ctypes.PYFUNCTYPE(restype, *argtypes)(address(function))

    def bind_long(function: Any, restype: Any, *argtypes: Any) -> Any:
        """For the calls that do a page's work (parse its content, build its text page): the GIL is
        let go, so other threads (heartbeats, progress) run meanwhile."""
        return ctypes.CFUNCTYPE(restype, *argtypes)(address(function))

    return Natives(
        load_page=bind_long(pdfium_c.FPDF_LoadPage, vp, vp, c_int),
        close_page=bind_long(pdfium_c.FPDF_ClosePage, None, vp),
        load_textpage=bind_long(pdfium_c.FPDFText_LoadPage, vp, vp),
        close_textpage=bind_long(pdfium_c.FPDFText_ClosePage, None, vp),
        count_chars=bind(pdfium_c.FPDFText_CountChars, c_int, vp),
        text_index=bind(pdfium_c.FPDFText_GetTextIndexFromCharIndex, c_int, vp, c_int),
        get_text=bind(pdfium_c.FPDFText_GetText, c_int, vp, c_int, c_int, vp),
        count_objects=bind(pdfium_c.FPDFPage_CountObjects, c_int, vp),
        get_object=bind(pdfium_c.FPDFPage_GetObject, vp, vp, c_int),
        form_count_objects=bind(pdfium_c.FPDFFormObj_CountObjects, c_int, vp),
        form_get_object=bind(pdfium_c.FPDFFormObj_GetObject, vp, vp, ctypes.c_ulong),
        object_type=bind(pdfium_c.FPDFPageObj_GetType, c_int, vp),
        font_size=bind(pdfium_c.FPDFText_GetFontSize, c_double, vp, c_int),
        char_origin=bind(pdfium_c.FPDFText_GetCharOrigin, c_int, vp, c_int, vp, vp),
        text_object=bind(pdfium_c.FPDFText_GetTextObject, vp, vp, c_int),
        render_mode=bind(pdfium_c.FPDFTextObj_GetTextRenderMode, c_int, vp),
    )


def address(handle: Any) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


def image_objects(page: Any, pdfium_c: Any) -> list[Any]:
    """The page's image objects as pypdfium2 objects (see `image_handles`)."""
    return wrap_images(page, image_handles(address(page.raw), pdfium_c), pdfium_c)


def wrap_images(page: Any, handles: list[tuple[int, int]], pdfium_c: Any) -> list[Any]:
    import pypdfium2 as pdfium

    handle_type = pdfium_c.FPDF_PAGEOBJECT
    return [
        pdfium.PdfObject(ctypes.cast(handle, handle_type), page=page, pdf=page.pdf, level=level)
        for handle, level in handles
    ]


def image_handles(page: int, pdfium_c: Any) -> list[tuple[int, int]]:
    """The page's image objects (address, nesting level): see `walk_objects`."""
    return walk_objects(page, pdfium_c)[0]


def walk_objects(page: int, pdfium_c: Any, max_depth: int = 4) -> tuple[list[tuple[int, int]], bool | None]:
    """The page's image objects (address, nesting level), in `page.get_objects(filter=(image,),
    max_depth=4)` order (depth-first, Form XObjects descended to `max_depth` levels), and whether any of
    its top-level text objects is drawn invisibly: None when the page has a Form XObject (text inside one
    is not among the top-level objects). Walks the raw handles: `get_objects` builds a Python object for
    every page object (tens of thousands on a text page). Each object's text render mode is asked first:
    it is UNKNOWN for every object but text, so only those are asked their type (CJK pages: about one text
    object a line, and two pdfium calls an object instead of three)."""
    import pypdfium2 as pdfium

    fn = natives(pdfium_c)
    image, form = pdfium_c.FPDF_PAGEOBJ_IMAGE, pdfium_c.FPDF_PAGEOBJ_FORM
    not_text, invisible_mode = pdfium_c.FPDF_TEXTRENDERMODE_UNKNOWN, pdfium_c.FPDF_TEXTRENDERMODE_INVISIBLE
    out: list[tuple[int, int]] = []
    invisible: bool | None = None

    def walk(count: Any, get: Any, parent: int, level: int) -> None:
        nonlocal invisible
        n = count(parent)
        if n < 0:
            raise pdfium.PdfiumError("Failed to get number of pageobjects.")
        handles = list(map(get, itertools.repeat(parent, n), range(n)))
        modes = list(map(fn.render_mode, handles))  # NULL → UNKNOWN
        if not_text not in modes:  # text objects only
            if level == 0:
                invisible = invisible_mode in modes
            return
        others = [i for i, mode in enumerate(modes) if mode == not_text]
        if None in handles:
            raise pdfium.PdfiumError("Failed to get pageobject.")
        kinds = list(map(fn.object_type, [handles[i] for i in others]))
        if level == 0 and form not in kinds:
            invisible = invisible_mode in modes
        if image not in kinds and form not in kinds:  # most pages: nothing to collect
            return
        for i, kind in zip(others, kinds, strict=True):
            if kind == image:
                out.append((handles[i], level))
            elif kind == form and level < max_depth - 1:
                walk(fn.form_count_objects, fn.form_get_object, handles[i], level + 1)

    walk(fn.count_objects, fn.get_object, page, 0)
    return out, invisible


@functools.cache
def _byte_array(size: int) -> Any:
    """`ctypes.c_char * size`, made once per size: making an array type costs ~20 us, more than reading a
    CJK page's text (callers round sizes up to a power of two)."""
    return ctypes.c_char * size


def page_text(textpage: int, fn: Natives) -> str:
    """The text page's text, as `PdfTextPage.get_text_range()` gives it (excluded characters at either end
    left out of the range: pdfium would read past it, crbug.com/pdfium/2079), over plain addresses."""
    import pypdfium2 as pdfium

    count = fn.count_chars(textpage)
    if count < 0:
        raise pdfium.PdfiumError("Failed to get character count.")
    first, last = 0, count - 1
    while first <= last and fn.text_index(textpage, first) == -1:
        first += 1
    while first <= last and fn.text_index(textpage, last) == -1:
        last -= 1
    if first > last:
        return ""
    units = fn.text_index(textpage, last) + 2 - fn.text_index(textpage, first)  # NUL included
    buffer = _byte_array(1 << (2 * units - 1).bit_length())()
    written = fn.get_text(textpage, first, last - first + 1, ctypes.addressof(buffer))
    if written > units:
        raise pdfium.PdfiumError(f"pdfium wrote {written} characters into a buffer of {units}.")
    return ctypes.string_at(buffer, 2 * max(written - 1, 0)).decode("utf-16-le", errors="ignore")
