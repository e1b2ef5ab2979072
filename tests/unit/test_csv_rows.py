"""A quote that opens a field and never closes folded every later row into one cell (silently for a small
file, "field larger than field limit" for a large one): the docreader's and the FAQ import's CSV rows."""

from __future__ import annotations

import csv

import pytest

from chalicelib.domain.csv_rows import TooManyCells, read_csv_rows


def test_rows_after_a_quote_never_closed_are_kept_as_rows() -> None:
    read = read_csv_rows('name,size\nscreen,"5 inch\nphone,6\ntablet,""10""\n')
    assert read.rows == [["name", "size"], ["screen", '"5 inch'], ["phone", "6"], ["tablet", '""10""']]
    assert read.unclosed_quote_line == 2


def test_a_quote_closed_later_is_csv_as_written() -> None:
    """A later lone quote closes the field (Python's reader, not strict): that is a multi-line cell."""
    text = 'name,size\nscreen,"5 inch\nphone,6\n"tablet, large",7\n'
    read = read_csv_rows(text)
    assert read.rows == list(csv.reader(text.splitlines(keepends=True))) and read.unclosed_quote_line is None


@pytest.mark.parametrize(
    "text",
    [
        'a,b\n"x\ny",2\n3,4\n',  # a quoted cell with a line break, closed
        'a,b\n1,"multi\nline"\n',  # the same, last
        'a,b\n1,2\n3,"oops',  # open on the last line: nothing after it to fold in
        "a,b\n1,2\n",
        "",
    ],
)
def test_well_formed_and_harmless_files_read_as_csv_reads_them(text: str) -> None:
    read = read_csv_rows(text)
    assert read.rows == list(csv.reader(text.splitlines(keepends=True))) and read.unclosed_quote_line is None


def test_a_cell_past_pythons_default_field_limit_is_read_whole() -> None:
    cell = "x" * 1_000_000
    assert read_csv_rows(f'a,b\n1,"{cell}"\n2,3\n').rows == [["a", "b"], ["1", cell], ["2", "3"]]


def test_a_quote_never_closed_in_a_large_file_is_repaired_not_a_failed_file() -> None:
    """Before the field limit was lifted, the swallowed rows passed 131,072 characters and failed the file."""
    text = 'a,b\n1,2\n3,"oops\n' + "4,five\n" * 30_000
    read = read_csv_rows(text)
    assert read.unclosed_quote_line == 3
    assert read.rows[2] == ["3", '"oops'] and read.rows[3:] == [["4", "five"]] * 30_000


def test_the_cell_cap_counts_the_repaired_rows_too() -> None:
    text = "a,b\n" + '1,"open\n' + "2,3\n" * 50
    assert len(read_csv_rows(text, max_cells=200).rows) == 52
    with pytest.raises(TooManyCells):
        read_csv_rows(text, max_cells=60)
