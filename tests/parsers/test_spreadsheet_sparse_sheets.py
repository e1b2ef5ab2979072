"""A sheet with a few cells far apart (a note at J600000, a formatted cell at XFD1048576) is read at a cost
that follows its stored cells, not the grid they span: calamine built that whole grid (5,000,000 cells were
~340 MB) and the preflight refused a sheet spanning more than max_sheet_cells. The builtin reader's preflight
now limits the cells written (sheets_by_extent=False); other engines' keeps the extent."""

from __future__ import annotations

import datetime as dt
import io
import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import openpyxl
import pytest
from openpyxl.styles import Font
from parser_helpers import xlsx_workbook

from chalicelib.domain.errors import PermanentStageError, SpanErrorCode
from chalicelib.parsers.base import Limits, ParseContext
from chalicelib.parsers.guards import check_zip
from chalicelib.parsers.office import parse_spreadsheet
from chalicelib.ports import ReadRequest

ROOT = Path(__file__).parents[2]


def _markdown(data: bytes, limits: Limits | None = None, **options: object) -> str:
    request = ReadRequest(data=data, file_name="sheet.xlsx", file_type="xlsx")
    return parse_spreadsheet(request, ParseContext(limits=limits or Limits(), options=dict(options))).markdown


_TOP = {"A1": "name", "B1": "value", "A2": "alpha", "B2": 1, "A3": "beta", "B3": 2.5}


@pytest.mark.parametrize(("far", "label"), [("J600000", "col10"), ("E999999", "col5")])
def test_a_far_cell_is_read_with_the_sheets_other_cells_and_no_empty_rows(far: str, label: str) -> None:
    data = xlsx_workbook({**_TOP, far: "FAR NOTE"})
    assert _markdown(data) == (
        f"## Data\n\n| name | value | {label} |\n|---|---|---|\n"
        "| alpha | 1 |  |\n| beta | 2.5 |  |\n|  |  | FAR NOTE |\n"
    )
    lines = _markdown(data, spreadsheet_layout="rows").splitlines()
    assert lines == ["## Data", "name: alpha, value: 1", "name: beta, value: 2.5", f"{label}: FAR NOTE"]
    # the builtin reader's preflight takes the file: its cells written are few
    assert check_zip(data, Limits(), "Excel", sheets=True, sheets_by_extent=False)["cells"] == 7


def test_the_sparse_path_writes_the_markdown_calamines_dense_path_writes(monkeypatch) -> None:
    """Every value type (shared and inline strings, numbers, dates, times, durations, booleans), columns
    named by their place, empty rows and columns left out, in both layouts and header modes."""
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "Data"
    values: dict[str, object] = {
        "C3": "name",
        "F3": "when",
        "H3": "n",
        "C10": "alpha",
        "F10": dt.datetime(2024, 5, 6, 7, 8, 9),
        "H10": 1.5,
        "C400": True,
        "F400": dt.date(2020, 1, 2),
        "H400": 7,
        "D77": " spaced | piped ",
        "L20": dt.time(13, 45),
        "L21": dt.timedelta(hours=30),
        "G50": "bold",
    }
    for ref, value in values.items():
        sheet[ref] = value
    sheet["G50"].font = Font(bold=True)
    sheet["J12"].font = Font(italic=True)  # a formatted cell without a value
    workbook.create_sheet("Other")["B2"] = 2
    out = io.BytesIO()
    workbook.save(out)
    data = out.getvalue()
    layouts: list[dict[str, object]] = [
        {},
        {"spreadsheet_layout": "rows"},
        {"xlsx_first_row_as_header": False},
    ]
    dense = [_markdown(data, **options) for options in layouts]
    monkeypatch.setattr("chalicelib.parsers.sparse_sheets.SPARSE_MIN_EXTENT", 0)  # every sheet read sparse
    monkeypatch.setattr("chalicelib.parsers.sparse_sheets.SPARSE_RATIO", 0)
    assert [_markdown(data, **options) for options in layouts] == dense
    assert "| 2024-05-06 07:08:09 |" in dense[0] and "| 1 day, 6:00:00 |" in dense[0]


def _sheet_zip(rows: str, before: str = "", after: str = "") -> bytes:
    """A minimal xlsx written by hand (inline strings, no shared strings or styles); `before` and `after`
    the sheet's data (column widths, merged cells)."""
    ns = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    pkg = "http://schemas.openxmlformats.org/package/2006/relationships"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(
            "_rels/.rels",
            f'<?xml version="1.0"?><Relationships xmlns="{pkg}"><Relationship Id="r1" '
            f'Type="{rel}/officeDocument" Target="xl/workbook.xml"/></Relationships>',
        )
        z.writestr(
            "xl/workbook.xml",
            f'<?xml version="1.0"?><workbook xmlns="{ns}" xmlns:r="{rel}"><sheets>'
            '<sheet name="Notes" sheetId="1" r:id="s1"/></sheets></workbook>',
        )
        z.writestr(
            "xl/_rels/workbook.xml.rels",
            f'<?xml version="1.0"?><Relationships xmlns="{pkg}"><Relationship Id="s1" '
            f'Type="{rel}/worksheet" Target="worksheets/sheet1.xml"/></Relationships>',
        )
        z.writestr(
            "xl/worksheets/sheet1.xml",
            f'<?xml version="1.0"?><worksheet xmlns="{ns}">{before}<sheetData>{rows}</sheetData>{after}'
            "</worksheet>",
        )
    return out.getvalue()


def _inline(ref: str, text: str) -> str:
    return f'<c r="{ref}" t="inlineStr"><is><t>{text}</t></is></c>'


def test_cells_without_references_are_placed_as_calamine_places_them(monkeypatch) -> None:
    rows = (
        f'<row r="2">{_inline("B2", "head")}<c t="inlineStr"><is><t>next</t></is></c></row>'
        '<row r="2900"><c r="AAA2900" s="1"/></row>'  # a formatted cell only: no row, no column
        f'<row r="3000">{_inline("ZZ3000", "last")}<c t="inlineStr"><is><t>after</t></is></c></row>'
    )
    expected = "## Notes\n\n| head | next | col701 | col702 |\n|---|---|---|---|\n|  |  | last | after |\n"
    assert _markdown(_sheet_zip(rows)) == expected  # 3,000 rows x 703 columns: read by its cells
    monkeypatch.setattr("chalicelib.parsers.sparse_sheets.SPARSE_MIN_EXTENT", 10**9)
    assert _markdown(_sheet_zip(rows)) == expected  # calamine's own placement, on its dense path


_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"


@pytest.mark.parametrize(
    "rows",
    [
        f'<x:row xmlns:x="{_NS}" r="2"><x:c r="B2" t="inlineStr"><x:is><x:t>head</x:t></x:is></x:c></x:row>'
        '<row r="3"><c r="C3"><v>5</v></c></row>',
        '<row r="2"><c r="B2"><v>0</v></c></row><row r="40"><c r="Q40" t="b"><v>1</v></c>'
        '<c r="R40" t="e"><v>#DIV/0!</v></c><c r="S40" t="str"><v></v></c><c r="T40"><f>1+1</f></c></row>',
        '<row r="1"><c r="b2"><v>3</v></c></row>',
        '<row r="1"><c r="bad"><v>3</v></c></row>',  # calamine cannot read the sheet: nor can this path
        '<row r="0"><c><v>3</v></c></row>',
    ],
    ids=["prefixed", "types", "lower-case", "bad-cell-reference", "row-zero"],
)
def test_hand_written_sheets_read_the_same_on_both_paths(rows: str, monkeypatch) -> None:
    data = _sheet_zip(rows)

    def read() -> tuple[str, dict[str, object]]:
        request = ReadRequest(data=data, file_name="sheet.xlsx", file_type="xlsx")
        result = parse_spreadsheet(request, ParseContext())
        return result.markdown, result.metadata

    dense = read()
    monkeypatch.setattr("chalicelib.parsers.sparse_sheets.SPARSE_MIN_EXTENT", 0)
    monkeypatch.setattr("chalicelib.parsers.sparse_sheets.SPARSE_RATIO", 0)
    assert read() == dense


_PEAK = """
import json, resource, sys
from chalicelib.parsers.base import ParseContext
from chalicelib.parsers.office import parse_spreadsheet
from chalicelib.ports import ReadRequest
data = open(sys.argv[1], "rb").read()
# the address space the read may add, as a hard cap: a peak under memory pressure could be paged out
mapped = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (mapped + 150 * 2**20, resource.RLIM_INFINITY))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
markdown = parse_spreadsheet(ReadRequest(data=data, file_name="s.xlsx", file_type="xlsx"), ParseContext()).markdown
print(json.dumps({"markdown": markdown, "mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024}))
"""


def _peak(data: bytes, tmp_path: Path) -> dict[str, Any]:
    """The read in a process of its own (_PEAK): its Markdown and its peak over what it had before (MB)."""
    path = tmp_path / "sparse.xlsx"
    path.write_bytes(data)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_PEAK), str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


@pytest.mark.parametrize(("far", "label"), [("E999999", "col5"), ("XFD1048576", "col16384")])
def test_reading_a_far_cell_takes_little_memory(far: str, label: str, tmp_path: Path) -> None:
    """Memory in a process of its own, its address space capped at 150 MB over what it had mapped before the
    read, and its peak (ru_maxrss, MB): calamine's grid of E1:E999999 was 224 MB more, and of A1:XFD1048576
    an allocation of 512 GB that aborted the process."""
    answer = _peak(xlsx_workbook({**_TOP, far: "FAR NOTE"}), tmp_path)
    assert answer["markdown"].endswith(
        f"| {label} |\n|---|---|---|\n| alpha | 1 |  |\n| beta | 2.5 |  |\n|  |  | FAR NOTE |\n"
    )
    assert answer["mb"] < 100


@pytest.mark.parametrize("before", [False, True], ids=["merged-cells-after", "columns-before"])
def test_a_sparse_sheets_other_elements_take_no_memory(before: bool, tmp_path: Path) -> None:
    """A sparse sheet (A1 and J600000) whose XML holds 600,000 other elements (<mergeCell>s after its data,
    or <col>s before it; a ~3 MB zip): only rows and cells were dropped as the sheet streamed, so the others
    all stayed (370 MB more for the <mergeCell>s, 900 MB for the <col>s, past the process's 150 MB cap); now
    each is dropped at its end."""
    rows = f'<row r="1">{_inline("A1", "head")}</row><row r="600000">{_inline("J600000", "note")}</row>'
    if before:
        columns = "".join(f'<col min="{n}" max="{n}" width="9"/>' for n in range(1, 600_001))
        data = _sheet_zip(rows, before=f"<cols>{columns}</cols>")
    else:
        merged = "".join(f'<mergeCell ref="A{n}:B{n}"/>' for n in range(2, 600_002))
        data = _sheet_zip(rows, after=f"<mergeCells>{merged}</mergeCells>")
    answer = _peak(data, tmp_path)
    assert answer["markdown"] == "## Notes\n\n| head | col10 |\n|---|---|\n|  | note |\n"
    assert answer["mb"] < 100


def _refused(call, *args, **kwargs) -> PermanentStageError:  # type: ignore[no-untyped-def]
    with pytest.raises(PermanentStageError) as error:
        call(*args, **kwargs)
    assert error.value.code == SpanErrorCode.DOCREADER_PARSE_FAILED
    return error.value


def test_a_sheet_with_too_many_stored_cells_is_still_refused_by_its_cells() -> None:
    limits = Limits(max_sheet_cells=10_000)
    rows = "".join(
        f'<row r="{r * 90}"><c r="A{r * 90}"><v>{r}</v></c><c r="XFD{r * 90}"><v>1</v></c></row>'
        for r in range(1, 5001)
    )
    data = _sheet_zip(rows)  # 10,000 cells over 450,000 rows x 16,384 columns
    assert check_zip(data, limits, "Excel", sheets=True, sheets_by_extent=False)["cells"] == 10_000
    assert "| 5000 | 1 |" in _markdown(data, limits)
    over = _sheet_zip(rows + '<row r="450001"><c r="B450001"><v>1</v></c></row>')
    error = _refused(check_zip, over, limits, "Excel", sheets=True, sheets_by_extent=False)
    assert "more than 10,000 cells" in error.message and "10,001 cells written" in error.message


def test_a_sheet_whose_few_cells_make_a_large_table_is_refused_before_the_table_is_built() -> None:
    """Cells on a diagonal: 120 cells written, 120 rows x 120 columns of table (more than the 10,000 cells
    a sheet may make), refused as the cells stream, before any grid is built."""
    limits = Limits(max_sheet_cells=10_000)
    rows = "".join(
        f'<row r="{n * 150}"><c r="{_letters(n)}{n * 150}"><v>{n}</v></c></row>' for n in range(1, 121)
    )
    error = _refused(_markdown, _sheet_zip(rows), limits)
    assert (
        "more than 10,000 cells" in error.message and "101 rows × 101 columns" in error.message
    )  # stopped at the first cell past the cap


def test_other_engines_still_meet_the_extent_limit() -> None:
    """An engine that builds the whole grid (MarkItDown's pandas) keeps the preflight's extent check."""
    data = xlsx_workbook({**_TOP, "XFD1048576": "FAR NOTE"})
    error = _refused(check_zip, data, Limits(), "Excel", sheets=True)
    assert "1,048,576 rows × 16,384 columns" in error.message


def _letters(number: int) -> str:
    letters = ""
    while number:
        number, rest = divmod(number - 1, 26)
        letters = chr(65 + rest) + letters
    return letters
