"""Lines that made a pattern backtrack for minutes: each now costs one pass, with the same matches as
WeKnora's form of the pattern. The time limits are four orders of magnitude above the time taken now."""

from __future__ import annotations

import itertools
import re

import pytest
from chunker_helpers import REFERENCE_PATTERNS

from chalicelib.chunker import ChunkingConfig, split
from chalicelib.chunker.profile import HEADING, Lines, heading_title
from chalicelib.chunker.spans import find_spans, table_rows

_H = r"[ \t\f\r]"
# WeKnora's heading pattern, which backtracks cubically on a run of blanks inside a heading line.
WEKNORA_HEADING = re.compile(r"(?m)^(#{1,6})" + _H + r"+(.+?)" + _H + r"*#*" + _H + r"*$")
WEKNORA_TABLE_ROW = REFERENCE_PATTERNS[4]
# The row pattern before it was anchored (tried at every start): WeKnora's rows, except that a row ends at
# the line's last pipe when a carriage return follows an earlier one (normalised text has none).
UNANCHORED_TABLE_ROW = re.compile(r"[ ]*+\|(?>[^\n]*\|)[\r\n]+")


def rows_of(text: str) -> list[tuple[int, int]]:
    return list(zip(*table_rows(text), strict=True))


def weknora_headings(text: str) -> list[tuple[int, int, str]]:
    return [(m.start(), len(m.group(1)), m.group(2)) for m in WEKNORA_HEADING.finditer(text)]


@pytest.mark.timeout(10)
def test_a_heading_with_a_long_run_of_blanks_is_scanned_in_one_pass() -> None:
    """4,000 spaces then a word took about ten minutes (1,500 took 32 s)."""
    md = "Intro paragraph.\n\n# Title" + " " * 4000 + "x\n\n" + "Body text.\n" * 3
    assert Lines(md).headings() == [(18, 1, "Title" + " " * 4000 + "x")]
    chunks = split(md, ChunkingConfig(strategy="auto"))
    assert all(c.content == md[c.start : c.end] for c in chunks)
    assert chunks[0].start == 0 and chunks[-1].end == len(md)


@pytest.mark.parametrize(
    "line",
    ["# Title", "## Title ##", "### Title ###   ", "# a # b ##", "#  ", "# ", "# ##", "#\tTab\t#\t", "####### x",
     "#x", "## #tag", "# \f", "#   Title   ", "# Title #x", "###### six ######", "# \v"],
)  # fmt: skip
def test_heading_titles_are_weknoras(line: str) -> None:
    text = "before\n" + line + "\nafter"
    assert Lines(text).headings() == weknora_headings(text)


def test_heading_titles_are_weknoras_on_every_short_line() -> None:
    for length in range(7):
        for runes in itertools.product("# \ta\r\v", repeat=length):
            text = "x\n" + "".join(runes)
            got = [
                (pos, m.end(1) - m.start(1), heading_title(m.group(2))) for pos, m in HEADING.finditer(text)
            ]
            assert got == weknora_headings(text), text


@pytest.mark.timeout(10)
def test_a_long_line_full_of_pipes_is_scanned_in_one_pass() -> None:
    """An 800 KB line of pipe-delimited data not ending in a pipe took minutes (400 KB: 45 s)."""
    md = "a|b|" * 200_000 + "x\n\n|end|\n" + " " * 200_000 + "y\n| row |\n"
    rows = rows_of(md)
    assert [md[s:e] for s, e in rows] == ["|end|\n", "| row |\n"]
    chunks = split(md, ChunkingConfig())  # (check_chunks's reference, WeKnora's pattern, takes minutes)
    assert all(c.content[c.header_prefix_len :] == md[c.start : c.end] for c in chunks)
    assert chunks[0].start == 0 and chunks[-1].end == len(md)


@pytest.mark.parametrize(
    "text",
    ["x | a | b |\n", "  | a |\n", "|a|\r|b|\n", "|a|\rx|b|\n", "a|b|x\n|c|\n", "|a|\n\n\n  |b|  |\n",
     "| a | b\n|c|\n", "|\n||\n", "x\r |a|\r\n", "no pipes\n", "   |   |   \n|x|", "||\r|"],
)  # fmt: skip
def test_table_rows_start_mid_line_and_after_a_carriage_return_as_before(text: str) -> None:
    expected = [m.span() for m in UNANCHORED_TABLE_ROW.finditer(text)]
    assert rows_of(text) == expected
    if "\r" not in text:
        assert expected == [m.span() for m in WEKNORA_TABLE_ROW.finditer(text)]


@pytest.mark.parametrize(
    ("runes", "reference"), [("| \nx", WEKNORA_TABLE_ROW), ("| \n\rx", UNANCHORED_TABLE_ROW)]
)
def test_table_rows_are_the_reference_rows_on_every_short_text(
    runes: str, reference: re.Pattern[str]
) -> None:
    for length in range(7):
        for chosen in itertools.product(runes, repeat=length):
            text = "".join(chosen)
            expected = [m.span() for m in reference.finditer(text)]
            assert rows_of(text) == expected, text
            spans = find_spans(text)  # no other pattern can match these runes
            assert list(zip(spans.starts, spans.ends, strict=True)) == expected, text
