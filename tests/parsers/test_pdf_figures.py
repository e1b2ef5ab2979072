"""A text PDF with embedded figures keeps its text layer (never OCR'd or rendered as a scan; issue 12),
its figures are kept as images, and the raw-handle image walk finds exactly the image objects pypdfium2's
`get_objects(filter=image, max_depth=4)` finds, in the same order, Form XObjects included."""

from __future__ import annotations

import ctypes
import io
from collections.abc import Callable
from pathlib import Path

import pypdfium2 as pdfium
import pypdfium2.raw as c
import pytest
from PIL import Image

from chalicelib.parsers.pdf_pdfium import RawImage, address, image_handles, natives, walk_objects
from chalicelib.ports import ReadRequest

LINES = [
    "Lecture three covers the sampling theorem and the aliasing it prevents in practice.",
    "The figure below shows a signal sampled below its Nyquist rate, folding high tones.",
    "Reconstruction uses an ideal low pass filter whose cutoff sits at half the rate.",
]

TOPICS = ["alpha", "beta", "gamma"]  # words, not page numbers: lines that differ only in digits repeat


def _text(pdf: pdfium.PdfDocument, page: pdfium.PdfPage, text: str, x: float, y: float) -> None:
    obj = c.FPDFPageObj_NewTextObj(pdf.raw, b"Helvetica", ctypes.c_float(11))
    encoded = ctypes.create_string_buffer((text + "\0").encode("utf-16-le"))
    c.FPDFText_SetText(obj, ctypes.cast(encoded, ctypes.POINTER(c.FPDF_WCHAR)))
    c.FPDFPageObj_Transform(obj, 1, 0, 0, 1, x, y)
    c.FPDFPage_InsertObject(page.raw, obj)


def _image(pdf: pdfium.PdfDocument, shade: int, width: float, height: float, x: float, y: float) -> object:
    jpeg = io.BytesIO()
    Image.new("RGB", (160, 120), (shade, 255 - shade, 90)).save(jpeg, format="JPEG")
    jpeg.seek(0)
    image = pdfium.PdfImage.new(pdf)
    image.load_jpeg(jpeg, inline=True)
    image.set_matrix(pdfium.PdfMatrix().scale(width, height).translate(x, y))
    return image


def build_pdf(pages: int = 3) -> bytes:
    """Text pages, each with a distinct figure covering about a fifth of the page under its text."""
    pdf = pdfium.PdfDocument.new()
    for n in range(pages):
        page = pdf.new_page(612, 792)
        y = 720.0
        for line in LINES:
            _text(pdf, page, f"{line} ({TOPICS[n]})", 72, y)
            y -= 16
        page.insert_obj(_image(pdf, 40 * n, 300, 200, 150, 300))
        page.gen_content()
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


def test_a_text_pdf_with_figures_keeps_its_text_layer_and_its_figures(reader) -> None:
    result = reader.read(ReadRequest(data=build_pdf(), file_name="lecture.pdf", file_type="pdf"))
    assert result.metadata["scanned_pages"] == []
    for n in range(3):
        for line in LINES:
            assert f"{line} ({TOPICS[n]})" in result.markdown
    figures = [i for i in result.images if i.ref.startswith("pdf-image-")]
    assert [i.page for i in figures] == [1, 2, 3]
    assert all(f"![]({i.ref})" in result.markdown for i in figures)
    # the figures are JPEG streams: kept as stored (issue 27), not decoded and encoded as PNG
    assert all(
        i.mime_type == "image/jpeg"
        and i.ref.endswith(".jpg")
        and Image.open(io.BytesIO(i.data)).size == (160, 120)
        for i in figures
    )


def _nested_pdf() -> bytes:
    """A page whose images sit at the top level and inside a Form XObject (a page imported as a form)."""
    source = pdfium.PdfDocument(build_pdf(1))
    pdf = pdfium.PdfDocument.new()
    page = pdf.new_page(612, 792)
    page.insert_obj(_image(pdf, 10, 100, 80, 20, 20))
    form = source.page_as_xobject(0, pdf).as_pageobject()
    page.insert_obj(form)
    page.insert_obj(_image(pdf, 200, 100, 80, 400, 20))
    _text(pdf, page, "Text around the imported page.", 72, 760)
    page.gen_content()
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


@pytest.mark.parametrize("make", [build_pdf, _nested_pdf], ids=["flat", "form-xobject"])
def test_the_raw_image_walk_matches_get_objects(make: Callable[[], bytes]) -> None:
    pdf = pdfium.PdfDocument(make())
    try:
        found = 0
        for i in range(len(pdf)):
            page = pdf[i]
            expected = list(page.get_objects(filter=(c.FPDF_PAGEOBJ_IMAGE,), max_depth=4))
            handles = image_handles(address(page.raw), c)
            ours = [RawImage(h, address(page.raw), level, natives(c), c) for h, level in handles]
            assert [(o.get_bounds(), o.level) for o in ours] == [(o.get_bounds(), o.level) for o in expected]
            found += len(ours)
            page.close()
        assert found >= 1
    finally:
        pdf.close()


def _reference_invisible(page: pdfium.PdfPage) -> bool | None:
    """Through pypdfium2's own objects: None when the page has a Form XObject at its top level, else
    whether any top-level text object is drawn invisibly."""
    objects = list(page.get_objects(max_depth=1))
    if any(o.type == c.FPDF_PAGEOBJ_FORM for o in objects):
        return None
    return any(
        o.type == c.FPDF_PAGEOBJ_TEXT
        and c.FPDFTextObj_GetTextRenderMode(o.raw) == c.FPDF_TEXTRENDERMODE_INVISIBLE
        for o in objects
    )


@pytest.mark.parametrize("make", [build_pdf, _nested_pdf], ids=["flat", "form-xobject"])
def test_the_walks_invisible_text_answer_matches_the_objects_types_and_render_modes(
    make: Callable[[], bytes],
) -> None:
    """Issue 27: the walk asks each object its text render mode first (UNKNOWN for every object that is
    not text) and only the others their type; images, forms and the invisible-text answer come out as
    asking every object its type would give them."""
    pdf = pdfium.PdfDocument(make())
    try:
        answers = []
        for i in range(len(pdf)):
            page = pdf[i]
            answers.append(walk_objects(address(page.raw), c)[1])
            assert answers[-1] == _reference_invisible(page)
            page.close()
        assert None in answers or False in answers
    finally:
        pdf.close()


@pytest.mark.parametrize("name", ["beamer-conference-talk.pdf", "debian-reference.en.pdf", "amsldoc.pdf"])
def test_the_walks_invisible_text_answer_matches_on_corpus_pdfs(corpus: Path, name: str) -> None:
    pdf = pdfium.PdfDocument((corpus / name).read_bytes())
    try:
        for i in range(min(len(pdf), 30)):
            page = pdf[i]
            assert walk_objects(address(page.raw), c)[1] == _reference_invisible(page), f"page {i + 1}"
            page.close()
    finally:
        pdf.close()
