"""A file name is one line of text, as a title is: whatever `NOT_ONE_LINE` matches (the line and paragraph
separators U+2028/U+2029 too) never reaches a row's file_name, shown in the console, sent in
Content-Disposition and in events (the separators had been kept)."""

from __future__ import annotations

import pytest

from chalicelib.commands import NOT_ONE_LINE
from chalicelib.domain.storage_keys import folder_of, safe_file_name

EVERY_MATCH = [chr(c) for c in range(0x3000) if NOT_ONE_LINE.match(chr(c))]


def test_the_rule_is_the_titles_one() -> None:
    from chalicelib.domain import storage_keys

    assert NOT_ONE_LINE is storage_keys.NOT_ONE_LINE  # one pattern, in the domain


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        ("q3\u2028plan.md", "q3plan.md"),
        ("notes\u2029.md", "notes.md"),
        ("\u2028notes.md", "notes.md"),
        ("notes.md\u2029", "notes.md"),
    ],
)
def test_a_line_or_paragraph_separator_is_dropped(name: str, kept: str) -> None:
    assert safe_file_name(name) == kept


def test_no_character_the_title_rule_refuses_is_kept() -> None:
    for char in EVERY_MATCH:
        cleaned = safe_file_name(f"a{char}b.pdf")
        assert not NOT_ONE_LINE.search(cleaned), repr(char)
        assert cleaned.startswith("a") and cleaned.endswith("b.pdf")
    assert not NOT_ONE_LINE.search(folder_of("q3\u2028plan/x\u2029y/report.pdf"))


def test_a_separator_left_at_an_end_leaves_no_dot_or_space_there() -> None:
    assert safe_file_name("x.\u2029.") == "x"
    assert safe_file_name("\u2028") == "unnamed"
