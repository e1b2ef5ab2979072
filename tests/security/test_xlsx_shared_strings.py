"""A workbook's shared strings are measured as its cells repeat them, before calamine reads it.

Regression (found by an audit): a ~750 KB xlsx holding one 1 MB shared string (random text, so every
ratio check passed) named by 3,000 cells passed the preflight (3,000 cells, ~1 MB inflated); calamine, run
in the worker's process for xlsx, copies the string into every cell: 3 GB, and the failed allocation
aborted the worker (SIGABRT) before any text was counted. The preflight now totals the text the cells name
and refuses past the text limit for one file (50 M characters), the message MarkdownBudget gives."""

from __future__ import annotations

import base64
import os

import pytest

from chalicelib.domain.errors import PermanentStageError
from chalicelib.parsers.base import Limits
from chalicelib.parsers.guards import check_zip

from . import hostile_files as H

TEXT_LIMIT = "more than 10,000 characters"


def _cells(indices: list[int]) -> bytes:
    """A sheet whose cells name these shared strings (one cell a row)."""
    return H.sheet_xml(
        "".join(
            f'<row r="{r}"><c r="A{r}" s="1" t="s"><v>{index}</v></c></row>'
            for r, index in enumerate(indices, 1)
        )
    )


def _strings(*texts: str, table: str = "") -> bytes:
    body = table or "".join(f"<si><t>{text}</t></si>" for text in texts)
    return f'<?xml version="1.0" encoding="UTF-8"?><sst xmlns="{H.SHEET_NS}">{body}</sst>'.encode()


def _xlsx(
    sheet: bytes,
    strings: bytes,
    sheet_path: str = "xl/worksheets/sheet1.xml",
    strings_path: str = "xl/sharedStrings.xml",
) -> bytes:
    return H.build_zip(H.xlsx_members(H.Member(sheet_path, sheet), [H.Member(strings_path, strings)]))


def _check(data: bytes) -> dict[str, object]:
    return check_zip(data, Limits(max_markdown_chars=10_000), "Excel", sheets=True)


def test_the_audits_workbook_is_refused_before_calamine_copies_its_string() -> None:
    """In a child process limited to 2 GB (the Lambda has 3): before the fix calamine aborted it."""
    text = base64.b64encode(os.urandom(750_000)).decode()  # 1 MB that does not compress
    data = _xlsx(_cells([0] * 3_000), _strings(text))
    assert len(data) < 1_100_000
    answer = H.read_in_a_two_gb_child(data, "b.xlsx")
    assert "docreader_parse_failed The document's text is more than 50,000,000 characters" in answer


def test_the_text_the_cells_name_is_counted_not_the_longest_string_for_each_cell() -> None:
    long = "x" * 1_000
    assert _check(_xlsx(_cells([0] * 9), _strings(long)))["cells"] == 9
    with pytest.raises(PermanentStageError, match=TEXT_LIMIT):
        _check(_xlsx(_cells([0] * 11), _strings(long)))
    # one cell names the long string, 300 a short one: past the quick bound (cells x longest), within
    # the count of what each cell names
    accepted = _check(_xlsx(_cells([1] + [0] * 300), _strings("short", long * 5)))
    assert accepted["cells"] == 301


def test_a_sheet_and_strings_found_where_the_workbook_names_them_are_measured() -> None:
    """openpyxl follows the workbook's relationships (calamine reads xl/sharedStrings.xml): parts told
    by their root element, wherever they are."""
    with pytest.raises(PermanentStageError, match=TEXT_LIMIT):
        _check(_xlsx(_cells([0] * 11), _strings("x" * 1_000), "xl/data/s1.xml", "xl/strings.xml"))


def test_every_way_of_writing_a_string_keeps_the_indices_aligned() -> None:
    """An empty <si/>, a prefixed element, an end tag with a space: each is a string, so the long one is
    not taken for its short neighbour."""
    long = "x" * 1_000
    tables = [
        f"<si><t>a</t></si><si/><si><t>{long}</t></si><si><t>b</t></si>",
        f"<si><t>a</t></si><si ></si ><si><t>{long}</t></si ><si><t>b</t></si>",
        f'<x:si xmlns:x="{H.SHEET_NS}"><x:t>a</x:t></x:si><si/><si><t>{long}</t></si><si><t>b</t></si>',
    ]
    for table in tables:
        with pytest.raises(PermanentStageError, match=TEXT_LIMIT):
            _check(_xlsx(_cells([2] * 11), _strings(table=table)))


def test_strings_whose_ends_could_hide_in_cdata_count_as_the_whole_table_each() -> None:
    table = f"<si><t><![CDATA[</si>]]></t></si><si><t>{'x' * 1_000}</t></si>"
    with pytest.raises(PermanentStageError, match=TEXT_LIMIT):
        _check(_xlsx(_cells([1] * 11), _strings(table=table)))
