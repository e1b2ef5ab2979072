"""The reader's preflight limits on streamed input: counts that span inflate steps, tags cut between
pieces, and every engine bound by them."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from chalicelib.domain.errors import PermanentStageError
from chalicelib.parsers.base import Limits
from chalicelib.parsers.guards import STEP, HtmlDepth, check_zip, preflight

sys.path.insert(0, str(Path(__file__).parents[1] / "security"))
import hostile_files as H


def refused(words: str, call: Callable[..., object], *args: object, **kwargs: object) -> str:
    with pytest.raises(PermanentStageError) as error:
        call(*args, **kwargs)
    assert words.lower() in error.value.message.lower(), error.value.message
    return error.value.message


def test_html_depth_is_measured_across_pieces_cut_inside_tags() -> None:
    html = b"<html><body>" + b'<div class="a">' * 300 + b"x" + b"</div>" * 300 + b"</body></html>"
    for size in (1, 7, 64, 4096):
        depth = HtmlDepth(10_000)
        for start in range(0, len(html), size):
            depth.feed(html[start : start + size])
        assert depth.max_depth == 302, size
    refused("levels deep", HtmlDepth(299).feed, html)


def test_unclosed_paragraphs_and_void_elements_do_not_count_as_nesting() -> None:
    depth = HtmlDepth(50)
    depth.feed(b"<body>" + b"<p>para<br><img src=x><li>item" * 5000 + b"</body>")
    assert depth.max_depth == 1


def test_a_far_cell_after_many_inflate_steps_is_still_counted() -> None:
    near = "".join(f'<row r="{r}"><c r="A{r}"><v>{r}</v></c></row>' for r in range(1, 5000))
    far = '<row r="900000"><c r="ZZ900000"><v>1</v></c></row>'
    sheet = H.sheet_xml(near + far)
    assert len(sheet) > 2 * STEP
    data = H.build_zip(H.xlsx_members(H.Member("xl/worksheets/sheet1.xml", sheet)))
    message = refused("cells", check_zip, data, Limits(), "Excel", sheets=True)
    assert "900,000 rows" in message
    assert check_zip(data, Limits(max_sheet_cells=10**9), "Excel", sheets=True)["cells"] == 5000


@pytest.mark.parametrize("prefix", ["", "x:"])
def test_cell_extent_counts_each_cells_first_reference_prefixed_or_not(prefix: str) -> None:
    """The counting passes are per element form: plain <c>, namespace-prefixed <x:c>, single quotes,
    spaces around '=', a cell without a reference (column 1)."""
    rows = "".join(
        f'<{prefix}row r="{r}"><{prefix}c s="1" r = \'C{r}\'><{prefix}v>1</{prefix}v></{prefix}c>'
        f"<{prefix}c><{prefix}v>2</{prefix}v></{prefix}c></{prefix}row>"
        for r in range(1, 101)
    )
    far = f'<{prefix}row r="101"><{prefix}c r="AB4000" t="n"/></{prefix}row>'
    data = H.build_zip(H.xlsx_members(H.Member("xl/worksheets/sheet1.xml", H.sheet_xml(rows + far))))
    assert check_zip(data, Limits(max_sheet_cells=28 * 4000), "Excel", sheets=True)["cells"] == 201
    message = refused("cells", check_zip, data, Limits(max_sheet_cells=28 * 4000 - 1), "Excel", sheets=True)
    assert "4,000 rows × 28 columns" in message


@pytest.mark.parametrize("far_cell", ['<c t="n" r="AB4000"/>', "<c r='AB4000'/>", '<c r="ab4000"/>'])
def test_one_cell_written_otherwise_among_canonical_ones_is_still_measured(far_cell: str) -> None:
    """The fast pass reads `<c r="B7"` only; any other cell start tag in a piece sends the piece through
    the general pattern, so a far cell cannot hide behind its attribute order, quotes or case."""
    rows = "".join(f'<row r="{r}"><c r="C{r}"><v>1</v></c></row>' for r in range(1, 101))
    sheet = H.sheet_xml(rows + f'<row r="101">{far_cell}</row>')
    data = H.build_zip(H.xlsx_members(H.Member("xl/worksheets/sheet1.xml", sheet)))
    assert check_zip(data, Limits(max_sheet_cells=28 * 4000), "Excel", sheets=True)["cells"] == 101
    message = refused("cells", check_zip, data, Limits(max_sheet_cells=28 * 4000 - 1), "Excel", sheets=True)
    assert "4,000 rows × 28 columns" in message


def _sheet_with_dimension(ref: str, rows: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{H.SHEET_NS}"><dimension ref="{ref}"/>'
        f"<sheetData>{rows}</sheetData></worksheet>"
    ).encode()


def _measured(sheet: bytes, limit: int = 10**9) -> tuple[int, int, int]:
    from chalicelib.parsers import guards

    data = H.build_zip(H.xlsx_members(H.Member("xl/worksheets/sheet1.xml", sheet)))
    cells = guards.SheetCells()
    original = guards.SheetCells
    guards.SheetCells = lambda: cells  # type: ignore[assignment,misc]
    try:
        check_zip(data, Limits(max_sheet_cells=limit), "Excel", sheets=True)
    finally:
        guards.SheetCells = original  # type: ignore[misc]
    (sheet_cells,) = cells.sheets
    return sheet_cells.cells, sheet_cells.rows, sheet_cells.cols


_MANY_ROWS = "".join(
    f'<row r="{r}"><c r="A{r}"><v>{r}</v></c><c r="J{r}" t="n"><v>1</v></c></row>' for r in range(1, 6001)
)


def test_a_sheet_whose_cells_stay_inside_its_dimension_is_measured_as_the_cell_by_cell_pass_does() -> None:
    """The claimed extent (`<dimension ref>`) is taken only where every cell of a piece is `<c r="REF"`
    inside it; then the figures are those of reading each cell."""
    sheet = _sheet_with_dimension("A1:J6000", _MANY_ROWS)
    assert len(sheet) > 2 * STEP
    assert _measured(sheet) == (12_000, 6000, 10)
    assert _measured(sheet.replace(b'<dimension ref="A1:J6000"/>', b"")) == (12_000, 6000, 10)


@pytest.mark.parametrize(
    "far_cell", ['<c r="K6001"/>', '<c r="A6001"/>', '<c r="XFD1048576"/>', '<c t="n" r="A2"/>', "<c/>"]
)
def test_a_cell_outside_the_claimed_dimension_is_read_and_measured(far_cell: str) -> None:
    """A dimension that under-states the sheet is only a claim: a cell past it (a column, a row further,
    the sheet's last cell) or written otherwise sends the piece through the cell-by-cell pass."""
    sheet = _sheet_with_dimension("A1:J6000", _MANY_ROWS + f'<row r="6001">{far_cell}</row>')
    if "XFD" in far_cell:
        message = refused("cells", _measured, sheet, 5_000_000)
        assert "1,048,576 rows × 16,384 columns" in message
        return
    exact = _measured(sheet.replace(b'<dimension ref="A1:J6000"/>', b""))
    assert _measured(sheet) == exact
    assert exact[0] == 12_001


def test_a_lying_dimension_does_not_hide_a_far_cell_many_inflate_steps_later() -> None:
    near = "".join(f'<row r="{r}"><c r="A{r}"><v>{r}</v></c></row>' for r in range(1, 5000))
    sheet = _sheet_with_dimension("A1:A4999", near + '<row r="900000"><c r="ZZ900000"><v>1</v></c></row>')
    data = H.build_zip(H.xlsx_members(H.Member("xl/worksheets/sheet1.xml", sheet)))
    assert "900,000 rows" in refused("cells", check_zip, data, Limits(), "Excel", sheets=True)


def test_an_entity_declaration_cut_between_inflate_steps_is_found() -> None:
    tail = b'--><!DOCTYPE d [<!ENTITY e "x">]><w:document/>'
    start = b'<?xml version="1.0"?><!--'
    cut = STEP - 4 - len(start) - tail.index(b"<!ENTITY")  # the pieces are STEP bytes of output each
    doc = start + b"y" * cut + tail
    assert doc.index(b"<!ENTITY") < STEP < doc.index(b"<!ENTITY") + 8
    data = H.build_zip(H.docx_members(H.Member("word/document.xml", doc)))
    refused("entity", check_zip, data, Limits(), "Word")


def test_a_member_under_the_caps_that_tells_the_truth_passes() -> None:
    data = H.build_zip(H.docx_members(H.Member("word/document.xml", H.docx_document("z" * 500_000))))
    assert check_zip(data, Limits(), "Word")["uncompressed_bytes"] > 500_000


def test_the_real_size_not_the_declared_one_meets_the_member_cap() -> None:
    honest = H.Member("word/media/big.bin", raw=H.deflate_zeros(3 << 20), declared_size=3 << 20)
    honest.crc = H.crc_of_zeros(3 << 20)
    data = H.build_zip(H.docx_members(extra=[honest]))
    refused("zip bomb", check_zip, data, Limits(zip_max_member_uncompressed=2 << 20), "Word")


@pytest.mark.parametrize("engine", ["", "builtin", "markitdown", "simple"])
def test_every_engine_is_bound_by_the_preflight(reader, engine: str) -> None:
    from chalicelib.ports import ReadRequest

    for name, data, words in (
        ("forged.docx", H.lying("docx"), "header declares"),
        ("pages.pdf", H.many_page_pdf(6000), "6,000 pages"),
        ("divs.html", H.nested_divs(20_000), "levels deep"),
        ("bomb.png", H.png_bomb(), "decompression bomb"),
    ):
        request = ReadRequest(data=data, file_name=name, file_type=name.rsplit(".", 1)[1], engine=engine)
        refused(words, reader.read, request)


def test_preflight_measures_what_it_lets_through() -> None:
    assert preflight(H.png_bomb(64, 48), "png", Limits()) == {"width": 64, "height": 48}
    assert preflight(H.many_page_pdf(3), "pdf", Limits()) == {"pages": 3}


def test_a_page_of_nested_divs_from_a_url_is_refused_before_any_tree_is_built() -> None:
    from chalicelib.net.client import FetchError, FetchResponse
    from chalicelib.net.urlimport import _page_document

    page = FetchResponse(
        "https://example.org/deep", 200, {"content-type": "text/html"}, H.nested_divs(50_000)
    )
    with pytest.raises(FetchError) as error:
        _page_document(page)
    assert error.value.permanent and "levels deep" in error.value.message


@pytest.mark.parametrize("top", ["1", "9", "10", "100", "999", "2019", "20191"])
def test_the_claimed_row_pattern_takes_exactly_the_rows_up_to_the_claim(top: str) -> None:
    import re

    from chalicelib.parsers.guards import _not_above

    pattern = re.compile(_not_above(top, "1", "0", "9") + '"')
    assert [n for n in range(0, 30_000) if pattern.fullmatch(f'{n}"')] == list(range(1, int(top) + 1))
    assert not pattern.fullmatch('01"')


@pytest.mark.parametrize("top", ["A", "J", "Z", "AA", "AZ", "BA", "ZZ", "AAA", "XFD"])
def test_the_claimed_column_pattern_takes_exactly_the_columns_up_to_the_claim(top: str) -> None:
    import itertools
    import re
    import string

    from chalicelib.parsers.guards import _not_above, column_number

    pattern = re.compile(_not_above(top, "A", "A", "Z") + "1")
    letters = ["".join(t) for n in (1, 2, 3) for t in itertools.product(string.ascii_uppercase, repeat=n)]
    taken = [col for col in letters if pattern.fullmatch(col + "1")]
    assert taken == [col for col in letters if column_number(col) <= column_number(top)]


_INLINE = '<c t="inlineStr"><is><t>v</t></is></c>'


@pytest.mark.parametrize(
    ("rows", "extent"),
    [
        # calamine places a cell without a reference after the cell before it, in its row's row
        (
            f'<row r="1">{_INLINE * 3000}</row><row r="1000000"><c r="A1000000"><v>1</v></c></row>',
            (10**6, 3000),
        ),
        (f'<row r="1"><c r="C1"><v>1</v></c>{_INLINE * 2}</row>', (1, 5)),
        (f'<row r="1">{_INLINE}</row><row r="900000">{_INLINE * 2}</row>', (900_000, 2)),
        (f'<row r="7"><c r="XFA7"><v>1</v></c></row><row>{_INLINE * 2}</row>', (8, 16_381)),
        (f'<x:row r="4">{_INLINE.replace("<c", "<x:c").replace("</c>", "</x:c>") * 4}</x:row>', (4, 4)),
    ],
)
def test_cells_without_references_are_placed_as_the_engine_places_them(
    rows: str, extent: tuple[int, int]
) -> None:
    """A row of unreferenced cells is as wide as its cells (it was counted as one column, and a sheet of
    3,000 such cells over 1,000,000 rows made calamine ask for 96 GB and abort the process)."""
    data = H.build_zip(H.xlsx_members(H.Member("xl/worksheets/sheet1.xml", H.sheet_xml(rows))))
    rows_n, cols_n = extent
    check_zip(data, Limits(max_sheet_cells=rows_n * cols_n), "Excel", sheets=True)
    message = refused(
        "cells", check_zip, data, Limits(max_sheet_cells=rows_n * cols_n - 1), "Excel", sheets=True
    )
    assert f"{rows_n:,} rows × {cols_n:,} columns" in message


def test_unreferenced_cells_are_placed_across_inflate_pieces() -> None:
    """Once placing, every later piece is placed too: a wide unreferenced row far down is still measured."""
    near = "".join(f'<row r="{r}"><c r="A{r}"><v>{r}</v></c><c><v>0</v></c></row>' for r in range(1, 5000))
    far = f'<row r="800000">{_INLINE * 40}</row>'
    sheet = H.sheet_xml(near + far)
    assert len(sheet) > 2 * STEP
    data = H.build_zip(H.xlsx_members(H.Member("xl/worksheets/sheet1.xml", sheet)))
    message = refused(
        "cells", check_zip, data, Limits(max_sheet_cells=800_000 * 40 - 1), "Excel", sheets=True
    )
    assert "800,000 rows × 40 columns" in message
