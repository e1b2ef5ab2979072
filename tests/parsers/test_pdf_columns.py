"""Two-column pages read column by column: a PDF that draws its lines across both columns (Word, InDesign,
re-ordered content streams) came out with the columns' lines interleaved, a left and a right line on one
baseline joined into one, which mixed two texts in every chunk. A single-column page and a two-column
table keep their reading order."""

from __future__ import annotations

import re

import pytest
from parser_helpers import helvetica_pdf

PAGE_WIDTH, PAGE_HEIGHT = 612, 792
SIZE = 10
LEAD = 12
LEFT_X, RIGHT_X = 54, 318  # two 240pt columns and a 24pt gutter
COLUMN_CHARS = 44  # Helvetica 10pt: about 5pt a character


def _pdf(pages: list[list[tuple[str, float, float, float]]]) -> bytes:
    """A PDF of Letter pages, each item (text, x, y, size) one Helvetica text object, drawn in list order."""
    return helvetica_pdf(pages, PAGE_WIDTH, PAGE_HEIGHT)


def _wrap(text: str, width: int) -> list[str]:
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def _sentences(side: str, first: int, count: int) -> str:
    return " ".join(
        f"{side}-{k}-th sentence carries the {side.lower()} column further down its page."
        for k in range(first, first + count)
    )


def _interleaved(left: list[str], right: list[str], top: float, right_shift: float = 0.0) -> list:
    """Both columns' lines drawn row by row across the page (left, right, next row): the order that
    interleaves them. `right_shift`: the right column's baselines that far below the left's."""
    items = []
    for row in range(max(len(left), len(right))):
        y = top - row * LEAD
        if row < len(left):
            items.append((left[row], LEFT_X, y, SIZE))
        if row < len(right):
            items.append((right[row], RIGHT_X, y - right_shift, SIZE))
    return items


def _order(markdown: str) -> list[str]:
    return [f"{side[0]}{k}" for side, k in re.findall(r"(Left|Right)-(\d+)-th", markdown)]


@pytest.mark.parametrize("right_shift", [0.0, 5.0], ids=["shared-baselines", "offset-baselines"])
def test_interleaved_columns_read_column_by_column(read, right_shift: float) -> None:
    left = _wrap(_sentences("Left", 0, 12), COLUMN_CHARS)
    right = _wrap(_sentences("Right", 0, 11), COLUMN_CHARS)
    title = ("A Title That Runs Across Both Columns", LEFT_X, 740, 18)
    md = read("columns.pdf", data=_pdf([[title, *_interleaved(left, right, 700, right_shift)]])).markdown
    assert _order(md) == [f"L{k}" for k in range(12)] + [f"R{k}" for k in range(11)]
    assert md.startswith("# A Title That Runs Across Both Columns\n")
    # the columns' own lines still join into paragraphs, one a column
    assert len(md.split("\n\n")) == 3


def test_a_full_width_line_splits_the_page_into_bands(read) -> None:
    """Columns above a full-width caption are read before it, those below after it."""
    top_left = _wrap(_sentences("Left", 0, 6), COLUMN_CHARS)
    top_right = _wrap(_sentences("Right", 0, 6), COLUMN_CHARS)
    bottom_left = _wrap(_sentences("Left", 6, 6), COLUMN_CHARS)
    bottom_right = _wrap(_sentences("Right", 6, 6), COLUMN_CHARS)
    caption_y = 700 - len(top_left) * LEAD - 20
    caption = (
        "Figure 1: a caption set across both of the columns of this page, wide",
        LEFT_X,
        caption_y,
        SIZE,
    )
    items = [
        *_interleaved(top_left, top_right, 700),
        caption,
        *_interleaved(bottom_left, bottom_right, caption_y - 24),
    ]
    md = read("bands.pdf", data=_pdf([items])).markdown
    expected = [f"L{k}" for k in range(6)] + [f"R{k}" for k in range(6)]
    expected += [f"L{k}" for k in range(6, 12)] + [f"R{k}" for k in range(6, 12)]
    assert _order(md) == expected
    caption_at = md.index("Figure 1")
    assert md.rindex("Right-5-th") < caption_at < md.index("Left-6-th")


def test_a_single_column_page_keeps_its_order(read) -> None:
    lines = _wrap(_sentences("Left", 0, 20), 95)
    items = [(text, 72, 720 - k * LEAD, SIZE) for k, text in enumerate(lines)]
    md = read("single.pdf", data=_pdf([items])).markdown
    assert md == " ".join(lines) + "\n"


@pytest.mark.parametrize(
    "rows",
    [
        [(f"Setting {k}", f"the value chosen for setting number {k} here") for k in range(12)],
        [(f"Region {k} north sales in spring", f"Region {k} south sales in autumn") for k in range(12)],
        [
            (f"North region {k} sales in the spring quarter", f"South region {k} sales in the autumn term")
            for k in range(12)
        ],
    ],
    ids=["labels-and-values", "even-cells", "column-wide-cells"],
)
def test_a_two_column_table_keeps_its_rows(read, rows: list[tuple[str, str]]) -> None:
    items = []
    for k, (label, value) in enumerate(rows):
        items += [(label, LEFT_X, 700 - k * 18, SIZE), (value, RIGHT_X, 700 - k * 18, SIZE)]
    md = read("table.pdf", data=_pdf([items])).markdown
    # each row's label then its value, row after row (short rows join into one paragraph)
    assert " ".join(md.split()) == " ".join(f"{label} {value}" for label, value in rows)
