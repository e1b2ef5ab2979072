"""Cell texts are computed once per distinct value, a column at a time; values that compare equal across
types keep their own text (True == 1 == 1.0, 10**16 == 1e16)."""

from __future__ import annotations

import datetime as dt

from chalicelib.parsers.office import _cell, _labelled_column, _sheet_lines


def test_equal_values_of_different_types_keep_their_own_text() -> None:
    row = [10**16, 1e16, True, 1, 1.0, 0, False, -0.0, 2.5, " padded ", dt.date(2024, 1, 2), None]
    expected = [
        "10000000000000000",
        "1e+16",
        "True",
        "1",
        "1",
        "0",
        "False",
        "0",
        "2.5",
        "padded",
        "2024-01-02",
        "",
    ]
    assert [_cell(v) for v in row] == expected
    assert _labelled_column(tuple(row), "") == expected  # one column holding them all
    assert _labelled_column((1, True, 1, 1.0, False, 0), "") == ["1", "True", "1", "1", "False", "0"]
    assert _labelled_column((10**16, 1e16, 10**16), "n: ") == [
        "n: 10000000000000000",
        "n: 1e+16",
        "n: 10000000000000000",
    ]
    assert _labelled_column((2.5, 2.5, None, 3.0, " "), "x: ") == ["x: 2.5", "x: 2.5", "", "x: 3", ""]
    header = ", ".join(
        f"{text or f'col{i + 1}'}: {back}"
        for i, (text, back) in enumerate(zip(expected, reversed(expected), strict=True))
        if back
    )
    assert _sheet_lines([row, list(reversed(row))], header_mode=True) == [header]


def test_the_first_row_with_text_heads_the_rows_after_it() -> None:
    grid: list[list[object]] = [[None, " "], ["name", None], [], ["b", 2.0], [None, None], ["c"]]
    assert _sheet_lines(grid, header_mode=True) == ["name: b, col2: 2", "name: c"]
    assert _sheet_lines(grid, header_mode=False) == ["col1: name", "col1: b, col2: 2", "col1: c"]
    assert _sheet_lines([["only", 1.0]], header_mode=True) == ["col1: only, col2: 1"]
    assert _sheet_lines([[None], []], header_mode=True) == []


def test_a_line_leaves_out_empty_cells_wherever_they_are_and_keeps_commas_in_the_text() -> None:
    grid: list[list[object]] = [["a", "b", "c"], [None, "x,", None], ["1, 2", None, 3.0], [None, " ", None]]
    assert _sheet_lines(grid, header_mode=True) == ["b: x,", "a: 1, 2, c: 3"]


def test_a_markdown_table_keeps_equal_numbers_of_different_types_apart() -> None:
    """1, 1.0 and True hash alike; the memoised column mapper must not give them one text."""
    from chalicelib.parsers.markdown_tables import markdown_table

    assert markdown_table([["n"], [1], [1.0], [True]]) == "| n |\n|---|\n| 1 |\n| 1.0 |\n| True |"
