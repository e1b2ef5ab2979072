"""Reading import rows (inline JSON, or an uploaded JSON / CSV / XLSX object) and writing failed rows.

CSV and XLSX follow WeKnora's template: a header row, then one entry per row with the columns
category, question, similar questions, negative questions, answers (lists `##`-joined), answer-all,
disabled. Headers are matched by name (English or WeKnora's Chinese); a file without a known header is
read by position in that order. The template is one sheet, and a workbook's other sheets may hold anything
(notes, instructions): only the first is read, and the other sheets holding a value are named in the
task's progress (`sheets_skipped`), never silently ignored.

One import reads, plans and stores every row in one delivery of a 1024 MB function, so a file is bounded
(MAX_FILE_BYTES, checked when the import starts and again here) and so is what it holds once read: at most
MAX_ROWS entries, and for a spreadsheet (compressed: its size says little) MAX_TEXT_CHARS of cell text. A
CSV's lines are bounded too (MAX_CSV_LINES: a file of blank lines is millions of empty rows). Beyond any of
them the import fails at once with the limit as its reason.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chalicelib.domain import strict_json
from chalicelib.domain.csv_rows import TooManyCells, excel_sep_line, read_csv_rows
from chalicelib.faq.validation import SWITCHES, ImportRow, PlannedRow

LIST_SEPARATOR = "##"
FAILED_CSV_HEADER = (
    "reason",
    "category",
    "question",
    "similar_questions",
    "negative_questions",
    "answers",
    "answer_all",
    "disabled",
)
COLUMNS = ("category", "question", "similar", "negatives", "answers", "answer_all", "disabled")
_ALIASES: dict[str, str] = {
    "category": "category",
    "tag": "category",
    "tags": "category",
    "分类": "category",
    "question": "question",
    "standard_question": "question",
    "问题": "question",
    "标准问题": "question",
    "similar": "similar",
    "similar_questions": "similar",
    "相似问题": "similar",
    "negatives": "negatives",
    "negative_questions": "negatives",
    "反例问题": "negatives",
    "answers": "answers",
    "answer": "answers",
    "答案": "answers",
    "机器人回答": "answers",
    "answer_all": "answer_all",  # `answer-all` too (`_column` reads hyphens and spaces as `_`)
    "是否全部回复": "answer_all",
    "disabled": "disabled",
    "是否停用": "disabled",
}
TRUE = {"true", "yes", "y", "1", "是", "t"}

#: an uploaded import file: the upload form's size bound (S3 refuses more), and 413 `import_file_too_large`
#: when the import starts (or a failed import with that code, when the worker finds a bigger object)
MAX_FILE_BYTES = 10 * 1024 * 1024
FILE_TOO_LARGE = "import_file_too_large"
#: entries one import holds (header and blank rows not counted)
MAX_ROWS = 50_000
#: cell text a spreadsheet may unpack to, and the cells a CSV or spreadsheet may hold
MAX_TEXT_CHARS = MAX_FILE_BYTES
MAX_CELLS = 20 * MAX_ROWS
#: physical lines of a CSV (a quoted cell may span several)
MAX_CSV_LINES = 1_000_000


@dataclass
class SourceRows:
    """What an import file holds: its rows, and the sheets of a workbook that were not read."""

    rows: list[ImportRow]
    #: sheets after the first that hold a value (their names, in the workbook's order)
    skipped_sheets: list[str] = field(default_factory=list)


class SourceError(ValueError):
    """The uploaded object cannot be read as an import (permanent: a retry reads the same bytes)."""

    #: the failed import's `error_code`, where the reason has one
    code = ""


class SourceTooLarge(SourceError):
    """An uploaded object over MAX_FILE_BYTES (the worker plans every row at once: it must fit its memory)."""

    code = FILE_TOO_LARGE

    def __init__(self) -> None:
        super().__init__(
            f"an FAQ import file holds at most {MAX_FILE_BYTES // (1024 * 1024)} MB and "
            f"{MAX_ROWS:,} entries; split it into several imports"
        )


def _too_many_rows() -> SourceError:
    return SourceError(f"the file holds more than {MAX_ROWS:,} entries: split it into several imports")


def _too_much(what: str) -> SourceError:
    return SourceError(
        f"the file holds more {what} than an import reads (at most {MAX_ROWS:,} entries and "
        f"{MAX_TEXT_CHARS // (1024 * 1024)} MB of text): split it into several imports"
    )


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [_text(v) for v in value if _text(v)]
    return [part.strip() for part in _text(value).split(LIST_SEPARATOR) if part.strip()]


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return _text(value).lower() in TRUE


def _given(value: Any) -> bool:
    """A field the entry carries: null or "" is one left unset (WeKnora's pointers), not false."""
    return value not in (None, "")


def _answer_all(data: Mapping[str, Any]) -> bool:
    """Ours (`answer_all`), else WeKnora's `answer_strategy` ("all" answers every one, "random" one)."""
    if _given(data.get("answer_all")):
        return _bool(data["answer_all"])
    return _text(data.get("answer_strategy")).lower() == "all"


def _disabled(data: Mapping[str, Any]) -> bool:
    if _given(data.get("disabled")):
        return _bool(data["disabled"])
    return _given(data.get("is_enabled")) and not _bool(data["is_enabled"])


def row_from_mapping(index: int, data: Mapping[str, Any]) -> ImportRow:
    """An entry object (inline or JSON file): WeKnora's names (its FAQEntryPayload and JSON export:
    `tag_name`, `answer_strategy`) or ours."""
    tags = data.get("tags")
    for single in ("tag_name", "category"):
        if tags is None and _given(data.get(single)):
            tags = [data[single]]
    disabled = _disabled(data)
    given = [
        name
        for name, keys in (
            ("answer_all", ("answer_all", "answer_strategy")),
            ("disabled", ("disabled", "is_enabled")),
        )
        if any(_given(data.get(key)) for key in keys)
    ]
    return ImportRow(
        row=index,
        question=_text(data.get("standard_question", data.get("question"))),
        answers=_list(data.get("answers", data.get("answer"))),
        similar=_list(data.get("similar_questions", data.get("similar"))),
        negatives=_list(data.get("negative_questions", data.get("negatives"))),
        tags=_list(tags),
        answer_all=_answer_all(data),
        disabled=disabled,
        given=given,
    )


#: an entry object's text fields (one text) and list fields (a text, `##`-joined, or a list of texts)
_TEXT_FIELDS = ("standard_question", "question", "category", "tag_name", "answer_strategy")
_LIST_FIELDS = (
    "answers",
    "answer",
    "similar_questions",
    "similar",
    "negative_questions",
    "negatives",
    "tags",
)


def _wrong_kind_in(data: Mapping[str, Any]) -> str:
    """Why an entry object is refused: a field holding an object or a list where a text belongs (read as
    its Python spelling, it would be imported as a question or an answer), or ""."""

    def text(value: Any) -> bool:
        return value is None or (isinstance(value, str | int | float) and not isinstance(value, bool))

    for name in _TEXT_FIELDS:
        if not text(data.get(name)):
            return f"{name}: a text is expected, not a {type(data[name]).__name__}"
    for name in _LIST_FIELDS:
        value = data.get(name)
        if isinstance(value, list):
            if not all(text(item) for item in value):
                return f"{name}: a list of texts is expected"
        elif not text(value):
            return f"{name}: a text or a list of texts is expected, not a {type(value).__name__}"
    return ""


def _column(header_cell: Any) -> str | None:
    """The column a header cell names: its words before a parenthesis (WeKnora's template says
    `问题(必填)`), case, spaces and hyphens aside (`Similar Questions`, `answer-all`)."""
    name = _text(header_cell).lower().split("(")[0].split("（")[0].strip()
    return _ALIASES.get(re.sub(r"[\s_-]+", "_", name))


def _from_table(table: Iterable[tuple[int, Sequence[Any]]]) -> list[ImportRow]:
    """`table`: the non-blank rows with their places in the sheet (0 = its first row). A row's number
    counts the rows after the header (without one, the sheet's rows), blank ones too: the number a user
    finds it by."""
    rows = [(place, list(r)) for place, r in table if any(_text(c) for c in r)]
    if not rows:
        return []
    header = [_column(c) for c in rows[0][1]]
    if "question" in header:
        positions = {name: i for i, name in reversed(list(enumerate(header))) if name}
        body = rows[1:]
        first = rows[0][0] + 1
    else:
        positions = {name: i for i, name in enumerate(COLUMNS)}
        body = rows
        first = 0
    if len(body) > MAX_ROWS:
        raise _too_many_rows()
    out = []
    for place, cells in body:
        number = place - first + 1

        def cell(name: str, cells: list[Any] = cells) -> Any:
            i = positions.get(name)
            return cells[i] if i is not None and i < len(cells) else None

        out.append(
            ImportRow(
                row=number,
                question=_text(cell("question")),
                answers=_list(cell("answers")),
                similar=_list(cell("similar")),
                negatives=_list(cell("negatives")),
                tags=_list(cell("category")),
                answer_all=_bool(cell("answer_all")),
                disabled=_bool(cell("disabled")),
                given=[name for name in SWITCHES if _text(cell(name))],
            )
        )
    return out


def _xlsx_rows(data: bytes) -> tuple[list[tuple[int, list[Any]]], list[str]]:
    """The first sheet's non-blank rows with their places, each up to its last value (openpyxl,
    read-only: rows stream, formulas as cached values), and the names of the other sheets that hold a
    value. Counted while they stream: past MAX_ROWS rows (and a header), MAX_CELLS cells or MAX_TEXT_CHARS
    characters the rest is not read (SourceError)."""
    import zlib
    from zipfile import BadZipFile

    from openpyxl import load_workbook
    from openpyxl.utils.exceptions import InvalidFileException

    # A damaged workbook fails on opening or while its rows stream: a broken zip or deflate stream, XML that
    # does not parse (lxml's and ElementTree's errors are both SyntaxErrors) or names an unknown encoding
    # (LookupError), an element with an attribute openpyxl's schema does not have (TypeError), a part, style
    # or value that is not there.
    damaged = (
        BadZipFile,
        zlib.error,
        InvalidFileException,
        SyntaxError,
        LookupError,
        TypeError,
        ValueError,
        OSError,
        EOFError,
    )
    try:
        book = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        try:
            if not book.worksheets:
                return [], []
            first, *others = book.worksheets
            rows = _bounded(first.iter_rows(values_only=True))
            return rows, [str(sheet.title) for sheet in others if _holds_a_value(sheet)]
        finally:
            book.close()
    except SourceError:  # a limit reached while the rows streamed (a ValueError too): as it is
        raise
    except damaged as error:
        raise SourceError(f"the spreadsheet cannot be read: {type(error).__name__}") from error


def _holds_a_value(sheet: Any) -> bool:
    """Whether a sheet not read holds a value (its first MAX_ROWS rows looked at: one formatted far down
    and blank there counts as holding one, to be named rather than passed over)."""
    for place, values in enumerate(sheet.iter_rows(values_only=True)):
        if place > MAX_ROWS or any(_text(v) for v in values):
            return True
    return False


def _bounded(rows: Iterable[Sequence[Any]]) -> list[tuple[int, list[Any]]]:
    kept: list[tuple[int, list[Any]]] = []
    cells = chars = 0
    for place, values in enumerate(rows):
        row = list(values)
        while row and _text(row[-1]) == "":  # a sheet formatted far right or down pads rows with blanks
            row.pop()
        if not row:
            continue
        cells += len(row)
        chars += sum(len(v) for v in row if isinstance(v, str))
        if cells > MAX_CELLS or chars > MAX_TEXT_CHARS:
            raise _too_much("cells" if cells > MAX_CELLS else "text")
        kept.append((place, row))
        if len(kept) > MAX_ROWS + 1:  # a header, then the entries
            raise _too_many_rows()
    return kept


def _repeated_key_in(value: Any) -> str:
    """Why an entry of a JSON file is refused: the first of its objects (itself or one nested in it) that
    names a key twice, or "". A loop, not recursion: the parse reached this depth, a walk must not fail it."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, strict_json.RepeatedKeys):
            return f"the entry cannot be read: {item.refusal()}"
        if isinstance(item, dict):
            pending.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            pending.extend(reversed(item))
    return ""


def read_rows(data: bytes, file_name: str) -> list[ImportRow]:
    """Rows of an uploaded object by its extension (json, csv, xlsx), within the limits above. Raises
    SourceError."""
    return read_source(data, file_name).rows


def read_source(data: bytes, file_name: str) -> SourceRows:
    """read_rows, with the workbook's sheets that were not read."""
    if len(data) > MAX_FILE_BYTES:  # (the worker's read refuses one before its bytes are read)
        raise SourceTooLarge()
    kind = file_name.rsplit(".", 1)[-1].lower() if "." in file_name else ""
    if kind == "json":
        try:
            # an entry that repeats a key fails alone (below); the file is refused only for its own
            parsed = strict_json.loads(data.decode("utf-8-sig"), on_duplicate="mark")
        except (UnicodeDecodeError, ValueError) as error:
            raise SourceError(f"the JSON file cannot be read: {error}") from error
        except RecursionError as error:
            raise SourceError("the JSON file is nested too deeply") from error
        if isinstance(parsed, strict_json.RepeatedKeys):
            raise SourceError(f"the JSON file cannot be read: {parsed.refusal()}")
        if isinstance(parsed, dict):
            parsed = parsed.get("entries")
        if not isinstance(parsed, list) or not all(isinstance(e, dict) for e in parsed):
            raise SourceError('the JSON file must be a list of entry objects (or {"entries": [...]})')
        if len(parsed) > MAX_ROWS:
            raise _too_many_rows()
        rows = []
        for index, data_of_entry in enumerate(parsed, start=1):
            row = row_from_mapping(index, data_of_entry)
            row.refused = _repeated_key_in(data_of_entry) or _wrong_kind_in(data_of_entry)
            rows.append(row)
        return SourceRows(rows)
    if kind == "csv":
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise SourceError("the CSV file is not UTF-8") from error
        if max(text.count("\n"), text.count("\r")) > MAX_CSV_LINES:
            raise _too_much("lines")
        try:
            text, dialect = excel_sep_line(text)
            return SourceRows(
                _from_table(enumerate(read_csv_rows(text, dialect or csv.excel, MAX_CELLS).rows))
            )
        except TooManyCells as error:
            raise _too_much("cells") from error
        except csv.Error as error:
            raise SourceError(f"the CSV file cannot be read: {error}") from error
    if kind == "xlsx":
        table, skipped = _xlsx_rows(data)
        return SourceRows(_from_table(table), skipped)
    raise SourceError(f"unsupported import file type {kind!r}: use json, csv or xlsx")


def failed_rows_csv(rows: Iterable[PlannedRow]) -> bytes:
    """UTF-8 with a BOM (spreadsheet programs open it as UTF-8); lists `##`-joined."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(FAILED_CSV_HEADER)
    for row in rows:
        source = row.source
        writer.writerow(
            [
                row.reason,
                LIST_SEPARATOR.join(source.tags),
                source.question,
                LIST_SEPARATOR.join(source.similar),
                LIST_SEPARATOR.join(source.negatives),
                LIST_SEPARATOR.join(source.answers),
                "TRUE" if source.answer_all else "FALSE",
                "TRUE" if source.disabled else "FALSE",
            ]
        )
    return out.getvalue().encode("utf-8-sig")
