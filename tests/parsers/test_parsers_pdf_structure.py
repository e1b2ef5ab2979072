"""Native-page structure on a PDF built here with pdfium: heading promotion by font size, paragraph
joining, running header/footer removal and hidden (invisible render mode) text dropped."""

import io

import pypdfium2 as pdfium
import pypdfium2.raw as c
import pytest
from parser_helpers import pdf_text

from chalicelib.ports import ReadRequest

PARAGRAPH = [
    "Debian systems keep their package lists under the var directory and refresh",
    "them whenever the administrator asks apt to update the indexes from mirrors.",
]


def build_pdf() -> bytes:
    pdf = pdfium.PdfDocument.new()
    for number in range(1, 5):
        page = pdf.new_page(612, 792)
        pdf_text(pdf, page, "ACME Handbook", 72, 760, 9)
        pdf_text(pdf, page, f"Chapter {number} Packages", 72, 700, 22)
        y = 660.0
        for line in PARAGRAPH:
            pdf_text(pdf, page, line, 72, y, 11)
            y -= 14
        word = ["alpha", "beta", "gamma", "delta"][number - 1]
        pdf_text(pdf, page, f"Second paragraph about {word} after a gap.", 72, y - 20, 11)
        if number == 2:
            pdf_text(pdf, page, "SECRET-KEYWORD-STUFFING", 72, 300, 11, invisible=True)
        pdf_text(pdf, page, f"Page {number} of 4", 280, 40, 9)
        c.FPDFPage_GenerateContent(page.raw)
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


@pytest.fixture(scope="module")
def markdown(reader) -> str:
    return reader.read(ReadRequest(data=build_pdf(), file_name="h.pdf", file_type="pdf")).markdown


def test_headings_promoted_by_font_size(markdown: str) -> None:
    for n in range(1, 5):
        assert f"# Chapter {n} Packages" in markdown.split("\n")


def test_lines_joined_into_paragraphs(markdown: str) -> None:
    assert " ".join(PARAGRAPH) in markdown
    assert "\n\nSecond paragraph about alpha after a gap." in markdown


def test_running_header_and_footer_removed(markdown: str) -> None:
    assert "ACME Handbook" not in markdown
    assert "of 4" not in markdown


def test_hidden_text_dropped(markdown: str) -> None:
    assert "SECRET-KEYWORD-STUFFING" not in markdown


@pytest.mark.parametrize("enabled_before", [True, False], ids=["gc-on", "gc-off"])
def test_the_cycle_collector_is_paused_for_a_parse_and_left_as_it_was(
    reader, monkeypatch: pytest.MonkeyPatch, enabled_before: bool
) -> None:
    """Issue 27: a PDF's parse runs with the cyclic garbage collector paused (its collections over the
    parse's lines found nothing); afterwards it is as it was, after a parse that fails too."""
    import gc

    from chalicelib.domain.errors import StageError
    from chalicelib.parsers import pdf as pdf_parser

    seen: list[bool] = []
    parse_open = pdf_parser._parse_open

    def watched(*args, **kwargs):
        seen.append(gc.isenabled())
        if len(seen) > 1:
            raise pdf_parser.parse_failed("a parse that fails half way")
        return parse_open(*args, **kwargs)

    monkeypatch.setattr(pdf_parser, "_parse_open", watched)
    was = gc.isenabled()
    try:
        gc.enable() if enabled_before else gc.disable()
        reader.read(ReadRequest(data=build_pdf(), file_name="a.pdf", file_type="pdf"))
        assert seen == [False]
        assert gc.isenabled() is enabled_before
        with pytest.raises(StageError):
            reader.read(ReadRequest(data=build_pdf(), file_name="b.pdf", file_type="pdf"))
        assert seen == [False, False]
        assert gc.isenabled() is enabled_before
    finally:
        gc.enable() if was else gc.disable()
