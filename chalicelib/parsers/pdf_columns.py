"""Two-column pages read column by column. pdfium gives a page's text in drawing order: a PDF that draws
line by line across both columns (Word, InDesign, re-ordered content streams) comes out with the columns'
lines interleaved, or with a left and a right line on the same baseline joined into one. On a page whose
centre is an empty gutter with prose on both sides, the lines are split at the gutter and read by band:
each full-width line (a title, an abstract, a caption across) closes a band, whose left column is read
top to bottom, then its right column.

Conservative by construction: a page is looked at only when a thin strip down its centre holds few
characters (one pdfium call a page); it is reordered only when both sides hold prose (column-wide lines,
a fair share of the page's text each) over most of its text height, so a single-column page, a table of
labels and values or a code listing keeps pdfium's order. A page drawn column by column already (LaTeX's
twocolumn) comes out in the same order."""

from __future__ import annotations

import bisect
import ctypes
import dataclasses
import itertools
import statistics
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from chalicelib.parsers.pdf_pdfium import Natives

#: half the width of the centre strip probed for a gutter (PDF units)
PROBE_HALF_WIDTH = 2.0
#: a page is looked at when at most this share of its lines can have a character in the strip
PROBE_SHARE = 0.5
#: characters a page needs before columns are looked for, and lines each column needs
MIN_CHARS = 400
MIN_COLUMN_LINES = 3
#: a line crossing the centre is a left and a right line when the gap at the centre is this many font
#: sizes wide (a word space is a third of one; a gutter one and more)
MIN_GUTTER_SIZES = 1.2
#: each column holds at least this share of the column text's characters
MIN_SIDE_SHARE = 0.2
#: prose fills its column: the median line spans this share of the column's width ...
MIN_FILL = 0.6
#: ... and a column is at least this share of the page's width (a table's label column is narrower)
MIN_COLUMN_WIDTH = 0.25
#: prose in a cased script: at least this share of a column's lines start in lower case (a table's cells
#: start in upper case or with a digit)
MIN_LOWER_STARTS = 0.3
#: the column lines span this share of the page's text height
MIN_HEIGHT_SHARE = 0.5
#: a page whose lines pdfium kept apart and whose sides alternate at most this often (or this share of its
#: lines) is in column order already: left as it is
MAX_SWITCHES = 4
MAX_SWITCH_SHARE = 0.1
#: full-width lines among the column lines: at most this share of them (more: a centred table or form)
MAX_CROSSING_SHARE = 0.2


class Line(Protocol):
    text: str
    size: float
    base: float


L = TypeVar("L", bound=Line)

_LEFT, _RIGHT, _FULL = 1, 2, 3


def in_column_order(
    lines: list[L], raw: str, starts: list[int], textpage: Any, fn: Natives, width: float
) -> list[L]:
    """`lines` (each starting at raw offset = char index `starts[i]`, as `pdf._page_lines` reads them), in
    column order when the page has two text columns; otherwise `lines` itself."""
    if width <= 0 or len(raw) < MIN_CHARS:
        return lines
    centre = width / 2
    in_strip = fn.bounded_text(  # the characters in a thin strip down the centre: one call a page
        textpage, centre - PROBE_HALF_WIDTH, 1e6, centre + PROBE_HALF_WIDTH, -1e6, None, 0
    )
    if in_strip > len(lines) * PROBE_SHARE:  # most lines run through the centre: one column
        return lines
    return _reorder(lines, raw, starts, textpage, fn, centre) or lines


@dataclasses.dataclass(slots=True)
class _Segment:
    side: int
    line: Any
    x0: float  # origin of its first and last character
    x1: float


def _reorder(
    lines: list[L], raw: str, starts: list[int], textpage: Any, fn: Any, centre: float
) -> list[L] | None:
    x, y = ctypes.c_double(), ctypes.c_double()
    px, py = ctypes.byref(x), ctypes.byref(y)

    def x_at(index: int) -> float | None:
        return x.value if fn.char_origin(textpage, index, px, py) else None

    segments: list[_Segment] = []
    split_any = False
    backwards = 0  # lines whose characters run right to left (Arabic, Hebrew: columns read right first)
    for line, start in zip(lines, starts, strict=True):
        if line.size <= 0:
            return None
        end = _last_char(raw, start)
        x0, x1 = x_at(start), x_at(end)
        if x0 is None or x1 is None:
            return None
        if _overfull(line, x0, x1):  # more text than its width holds: lines pdfium ran together
            walked = _walk(line, raw, start, end, centre, fn, textpage)
            if walked is None:
                return None
            segments.extend(walked)
            split_any = split_any or len({s.side for s in walked}) > 1
        elif (x0 >= centre) == (x1 >= centre):
            backwards += x1 < x0
            segments.append(_Segment(_RIGHT if x0 >= centre else _LEFT, line, x0, x1))
        else:
            split = _split(line, raw, start, end, x0 >= centre, centre, x_at, fn, textpage)
            split_any = split_any or split is not None
            segments.extend(split or [_Segment(_FULL, line, min(x0, x1), max(x0, x1))])
    if backwards * 2 > len(segments) or not _two_columns(segments, 2 * centre):
        return None  # right-to-left pages are left to pdfium's order
    sides = [s.side for s in segments if s.side != _FULL]
    switches = sum(1 for a, b in itertools.pairwise(sides) if a != b)
    if not split_any and switches <= max(MAX_SWITCHES, MAX_SWITCH_SHARE * len(sides)):
        return None  # drawn column by column already (LaTeX's twocolumn): pdfium's order stands
    full_bases = sorted(-s.line.base for s in segments if s.side == _FULL)

    def key(segment: _Segment) -> tuple[int, int]:
        # band: the full-width lines above it; a full-width line closes its band. Within a band's column
        # pdfium's order stands (a formula's raised and lowered parts keep theirs).
        return bisect.bisect_left(full_bases, -segment.line.base), segment.side

    return [s.line for s in sorted(segments, key=key)]


def _last_char(raw: str, start: int) -> int:
    """The index of the last non-blank character of the line starting at `start`."""
    ends = [i for i in (raw.find("\r", start), raw.find("\n", start)) if i >= 0]
    end = min(ends) if ends else len(raw)
    while end > start + 1 and raw[end - 1].isspace():
        end -= 1
    return end - 1


def _split(
    line: L,
    raw: str,
    start: int,
    end: int,
    first_right: bool,
    centre: float,
    x_at: Callable[[int], float | None],
    fn: Any,
    textpage: Any,
) -> list[_Segment] | None:
    """A line running through the centre as its left and right parts, when pdfium joined a left and a right
    column line on one baseline (a gap of `MIN_GUTTER_SIZES` at the centre); None for a full-width line."""
    lo, hi = start, end  # the first character on the other side is in (lo, hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        at = x_at(mid)
        if at is None:
            return None
        if (at >= centre) == first_right:
            lo = mid
        else:
            hi = mid
    first, second = (start, lo), (hi, end)  # character ranges, inclusive
    left, right = (second, first) if first_right else (first, second)
    left_end, right_start = x_at(left[1]), x_at(right[0])
    if left_end is None or right_start is None or right_start - left_end < MIN_GUTTER_SIZES * line.size:
        return None
    head, tail = _split_text(line.text, raw[start:hi])
    if not head or not tail:
        return None
    right_size = round(fn.font_size(textpage, right[0]), 1)
    first_size = line.size if not first_right else right_size
    second_size = right_size if not first_right else line.size
    parts = [
        (_RIGHT if first_right else _LEFT, head, first_size, x_at(first[0]), x_at(first[1])),
        (_LEFT if first_right else _RIGHT, tail, second_size, x_at(second[0]), x_at(second[1])),
    ]
    return [
        _Segment(side, dataclasses.replace(line, text=text, size=size), a or 0.0, b or 0.0)  # type: ignore[type-var]
        for side, text, size, a, b in parts
    ]


def _overfull(line: Line, x0: float, x1: float) -> bool:
    """Whether the line holds more characters than fit between its first and last one at a third of its
    size a character (narrower than any text font's average): pdfium joined lines drawn in turns on both
    sides with their baselines a little apart."""
    return len(line.text) * line.size * 0.3 > abs(x1 - x0) + 2 * line.size


def _walk(
    line: L, raw: str, start: int, end: int, centre: float, fn: Any, textpage: Any
) -> list[_Segment] | None:
    """An overfull line cut, character by character, wherever it moves to the other side of the centre
    across a gutter or to another baseline: its visual lines, each on its side."""
    x, y = ctypes.c_double(), ctypes.c_double()
    px, py = ctypes.byref(x), ctypes.byref(y)
    gutter, lift = MIN_GUTTER_SIZES * line.size, 0.5 * line.size
    cuts: list[tuple[int, float, float, float]] = []  # (first char, its x, its baseline, last char's x)
    prev_x = 0.0
    for i in range(start, end + 1):
        if not fn.char_origin(textpage, i, px, py):
            return None
        if raw[i].isspace():
            continue
        if not cuts:
            cuts.append((i, x.value, y.value, x.value))
        else:
            first, first_x, base, _ = cuts[-1]
            crossed = (x.value >= centre) != (first_x >= centre) and abs(x.value - prev_x) >= gutter
            if crossed or abs(y.value - base) > lift:
                cuts.append((i, x.value, y.value, x.value))
            else:
                cuts[-1] = (first, first_x, base, x.value)
        prev_x = x.value
    out: list[_Segment] = []
    rest, offset = line.text, start
    for k, (first, x0, base, x1) in enumerate(cuts):
        stop = cuts[k + 1][0] if k + 1 < len(cuts) else end + 1
        head, rest = _split_text(rest, raw[offset:stop]) if k + 1 < len(cuts) else (rest.strip(), "")
        offset = stop
        if not head:
            return None
        size = round(fn.font_size(textpage, first), 1)
        side = _FULL if (x0 >= centre) != (x1 >= centre) else _RIGHT if x0 >= centre else _LEFT
        part = dataclasses.replace(line, text=head, size=size, base=base)  # type: ignore[type-var]
        out.append(_Segment(side, part, min(x0, x1), max(x0, x1)))
    return out


def _cells(side: list[_Segment]) -> bool:
    """Whether a side's lines read as a table's cells rather than prose: in a cased script, prose breaks
    its lines mid-sentence, so many start in lower case; cells start in upper case or with a digit."""
    starts = [s.line.text[0] for s in side[1:] if s.line.text[0].isalpha() or s.line.text[0].isdigit()]
    cased = [ch for ch in starts if ch.isdigit() or ch.isupper() or ch.islower()]
    if len(cased) < MIN_COLUMN_LINES:
        return False  # an uncased script (CJK): no telling
    return sum(1 for ch in cased if ch.islower()) < MIN_LOWER_STARTS * len(cased)


def _split_text(text: str, raw_head: str) -> tuple[str, str]:
    """The line's (normalised) text cut after as many non-blank characters as `raw_head` has: the line's
    normalising only turns blanks into spaces and one character into another."""
    wanted = sum(1 for ch in raw_head if not ch.isspace())
    seen = 0
    for i, ch in enumerate(text):
        if seen == wanted:
            return text[:i].strip(), text[i:].strip()
        if not ch.isspace():
            seen += 1
    return text, ""


def _two_columns(segments: list[_Segment], width: float) -> bool:
    """Prose on both sides of the gutter over most of the page's text height (see the module's doc)."""
    sides = {side: [s for s in segments if s.side == side] for side in (_LEFT, _RIGHT)}
    columns = sides[_LEFT] + sides[_RIGHT]
    if any(len(found) < MIN_COLUMN_LINES for found in sides.values()):
        return False
    chars = {side: sum(len(s.line.text) for s in found) for side, found in sides.items()}
    if any(count < MIN_SIDE_SHARE * sum(chars.values()) for count in chars.values()):
        return False
    for found in sides.values():
        extent = max(s.x1 for s in found) - min(s.x0 for s in found)
        if extent < MIN_COLUMN_WIDTH * width:
            return False
        if statistics.median(s.x1 - s.x0 for s in found) < MIN_FILL * extent:
            return False
    if any(_cells(found) for found in sides.values()):
        return False
    top, bottom = max(s.line.base for s in columns), min(s.line.base for s in columns)
    text_top = max(s.line.base for s in segments)
    text_bottom = min(s.line.base for s in segments)
    if top - bottom < MIN_HEIGHT_SHARE * (text_top - text_bottom):
        return False
    crossing = sum(1 for s in segments if s.side == _FULL and bottom < s.line.base < top)
    return crossing <= MAX_CROSSING_SHARE * len(columns)
