"""Running headers and footers are lines at the same place in a page's top or bottom band, set apart from
the body; a page's content lines that merely repeat with other numbers are kept (found by a docreader
audit: ten one-invoice pages failed with "No text could be extracted", a last "Subtotal" line was dropped
on every page, pages of ten similar lines lost two fifths of them)."""

from __future__ import annotations

import pytest
from parser_helpers import helvetica_pdf

from chalicelib.domain.errors import PermanentStageError

PAGE_HEIGHT = 792


def _pdf(pages: list[list[tuple[str, float]]], size: int = 12) -> bytes:
    """A PDF of Letter pages, each line of Helvetica at its own baseline (text, y from the bottom)."""
    return helvetica_pdf(
        [[(text.replace("(", "[").replace(")", "]"), 72, y, size) for text, y in lines] for lines in pages],
        height=PAGE_HEIGHT,
    )


def _stacked(texts: list[str], top: float = 720, lead: float = 16) -> list[tuple[str, float]]:
    return [(text, top - k * lead) for k, text in enumerate(texts)]


def test_short_pages_that_differ_only_by_numbers_keep_their_text(read) -> None:
    pages = [_stacked([f"Invoice {1000 + i}", f"Total due: {i * 7 + 3} EUR", "Thank you"]) for i in range(10)]
    md = read("invoices.pdf", data=_pdf(pages)).markdown
    for i in range(10):
        assert f"Invoice {1000 + i}" in md
        assert f"Total due: {i * 7 + 3} EUR" in md
    assert md.count("Thank you") == 10


def test_a_last_line_that_varies_by_numbers_is_content_not_a_footer(read) -> None:
    pages = [
        _stacked(
            [f"Paragraph {k} of section {i} body text words." for k in range(8)] + [f"Subtotal {i}: {i * 13}"]
        )
        for i in range(6)
    ]
    md = read("subtotals.pdf", data=_pdf(pages)).markdown
    for i in range(6):
        assert f"Subtotal {i}: {i * 13}" in md


def test_pages_of_similar_lines_keep_every_line(read) -> None:
    pages = [_stacked([f"Page {i} line {k} body words here." for k in range(10)]) for i in range(30)]
    md = read("similar.pdf", data=_pdf(pages)).markdown
    assert sum(md.count(f"Page {i} line {k} body") for i in range(30) for k in range(10)) == 300


def test_a_repeating_line_not_at_the_same_place_is_kept(read) -> None:
    """A line in the bottom band, set apart, repeating digits aside, but each page at another height."""
    pages = [
        [
            *_stacked([f"Body line {k} of page {i} with words." for k in range(6)]),
            (f"Signed for batch {i}", 40 + 14 * i),
        ]
        for i in range(6)
    ]
    md = read("signed.pdf", data=_pdf(pages)).markdown
    for i in range(6):
        assert f"Signed for batch {i}" in md


def test_running_header_and_page_number_at_the_edges_are_still_removed(read) -> None:
    pages = [
        [
            ("Acme Annual Report 2024", 760),
            *_stacked([f"Body line {k} of page {i} says something." for k in range(12)], top=700),
            (f"Page {i + 1} of 8", 36),
        ]
        for i in range(8)
    ]
    md = read("report.pdf", data=_pdf(pages)).markdown
    assert "Acme Annual Report" not in md
    assert "of 8" not in md
    assert md.count("says something.") == 96


def test_a_page_whose_every_line_repeats_at_the_edges_keeps_them(read) -> None:
    """Header and footer alike on every page, and nothing else: stripping them would leave no text."""
    pages = [[(f"Ticket {100 + i}", 760), (f"Seat {i + 1}", 36)] for i in range(6)]
    md = read("tickets.pdf", data=_pdf(pages)).markdown
    for i in range(6):
        assert f"Ticket {100 + i}" in md
        assert f"Seat {i + 1}" in md


def test_no_text_error_is_not_raised_for_template_pages(read) -> None:
    pages = [_stacked([f"Invoice {1000 + i}", f"Total due: {i} EUR"]) for i in range(4)]
    try:
        md = read("two_lines.pdf", data=_pdf(pages)).markdown
    except PermanentStageError as exc:  # HEAD: "No text could be extracted"
        pytest.fail(f"refused: {exc}")
    assert "Invoice 1003" in md
