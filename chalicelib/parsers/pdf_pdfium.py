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


class Handle(ctypes.c_void_p):
    """A pdfium handle for the unchecked calls (`Natives`): passed as it is, and returned as it is (ctypes
    turns a plain `c_void_p` result into an int, which an unchecked call would pass as a C int)."""


@dataclass(frozen=True)
class Natives:
    """pdfium's per-page, per-line and per-object calls as foreign functions over plain addresses (ints).
    The generated bindings (`pypdfium2.raw`) convert every handle to and from a typed pointer object, which
    costs as much as the call itself when it runs once per text line or page object; pypdfium2's page and
    text page helpers add finalizer bookkeeping to every page (~30 us: 10% of a CJK page's reading).

    The calls made once per line or object are unchecked: declared without argument types, so ctypes
    converts nothing (40% less a call than with `c_void_p, c_int` argument types, issue 27). Their
    arguments must therefore be given as C passes them: a handle as a `Handle` (or `c_void_p`), an `int`
    parameter as a Python int, an out-parameter as `ctypes.byref`, a buffer as a ctypes array. A Python int
    in a pointer's place would be cut to 32 bits: only the functions of this module and `pdf._page_lines`
    call them, each making its handles from the addresses it is given."""

    load_page: Any  # FPDF_LoadPage(document, i) -> page address or None (checked)
    close_page: Any  # (checked)
    load_textpage: Any  # FPDFText_LoadPage(page) -> text page address or None (checked)
    close_textpage: Any  # (checked)
    count_chars: Any  # FPDFText_CountChars(textpage) -> int, -1 on failure
    text_index: Any  # FPDFText_GetTextIndexFromCharIndex(textpage, char) -> int, -1 for excluded chars
    get_text: Any  # FPDFText_GetText(textpage, start, count, buffer) -> UTF-16 units written, NUL included
    # FPDFText_GetBoundedText(textpage, left, top, right, bottom, buffer, size) -> UTF-16 units in the
    # rectangle (NULL, 0: counted, none written; checked: doubles)
    bounded_text: Any
    count_objects: Any  # FPDFPage_CountObjects(page) -> int
    get_object: Any  # FPDFPage_GetObject(page, i) -> Handle (NULL: false)
    form_count_objects: Any  # FPDFFormObj_CountObjects(form) -> int
    form_get_object: Any  # FPDFFormObj_GetObject(form, i) -> Handle (checked: i is an unsigned long)
    object_type: Any  # FPDFPageObj_GetType(object) -> FPDF_PAGEOBJ_*, UNKNOWN for NULL
    font_size: Any  # FPDFText_GetFontSize(textpage, char) -> float
    char_origin: Any  # FPDFText_GetCharOrigin(textpage, char, byref(x), byref(y)) -> bool
    text_object: Any  # FPDFText_GetTextObject(textpage, char) -> Handle (NULL: false)
    render_mode: Any  # FPDFTextObj_GetTextRenderMode(object) -> FPDF_TEXTRENDERMODE_*, UNKNOWN for NULL
    page_width: Any  # FPDF_GetPageWidthF(page) -> float
    page_height: Any  # FPDF_GetPageHeightF(page) -> float
    object_bounds: Any  # FPDFPageObj_GetBounds(object, byref(left), byref(bottom), ...) -> bool
    image_px_size: Any  # FPDFImageObj_GetImagePixelSize(image, byref(width), byref(height)) -> bool
    image_metadata: Any  # FPDFImageObj_GetImageMetadata(image, page, byref(metadata)) -> bool
    image_data_raw: Any  # FPDFImageObj_GetImageDataRaw(image, buffer, size) -> size (checked: unsigned long)
    image_data_decoded: Any  # FPDFImageObj_GetImageDataDecoded(image, buffer, size) -> size (checked)
    image_filter_count: Any  # FPDFImageObj_GetImageFilterCount(image) -> int
    image_filter: Any  # FPDFImageObj_GetImageFilter(image, i, buffer, size) -> size (checked)


@functools.cache
def natives(pdfium_c: Any) -> Natives:
    vp, c_int, c_double, ulong = ctypes.c_void_p, ctypes.c_int, ctypes.c_double, ctypes.c_ulong

    def unchecked(function: Any, restype: Any) -> Any:
        """For the calls made once per line or object: no argument types (see `Natives`), and PYFUNCTYPE
        keeps the GIL over the call (pdfium never calls back into Python and runs under
        `pdf.PDFIUM_LOCK` anyway; 13% less a call than CFUNCTYPE's letting it go and taking it again)."""
        return ctypes.PYFUNCTYPE(restype)(address(function))

    def checked(function: Any, restype: Any, *argtypes: Any) -> Any:
        """Unchecked's GIL-keeping call with argument types, for the few whose unsigned long arguments a
        Python int would not pass as C does."""
        return ctypes.PYFUNCTYPE(restype, *argtypes)(address(function))

    def bind_long(function: Any, restype: Any, *argtypes: Any) -> Any:
        """For the calls that do a page's work (parse its content, build its text page): argument types
        checked, and the GIL let go, so other threads (heartbeats, progress) run meanwhile."""
        return ctypes.CFUNCTYPE(restype, *argtypes)(address(function))

    return Natives(
        load_page=bind_long(pdfium_c.FPDF_LoadPage, vp, vp, c_int),
        close_page=bind_long(pdfium_c.FPDF_ClosePage, None, vp),
        load_textpage=bind_long(pdfium_c.FPDFText_LoadPage, vp, vp),
        close_textpage=bind_long(pdfium_c.FPDFText_ClosePage, None, vp),
        count_chars=unchecked(pdfium_c.FPDFText_CountChars, c_int),
        text_index=unchecked(pdfium_c.FPDFText_GetTextIndexFromCharIndex, c_int),
        get_text=unchecked(pdfium_c.FPDFText_GetText, c_int),
        bounded_text=checked(
            pdfium_c.FPDFText_GetBoundedText, c_int, vp, c_double, c_double, c_double, c_double, vp, c_int
        ),
        count_objects=unchecked(pdfium_c.FPDFPage_CountObjects, c_int),
        get_object=unchecked(pdfium_c.FPDFPage_GetObject, Handle),
        form_count_objects=unchecked(pdfium_c.FPDFFormObj_CountObjects, c_int),
        form_get_object=checked(pdfium_c.FPDFFormObj_GetObject, Handle, vp, ulong),
        object_type=unchecked(pdfium_c.FPDFPageObj_GetType, c_int),
        font_size=unchecked(pdfium_c.FPDFText_GetFontSize, c_double),
        char_origin=unchecked(pdfium_c.FPDFText_GetCharOrigin, c_int),
        text_object=unchecked(pdfium_c.FPDFText_GetTextObject, Handle),
        render_mode=unchecked(pdfium_c.FPDFTextObj_GetTextRenderMode, c_int),
        page_width=unchecked(pdfium_c.FPDF_GetPageWidthF, ctypes.c_float),
        page_height=unchecked(pdfium_c.FPDF_GetPageHeightF, ctypes.c_float),
        object_bounds=unchecked(pdfium_c.FPDFPageObj_GetBounds, c_int),
        image_px_size=unchecked(pdfium_c.FPDFImageObj_GetImagePixelSize, c_int),
        image_metadata=unchecked(pdfium_c.FPDFImageObj_GetImageMetadata, c_int),
        image_data_raw=checked(pdfium_c.FPDFImageObj_GetImageDataRaw, ulong, vp, vp, ulong),
        image_data_decoded=checked(pdfium_c.FPDFImageObj_GetImageDataDecoded, ulong, vp, vp, ulong),
        image_filter_count=unchecked(pdfium_c.FPDFImageObj_GetImageFilterCount, c_int),
        image_filter=checked(pdfium_c.FPDFImageObj_GetImageFilter, ulong, vp, c_int, vp, ulong),
    )


def address(handle: Any) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


class RawImage:
    """An image object of a loaded page, over plain addresses: the calls `pypdfium2.PdfImage` makes for
    `pdf._parse_open` and `pdf_figures.figure_image`, with its results and errors, without the page and
    object helpers (their creation and finalizer bookkeeping: about a third of a figure's cost on a CJK
    manual, issue 27). A `PdfImage` of it would not do: with no page helper it counts as a loose object and
    destroys it when collected."""

    __slots__ = ("fn", "handle", "level", "page", "pdfium_c")

    def __init__(self, image: int, page: int, level: int, fn: Natives, pdfium_c: Any) -> None:
        self.handle, self.page, self.level, self.fn, self.pdfium_c = Handle(image), page, level, fn, pdfium_c

    def get_bounds(self) -> tuple[float, float, float, float]:
        import pypdfium2 as pdfium

        left, bottom, right, top = (ctypes.c_float() for _ in range(4))
        refs = map(ctypes.byref, (left, bottom, right, top))
        if not self.fn.object_bounds(self.handle, *refs):
            raise pdfium.PdfiumError("Failed to locate pageobject.")
        return left.value, bottom.value, right.value, top.value

    def get_px_size(self) -> tuple[int, int]:
        import pypdfium2 as pdfium

        width, height = ctypes.c_uint(), ctypes.c_uint()
        if not self.fn.image_px_size(self.handle, ctypes.byref(width), ctypes.byref(height)):
            raise pdfium.PdfiumError("Failed to get image size.")
        return width.value, height.value

    def get_metadata(self) -> Any:
        import pypdfium2 as pdfium

        metadata = self.pdfium_c.FPDF_IMAGEOBJ_METADATA()
        if not self.fn.image_metadata(self.handle, Handle(self.page), ctypes.byref(metadata)):
            raise pdfium.PdfiumError("Failed to get image metadata.")
        return metadata

    def get_filters(self) -> list[str]:
        filters = []
        for i in range(self.fn.image_filter_count(self.handle)):
            length = self.fn.image_filter(self.handle, i, None, 0)
            buffer = ctypes.create_string_buffer(length)
            self.fn.image_filter(self.handle, i, buffer, length)
            filters.append(bytes(memoryview(buffer)[: length - 1]).decode("utf-8"))
        return filters

    def get_data(self, decode_simple: bool = False) -> Any:
        # Two calls, each copying the stream inside pdfium: pdfium (159.0.8149) copies only into a buffer of
        # exactly the stream's size (one byte more and it copies nothing), so a larger scratch buffer cannot
        # save the size query; reading into a kept buffer instead of a new array saved nothing in a parse.
        read = self.fn.image_data_decoded if decode_simple else self.fn.image_data_raw
        size = read(self.handle, None, 0)
        buffer = (ctypes.c_ubyte * size)()
        read(self.handle, buffer, size)
        return buffer

    def get_bitmap(self) -> Any:
        """`PdfImage.get_bitmap(render=False)`: the image's bitmap, as pdfium decodes it (few figures)."""
        import pypdfium2 as pdfium

        raw_bitmap = self.pdfium_c.FPDFImageObj_GetBitmap(
            ctypes.cast(self.handle, self.pdfium_c.FPDF_PAGEOBJECT)
        )
        if not raw_bitmap:
            raise pdfium.PdfiumError("Failed to get bitmap of image.")
        return pdfium.PdfBitmap.from_raw(raw_bitmap)


def page_size(page: int, fn: Natives) -> tuple[float, float]:
    """`PdfPage.get_size()` of a page (address)."""
    handle = Handle(page)
    return fn.page_width(handle), fn.page_height(handle)


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

    def walk(count: Any, get: Any, parent: Handle, level: int) -> None:
        nonlocal invisible
        n = count(parent)
        if n < 0:
            raise pdfium.PdfiumError("Failed to get number of pageobjects.")
        handles = list(map(get, itertools.repeat(parent, n), range(n)))  # Handles
        modes = list(map(fn.render_mode, handles))  # NULL → UNKNOWN
        if not_text not in modes:  # text objects only
            if level == 0:
                invisible = invisible_mode in modes
            return
        others = [i for i, mode in enumerate(modes) if mode == not_text]
        other_handles = [handles[i] for i in others]
        if not all(other_handles):  # a NULL handle
            raise pdfium.PdfiumError("Failed to get pageobject.")
        kinds = list(map(fn.object_type, other_handles))
        if level == 0 and form not in kinds:
            invisible = invisible_mode in modes
        if image not in kinds and form not in kinds:  # most pages: nothing to collect
            return
        for i, kind in zip(others, kinds, strict=True):
            if kind == image:
                out.append((handles[i].value, level))
            elif kind == form and level < max_depth - 1:
                walk(fn.form_count_objects, fn.form_get_object, handles[i], level + 1)

    walk(fn.count_objects, fn.get_object, Handle(page), 0)
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

    textpage_handle = Handle(textpage)
    count = fn.count_chars(textpage_handle)
    if count < 0:
        raise pdfium.PdfiumError("Failed to get character count.")
    first, last = 0, count - 1
    index = functools.partial(fn.text_index, textpage_handle)
    while first <= last and index(first) == -1:
        first += 1
    while first <= last and index(last) == -1:
        last -= 1
    if first > last:
        return ""
    units = index(last) + 2 - index(first)  # NUL included
    buffer = _byte_array(1 << (2 * units - 1).bit_length())()
    written = fn.get_text(textpage_handle, first, last - first + 1, buffer)
    if written > units:
        raise pdfium.PdfiumError(f"pdfium wrote {written} characters into a buffer of {units}.")
    return ctypes.string_at(buffer, 2 * max(written - 1, 0)).decode("utf-16-le", errors="ignore")
