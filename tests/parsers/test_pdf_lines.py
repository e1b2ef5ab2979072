"""`_page_lines` (whole-page regexes, one address-level pdfium call per line and attribute) reads for every
non-blank line what pypdfium2's own bindings say about the line's first non-blank character: the same
normalised text, font size, baseline and invisible render mode; on lines built here (leading blanks, runs
of blanks, sizes, invisible text, a blank line) and on corpus PDFs (CJK, Arabic, TeX)."""

from __future__ import annotations

import ctypes
import io
import re
from collections.abc import Callable
from pathlib import Path

import pypdfium2 as pdfium
import pypdfium2.raw as c
import pytest
from parser_helpers import pdf_text

from chalicelib.parsers.pdf import _Line, _page_lines, _strip_repeating
from chalicelib.parsers.pdf_pdfium import address, natives, page_text, walk_objects

SPACES = re.compile(r"[ \t\u00a0]+")


def reference_lines(textpage: pdfium.PdfTextPage) -> list[tuple[str, float, float, bool]]:
    """Line by line through `pypdfium2.raw`: (text, size, baseline, hidden) of each non-blank line."""
    raw = textpage.get_text_range()
    structured = len(raw) == textpage.count_chars()
    out = []
    x, y = ctypes.c_double(), ctypes.c_double()
    for m in re.finditer(r"[^\r\n]+", raw):
        text = SPACES.sub(" ", m.group()).replace("\x02", "-").replace("\ufffe", "-").strip()
        if not text:
            continue
        if not structured:
            out.append((text, 0.0, 0.0, False))
            continue
        idx = m.start() + len(m.group()) - len(m.group().lstrip())
        size = round(float(c.FPDFText_GetFontSize(textpage.raw, idx)), 1)
        base = (
            y.value if c.FPDFText_GetCharOrigin(textpage.raw, idx, ctypes.byref(x), ctypes.byref(y)) else 0.0
        )
        obj = c.FPDFText_GetTextObject(textpage.raw, idx)
        hidden = bool(obj) and c.FPDFTextObj_GetTextRenderMode(obj) == c.FPDF_TEXTRENDERMODE_INVISIBLE
        out.append((text, size, base, hidden))
    return out


def ours(
    textpage: pdfium.PdfTextPage, page: pdfium.PdfPage | None = None
) -> list[tuple[str, float, float, bool]]:
    """With `page`: the invisible-text check over the page's objects (issue 27), where it applies."""
    invisible = walk_objects(address(page.raw), c)[1] if page is not None else None
    return [(ln.text, ln.size, ln.base, ln.hidden) for ln in _page_lines(address(textpage.raw), c, invisible)]


LINES = [  # (text, size, invisible)
    ("A heading set large", 20, False),
    ("   three leading blanks then words", 11, False),
    ("runs of  two   and three blanks inside", 11, False),
    ("invisible layer text over the page", 11, True),
    ("     ", 11, False),
    ("a smaller footnote line 12", 7.5, False),
    ("x", 11, False),
]


def build_pdf() -> bytes:
    pdf = pdfium.PdfDocument.new()
    page = pdf.new_page(612, 792)
    y = 740.0
    for text, size, invisible in LINES:
        pdf_text(pdf, page, text, 72, y, size, invisible)
        y -= 30
    c.FPDFPage_GenerateContent(page.raw)
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


def test_page_lines_match_the_per_line_bindings_on_built_lines() -> None:
    pdf = pdfium.PdfDocument(build_pdf())
    try:
        page = pdf[0]
        textpage = page.get_textpage()
        expected = reference_lines(textpage)
        assert ours(textpage) == expected
        assert ours(textpage, page) == expected  # one object a line: the page-level check, then per line
        assert len(expected) == 6  # the blank line is skipped
        assert {size for _, size, _, _ in expected} == {20.0, 11.0, 7.5}
        assert [text for text, *_, hidden in expected if hidden] == ["invisible layer text over the page"]
        assert "runs of two and three blanks inside" in [text for text, *_ in expected]
        textpage.close()
        page.close()
    finally:
        pdf.close()


def _visible_only_pdf() -> bytes:
    pdf = pdfium.PdfDocument.new()
    page = pdf.new_page(612, 792)
    for k, (text, size, _) in enumerate(LINES):
        pdf_text(pdf, page, text, 72, 740.0 - 30 * k, size, False)
    c.FPDFPage_GenerateContent(page.raw)
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


def _form_pdf() -> bytes:
    """The built page (with its invisible line) imported into another page as a Form XObject."""
    source = pdfium.PdfDocument(build_pdf())
    pdf = pdfium.PdfDocument.new()
    page = pdf.new_page(612, 792)
    page.insert_obj(source.page_as_xobject(0, pdf).as_pageobject())
    page.gen_content()
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("make", "hidden", "top_level"),
    [(_visible_only_pdf, [], True), (_form_pdf, ["invisible layer text over the page"], False)],
    ids=["no-invisible-text", "invisible-text-in-a-form"],
)
def test_the_page_level_invisible_text_check_reads_as_the_per_line_one(
    make: Callable[[], bytes], hidden: list[str], top_level: bool
) -> None:
    """Issue 27: a page whose objects show no invisible text skips the per-line check; text inside a Form
    XObject is not among the page's objects, so such a page is checked line by line."""
    pdf = pdfium.PdfDocument(make())
    try:
        page = pdf[0]
        textpage = page.get_textpage()
        assert (walk_objects(address(page.raw), c)[1] is not None) is top_level
        expected = reference_lines(textpage)
        assert ours(textpage, page) == expected
        assert [text for text, *_, is_hidden in expected if is_hidden] == hidden
        textpage.close()
        page.close()
    finally:
        pdf.close()


@pytest.mark.parametrize("name", ["kotex-utf-doc.ko.pdf", "polyglossia-example-arabic.pdf", "amsldoc.pdf"])
def test_page_lines_match_the_per_line_bindings_on_corpus_pdfs(corpus: Path, name: str) -> None:
    pdf = pdfium.PdfDocument((corpus / name).read_bytes())
    try:
        lines = 0
        for i in range(min(len(pdf), 25)):
            page = pdf[i]
            textpage = page.get_textpage()
            expected = reference_lines(textpage)
            assert ours(textpage) == expected, f"page {i + 1}"
            assert ours(textpage, page) == expected, f"page {i + 1}"
            lines += len(expected)
            textpage.close()
            page.close()
        assert lines > 20
    finally:
        pdf.close()


@pytest.mark.parametrize(
    "name",
    ["kotex-utf-doc.ko.pdf", "polyglossia-example-arabic.pdf", "polyglossia-example-chinese.pdf", "lppl.pdf"],
)
def test_page_text_over_addresses_is_pypdfium2s_text_range(corpus: Path, name: str) -> None:
    """`page_text` (issue 27: no helper objects per page) gives `PdfTextPage.get_text_range()`."""
    pdf = pdfium.PdfDocument((corpus / name).read_bytes())
    try:
        chars = 0
        for i in range(len(pdf)):
            page = pdf[i]
            textpage = page.get_textpage()
            expected = textpage.get_text_range()
            assert page_text(address(textpage.raw), natives(c)) == expected, f"page {i + 1}"
            chars += len(expected)
            textpage.close()
            page.close()
        assert chars > 500
    finally:
        pdf.close()


@pytest.mark.parametrize(
    ("header_size", "kept"),
    [(9.0, False), (10.0, False), (11.4, False), (11.6, True), (14.0, True)],
    ids=["smaller", "body", "just-under-1.15x", "just-over-1.15x", "heading"],
)
def test_a_repeating_edge_line_goes_unless_set_larger_than_the_page_body(
    header_size: float, kept: bool
) -> None:
    """Issue 27 skips the page's body size when no repeating edge line is over 1.15x the page's smallest
    size; the rule itself is unchanged: a repeating line set over 1.15x the body size is a heading."""
    page = [
        _Line("Manual 3", header_size, 760.0),
        _Line("Body text that is long enough to weigh the most on this page.", 10.0, 700.0),
        _Line("A footnote in small type.", 8.0, 686.0),
        _Line("More body text, as long again as the line before it was.", 10.0, 672.0),
        _Line("Page 3", 9.0, 30.0),
    ]
    out = _strip_repeating(page, 792.0, {"top:Manual #": 32.0, "bottom:Page #": 30.0})
    assert [ln.text for ln in out] == (["Manual 3"] if kept else []) + [ln.text for ln in page[1:4]]
