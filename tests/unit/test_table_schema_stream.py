"""`schema_of_lines(lines_of(chunks))`, the plan task's streamed read of a data table's parsed Markdown, gives
the schema the whole text read at once gave (`schema_of`, kept below as it was): the model is asked the
same question whatever the pieces the store hands out. `lines_of` splits as `str.splitlines` does, a line
end (a CR LF too) or a UTF-8 sequence cut anywhere between two pieces."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.enrich.tables import (
    SAMPLE_ROWS,
    TableSchema,
    _cells,
    _type_of,
    lines_of,
    schema_of,
    schema_of_lines,
)

_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{3,}")


def schema_read_whole(markdown: str, max_rows_typed: int = 200) -> TableSchema | None:
    """`schema_of` as it was before the streamed read: every line, every row's cells held."""
    lines = markdown.splitlines()
    for i in range(len(lines) - 1):
        header = _cells(lines[i])
        if header and _SEPARATOR.match(lines[i + 1]):
            rows = []
            for line in lines[i + 2 :]:
                cells = _cells(line)
                if not cells:
                    break
                rows.append(cells)
            typed = rows[:max_rows_typed]
            columns = [
                (name or f"column {n + 1}", _type_of([r[n] if n < len(r) else "" for r in typed]))
                for n, name in enumerate(header)
            ]
            return TableSchema(columns, rows[:SAMPLE_ROWS], len(rows))
    return None


def pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    at = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *at], [*at, len(data)], strict=True)]


LINE_ENDS = ["\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028"]
CELLS = st.sampled_from(["", " ", "12", "-3", "1.5e3", "2024-01-31", "港口", "a|b", "x", "---", ":--"])
LINE = st.one_of(
    st.lists(CELLS, max_size=4).map(lambda cells: "|" + "|".join(cells) + "|"),
    st.sampled_from(["", "text", "|---|---|", "---", " | a | ", "|", "# Sheet1"]),
)
MARKDOWN = st.lists(st.tuples(LINE, st.sampled_from(LINE_ENDS)), max_size=40).map(
    lambda lines: "".join(line + end for line, end in lines)
)


@settings(max_examples=200, deadline=None)
@given(MARKDOWN, st.lists(st.integers(0, 10_000), max_size=12), st.sampled_from([0, 1, 3, 200]))
def test_the_streamed_schema_is_the_schema_of_the_whole_text(
    markdown: str, cuts: list[int], typed: int
) -> None:
    chunks = pieces(markdown.encode(), cuts)
    assert list(lines_of(chunks)) == markdown.splitlines()
    expected = schema_read_whole(markdown, typed)
    assert schema_of_lines(lines_of(chunks), typed) == expected
    assert schema_of(markdown, typed) == expected


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80), st.lists(st.integers(0, 400), max_size=10))
def test_lines_of_splits_any_text_as_splitlines_does(text: str, cuts: list[int]) -> None:
    assert list(lines_of(pieces(text.encode(), cuts))) == text.splitlines()


def in_pieces(markdown: str, read: list[bytes]) -> Iterator[bytes]:
    """The Markdown in 64-byte pieces, each noted in `read` when handed out."""
    data = markdown.encode()
    for start in range(0, len(data), 64):
        read.append(data[start : start + 64])
        yield data[start : start + 64]


def test_a_big_table_keeps_its_row_count_types_and_samples_and_is_read_only_to_its_end() -> None:
    rows = [f"| {n} | 2024-01-{n % 28 + 1:02d} | item {n} |" for n in range(1000)]
    rows[500] = "| x | 2024-01-01 | later |"  # past the 200 typed rows: column a stays an integer
    markdown = "\n".join(["# Sheet1", "| a | when | name |", "|---|---|---|", *rows, "", "after"])
    read: list[bytes] = []
    schema = schema_of_lines(lines_of(in_pieces(markdown, read)))
    assert schema == schema_read_whole(markdown)
    assert schema is not None and schema.rows == 1000 and len(schema.samples) == SAMPLE_ROWS
    assert schema.columns == [("a", "integer"), ("when", "date"), ("name", "text")]

    read.clear()
    schema_of_lines(lines_of(in_pieces("\n".join(["| a |", "|---|", "| 1 |", "", "x" * 10_000]), read)))
    assert sum(map(len, read)) < 1_000  # the text after the table is not read


def test_invalid_utf8_is_an_error_as_a_whole_decode_is() -> None:
    with pytest.raises(UnicodeDecodeError):
        list(lines_of([b"| a |\n", b"\xe6\xb8"]))  # a sequence cut short at the end
    with pytest.raises(UnicodeDecodeError):
        list(lines_of([b"\xff\n"]))
