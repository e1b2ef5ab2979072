"""CSV rows, with one common damage repaired: a quote that opens a field and is never closed.

Python's reader, like Excel's, takes everything after such a quote as one cell, newlines and delimiters
included: a stray `"` at the start of a field (`screen,"5 inch`) folds every later row into it, silently
for a small file and as "field larger than field limit" for a large one. Both the docreader (a CSV document)
and the FAQ import (a CSV of entries) read CSV here.

Python's reader refuses a field over 131,072 characters by default, a limit of the process. A cell can hold
no more than the text it is read from, which the upload cap already bounds, so the limit is lifted once,
here: a long cell (a description, a JSON value) is read, not the file failed.

Excel writes, and honours, a first line `sep=;` naming the delimiter; both readers take it as Excel does
(`excel_sep_line`)."""

from __future__ import annotations

import csv
import io
import re
import sys
from dataclasses import dataclass, field
from typing import Any

csv.field_size_limit(sys.maxsize)

#: Excel's first line naming a CSV's delimiter (`sep=;`, possibly quoted)
_SEP_LINE = re.compile(r'"?sep=([^\r\n"])"?[ \t]*(?:\r\n|\n|\r|$)', re.IGNORECASE)


def excel_sep_line(text: str) -> tuple[str, type[csv.Dialect] | None]:
    """`text` without Excel's `sep=` first line, and the dialect that line names (None without one):
    Excel reads such a file with that delimiter and shows no row for the line."""
    line = _SEP_LINE.match(text)
    if line is None:
        return text, None
    return text[line.end() :], type("ExcelSepDialect", (csv.excel,), {"delimiter": line.group(1)})


class TooManyCells(ValueError):
    """More cells than the reader was allowed (counted while reading, before the rest is held)."""


@dataclass
class CsvRows:
    rows: list[list[str]] = field(default_factory=list)
    #: the line whose field opened a quote that never closed; its rows were read with quotes as plain text
    unclosed_quote_line: int | None = None


def read_csv_rows(text: str, dialect: Any = csv.excel, max_cells: int | None = None) -> CsvRows:
    """Every row of `text` (blank rows included). Raises csv.Error for damage it does not repair, and
    TooManyCells past `max_cells`."""
    reader = csv.reader(io.StringIO(text), dialect)
    out = CsvRows()
    cells, row_start = 0, 0  # row_start: the physical lines read before the current row
    last_start = 0
    for row in reader:
        cells += len(row)
        if max_cells is not None and cells > max_cells:
            raise TooManyCells(cells)
        out.rows.append(row)
        last_start, row_start = row_start, reader.line_num
    if not out.rows or not out.rows[-1] or not any(ch in out.rows[-1][-1] for ch in "\r\n"):
        return out  # the last cell spans no line: no quote swallowed the rest of the file
    tail = "".join(text.splitlines(keepends=True)[last_start:])
    try:  # read strictly, a quote still open at the end of the data is an error of its own
        for _ in csv.reader(io.StringIO(tail), dialect, strict=True):
            pass
        return out  # a quoted cell with line breaks, closed: as written
    except csv.Error as error:
        if "unexpected end of data" not in str(error):
            return out
    # No lone quote follows the open one anywhere (it would have closed the field), so reading the rest
    # with quotes as plain characters changes only doubled quotes ("" stays as two).
    repaired = list(csv.reader(io.StringIO(tail), dialect, quoting=csv.QUOTE_NONE))
    cells += sum(map(len, repaired)) - len(out.rows[-1])
    if max_cells is not None and cells > max_cells:
        raise TooManyCells(cells)
    out.rows[-1:] = repaired
    out.unclosed_quote_line = last_start + 1
    return out
