"""A sheet's grid spans its cells' bounding box: columns with no text in any row are left out of its Markdown
table (two cells at A1 and XFD1 had made 16,384 columns, 283,836 characters of empty colN headers), and the
columns kept are still named by where they are."""

from __future__ import annotations

from parser_helpers import xlsx_workbook


def test_two_cells_far_apart_make_a_two_column_table(read) -> None:
    markdown = read("sparse.xlsx", data=xlsx_workbook({"A1": "TOPLEFT", "XFD1": "FARCELL"})).markdown
    assert markdown == "## Data\n\n| col1 | col16384 |\n|---|---|\n| TOPLEFT | FARCELL |\n"


def test_empty_columns_between_a_header_and_its_values_are_left_out(read) -> None:
    cells = {"A1": "name", "D1": "value", "A2": "alpha", "D2": "1", "A3": "beta", "F3": "note"}
    markdown = read("spaced.xlsx", data=xlsx_workbook(cells)).markdown
    assert markdown == (
        "## Data\n\n| name | value | col6 |\n|---|---|---|\n| alpha | 1 |  |\n| beta |  | note |\n"
    )


def test_a_full_sheet_keeps_every_column(read) -> None:
    cells = {f"{column}{row}": f"{column}{row}" for column in "ABC" for row in range(1, 4)}
    markdown = read("full.xlsx", data=xlsx_workbook(cells)).markdown
    assert markdown == "## Data\n\n| A1 | B1 | C1 |\n|---|---|---|\n| A2 | B2 | C2 |\n| A3 | B3 | C3 |\n"
