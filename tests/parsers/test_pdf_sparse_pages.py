"""WeKnora's second scan rule (an image over 10-50% of a page and under 10 characters) in context (issue
27): in a PDF whose other pages are text, such a page is a figure page (a screenshot under the running
header): not rendered, its figure kept as stored, even past `max_images` (it stands in for the render);
rendered as before when none of its figures is kept, and in a PDF without a text layer."""

from __future__ import annotations

import io

import pypdfium2 as pdfium
from test_pdf_figures import LINES, _image, _text

from chalicelib.ports import ReadRequest

TOPICS = ["alpha", "beta", "gamma", "delta"]  # a word per text page: no line repeats across pages


def _pdf(text_pages: int, sparse_pages: int, figure_on_text_pages: bool = False) -> bytes:
    """Text pages (three lines each), then pages holding only an image over a quarter of the page and a
    page number."""
    pdf = pdfium.PdfDocument.new()
    for n in range(text_pages):
        page = pdf.new_page(612, 792)
        for k, line in enumerate(LINES):
            _text(pdf, page, f"{line} ({TOPICS[n]})", 72, 720 - 16 * k)
        if figure_on_text_pages:  # the same picture on every page: a repeated figure (a logo)
            page.insert_obj(_image(pdf, 0, 300, 200, 150, 300))
        page.gen_content()
    for n in range(sparse_pages):
        page = pdf.new_page(612, 792)
        page.insert_obj(_image(pdf, 0 if figure_on_text_pages else 30 + 40 * n, 360, 300, 120, 250))
        _text(pdf, page, str(text_pages + n + 1), 300, 40)
        page.gen_content()
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


def _read(reader, data: bytes, **options) -> object:
    return reader.read(ReadRequest(data=data, file_name="manual.pdf", file_type="pdf", options=options))


def test_a_figure_page_in_a_text_pdf_keeps_its_figure_and_is_not_rendered(reader) -> None:
    result = _read(reader, _pdf(text_pages=4, sparse_pages=1))
    assert result.metadata["scanned_pages"] == []
    assert not [i for i in result.images if i.tag == "scanned_pdf"]
    [figure] = [i for i in result.images if i.page == 5]
    assert figure.mime_type == "image/jpeg" and f"![]({figure.ref})" in result.markdown
    assert all(f"{LINES[0]} ({TOPICS[n]})" in result.markdown for n in range(4))


def test_a_figure_page_keeps_its_figure_past_max_images(reader) -> None:
    result = _read(reader, _pdf(text_pages=4, sparse_pages=1), limits={"max_images": 0})
    assert result.metadata["scanned_pages"] == []
    assert [i.page for i in result.images] == [5]


def test_a_figure_page_whose_figure_is_not_kept_is_rendered(reader) -> None:
    # the picture repeats on every page (a logo): dropped as a figure, so the page is rendered as before
    result = _read(reader, _pdf(text_pages=4, sparse_pages=1, figure_on_text_pages=True))
    assert result.metadata["scanned_pages"] == [5]
    assert [(i.page, i.tag) for i in result.images] == [(5, "scanned_pdf")]


def test_image_pages_without_a_text_layer_are_scans(reader) -> None:
    result = _read(reader, _pdf(text_pages=1, sparse_pages=2))
    assert result.metadata["scanned_pages"] == [2, 3]
    assert [(i.page, i.tag) for i in result.images] == [(2, "scanned_pdf"), (3, "scanned_pdf")]
    # a page range holding only the figure page: no text layer in the parse, a scan
    alone = _read(reader, _pdf(text_pages=4, sparse_pages=1), page_range=[4, 5])
    assert alone.metadata["scanned_pages"] == [5]
