"""Markdown tables: cell texts escaped column by column (C-level passes, each distinct value once) and the
table written; the one writer for every parser that makes a table (CSV, sheets, Word and slide tables, HTML)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from chalicelib.parsers.base import Limits, parse_failed


def md_escape_cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return (
        text.replace("\\", "\\\\").replace("|", "\\|").replace("\r\n", "<br>").replace("\n", "<br>").strip()
    )


#: equal values of these types (1, 1.0, True) hash alike but have their own texts
NUMBER_TYPES = frozenset({bool, int, float})


class _CellTexts(dict[Any, str]):
    """A column's value → its cell text, each computed once, on first sight (columns repeat values)."""

    def __init__(self, text: Callable[[Any], str]) -> None:
        super().__init__()
        self.text = text

    def __missing__(self, value: Any) -> str:
        out = self[value] = self.text(value)
        return out


def column_texts(column: Sequence[Any], text: Callable[[Any], str]) -> list[str]:
    """`text` of every value of a column as C-level passes (map over a self-filling dict, each distinct value
    computed once), not a Python step per cell, which was most of a big sheet's time. Equal numbers of
    different types (1, 1.0, True; 10**16, 1e16) have their own texts, so a column mixing them maps every cell."""
    if len(set(map(type, column)) & NUMBER_TYPES) > 1:
        return list(map(text, column))
    return list(map(_CellTexts(text).__getitem__, column))


#: the cells a table padded to its widest row may have (a CSV or sheet's own cap)
DEFAULT_MAX_CELLS = Limits.max_sheet_cells


def check_padded_size(rows: int, width: int, max_cells: int) -> None:
    """Refuses a table whose rows, padded to its widest, would make more than `max_cells` cells: one long
    row among many short ones would otherwise pad every row to gigabytes."""
    if rows * width > max_cells:
        raise parse_failed(
            f"A table's {rows:,} rows padded to its widest row ({width:,} cells) make more than "
            f"{max_cells:,} cells, which is over the limit."
        )


def padded_rows(rows: Sequence[Sequence[Any]], max_cells: int = DEFAULT_MAX_CELLS) -> Sequence[Sequence[Any]]:
    """The rows, each padded with None to the widest (a grid calamine gives is dense already)."""
    widths = set(map(len, rows))
    if len(widths) <= 1:
        return rows
    width = max(widths)
    check_padded_size(len(rows), width, max_cells)
    return [list(row) + [None] * (width - len(row)) for row in rows]


_ESCAPED = ("\\", "|", "\n")  # a text without these is its own escaped form (a `\r\n` holds a `\n`)


def _escaped_column(texts: list[str]) -> list[str]:
    """md_escape_cell over stripped texts, done on the column joined (C-level passes), not cell by cell."""
    joined = "\x00".join(texts)
    if not any(mark in joined for mark in _ESCAPED):
        return texts
    if joined.count("\x00") != len(texts) - 1:  # a cell holds the joint itself
        return list(map(md_escape_cell, texts))
    escaped = joined.replace("\\", "\\\\").replace("|", "\\|").replace("\r\n", "<br>").replace("\n", "<br>")
    return escaped.split("\x00")


def table_cells(
    rows: Sequence[Sequence[Any]],
    text: Callable[[Any], str] | None = None,
    max_cells: int = DEFAULT_MAX_CELLS,
) -> list[tuple[str, ...]]:
    """Every row's escaped cell texts, padded to the widest row (at most `max_cells` cells then). Without
    `text`, each value as md_escape_cell makes it (str, None as "", stripped); `text` must give a value's
    stripped text (escaped here)."""
    rows = padded_rows(rows, max_cells)
    if not rows or not rows[0]:
        return []
    columns = (
        column_texts(column, md_escape_cell) if text is None else _escaped_column(column_texts(column, text))
        for column in zip(*rows, strict=True)
    )
    return list(zip(*columns, strict=True))


def format_table(rows: Sequence[Sequence[str]]) -> str:
    """Escaped cell texts as a Markdown table, the first row its header."""
    if not rows:
        return ""
    lines = map(" | ".join, rows)
    header = next(lines)
    body = " |\n| ".join(lines)
    out = f"| {header} |\n|{'---|' * len(rows[0])}"
    return f"{out}\n| {body} |" if body or len(rows) > 1 else out


def markdown_table(rows: Sequence[Sequence[Any]], max_cells: int = DEFAULT_MAX_CELLS) -> str:
    """The one Markdown table writer (CSV, docx/pptx/JSON tables; spreadsheets use its two parts): the first
    row is the header; cells escaped (`|`, backslashes, line breaks as `<br>`) and stripped; uneven rows
    padded to at most `max_cells` cells."""
    return format_table(table_cells(rows, max_cells=max_cells))
