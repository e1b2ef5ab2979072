"""Spreadsheets as Markdown tables (issue 27 item 7): an xlsx/xls sheet is written as the CSV path writes a
table (`markdown_table`'s parts: the header row once, cells escaped), so the column names no longer repeat on
every row, and the chunker puts the header atop every chunk of a big sheet. WeKnora's `header: value, …` line
per row stays as the `spreadsheet_layout: "rows"` setting, checked at the API boundary."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from project_paths import CORPUS

from chalicelib.chunker import split
from chalicelib.commands import CreateKnowledgeBase, ProcessConfig, UpdateKnowledgeBase, validate
from chalicelib.domain.errors import BadRequest
from chalicelib.domain.process_config import resolve
from chalicelib.domain.types import ChunkingConfig, KnowledgeBase
from chalicelib.parsers.base import ParseContext
from chalicelib.parsers.markdown_tables import markdown_table
from chalicelib.parsers.office import _sheet_table, parse_spreadsheet
from chalicelib.parsers.simple import csv_to_markdown
from chalicelib.ports import ReadRequest

STATECRIME_HEADER = "| state | violent | murder | hs_grad | poverty | single | white | urban |"


def _read(path: Path, **options: object) -> str:
    request = ReadRequest(data=path.read_bytes(), file_name=path.name, file_type=path.suffix[1:])
    return parse_spreadsheet(request, ParseContext(options=dict(options))).markdown


def test_a_sheet_is_one_markdown_table_with_its_header_once() -> None:
    markdown = _read(CORPUS / "statsmodels-statecrime.xlsx")
    assert markdown.startswith("## statecrime\n\n" + STATECRIME_HEADER + "\n|---|")
    assert "| Alabama | 459.9 | 7.1 | 82.1 | 17.5 | 29 | 70 | 48.65 |" in markdown.splitlines()
    assert markdown.count("violent") == 1  # the column name once, not once a row
    assert _read(CORPUS / "vega-seattle-weather.xls") == _read(CORPUS / "vega-seattle-weather.xlsx")


def test_the_table_is_the_csv_paths_table() -> None:
    """The same table as the CSV of the same data, row for row (one writer for both)."""
    sheet = _read(CORPUS / "statsmodels-statecrime.xlsx").split("\n\n", 1)[1].strip()
    csv = csv_to_markdown((CORPUS / "statsmodels-statecrime.csv").read_text(), 1_000_000)
    assert sheet.splitlines()[:2] == csv.splitlines()[:2]
    csv_rows = {re.sub(r"\.0+ ", " ", line) for line in csv.splitlines()[2:]}
    assert len(sheet.splitlines()) == len(csv.splitlines())
    assert sum(line in csv_rows for line in sheet.splitlines()[2:]) >= 45  # a few cells differ in float text


def test_the_rows_setting_keeps_weknoras_line_per_row() -> None:
    markdown = _read(CORPUS / "statsmodels-statecrime.xlsx", spreadsheet_layout="rows")
    assert "state: Alabama, violent: 459.9, murder: 7.1, hs_grad: 82.1" in markdown
    assert "|" not in markdown


def test_header_rules_blank_rows_and_escaped_cells() -> None:
    grid: list[list[object]] = [[None, " "], ["name", None], [], ["b|x", 2.0], [None, None], ["c\nd"]]
    assert _sheet_table(grid, header_mode=True) == "| name | col2 |\n|---|---|\n| b\\|x | 2 |\n| c<br>d |  |"
    assert _sheet_table(grid, header_mode=False).startswith("| col1 | col2 |\n|---|---|\n| name |  |\n")
    assert _sheet_table([["only", 1.0]], header_mode=True) == "| col1 | col2 |\n|---|---|\n| only | 1 |"
    assert _sheet_table([[None], [], [" "]], header_mode=True) == ""
    # equal numbers of different types keep their own texts, in a column of them
    assert _sheet_table([["n"], [1], [True], [1.0], [10**16], [1e16]], header_mode=True).splitlines()[2:] == [
        "| 1 |",
        "| True |",
        "| 1 |",
        "| 10000000000000000 |",
        "| 1e+16 |",
    ]


def test_the_shared_writer_escapes_as_before() -> None:
    rows = [["a", "b|c"], [" pad ", "x\\y"], ["line\r\nbreak", None, "extra"]]
    assert markdown_table(rows) == (
        "| a | b\\|c |  |\n|---|---|---|\n| pad | x\\\\y |  |\n| line<br>break |  | extra |"
    )
    assert markdown_table([]) == "" and markdown_table([[], []]) == ""


def _big_sheet(rows: int) -> bytes:
    from openpyxl import Workbook

    book = Workbook(write_only=True)
    sheet = book.create_sheet("orders")
    sheet.append(["order", "customer", "amount", "note"])
    for i in range(rows):
        sheet.append([i, f"customer {i % 97}", i * 1.5, f"note {i}"])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def test_every_chunk_of_a_big_sheet_carries_the_header_once() -> None:
    request = ReadRequest(data=_big_sheet(3000), file_name="orders.xlsx", file_type="xlsx")
    markdown = parse_spreadsheet(request, ParseContext()).markdown
    chunks = split(markdown, ChunkingConfig())
    header = "| order | customer | amount | note |\n|---|---|---|---|\n"
    assert len(chunks) > 50
    assert chunks[0].content.startswith("## orders\n\n" + header)
    for chunk in chunks[1:]:
        assert chunk.content.startswith(header)  # the header atop the chunk, once
        assert chunk.content.count("| order | customer |") == 1
    rows = {line for c in chunks for line in c.content.splitlines() if re.fullmatch(r"\| \d+ \|.*\|", line)}
    assert len(rows) == 3000  # every row in some chunk


def test_the_setting_is_typed_at_the_api_boundary_and_an_upload_overrides_it() -> None:
    assert validate(CreateKnowledgeBase, {"name": "s"}).spreadsheet_layout == "table"
    assert (
        validate(CreateKnowledgeBase, {"name": "s", "spreadsheet_layout": "rows"}).spreadsheet_layout
        == "rows"
    )
    for bad in ("grid", 1, None):
        with pytest.raises(BadRequest) as caught:
            validate(CreateKnowledgeBase, {"name": "s", "spreadsheet_layout": bad})
        assert caught.value.code == "invalid_spreadsheet_layout"
    with pytest.raises(BadRequest) as caught:
        validate(UpdateKnowledgeBase, {"spreadsheet_layout": "lines"})
    assert caught.value.code == "invalid_spreadsheet_layout"
    with pytest.raises(BadRequest):
        validate(ProcessConfig, {"spreadsheet_layout": "lines"})
    kb = KnowledgeBase(id="kb", tenant_id="t", name="n", spreadsheet_layout="rows")
    assert resolve(kb, {}).spreadsheet_layout == "rows"
    assert resolve(kb, ProcessConfig(spreadsheet_layout="table").overrides()).spreadsheet_layout == "table"
    assert resolve(KnowledgeBase(id="kb", tenant_id="t", name="n"), {}).spreadsheet_layout == "table"
