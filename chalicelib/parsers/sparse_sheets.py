"""xlsx sheets whose cells are few for the grid they span (a note at J600000, a formatted cell at XFD1048576)
read at a cost that follows their stored cells: calamine builds a sheet's whole bounding box (5,000,000 cells
were ~340 MB), so such a sheet's cells are streamed from its XML (lxml iterparse, placed as calamine places
them), moved next to each other (only the rows and columns that hold a cell), and that compact sheet is read
by calamine in a small workbook of its own with the file's shared strings, styles and date system: every
value has calamine's type and text, as on the dense path. The Markdown is written by the same functions
(office.py), told each column's place in the original sheet so that a column named colN keeps its N; rows
without text are left out there, as for every sheet."""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator, Mapping
from typing import IO, Any
from xml.sax.saxutils import quoteattr

from lxml import etree

from chalicelib.parsers.base import ZIP_MEMBER_ERRORS, Limits, parse_failed
from chalicelib.parsers.guards import column_number
from chalicelib.parsers.ooxml import R_NS, Package, transitional

#: a sheet spanning at most this many cells stays on calamine's path whatever its density (its grid is small)
SPARSE_MIN_EXTENT = 1 << 18
#: a larger sheet is read by its stored cells when its grid is more than this many times its cells written
SPARSE_RATIO = 4

_MAIN_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_RELS_NS = "http://schemas.openxmlformats.org/package/2006/relationships"
_WORKSHEET_REL = f"{R_NS}/worksheet"
# the parts calamine reads besides the workbook and its sheets (relationship type's last segment)
_SHARED_PARTS = ("/sharedStrings", "/styles")
_REF = re.compile(r"([A-Za-z]+)([0-9]+)")


class _Unreadable(Exception):
    """A sheet calamine does not read (a reference it cannot parse): that sheet is named unreadable."""


def is_sparse(cells: int, rows: int, cols: int, max_cells: int) -> bool:
    """Whether a sheet (its cells written and the rows × columns they span) is read by its stored cells: its
    grid is large and mostly empty, or larger than calamine's path may build."""
    extent = rows * cols
    return extent > SPARSE_MIN_EXTENT and (extent > SPARSE_RATIO * cells or extent > max_cells)


class SparseGrid:
    """A sparse sheet as calamine read its compact form: `grid` (rows and columns that hold no cell left out)
    and `numbers`, each grid column's number as the dense path would name it (colN)."""

    def __init__(self, grid: list[list[Any]], numbers: list[int]) -> None:
        self.grid = grid
        self.numbers = numbers


class SparseSheets:
    """The sparse sheets of a workbook: `names` (calamine's path skips them), their grids by name, the names
    calamine could not read, and the cells their compact grids span (counted against the workbook's cap)."""

    def __init__(self) -> None:
        self.names: frozenset[str] = frozenset()
        self.grids: dict[str, SparseGrid] = {}
        self.unreadable: list[str] = []
        self.spanned = 0


def read_sparse_sheets(
    data: bytes, measures: Mapping[str, tuple[int, int, int]], limits: Limits
) -> SparseSheets:
    """The sheets is_sparse finds in the preflight's `measures` (part → cells, rows, columns), read by their
    stored cells; nothing is opened when there is none. Refuses the file when their compact grids span more
    than the cells a workbook may (max_sheet_cells, calamine's path's cap)."""
    out = SparseSheets()
    max_cells = limits.max_sheet_cells
    sparse = {
        part for part, (cells, rows, cols) in measures.items() if is_sparse(cells, rows, cols, max_cells)
    }
    if not sparse:
        return out
    package = Package(data, "Excel", limits.zip_max_member_uncompressed)
    try:
        main = package.main_part()
        workbook = package.xml(main)
        rels = package.rels(main)
        copied = {
            target: (kind[len(R_NS) :], blob)
            for kind, target in rels.values()
            if kind.endswith(_SHARED_PARTS) and (blob := package.blob(target)) is not None
        }
        parts = {name: part for name, part in _sheet_parts(workbook, rels) if part in sparse}
        if sparse - set(parts.values()):  # a sheet this cannot name would be calamine's to build whole
            raise parse_failed(
                f"The spreadsheet has more than {max_cells:,} cells (a sheet spans more than its cells "
                "could fill, and its name cannot be read); split it into smaller files."
            )
        out.names = frozenset(parts)
        properties = next(workbook.iter("{*}workbookPr"), None) if workbook is not None else None
        date1904 = (properties.get("date1904") or "") if properties is not None else ""
        compact: list[tuple[str, bytes, list[int]]] = []
        zf = package.opened()  # the sheets stream from the zip the package opened for its parts
        try:
            for name, part in parts.items():
                try:
                    rows, cols = _rows_and_columns(zf, part, name, max_cells - out.spanned, max_cells)
                except _Unreadable:
                    out.unreadable.append(name)
                    continue
                out.spanned += len(rows) * len(cols)
                compact.append((name, _compact_sheet(zf, part, rows, cols), cols))
        except ZIP_MEMBER_ERRORS as exc:
            raise parse_failed("The Excel file is damaged (a sheet cannot be read).") from exc
    finally:
        package.close()
    out.grids, unreadable = _read_compact(_workbook(compact, copied, date1904), compact)
    out.unreadable += unreadable
    return out


def _sheet_parts(workbook: Any | None, rels: Mapping[str, tuple[str, str]]) -> list[tuple[str, str]]:
    """(sheet name, worksheet part) in the workbook's order."""
    out: list[tuple[str, str]] = []
    if workbook is None:
        return out
    for sheet in transitional(workbook).iter("{*}sheet"):  # a Strict workbook's r:id in R_NS
        rid = sheet.get(f"{{{R_NS}}}id") or ""
        kind, part = rels.get(rid, ("", ""))
        name = sheet.get("name")
        if kind == _WORKSHEET_REL and name:
            out.append((name, part))
    return out


def _placed_cells(stream: IO[bytes]) -> Iterator[tuple[int, int, Any]]:
    """Each cell with content (an element below it: a value, an inline string, a formula) with its row and
    column, placed as calamine places them: a row without a reference follows the row before, a cell without
    one the cell before it in its row. Every element is dropped at its end (a cell's once the caller has it),
    except those inside a cell, kept until their cell ends: memory is one cell, whatever else the sheet holds
    (a million <mergeCell>s, hyperlinks). A reference calamine cannot parse (a row's not a positive number, a
    cell's not letters and digits) makes the sheet _Unreadable, as it is on calamine's path."""
    row = col = 0
    open_cells = 0  # cells started and not ended: what is inside one is its content, kept until it ends
    events = etree.iterparse(
        stream,
        events=("start", "end"),
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
    )
    for event, element in events:
        tag = element.tag
        is_cell = tag.endswith("}c") or tag == "c"
        if event == "start":
            if is_cell:
                open_cells += 1
            elif tag.endswith("}row") or tag == "row":
                written = element.get("r")
                row = _row_number(written) if written else row + 1
                col = 0
            continue
        if is_cell:
            open_cells -= 1
            reference = element.get("r")
            if reference:
                found = _REF.fullmatch(reference)
                if found is None:
                    raise _Unreadable(reference)
                col, cell_row = column_number(found.group(1)), int(found.group(2))
            else:
                col, cell_row = col + 1, row
            if len(element):
                yield cell_row, col, element
        elif open_cells:
            continue
        element.clear()
        if not open_cells:
            while element.getprevious() is not None:
                del element.getparent()[0]


def _rows_and_columns(
    zf: zipfile.ZipFile, part: str, name: str, budget: int, limit: int
) -> tuple[list[int], list[int]]:
    """The rows and the columns that hold a cell, sorted; refused as soon as the grid they make passes
    `budget` (what is left of the workbook's `limit`): cells on a diagonal make a square grid."""
    rows: set[int] = set()
    cols: set[int] = set()
    with zf.open(part) as stream:
        try:
            for row, col, _ in _placed_cells(stream):
                if row not in rows or col not in cols:
                    rows.add(row)
                    cols.add(col)
                    if len(rows) * len(cols) > budget:
                        raise parse_failed(
                            f"The spreadsheet has more than {limit:,} cells (sheet '{name}' has cells in "
                            f"{len(rows):,} rows × {len(cols):,} columns); split it into smaller files."
                        )
        except etree.XMLSyntaxError as exc:
            raise parse_failed(f"The Excel file is damaged ({part} is not well-formed XML).") from exc
    return sorted(rows), sorted(cols)


def _compact_sheet(zf: zipfile.ZipFile, part: str, rows: list[int], cols: list[int]) -> bytes:
    """The sheet's cells, each at its place among the rows and columns that hold one (the second pass: the
    cells are written as they stream, never all held as elements)."""
    row_at = {row: n for n, row in enumerate(rows, 1)}
    letters_at = {col: _column_letters(n) for n, col in enumerate(cols, 1)}
    out = io.BytesIO()
    out.write(f'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{_MAIN_NS}"><sheetData>'.encode())
    open_row = 0
    with zf.open(part) as stream:
        for row, col, cell in _placed_cells(stream):
            at = row_at[row]
            if at != open_row:
                out.write(f'{"</row>" if open_row else ""}<row r="{at}">'.encode())
                open_row = at
            cell.set("r", f"{letters_at[col]}{at}")
            out.write(etree.tostring(cell))
    out.write(b"</row></sheetData></worksheet>" if open_row else b"</sheetData></worksheet>")
    return out.getvalue()


def _workbook(
    compact: list[tuple[str, bytes, list[int]]], copied: Mapping[str, tuple[str, bytes]], date1904: str
) -> bytes:
    """A workbook of the compact sheets with the file's shared strings, styles and date system."""
    sheets = "".join(
        f'<sheet name={quoteattr(name)} sheetId="{n}" r:id="s{n}"/>'
        for n, (name, _, _) in enumerate(compact, 1)
    )
    system = f"<workbookPr date1904={quoteattr(date1904)}/>" if date1904 else ""
    rels = "".join(
        f'<Relationship Id="s{n}" Type="{_WORKSHEET_REL}" Target="/xl/worksheets/sheet{n}.xml"/>'
        for n in range(1, len(compact) + 1)
    ) + "".join(
        f'<Relationship Id="c{n}" Type="{R_NS}{kind}" Target={quoteattr("/" + target)}/>'
        for n, (target, (kind, _)) in enumerate(copied.items(), 1)
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as mini:
        mini.writestr(
            "_rels/.rels",
            f'<?xml version="1.0"?><Relationships xmlns="{_RELS_NS}"><Relationship Id="r1" '
            f'Type="{R_NS}/officeDocument" Target="xl/workbook.xml"/></Relationships>',
        )
        mini.writestr(
            "xl/workbook.xml",
            f'<?xml version="1.0"?><workbook xmlns="{_MAIN_NS}" xmlns:r="{R_NS}">{system}<sheets>{sheets}'
            "</sheets></workbook>",
        )
        mini.writestr(
            "xl/_rels/workbook.xml.rels",
            f'<?xml version="1.0"?><Relationships xmlns="{_RELS_NS}">{rels}</Relationships>',
        )
        for n, (_, sheet, _) in enumerate(compact, 1):
            mini.writestr(f"xl/worksheets/sheet{n}.xml", sheet)
        for target, (_, blob) in copied.items():
            mini.writestr(target, blob)
    return out.getvalue()


def _read_compact(
    mini: bytes, compact: list[tuple[str, bytes, list[int]]]
) -> tuple[dict[str, SparseGrid], list[str]]:
    """calamine's grids of the compact sheets; each grid column numbered as on the dense path: from the first
    column calamine keeps a value in (its range's start), in the original sheet's columns."""
    from python_calamine import CalamineError, CalamineWorkbook

    grids: dict[str, SparseGrid] = {}
    unreadable: list[str] = []
    try:
        workbook = CalamineWorkbook.from_filelike(io.BytesIO(mini))
    except CalamineError as error:
        raise parse_failed(f"The spreadsheet is damaged or unreadable ({str(error)[:120]}).") from error
    with workbook:
        for name, _, cols in compact:
            try:
                sheet = workbook.get_sheet_by_name(name)
            except CalamineError:
                unreadable.append(name)
                continue
            grid = sheet.to_python(skip_empty_area=True)
            start = sheet.start
            if not grid or start is None:
                continue
            first = start[1]
            width = max(map(len, grid))
            numbers = [cols[first + j] - cols[first] + 1 for j in range(width)]
            grids[name] = SparseGrid(grid, numbers)
    return grids, unreadable


def _row_number(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise _Unreadable(text)
    return int(text)


def _column_letters(number: int) -> str:
    letters = ""
    while number:
        number, rest = divmod(number - 1, 26)
        letters = chr(65 + rest) + letters
    return letters
