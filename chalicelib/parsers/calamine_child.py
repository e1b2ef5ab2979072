"""A workbook's sheets read by calamine in a child process: the script the parent runs (office.py,
`ContainedCalamine`), by path, so that it imports calamine and nothing of chalicelib.

calamine's .xls reader (BIFF in an OLE2 container) sizes its buffers from counts and indexes in the file: a
damaged one asked for 5.4 GB and, in another file, 44 TB. A failed allocation aborts a Rust process, which
no Python `except` sees: in the docreader that was the whole Lambda (or the whole local stack). Here it is
this child, under an address-space limit; the parent reads its exit as a damaged file.

The child stays up for the next file (its start is ~15 ms, the read of a small sheet under 1 ms); the parent
starts another when one dies. Protocol, per file, over its stdin and stdout: the parent writes the file's
length and the most cells all sheets may span (two little-endian u64) and the file; the child answers with a
length (u64) and `read`'s answer, plus the CPU seconds it spent ("cpu"), in marshal's format (built in:
json's import alone was 9 of the child's 30 ms of start), each date, time and duration a (tag, text) tuple
that `untagged` turns back into its value. argv: the address-space limit in bytes."""

from __future__ import annotations

import datetime as dt
import io
import marshal
import resource
import sys
import time

TYPE_CHECKING = False  # typing's own import is 4.5 ms of the child's start; mypy reads the block below
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

#: the values marshal cannot write, by type: (tag, text or seconds)
_TAGS: dict[type, Callable[[Any], tuple[str, Any]]] = {
    dt.datetime: lambda v: ("datetime", v.isoformat()),
    dt.date: lambda v: ("date", v.isoformat()),
    dt.time: lambda v: ("time", v.isoformat()),
    dt.timedelta: lambda v: ("timedelta", v.total_seconds()),
}
_READ_BACK: dict[str, Callable[[Any], Any]] = {
    "datetime": dt.datetime.fromisoformat,
    "date": dt.date.fromisoformat,
    "time": dt.time.fromisoformat,
    "timedelta": lambda seconds: dt.timedelta(seconds=seconds),
}


def _tagged(grid: list[list[Any]]) -> list[list[Any]]:
    tags = _TAGS
    return [[tags[type(v)](v) if type(v) in tags else v for v in row] for row in grid]


def untagged(grid: list[list[Any]]) -> list[list[Any]]:
    """A grid as the child wrote it, with its dates, times and durations made values again."""
    back = _READ_BACK
    return [[back[v[0]](v[1]) if type(v) is tuple else v for v in row] for row in grid]


def read(data: bytes, max_cells: int, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Every sheet's grid, in order; a sheet named in `skip` is not read (an empty grid holds its place:
    the parent reads it another way, sparse_sheets.py)."""
    from python_calamine import CalamineError, CalamineWorkbook

    try:
        workbook = CalamineWorkbook.from_filelike(io.BytesIO(data))
    except CalamineError as error:
        return {"error": str(error)[:120]}
    sheets: list[list[Any]] = []
    unreadable: list[str] = []
    budget = max_cells
    with workbook:
        if not skip <= set(workbook.sheet_names):  # a sheet to skip under another name would be read whole
            return {"error": "its sheets' names do not match its workbook's"}
        for name in workbook.sheet_names:
            if name in skip:
                sheets.append([name, []])
                continue
            try:
                sheet = workbook.get_sheet_by_name(name)
            except CalamineError:
                unreadable.append(name)
                continue
            budget -= sheet.height * sheet.width
            if budget < 0:
                return {"over": [name, sheet.height, sheet.width]}
            sheets.append([name, sheet.to_python(skip_empty_area=True)])
    return {"sheets": sheets, "unreadable": unreadable}


def native_panic(error: BaseException) -> bool:
    """Whether `error` is a Rust library's panic (calamine, unword) on the bytes it was given. pyo3 raises it
    as `pyo3_runtime.PanicException`, a BaseException, so an `except Exception` lets it through; the class
    is made at run time and cannot be imported, hence the names. Here, not in parsers/base.py, because this
    child imports nothing of chalicelib; the reader and office.py take it from here."""
    kind = type(error)
    return kind.__name__ == "PanicException" and kind.__module__ == "pyo3_runtime"


def _answer(data: bytes, max_cells: int) -> dict[str, Any]:
    try:
        answer = read(data, max_cells)
    except BaseException as error:
        if not native_panic(error):
            raise
        return {"error": f"its reader stopped on it ({str(error)[:120]})"}
    if "sheets" in answer:  # a sheet without dates goes as it is (its third field False): no walk back
        tagged = set(_TAGS)
        answer["sheets"] = [
            (name, _tagged(grid), True)
            if tagged & {type(v) for row in grid for v in row}
            else (name, grid, False)
            for name, grid in answer["sheets"]
        ]
    return answer


def main() -> None:
    memory = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    while len(head := requests.read(16)) == 16:
        size, max_cells = int.from_bytes(head[:8], "little"), int.from_bytes(head[8:], "little")
        data = requests.read(size)
        started = time.process_time()
        answer = _answer(data, max_cells)
        answer["cpu"] = time.process_time() - started
        body = marshal.dumps(answer)
        replies.write(len(body).to_bytes(8, "little") + body)
        replies.flush()


if __name__ == "__main__":
    main()
