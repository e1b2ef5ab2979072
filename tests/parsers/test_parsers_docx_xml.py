"""The .docx reader works on the package's XML (chalicelib/parsers/office.py with ooxml.Package), not
python-docx's objects: merged table cells come out as python-docx's row.cells gives them, headings by style
name, breaks and tabs in place."""

from __future__ import annotations

import io

import docx

from chalicelib.parsers.base import ParseContext
from chalicelib.parsers.office import parse_docx
from chalicelib.ports import ReadRequest


def _document() -> tuple[bytes, list[list[str]]]:
    document = docx.Document()
    document.add_heading("Chapter one", level=1)
    document.add_heading("Section", level=2)
    run = document.add_paragraph().add_run("left")
    run.add_tab()
    run.add_text("right")
    run.add_break()
    run.add_text("below")
    table = document.add_table(rows=4, cols=3)
    for r in range(4):
        for c in range(3):
            table.cell(r, c).text = f"r{r}c{c}"
    table.cell(0, 0).merge(table.cell(0, 1))  # a horizontal span
    table.cell(1, 2).merge(table.cell(3, 2))  # a vertical span over three rows
    table.cell(2, 0).merge(table.cell(3, 1))  # both at once
    out = io.BytesIO()
    document.save(out)
    data = out.getvalue()
    reread = docx.Document(io.BytesIO(data)).tables[0]
    expected = [[cell.text.strip().replace("\n", "<br>") for cell in row.cells] for row in reread.rows]
    return data, expected


def test_merged_cells_headings_lists_and_breaks_read_as_python_docx_gives_them() -> None:
    data, expected_rows = _document()
    result = parse_docx(ReadRequest(data=data, file_name="d.docx", file_type="docx"), ParseContext())
    blocks = result.markdown.split("\n\n")
    assert blocks[0] == "# Chapter one"
    assert result.title == "Chapter one"
    assert blocks[1] == "## Section"
    assert blocks[2] == "left\tright\nbelow"
    table_lines = blocks[3].splitlines()
    cells = [
        [c.strip() for c in line.strip("|").split(" | ")]
        for line in table_lines
        if not line.startswith("|---")
    ]
    assert (
        len(expected_rows) == 4 and expected_rows[3][2] == expected_rows[1][2]
    )  # the reference really merges
    assert cells == expected_rows
